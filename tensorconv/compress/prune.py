"""Non-structured weight pruning: which convolutions are pruned, the masks that keep the
``l`` largest weights of each, and putting masks on a model (Rumi et al., PACT'20, §3; the
ADMM training that moves a model towards its masks is :mod:`training.admm_prune`).

A *mask* is a host bool array of a convolution's weight shape (K, C, R, S); ``True`` marks a
weight that stays.  Masks are keyed by the convolution's name in ``model.named_modules()``.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from tensorconv import backend
from tensorconv.autograd import no_grad
from tensorconv.checks import check_int, check_real
from tensorconv.files import atomic_write
from tensorconv.nn.layers import Conv2d


def prune_candidates(model, min_in_channels: int = 4) -> dict:
    """The convolutions a uniform pruning ratio applies to: dense (no groups) convolutions
    reading at least ``min_in_channels`` channels (a stem reading 1-3 image channels keeps
    every weight, as in the paper's models)."""
    check_int(min_in_channels, "min_in_channels", minimum=1)
    return {name.rstrip("."): m for name, m in model.named_modules()
            if type(m) is Conv2d and m.groups == 1 and m.in_channels >= min_in_channels}


def keep_count(size: int, ratio: float) -> int:
    """``l``: how many of ``size`` weights a layer pruned ``ratio`` times keeps
    (``ceil(size / ratio)``, at least 1)."""
    check_int(size, "size", minimum=1)
    check_real(ratio, "ratio", low=1.0)
    return max(1, math.ceil(size / ratio))


def top_magnitude(w, keep: int):
    """Bool mask (w's array module and shape) of the ``keep`` largest ``|w|``; ties go to
    the lower flat index, so the mask is reproducible (chosen on the host: the same on
    either backend)."""
    xp = backend.array_module(w)
    keep = check_int(keep, "keep", minimum=0)
    flat = np.abs(backend.to_host(w)).reshape(-1)
    mask = np.zeros(flat.size, bool)
    mask[np.argsort(-flat, kind="stable")[:keep]] = True
    return xp.asarray(mask.reshape(w.shape))


def project_top(w, keep: int):
    """The nearest array to ``w`` with at most ``keep`` nonzeros: ``w`` where
    :func:`top_magnitude` keeps it, 0 elsewhere (the Z-update of ADMM pruning)."""
    return w * top_magnitude(w, keep)


def magnitude_masks(model, ratio: float, names=None) -> dict:
    """Masks keeping the ``keep_count`` largest weights of every named convolution
    (default: every :func:`prune_candidates` convolution) — magnitude pruning, the simple
    baseline, and the hard prune that ends ADMM pruning."""
    convs = prune_candidates(model)
    names = list(convs) if names is None else list(names)
    unknown = sorted(set(names) - set(convs))
    if unknown:
        raise ValueError(f"no prunable convolution named {unknown[:3]} in the model")
    out = {}
    for name in names:
        w = convs[name].weight.data
        out[name] = backend.to_host(top_magnitude(w, keep_count(w.size, ratio)))
    return out


def check_masks(model, masks: dict) -> dict:
    """``masks`` checked against ``model``: each names a prunable convolution and has its
    weight's shape and a bool dtype; returns {name: convolution}."""
    if not isinstance(masks, dict):
        raise TypeError(f"masks must be a dict name -> bool array, got {type(masks).__name__}")
    convs = prune_candidates(model, min_in_channels=1)
    unknown = sorted(set(masks) - set(convs))
    if unknown:
        raise ValueError(f"masks name no dense convolution of the model: {unknown[:3]}")
    for name, mask in masks.items():
        shape = tuple(convs[name].weight.shape)
        if not hasattr(mask, "dtype") or mask.dtype != bool or tuple(mask.shape) != shape:
            raise ValueError(f"masks[{name!r}] must be a bool array of shape {shape}, got "
                             f"{getattr(mask, 'dtype', type(mask).__name__)} "
                             f"{tuple(getattr(mask, 'shape', ()))}")
    return {name: convs[name] for name in masks}


def apply_masks(model, masks: dict) -> None:
    """Zero every weight a mask drops, in place (all masks checked first)."""
    convs = check_masks(model, masks)
    with no_grad():
        for name, conv in convs.items():
            w = conv.weight
            w.data = w.data * w.xp.asarray(masks[name], dtype=w.dtype)


def density(model, masks: dict) -> float:
    """Share of the masked convolutions' weights that are nonzero (host float)."""
    convs = check_masks(model, masks)
    nnz = sum(int(backend.to_host(c.weight.data != 0).sum()) for c in convs.values())
    return nnz / max(1, sum(c.weight.size for c in convs.values()))


def save_masks(path, masks: dict):
    """Write ``masks`` ({name: bool array}) to an ``.npz`` file, atomically; return the path."""
    if not masks or not all(getattr(m, "dtype", None) == np.bool_ for m in masks.values()):
        raise ValueError("masks must be a non-empty dict name -> bool array")
    arrays = {name: backend.to_host(m) for name, m in masks.items()}
    return atomic_write(path, None, write=lambda f: np.savez_compressed(f, **arrays))


def load_masks(path) -> dict:
    """The masks :func:`save_masks` wrote to ``path``."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            masks = {name: z[name] for name in z.files}
    except FileNotFoundError:
        raise FileNotFoundError(f"no masks file at {path}") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path} is not a masks file ({type(exc).__name__}: {exc})") from exc
    if not masks or any(m.dtype != bool for m in masks.values()):
        raise ValueError(f"{path} is not a masks file (it must hold bool arrays)")
    return masks
