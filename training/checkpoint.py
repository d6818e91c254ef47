"""Atomic, self-describing training checkpoints (one ``.npz`` file)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


class CheckpointMismatchError(ValueError):
    """A checkpoint exists but was written for another model or configuration."""


def save(path, *, model_state: dict, optimizer_state: dict, meta: dict,
         extra: dict | None = None) -> Path:
    """Write the checkpoint to a temporary file beside ``path``, then rename it over ``path``.

    A run killed while writing leaves the previous checkpoint intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"model/{k}": v for k, v in model_state.items()}
    velocity = optimizer_state["velocity"]
    arrays.update({f"opt/velocity/{i}": v for i, v in enumerate(velocity) if v is not None})
    arrays.update({f"extra/{k}": v for k, v in (extra or {}).items()})
    meta = dict(meta, optimizer={"lr": optimizer_state["lr"], "steps": optimizer_state["steps"],
                                 "n_velocity": len(velocity)})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load(path) -> tuple[dict, dict, dict]:
    """Return ``(model_state, optimizer_state, meta)``; ``meta["extra"]`` holds the extra arrays."""
    with np.load(path) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        model_state = {k[len("model/"):]: z[k] for k in z.files if k.startswith("model/")}
        n = meta["optimizer"]["n_velocity"]
        velocity = [z[f"opt/velocity/{i}"] if f"opt/velocity/{i}" in z.files else None
                    for i in range(n)]
        meta["extra"] = {k[len("extra/"):]: z[k] for k in z.files if k.startswith("extra/")}
    optimizer_state = {"lr": meta["optimizer"]["lr"], "steps": meta["optimizer"]["steps"],
                       "velocity": velocity}
    return model_state, optimizer_state, meta
