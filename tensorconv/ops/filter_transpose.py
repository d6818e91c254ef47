"""A grouped filter bank with its channel axes swapped (``kernels_cu/filter_transpose.cu``):
``w`` (K, C/G, R, S) rewritten as (G, C/G, K/G, R, S), or (G, C/G, R, S, K/G) with
``taps_last``, the layouts :mod:`tensorconv.ops.igemm_tf32x3`'s data gradients read.

A block stages a tile of (output, input) channel pairs with all their taps, so that loads
and stores both run along contiguous memory.  The tile is sized here from the filter's
size alone (no ``Problem`` or ``Tile`` worth tuning): :func:`plan`.
"""

from __future__ import annotations

import math

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_array, check_bools, check_int, output_buffer
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu
from tensorconv.reference import conv as ref

FILE = "filter_transpose.cu"
BLOCK = (32, 8, 1)
TILE_FLOATS = 4096
"""Values a block stages (16 KB): a 3x3 filter's tile is 21 x 21 channel pairs."""
MAX_TAPS = 8191
"""Taps of the largest filter (90 x 90) taken: a block stages one channel pair of it,
32 KB."""


def kernels(taps_last: bool = False) -> tuple[cuda.KernelRef, ...]:
    """The kernel one call launches."""
    return (cuda.kernel_ref(FILE, f"filter_transpose<{str(bool(taps_last)).lower()}>"),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both output layouts."""
    return ["filter_transpose<false>", "filter_transpose<true>"]


def plan(p: int, q: int, t: int, taps_last: bool) -> tuple[int, int, int]:
    """(tp, tq, pitch): the tile's output and input channels and its staged row's length.

    Stores of (G, Q, T, P) run along P, so a tile takes 32 of them (one warp's row); those
    of (G, Q, P, T) run along P*T, so the tile is square.  ``pitch`` is ``tq * t``, made
    odd: the taps-last stores read the tile down a column, 32 rows apart."""
    if taps_last:
        tp = min(p, BLOCK[0], max(1, TILE_FLOATS // t))
        tq = min(q, max(1, TILE_FLOATS // (tp * t)), 64)
    else:
        side = max(1, math.isqrt(TILE_FLOATS // t)) if t <= TILE_FLOATS else 1
        tp, tq = min(p, side, 64), min(q, side, 64)
    return tp, tq, tq * t | 1


def run(w, out, groups: int, taps_last: bool) -> None:
    """Launch on checked arguments: ``w`` (K, C/G, R, S) into ``out`` (its size, any
    shape), both C-contiguous CuPy float32 on one device, ``R * S <= MAX_TAPS``."""
    k, q, r, s = w.shape
    p, t = k // groups, r * s
    tp, tq, pitch = plan(p, q, t, taps_last)
    tiles_p, tiles_q = cdiv(p, tp), cdiv(q, tq)
    i32 = np.int32
    launch(kernels(taps_last)[0], (groups * tiles_p * tiles_q,), BLOCK,
           (w, out, i32(p), i32(q), i32(t), i32(tp), i32(tq), i32(pitch), i32(tiles_p),
            i32(tiles_q)), smem=4 * tp * pitch)


def transpose_filters(w, groups: int = 1, *, taps_last: bool = False, out=None):
    """``w`` with its channel axes swapped per group.

    Parameters
    ----------
    w : array, (K, C // groups, R, S), float32, C-contiguous
    groups : int
        Must divide K.
    taps_last : bool
        Put the taps ahead of the output channels: (G, C/G, R, S, K/G).
    out : array, float32, C-contiguous, of the result's shape, optional (GPU only)

    Returns
    -------
    array, (G, C/G, K/G, R, S) or (G, C/G, R, S, K/G), float32
    """
    w = backend.as_array(w, "w")
    xp = backend.array_module(w)
    check_array(w, "w", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    check_int(groups, "groups", minimum=1)
    check_bools(taps_last=taps_last)
    k, cg, r, s = w.shape
    if k % groups:
        raise ValueError(f"groups={groups} must divide w's {k} output channels")
    if r * s > MAX_TAPS:
        raise ValueError(f"w has {r * s} taps a filter; the kernel stages at most {MAX_TAPS}")
    shape = (groups, cg) + ((r, s, k // groups) if taps_last else (k // groups, r, s))
    if xp is np:
        no_out_on_cpu(out=out)
        return ref.transpose_filters(w, groups, taps_last)
    out = output_buffer(xp, out, shape)
    run(w, out, groups, bool(taps_last))
    return out
