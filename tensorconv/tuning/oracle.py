"""Exhaustive ("oracle") tuning of the core-convolution tiles, with the tune cache.

``"tdc"`` (the paper's scheme): every valid tile is timed — the analytic model
is judged against this.  ``"cluster"`` (ours): the estimate's best candidates
are timed; the engine and ``core_conv2d`` reuse the winner through
:func:`known_cluster_tile`.
"""

from __future__ import annotations

import dataclasses

from tensorconv import backend, bench
from tensorconv.checks import ConvGeometry
from tensorconv.ops import tucker
from tensorconv.tuning import cache, cluster_model

_MEMO: dict = {}


def time_tile(x, w, w_crsn, out, geom: ConvGeometry, tile: tucker.CoreTile,
              repeat: int = 10) -> float:
    """Kernel time (µs, CUDA-graph replay median) of one tile."""
    run = lambda: tucker.core_conv2d(x, w, geom.stride, geom.padding, variant="tdc",  # noqa: E731
                                     tile=tile, w_crsn=w_crsn, out=out)
    return bench.time_graph(run, warmup=2, repeat=repeat, calls_per_graph=10).median_us


def oracle_tile(x, w, geom: ConvGeometry, *, repeat: int = 10, use_cache: bool = True):
    """Time every candidate tile; return ``(best tile, {tile: µs})`` and remember the best.

    The cache key holds the device, the kernel source hash and the shape; a
    cache hit returns the stored tile and an empty timing dict.
    """
    key = cache.make_key("tdc_oracle", "tucker_core_conv.cu", geom)
    if use_cache and (hit := cache.lookup(key)) is not None:
        return tucker.CoreTile(**hit["tile"]), {}
    facts = backend.device_facts()
    w_crsn = tucker.to_crsn(w)
    out = backend.array_module(x).empty(geom.output_shape, dtype="float32")
    times = {t: time_tile(x, w, w_crsn, out, geom, t, repeat)
             for t in tucker.candidate_tiles(geom, facts.smem_per_block_optin)}
    best = min(times, key=times.get)
    cache.store(key, {"tile": dataclasses.asdict(best), "us": times[best]})
    return best, times


def tune_cluster_tile(x, w, geom: ConvGeometry, *, candidates: int = 64, repeat: int = 10,
                      use_cache: bool = True):
    """Time the ``candidates`` best-estimated cluster tiles; return ``(best, {tile: µs})``.

    The winner is stored in the tune cache (device, kernel source hash, shape);
    a cache hit returns it with an empty timing dict.
    """
    key = cache.make_key("tdc_cluster", "tucker_core_conv.cu", geom)
    if use_cache and (hit := known_cluster_tile(geom)) is not None:
        return hit, {}
    facts = backend.device_facts()
    w_crsn = tucker.to_crsn(w)
    out = backend.array_module(x).empty(geom.output_shape, dtype="float32")
    times = {}
    for t in cluster_model.ranked_tiles(geom, facts.smem_per_block_optin, facts.sm_count,
                                        limit=candidates,
                                        clusters=facts.compute_capability >= (9, 0)):
        run = lambda t=t: tucker.core_conv2d(x, w, geom.stride, geom.padding,  # noqa: E731
                                             variant="cluster", tile=t, w_crsn=w_crsn, out=out)
        times[t] = bench.time_graph(run, warmup=2, repeat=repeat, calls_per_graph=10).median_us
    best = min(times, key=times.get)
    cache.store(key, {"tile": dataclasses.asdict(best), "us": times[best]})
    _MEMO[key] = best
    return best, times


def known_cluster_tile(geom: ConvGeometry) -> tucker.ClusterTile | None:
    """The tuned cluster tile when ``geom`` was tuned on this device, else None; never times."""
    key = cache.make_key("tdc_cluster", "tucker_core_conv.cu", geom)
    if key not in _MEMO:
        hit = cache.lookup(key)
        if hit is None:
            return None
        _MEMO[key] = tucker.ClusterTile(**hit["tile"])
    return _MEMO[key]


def _fused_key(geom: ConvGeometry, d1: int, d2: int, n: int, c: int) -> str:
    return cache.make_key("tucker_fused", "tucker_layer.cu", f"{geom}|C{c}|D{d1}x{d2}|N{n}")


def tune_fused_tile(x, u1, core, u3, bias, stride, padding, *, candidates: int = 16,
                    repeat: int = 10, use_cache: bool = True):
    """Time the ``candidates`` lowest-cost fused Tucker-layer tiles; return ``(best, {tile: µs})``.

    ``u1, core, u3, bias`` as for :func:`tensorconv.ops.tucker_layer.pack_weights`; the
    winner goes to the tune cache (a hit returns it with an empty timing dict).
    """
    from tensorconv.checks import conv_geometry
    from tensorconv.ops import tucker_layer as tl

    d2, d1, r, s = core.shape
    n = u3.shape[0]
    geom = conv_geometry((x.shape[0], d1, x.shape[2], x.shape[3]), core.shape, stride, padding)
    key = _fused_key(geom, d1, d2, n, x.shape[1])
    if use_cache and (hit := known_fused_tile(geom, d1, d2, n, x.shape[1])) is not None:
        return hit, {}
    xp = backend.array_module(x)
    out = xp.empty((x.shape[0], n, geom.oh, geom.ow), dtype="float32")
    packed, times = {}, {}
    for t in tl.ranked_tiles(geom, x.shape[1], d1, d2, n, limit=candidates):
        if t.cluster not in packed:
            packed[t.cluster] = tl.pack_weights(u1, core, u3, bias, t.cluster, xp=xp)
        run = lambda t=t: tl.tucker_layer(x, packed[t.cluster], stride, padding,  # noqa: E731
                                          tile=t, out=out)
        times[t] = bench.time_graph(run, warmup=2, repeat=repeat, calls_per_graph=10).median_us
    best = min(times, key=times.get)
    cache.store(key, {"tile": dataclasses.asdict(best), "us": times[best]})
    _MEMO[key] = best
    return best, times


def known_fused_tile(geom: ConvGeometry, d1: int, d2: int, n: int, c: int):
    """The tuned fused tile for this layer on this device, else None; never times."""
    from tensorconv.ops import tucker_layer as tl

    key = _fused_key(geom, d1, d2, n, c)
    if key not in _MEMO:
        hit = cache.lookup(key)
        if hit is None:
            return None
        _MEMO[key] = tl.FusedTile(**hit["tile"])
    return _MEMO[key]
