"""Schedule search of the tensor-core convolution (:mod:`tensorconv.ops.tensorcore_conv`).

The knobs are the paper's (block tile, warp tile, fragment shape) and ours (the ``mma.sync``
path and split-K inside the launch).  :func:`tensorconv.ops.tensorcore_conv.candidates`
ranks every combination by an analytic cost (waves of blocks over the SMs times the padded
work of a block, plus the split reduction's traffic); the best ``budget`` of them are
compiled in parallel and timed as CUDA-graph replays, and the fastest is kept in the tune
cache under the device, the source, the shape and the layout (fp16), where
``tc_conv2d`` finds it.  ``paths`` and ``max_splits`` narrow the space for the ablation
(the paper's knobs alone: WMMA paths, no split).
"""

from __future__ import annotations

from tensorconv import backend
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.tuning.oracle import time_tiles

BUDGET = 64          # candidates timed per layer: a few seconds of GPU time at batch 1
PAPER_PATHS = (1, 2, 3)   # WMMA with the paper's fragment shapes


def tune_tc_tile(x, w, stride=1, padding=0, *, layout: str = "nchw", budget: int = BUDGET,
                 paths=None, max_splits: int = tcc.MAX_SPLITS, repeat: int = 20,
                 store: bool = True, use_cache: bool = True):
    """Time the ``budget`` best-ranked tiles of ``tc_conv2d(x, w, ...)``; return ``(best,
    {tile: µs})`` (a cache hit returns the stored tile and an empty dict).  ``paths`` and
    ``max_splits`` narrow the search (the result is then not stored unless ``store``)."""
    xp = backend.array_module(x)
    p = tcc.problem(x.shape, w.shape, stride, padding, layout)
    if use_cache and store and (hit := tcc.tuned_tile(p)) is not None:
        return hit, {}
    facts = backend.device_facts()
    tiles = tcc.candidates(p, facts, paths=tuple(paths or tcc.PATHS),
                           max_splits=max_splits)[:budget]
    packed = tcc.pack_weights(w, layout, xp)
    out = xp.empty(tcc.output_shape(p), dtype="float16")

    def run(t):
        tcc.tc_conv2d(x, w, None, stride, padding, layout=layout, tile=t, packed=packed,
                      out=out)

    return time_tiles(tcc.tile_key(p) if store else None, tiles, run,
                      lambda t: tcc.kernels(p, t), repeat=repeat,
                      what=f"{len(tiles)} tensor-core tiles for {p.geom.c}->{p.geom.k} "
                           f"{p.geom.r}x{p.geom.s} on {p.geom.h}x{p.geom.w} ({layout})")
