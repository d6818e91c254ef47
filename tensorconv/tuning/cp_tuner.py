"""Tuning the fused CP kernel's launch shape (:class:`tensorconv.ops.cp.CPTile`), with the tune cache."""

from __future__ import annotations

import dataclasses

from tensorconv import backend, bench
from tensorconv.checks import pair
from tensorconv.ops import cp as cpops
from tensorconv.tuning import cache

def _problem(x, factors, stride, padding) -> str:
    s, h, w, t = factors
    return (f"x{tuple(x.shape)}|R{s.shape[1]}|k{(h.shape[0], w.shape[0], t.shape[0])}"
            f"|s{pair(stride, 'stride', minimum=1)}|p{pair(padding, 'padding', minimum=0)}")


def tune_tile(x, factors, stride=1, padding=0, *, repeat: int = 10, use_cache: bool = True):
    """Time every candidate tile (CUDA-graph replay medians); return ``(best, {tile: µs})``.

    ``factors`` is ``(s, h, w, t)`` as for :func:`tensorconv.ops.cp.cp_conv2d`.
    A hit in the tune cache (device, kernel source hash, shape) returns the stored
    tile and an empty timing dict.
    """
    key = cache.make_key("cp_fused", "cp_conv.cu", _problem(x, factors, stride, padding))
    memo = cache.memo()
    if use_cache:
        if key in memo:
            return memo[key], {}
        if (hit := cache.lookup(key)) is not None:
            memo[key] = cpops.CPTile(**hit["tile"])
            return memo[key], {}
    out = cpops.cp_conv2d(x, *factors, stride, padding)  # checks the arguments once
    facts = backend.device_facts()
    kh, kw, k, r = factors[1].shape[0], factors[2].shape[0], factors[3].shape[0], factors[0].shape[1]
    times = {}
    for tile in cpops.candidate_tiles(x.shape[1], kh, kw, pair(stride, "stride", minimum=1)):
        if tile.smem_bytes(kh, kw, k, r) > facts.smem_per_block_optin:
            continue
        run = lambda tile=tile: cpops.cp_conv2d(x, *factors, stride, padding,  # noqa: E731
                                                tile=tile, out=out)
        times[tile] = bench.time_graph(run, warmup=2, repeat=repeat, calls_per_graph=10).median_us
    best = min(times, key=times.get)
    cache.store(key, {"tile": dataclasses.asdict(best), "us": times[best]})
    memo[key] = best
    return best, times


def known_tile(x, factors, stride=1, padding=0) -> cpops.CPTile | None:
    """The tuned tile when this problem was tuned on this device (memo or tune cache),
    else None (the op then uses :func:`tensorconv.ops.cp.default_tile`); never times."""
    key = cache.make_key("cp_fused", "cp_conv.cu", _problem(x, factors, stride, padding))
    memo = cache.memo()
    if key not in memo and (hit := cache.lookup(key)) is not None:
        memo[key] = cpops.CPTile(**hit["tile"])
    return memo.get(key)
