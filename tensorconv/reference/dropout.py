"""Counter-based dropout: the mask as a pure function of (seed, step, element index), in the
integer arithmetic of ``kernels_cu/dropout.cu`` (the GPU's mask equals this one bit for bit)."""

from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
ODD = np.uint64(0xD1B54A32D192ED03)
BITS = 24                               # the draw's resolution: keep_from / 2^24 is p


def _mix64(z):
    """SplitMix64's finaliser on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keep_from(p: float) -> int:
    """The draw (0 .. 2^24 - 1) from which an element is kept: round(p · 2^24)."""
    return int(round(p * (1 << BITS)))


def dropout_mask(seed: int, step: int, n: int, p: float, offset: int = 0) -> np.ndarray:
    """Which of ``n`` elements (those from ``offset`` on of a larger array) call ``step`` of
    a dropout seeded ``seed`` keeps.

    Returns
    -------
    numpy.ndarray, (n,), bool
    """
    with np.errstate(over="ignore"):
        key = _mix64(np.array([seed], np.uint64) * GOLDEN + np.uint64(step))
        index = np.arange(offset, offset + n, dtype=np.uint64)
        draws = _mix64(key ^ (index * ODD)) >> np.uint64(64 - BITS)
    return draws >= np.uint64(keep_from(p))


def dropout(x, seed: int, step: int, p: float, offset: int = 0):
    """``x`` with the elements call ``step`` drops zeroed and the rest scaled by 1/(1-p);
    also the mask (x's shape, bool)."""
    x = np.asarray(x)
    keep = dropout_mask(seed, step, x.size, p, offset).reshape(x.shape)
    return np.where(keep, x * x.dtype.type(1.0 / (1.0 - p)), x.dtype.type(0)), keep
