"""Tuning the fused CP kernel's launch shape (:class:`tensorconv.ops.cp_conv.Tile`), with the
tune cache: every candidate timed, the fastest stored where ``cp_conv2d``'s default and the
inference engine find it (:func:`tensorconv.ops.cp_conv.tuned_tile`)."""

from __future__ import annotations

from tensorconv import backend
from tensorconv.ops import cp_conv
from tensorconv.tuning.oracle import time_tiles


def tune_tile(x, factors, stride=1, padding=0, *, repeat: int = 10, use_cache: bool = True):
    """Time every candidate tile (CUDA-graph replay medians); return ``(best, {tile: µs})``.

    ``factors`` is ``(s, h, w, t)`` as for :func:`tensorconv.ops.cp_conv.cp_conv2d`.
    A hit in the tune cache (device, kernel source hash, shape) returns the stored
    tile and an empty timing dict.
    """
    p = cp_conv.problem(x.shape, factors, stride, padding)
    if use_cache and (hit := cp_conv.tuned_tile(p)) is not None:
        return hit, {}
    out = cp_conv.cp_conv2d(x, *factors, stride, padding)  # checks the arguments once
    return time_tiles(cp_conv.tile_key(p), cp_conv.candidates(p, backend.device_facts()),
                      lambda t: cp_conv.run(x, factors, out, p, t),
                      lambda t: cp_conv.kernels(p, t), repeat=repeat,
                      what=f"CP tiles for rank {p.rank}")
