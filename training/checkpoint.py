"""Atomic, self-describing training checkpoints (one ``.npz`` file).

:func:`save` writes through :func:`tensorconv.files.atomic_write` (a killed run leaves
the previous checkpoint whole; a read-only one is never replaced); :func:`load` answers
a damaged, truncated or foreign file with one :class:`CheckpointError` naming the path
and what is wrong.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

import numpy as np

from tensorconv.files import atomic_write


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint (damaged, truncated or foreign)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint exists but was written for another model or configuration."""


def save(path, *, model_state: dict, optimizer_state: dict, meta: dict,
         extra: dict | None = None) -> Path:
    """Write the checkpoint atomically (a temporary file beside ``path``, then a rename).

    A run killed while writing leaves the previous checkpoint intact; a checkpoint the
    user made read-only raises :class:`tensorconv.files.ReadOnlyFileError` and is kept.
    """
    arrays = {f"model/{k}": v for k, v in model_state.items()}
    velocity = optimizer_state["velocity"]
    arrays.update({f"opt/velocity/{i}": v for i, v in enumerate(velocity) if v is not None})
    arrays.update({f"extra/{k}": v for k, v in (extra or {}).items()})
    meta = dict(meta, optimizer={"lr": optimizer_state["lr"], "steps": optimizer_state["steps"],
                                 "n_velocity": len(velocity)})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return atomic_write(path, None, write=lambda f: np.savez(f, **arrays))


def load(path) -> tuple[dict, dict, dict]:
    """Return ``(model_state, optimizer_state, meta)``; ``meta["extra"]`` holds the extra arrays.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    CheckpointError
        The file is not a tensorconv checkpoint, or is damaged or truncated.
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a tensorconv checkpoint (not an .npz archive; "
                              f"truncated or another kind of file)")
    try:
        with np.load(path, allow_pickle=False) as z:
            if "meta" not in z.files:
                raise CheckpointError(f"{path} is an .npz archive without tensorconv's "
                                      f"metadata: not a tensorconv checkpoint")
            meta = json.loads(bytes(z["meta"]).decode())
            model_state = {k[len("model/"):]: z[k] for k in z.files if k.startswith("model/")}
            n = meta["optimizer"]["n_velocity"]
            velocity = [z[f"opt/velocity/{i}"] if f"opt/velocity/{i}" in z.files else None
                        for i in range(n)]
            meta["extra"] = {k[len("extra/"):]: z[k] for k in z.files if k.startswith("extra/")}
            optimizer_state = {"lr": meta["optimizer"]["lr"], "steps": meta["optimizer"]["steps"],
                               "velocity": velocity}
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError,
            TypeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is a damaged tensorconv checkpoint "
                              f"({type(exc).__name__}: {exc})") from exc
    return model_state, optimizer_state, meta


def slim(path) -> Path:
    """Rewrite the finished run's checkpoint at ``path`` as its weights and metadata alone
    (compressed; no optimizer velocity, no extra arrays such as ADMM's targets), marked
    ``meta["slim"]``: what a later run's ``init_from`` and the run's report read, in a
    file small enough to move between machines.  Training cannot resume from it (the
    training loop refuses to add epochs to a slim checkpoint).  Returns the path."""
    model_state, opt_state, meta = load(path)
    if meta.get("slim"):
        return Path(path)
    meta = {k: v for k, v in meta.items() if k not in ("extra", "optimizer")}
    meta["slim"] = True
    arrays = {f"model/{k}": v for k, v in model_state.items()}
    meta["optimizer"] = {"lr": opt_state["lr"], "steps": opt_state["steps"], "n_velocity": 0}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return atomic_write(path, None, write=lambda f: np.savez_compressed(f, **arrays))
