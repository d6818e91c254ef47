"""Timing tiles ("oracle" tuning) of the dense-convolution kernels, kept in the tune cache.

``"tdc"`` (the paper's scheme): every valid tile is timed — the analytic model is judged
against this.  ``"cluster"`` and ``"tf32x3"``: the best candidates of each kernel's
estimate; ``"winograd"``: all of its few tiles.  :func:`tune_core` picks the fastest
kernel for a shape; :func:`tune_fused_tile` times the one-launch Tucker layer's tiles.
The winners go to the tune cache under the keys the ops read back (``tuned_tile``,
:func:`tensorconv.ops.core_conv.tuned_choice`).  Every tuner compiles the kernels of
all its candidates at once, in parallel (:func:`tensorconv.cuda.compile_all`), before
timing any.
"""

from __future__ import annotations

import dataclasses

from tensorconv import backend, cuda, timing, tunecache
from tensorconv.checks import ConvGeometry, conv_geometry
from tensorconv.ops import (
    core_conv,
    tucker_core_cluster,
    tucker_core_tdc,
    tucker_core_tf32x3,
    tucker_layer,
    winograd_conv,
)

_TUNED = {"cluster": tucker_core_cluster, "tf32x3": tucker_core_tf32x3,
          "winograd": winograd_conv}
CANDIDATES = 64   # tiles of the cluster and tf32x3 kernels timed per shape: each estimate's best


def time_tiles(key: str | None, tiles, run_tile, kernels, *, repeat: int = 10,
               what: str = "tiles") -> tuple:
    """Time ``run_tile(t)`` (CUDA-graph replay median) for every tile, their ``kernels(t)``
    compiled first, in parallel; store the fastest under ``key`` (None: store nothing).

    Returns ``(best tile, {tile: µs})``.
    """
    tiles = list(tiles)
    cuda.compile_all((k for t in tiles for k in kernels(t)), desc=f"compiling {what}")
    times = {t: timing.time_graph(lambda t=t: run_tile(t), warmup=2, repeat=repeat,
                                  calls_per_graph=10).median_us for t in tiles}
    best = min(times, key=times.get)
    if key is not None:
        tunecache.store(key, {"tile": dataclasses.asdict(best), "us": times[best]})
    return best, times


def _stored_us(key: str) -> float | None:
    """The time stored beside a tuned tile (None when the entry has no usable one)."""
    hit = tunecache.lookup(key)
    us = hit.get("us") if isinstance(hit, dict) else None
    return float(us) if isinstance(us, (int, float)) and us > 0 else None


def oracle_tile(x, w, geom: ConvGeometry, *, repeat: int = 10, use_cache: bool = True):
    """Time every tile of the paper's kernel; return ``(best tile, {tile: µs})`` and remember
    the best (a cache hit returns it with an empty timing dict)."""
    key = tunecache.make_key("tdc_oracle", tucker_core_tdc.FILE, geom)
    tiles = tucker_core_tdc.candidates(geom, backend.device_facts())

    def check(tile):
        if tile not in tiles:
            raise ValueError(f"{tile} is not a candidate for {geom}")

    if use_cache and (hit := tunecache.known_tile(key, tucker_core_tdc.Tile, check)) is not None:
        return hit, {}
    packed = tucker_core_tdc.pack_weights(w)
    out = backend.array_module(x).empty(geom.output_shape, dtype="float32")
    return time_tiles(key, tiles, lambda t: tucker_core_tdc.run(x, packed, out, geom, t),
                      lambda t: tucker_core_tdc.kernels(geom, t), repeat=repeat,
                      what=f"tdc tiles for {geom.c}->{geom.k} on {geom.h}x{geom.w}")


def _tune_kernel(variant: str, x, w, geom: ConvGeometry, tiles, repeat: int, use_cache: bool):
    """Time ``tiles`` of core kernel ``variant`` on ``geom``; store and return the fastest and
    the times (a cache hit: the stored tile and an empty dict)."""
    kernel = _TUNED[variant]
    if use_cache and (hit := kernel.tuned_tile(geom)) is not None and \
            _stored_us(kernel.tile_key(geom)) is not None:
        return hit, {}
    packed = kernel.pack_weights(w)
    out = backend.array_module(x).empty(geom.output_shape, dtype="float32")
    return time_tiles(kernel.tile_key(geom), tiles(),
                      lambda t: kernel.run(x, packed, out, geom, t),
                      lambda t: kernel.kernels(geom, t), repeat=repeat,
                      what=f"{variant} tiles for {geom.c}->{geom.k} on {geom.h}x{geom.w}")


def tuned_candidates(variant: str, geom: ConvGeometry, facts, candidates: int | None = None):
    """The tiles the tuner times for core kernel ``variant``: the ``candidates`` (default
    :data:`CANDIDATES`) best-estimated cluster or tf32x3 tiles, every Winograd tile."""
    if variant == "winograd":
        return winograd_conv.candidates(geom, facts)
    return _TUNED[variant].ranked(geom, facts, candidates or CANDIDATES)


def tune_cluster_tile(x, w, geom: ConvGeometry, *, candidates: int | None = None,
                      repeat: int = 10, use_cache: bool = True):
    """Time the ``candidates`` best-estimated cluster tiles; return ``(best, {tile: µs})``."""
    facts = backend.device_facts()
    return _tune_kernel("cluster", x, w, geom,
                        lambda: tuned_candidates("cluster", geom, facts, candidates), repeat,
                        use_cache)


def tune_tf32x3_tile(x, w, geom: ConvGeometry, *, candidates: int | None = None,
                     repeat: int = 10, use_cache: bool = True):
    """Time the ``candidates`` best-estimated ``"tf32x3"`` tiles; return ``(best, {tile: µs})``."""
    facts = backend.device_facts()
    return _tune_kernel("tf32x3", x, w, geom,
                        lambda: tuned_candidates("tf32x3", geom, facts, candidates), repeat,
                        use_cache)


def tune_winograd_tile(x, w, geom: ConvGeometry, *, repeat: int = 10, use_cache: bool = True):
    """Time every ``"winograd"`` tile; return ``(best, {tile: µs})``."""
    facts = backend.device_facts()
    return _tune_kernel("winograd", x, w, geom, lambda: tuned_candidates("winograd", geom, facts),
                        repeat, use_cache)


_TUNERS = {"cluster": tune_cluster_tile, "tf32x3": tune_tf32x3_tile,
           "winograd": tune_winograd_tile}


def core_kernels(geom: ConvGeometry) -> list:
    """Every kernel :func:`tune_core` may compile for ``geom`` (for an ahead-of-time build)."""
    facts = backend.device_facts()
    return [k for v in core_conv.competing(geom) for t in tuned_candidates(v, geom, facts)
            for k in _TUNED[v].kernels(geom, t)]


def tune_core(x, w, geom: ConvGeometry, *, repeat: int = 10, use_cache: bool = True):
    """Tune the cluster, tf32x3 and Winograd kernels on ``geom`` (those that run it); return
    ``(variant, tile)`` of the fastest, stored under
    :func:`tensorconv.ops.core_conv.choice_key`, where ``core_conv2d``'s default finds it."""
    if use_cache and (hit := core_conv.tuned_choice(geom)) is not None:
        return hit
    facts = backend.device_facts()
    cuda.compile_all(core_kernels(geom), desc=f"compiling core kernels for {geom.c}->{geom.k} "
                                              f"on {geom.h}x{geom.w}")
    best = None
    for variant in core_conv.competing(geom):
        if not _TUNED[variant].candidates(geom, facts):
            continue
        tile, times = _TUNERS[variant](x, w, geom, repeat=repeat, use_cache=use_cache)
        us = times[tile] if times else _stored_us(_TUNED[variant].tile_key(geom))
        if best is None or us < best[2]:
            best = (variant, tile, us)
    if best is None:
        raise ValueError(f"no core kernel runs {geom}: "
                         f"{tucker_core_cluster.supported(geom) or 'no tile fits'}")
    tunecache.store(core_conv.choice_key(geom),
                    {**core_conv.encode_choice(best[:2]), "us": best[2]})
    return best[0], best[1]


def fused_problem(x_shape, core_shape, n: int, stride, padding) -> tucker_layer.Problem:
    """The one-launch Tucker layer's :class:`~tensorconv.ops.tucker_layer.Problem` for an
    input of ``x_shape``, a core of ``core_shape`` (D2, D1, R, S) and ``n`` outputs."""
    b, c, h, w = x_shape
    geom = conv_geometry((b, core_shape[1], h, w), core_shape, stride, padding)
    return tucker_layer.Problem(geom, c, n)


def tune_fused_tile(x, u1, core, u3, bias, stride, padding, *, candidates: int = 16,
                    repeat: int = 10, use_cache: bool = True):
    """Time the ``candidates`` lowest-cost one-launch Tucker-layer tiles; return
    ``(best, {tile: µs})``.

    ``u1, core, u3, bias`` as for :func:`tensorconv.ops.tucker_layer.pack_weights`; the
    winner goes to the tune cache (a hit returns it with an empty timing dict).
    """
    p = fused_problem(x.shape, core.shape, u3.shape[0], stride, padding)
    if use_cache and (hit := tucker_layer.tuned_tile(p)) is not None:
        return hit, {}
    xp = backend.array_module(x)
    out = xp.empty((x.shape[0], p.n, p.core.oh, p.core.ow), dtype="float32")
    tiles = tucker_layer.ranked(p, backend.device_facts(), limit=candidates)
    packed = {cl: tucker_layer.pack_weights(u1, core, u3, bias, cl, xp=xp)
              for cl in {t.cluster for t in tiles}}
    return time_tiles(tucker_layer.tile_key(p), tiles, lambda t: tucker_layer.tucker_layer_conv2d(
        x, packed[t.cluster], stride, padding, tile=t, out=out),
        lambda t: tucker_layer.kernels(p, t), repeat=repeat,
        what=f"one-launch Tucker tiles for C{p.c} D{p.core.c}x{p.core.k} N{p.n}")
