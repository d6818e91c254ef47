"""Schedule search of the tensor-core convolution (:mod:`tensorconv.ops.tensorcore_conv`).

The knobs are the paper's (block tile, warp tile, fragment shape) and ours (the ``mma.sync``
path, split-K inside the launch, and the fragments and halo paths with their K shares;
their weights are packed once in fragment order beside the rows the ring tiles read).
:func:`tensorconv.ops.tensorcore_conv.candidates` ranks every combination by an analytic
cost (waves of blocks over the SMs times the padded work of a block, plus the split
reduction's traffic); the best ``budget`` of them (by
default all: 300-1,300 a layer, or as many as :data:`SWEEP_SECONDS` allows) are compiled in
parallel and timed as CUDA-graph replays in the rank's order, the fastest :data:`CONFIRM`
timed again with more replays, and the fastest of those is
kept in the tune cache under the device, the source, the shape and the layout (fp16),
where ``tc_conv2d`` finds it.  ``paths`` and ``max_splits`` narrow the space for the
ablation (the paper's knobs alone: WMMA paths, no split).

Why every candidate: at batch 1 a layer's time is latency (a block's serial chunks, the
launch, the split's reduction), which the analytic cost ranks poorly; on the H100 the
rank's first 64 missed tiles 1.1-1.6x faster on 7 of 8 layers, and timing all of a layer's
candidates takes 1-8 s (``docs/notes/tensorcore_conv.md``).
"""

from __future__ import annotations

import time

from tensorconv import backend, cuda
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.tuning.oracle import time_tiles

BUDGET = None        # candidates timed per layer (None: every one; seconds at batch 1)
SWEEP_SECONDS = 30.0  # ... until this much time is spent (large batches: slower replays),
CHUNK = 64            # checked after each chunk of this many, in the rank's order
CONFIRM = 8          # the sweep's fastest, timed again: one short median a tile over
                     # hundreds of tiles would otherwise crown a lucky sample
PAPER_PATHS = (1, 2, 3)   # WMMA with the paper's fragment shapes


def tune_tc_tile(x, w, stride=1, padding=0, *, layout: str = "nchw",
                 budget: int | None = BUDGET, paths=None, max_splits: int = tcc.MAX_SPLITS,
                 repeat: int = 20, store: bool = True, use_cache: bool = True):
    """Time the ``budget`` best-ranked tiles of ``tc_conv2d(x, w, ...)`` (None: all), in
    the rank's order, :data:`CHUNK` at a time, stopping after the chunk that passes
    :data:`SWEEP_SECONDS`; the fastest :data:`CONFIRM` again with five times the replays.
    Return ``(best, {tile: µs})`` for the tiles timed, the second timing where there was
    one (a cache hit returns the stored tile and an empty dict).  ``paths`` and
    ``max_splits`` narrow the search (the result is then not stored unless ``store``)."""
    xp = backend.array_module(x)
    p = tcc.problem(x.shape, w.shape, stride, padding, layout, x.dtype.name)
    if use_cache and store and (hit := tcc.tuned_tile(p)) is not None:
        return hit, {}
    facts = backend.device_facts()
    tiles = tcc.candidates(p, facts, paths=tuple(paths or tcc.PATHS),
                           max_splits=max_splits)[:budget]
    # the weights as rows and, for the fragments and halo tiles, in fragment order
    packed = {order: tcc.pack_weights(w, layout, xp, p.dtype, next(
        (t for t in tiles if tcc.fragment_order(t) == order), None))
        for order in {tcc.fragment_order(t) for t in tiles}}
    out = xp.empty(tcc.output_shape(p), dtype=x.dtype)

    def run(t):
        tcc.tc_conv2d(x, w, None, stride, padding, layout=layout, tile=t,
                      packed=packed[tcc.fragment_order(t)], out=out)

    key = tcc.tile_key(p) if store else None
    what = (f"{len(tiles)} tensor-core tiles for {p.geom.c}->{p.geom.k} {p.geom.r}x{p.geom.s} "
            f"on {p.geom.h}x{p.geom.w} ({layout})")
    kernels = lambda t: tcc.kernels(p, t)  # noqa: E731
    if len(tiles) <= CONFIRM:
        return time_tiles(key, tiles, run, kernels, repeat=repeat, what=what)
    # every kernel first, all in parallel: the time limit is for timing, not compiling
    cuda.compile_all((k for t in tiles for k in kernels(t)), desc=f"compiling {what}")
    times, start = {}, time.perf_counter()
    for i in range(0, len(tiles), CHUNK):
        times.update(time_tiles(None, tiles[i:i + CHUNK], run, kernels, repeat=repeat,
                                what=f"{what}, from {i}")[1])
        if time.perf_counter() - start > SWEEP_SECONDS:
            break
    finalists = sorted(times, key=times.get)[:CONFIRM]
    best, again = time_tiles(key, finalists, run, kernels, repeat=5 * repeat,
                             what=f"the fastest {CONFIRM} again")
    return best, {**times, **again}
