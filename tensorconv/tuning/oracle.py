"""Exhaustive ("oracle") tuning of the core-convolution tiles, with the tune cache.

``"tdc"`` (the paper's scheme): every valid tile is timed — the analytic model
is judged against this.  ``"cluster"`` (ours): the estimate's best candidates
are timed; the engine and ``core_conv2d`` reuse the winner through
:func:`known_cluster_tile`.  ``"tf32x3"``: the estimate's best candidates;
``"winograd"``: all of its few tiles.  :func:`tune_core` picks the fastest kernel.
"""

from __future__ import annotations

import dataclasses

from tensorconv import backend, bench
from tensorconv.checks import ConvGeometry
from tensorconv.ops import tucker
from tensorconv.ops import tucker_tf32x3 as tf32x3
from tensorconv.ops import winograd
from tensorconv.tuning import cache, cluster_model, tf32x3_model

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


def _time_tiles(key: str, tiles, run_tile, repeat: int):
    """Time ``run_tile(t)`` for every tile; store and remember the fastest; return it and the times."""
    times = {t: bench.time_graph(lambda t=t: run_tile(t), warmup=2, repeat=repeat,
                                 calls_per_graph=10).median_us for t in tiles}
    best = min(times, key=times.get)
    cache.store(key, {"tile": dataclasses.asdict(best), "us": times[best]})
    cache.memo()[key] = best
    return best, times


def _known(key: str, tile_type):
    """The tile stored under ``key`` (memoised), else None."""
    memo = cache.memo()
    if key not in memo:
        hit = cache.lookup(key)
        if hit is None:
            return None
        memo[key] = tile_type(**hit["tile"])
    return memo[key]


def _tune_core_kernel(x, w, geom: ConvGeometry, variant: str, model, key: str, prepared: dict,
                      candidates: int, repeat: int):
    """Time ``model``'s ``candidates`` best-ranked tiles of core kernel ``variant`` (its
    weights ``prepared`` once); store and return the fastest and the times."""
    facts = backend.device_facts()
    out = backend.array_module(x).empty(geom.output_shape, dtype="float32")
    tiles = model.ranked_tiles(geom, facts.smem_per_block_optin, facts.sm_count,
                               limit=candidates, clusters=facts.compute_capability >= (9, 0))
    return _time_tiles(key, tiles, lambda t: tucker.core_conv2d(
        x, w, geom.stride, geom.padding, variant=variant, tile=t, out=out, **prepared), repeat)


def _cluster_key(geom: ConvGeometry) -> str:
    return cache.make_key("tdc_cluster", "tucker_core_conv.cu", geom)


def _tf32x3_key(geom: ConvGeometry) -> str:
    return cache.make_key("tdc_tf32x3", "tucker_core_tf32x3.cu", geom)


def tune_cluster_tile(x, w, geom: ConvGeometry, *, candidates: int = 64, repeat: int = 10,
                      use_cache: bool = True):
    """Time the ``candidates`` best-estimated cluster tiles; return ``(best, {tile: µs})``.

    The winner is stored in the tune cache (device, kernel source hash, shape);
    a cache hit returns it with an empty timing dict.
    """
    if use_cache and (hit := known_cluster_tile(geom)) is not None:
        return hit, {}
    return _tune_core_kernel(x, w, geom, "cluster", cluster_model, _cluster_key(geom),
                             tucker.prepared_weights("cluster", w), candidates, repeat)


def known_cluster_tile(geom: ConvGeometry) -> tucker.ClusterTile | None:
    """The tuned cluster tile when ``geom`` was tuned on this device, else None; never times."""
    return _known(_cluster_key(geom), tucker.ClusterTile)


def tune_tf32x3_tile(x, w, geom: ConvGeometry, *, candidates: int = 64, repeat: int = 10,
                     use_cache: bool = True):
    """Time the ``candidates`` best-estimated ``"tf32x3"`` tiles; return ``(best, {tile: µs})``
    (stored in the tune cache; a hit returns it with an empty timing dict)."""
    if use_cache and (hit := known_tf32x3_tile(geom)) is not None:
        return hit, {}
    return _tune_core_kernel(x, w, geom, "tf32x3", tf32x3_model, _tf32x3_key(geom),
                             tucker.prepared_weights("tf32x3", w), candidates, repeat)


def known_tf32x3_tile(geom: ConvGeometry) -> tf32x3.Tf32x3Tile | None:
    """The tuned ``"tf32x3"`` tile when ``geom`` was tuned on this device, else None."""
    return _known(_tf32x3_key(geom), tf32x3.Tf32x3Tile)


def _winograd_key(geom: ConvGeometry) -> str:
    return cache.make_key("winograd", "winograd_conv.cu", geom)


def tune_winograd_tile(x, w, geom: ConvGeometry, *, repeat: int = 10, use_cache: bool = True):
    """Time every ``"winograd"`` tile; return ``(best, {tile: µs})`` (stored in the tune
    cache; a hit returns it with an empty timing dict)."""
    if use_cache and (hit := known_winograd_tile(geom)) is not None:
        return hit, {}
    out = backend.array_module(x).empty(geom.output_shape, dtype="float32")
    prepared = tucker.prepared_weights("winograd", w)
    tiles = winograd.candidates(geom, backend.device_facts().smem_per_block_optin)
    return _time_tiles(_winograd_key(geom), tiles, lambda t: tucker.core_conv2d(
        x, w, geom.stride, geom.padding, variant="winograd", tile=t, out=out, **prepared), repeat)


def known_winograd_tile(geom: ConvGeometry) -> winograd.WinogradTile | None:
    """The tuned ``"winograd"`` tile when ``geom`` was tuned on this device, else None."""
    return _known(_winograd_key(geom), winograd.WinogradTile)


def tune_core(x, w, geom: ConvGeometry, *, repeat: int = 10, use_cache: bool = True):
    """Tune the core kernels on ``geom``; return ``(variant, tile)`` of the fastest.

    ``"tf32x3"`` and ``"winograd"`` are tried only where they run the shape; the
    choice goes to the tune cache, where :func:`known_core_choice` (and
    ``core_conv2d``'s default) finds it.
    """
    if use_cache and (hit := known_core_choice(geom)) is not None:
        return hit
    cluster, times = tune_cluster_tile(x, w, geom, repeat=repeat, use_cache=use_cache)
    best = ("cluster", cluster, times.get(cluster) or cache.lookup(_cluster_key(geom))["us"])
    smem = backend.device_facts().smem_per_block_optin
    for variant, module, tune, key in (("tf32x3", tf32x3, tune_tf32x3_tile, _tf32x3_key),
                                       ("winograd", winograd, tune_winograd_tile, _winograd_key)):
        if module.supported(geom) is None and module.candidates(geom, smem):
            tile, times = tune(x, w, geom, repeat=repeat, use_cache=use_cache)
            us = times.get(tile) or cache.lookup(key(geom))["us"]
            if us < best[2]:
                best = (variant, tile, us)
    cache.store(_core_key(geom), {"variant": best[0], "tile": dataclasses.asdict(best[1]),
                                  "us": best[2]})
    cache.memo().pop(_core_key(geom), None)
    return best[0], best[1]


def default_core(geom: ConvGeometry):
    """``(variant, tile)`` that runs ``geom`` untold: the tuned faster kernel, else the
    cluster kernel with its tuned (or estimated) tile; never times."""
    return known_core_choice(geom) or ("cluster", known_cluster_tile(geom)
                                       or cluster_model.choose_tile(geom))


def winograd_version(geom: ConvGeometry) -> str:
    """``"|<winograd_conv.cu version>"`` where the Winograd kernel competes for ``geom``,
    else ``""``: keys of choices among the core kernels carry it, so that its edits
    invalidate those choices and leave the other shapes' standing."""
    if winograd.supported(geom) is not None:
        return ""
    return f"|{cache.kernel_version('winograd_conv.cu')}"


def _core_key(geom: ConvGeometry) -> str:
    # every competing kernel's source: an edit of any invalidates the choice
    return cache.make_key("tdc_core", "tucker_core_tf32x3.cu",
                          f"{cache.kernel_version('tucker_core_conv.cu')}"
                          f"{winograd_version(geom)}|{geom}")


def known_core_choice(geom: ConvGeometry):
    """``(variant, tile)`` of the faster core kernel when ``geom`` was tuned here, else None."""
    key, memo = _core_key(geom), cache.memo()
    if key not in memo:
        hit = cache.lookup(key)
        if hit is None:
            return None
        tile_type = {"tf32x3": tf32x3.Tf32x3Tile, "winograd": winograd.WinogradTile}.get(
            hit["variant"], tucker.ClusterTile)
        memo[key] = (hit["variant"], tile_type(**hit["tile"]))
    return memo[key]


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
    packed = {}
    tiles = tl.ranked_tiles(geom, x.shape[1], d1, d2, n, limit=candidates)
    for t in tiles:
        if t.cluster not in packed:
            packed[t.cluster] = tl.pack_weights(u1, core, u3, bias, t.cluster, xp=xp)
    return _time_tiles(key, tiles, lambda t: tl.tucker_layer(
        x, packed[t.cluster], stride, padding, tile=t, out=out), repeat)


def known_fused_tile(geom: ConvGeometry, d1: int, d2: int, n: int, c: int):
    """The tuned fused tile for this layer on this device, else None; never times."""
    from tensorconv.ops import tucker_layer as tl

    return _known(_fused_key(geom, d1, d2, n, c), tl.FusedTile)
