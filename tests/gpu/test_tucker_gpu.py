"""TDC core convolution kernel, its tile model and oracle, on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import tucker
from tensorconv.tuning import cluster_model, oracle, tdc_model
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


def _check(rng, xs, ws, stride, padding, **kw):
    import cupy as cp

    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    geom = conv_geometry(xs, ws, stride, padding)
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    tucker.core_conv2d(cp.asarray(x), cp.asarray(w), stride, padding, out=out, **kw)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), stride=stride,
                           padding=padding)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (xs, ws, stride, padding, kw)


@pytest.mark.parametrize("trial", range(40))
def test_tdc_random_shapes_and_tiles(rng, trial):
    b = int(rng.integers(1, 4))
    c, n = (int(v) for v in rng.integers(1, 100, size=2))       # ranks not multiples of 32
    h, w = (int(v) for v in rng.integers(3, 40, size=2))         # odd sizes too
    stride = int(rng.choice([1, 1, 2]))
    padding = int(rng.choice([0, 1, 1]))
    geom = conv_geometry((b, c, h, w), (n, c, 3, 3), stride, padding)
    tiles = tucker.candidate_tiles(geom, 48 * 1024)
    tile = tiles[int(rng.integers(len(tiles)))]                  # tc < C exercises the atomics
    _check(rng, (b, c, h, w), (n, c, 3, 3), stride, padding, variant="tdc", tile=tile)


def _splits():
    """Cluster sizes this device runs: clusters need sm_90."""
    from tensorconv import backend

    return tucker.CLUSTER_SPLITS if backend.device_facts().compute_capability >= (9, 0) else (1,)


def _random_cluster_tile(rng, geom):
    """Any valid cluster tile — odd channel groups, stage depths not dividing C, every cluster size."""
    while True:
        nt, pt = (int(rng.choice(v)) for v in (tucker.CLUSTER_NT, tucker.CLUSTER_PT))
        tile = tucker.ClusterTile(nt, pt, nt * int(rng.integers(1, 9)), int(rng.integers(1, 9)),
                                  int(rng.integers(1, 5)), int(rng.integers(1, 17)),
                                  int(rng.choice(_splits())))
        if tile.threads <= tucker.CLUSTER_MAX_THREADS and tile.smem_bytes(geom) <= 96 * 1024:
            return tile


@pytest.mark.parametrize("trial", range(40))
def test_cluster_random_shapes_and_tiles(rng, trial):
    b = int(rng.integers(1, 4))
    c, n = (int(v) for v in rng.integers(1, 100, size=2))   # N % 4 != 0: the scalar weight path
    h, w = (int(v) for v in rng.integers(3, 40, size=2))
    k = int(rng.choice([1, 3, 3, 3, 5, 7]))
    stride = int(rng.choice([1, 1, 2]))
    padding = int(rng.integers(0, k // 2 + 1))
    if h + 2 * padding < k or w + 2 * padding < k:
        padding = k
    geom = conv_geometry((b, c, h, w), (n, c, k, k), stride, padding)
    tile = _random_cluster_tile(rng, geom)                   # splits > C/CK leaves blocks idle
    _check(rng, (b, c, h, w), (n, c, k, k), stride, padding, variant="cluster", tile=tile)


@pytest.mark.parametrize("variant", ["cluster", "tf32x3"])
@pytest.mark.parametrize("trial", range(12))
def test_epilogue_bias_residual_relu(rng, variant, trial):
    """relu?(conv + bias + residual) on random shapes, filters, tiles and cluster sizes: the
    direct store and the cluster's push reduction both apply it; outputs start as NaN."""
    import cupy as cp

    from tests.gpu.test_tucker_tf32x3_gpu import _random_tile

    b = int(rng.integers(1, 3))
    c, n = (int(v) for v in rng.integers(1, 70, size=2))
    h, w = (int(v) for v in rng.integers(3, 30, size=2))
    k, stride = int(rng.choice([1, 3, 3, 5])), int(rng.choice([1, 2]))
    padding = k // 2
    geom = conv_geometry((b, c, h, w), (n, c, k, k), stride, padding)
    tile = _random_cluster_tile(rng, geom) if variant == "cluster" else _random_tile(rng, geom)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((n, c, k, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if trial % 3 else None
    res = rng.standard_normal(geom.output_shape).astype(np.float32) if trial % 2 else None
    relu = trial % 4 < 2
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    tucker.core_conv2d(cp.asarray(x), cp.asarray(wt), stride, padding, variant=variant, tile=tile,
                       bias=None if bias is None else cp.asarray(bias), relu=relu,
                       residual=None if res is None else cp.asarray(res), out=out)
    ref = reference.conv2d(x.astype(np.float64), wt.astype(np.float64), stride=stride,
                           padding=padding)
    ref += 0 if bias is None else bias.reshape(1, -1, 1, 1)
    ref += 0 if res is None else res
    ref = np.maximum(ref, 0) if relu else ref
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (geom, tile, bias is None, res is None, relu)


def test_cluster_candidates_and_default_tile_run(rng):
    geom = conv_geometry((2, 48, 15, 13), (40, 48, 3, 3), 2, 1)
    from tensorconv import backend

    facts = backend.device_facts()
    for tile in cluster_model.ranked_tiles(geom, facts.smem_per_block_optin, facts.sm_count, 12):
        _check(rng, (2, 48, 15, 13), (40, 48, 3, 3), 2, 1, variant="cluster", tile=tile)


def test_cluster_is_deterministic(rng):
    import cupy as cp

    x = cp.asarray(rng.standard_normal((1, 96, 28, 28)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((64, 96, 3, 3)).astype(np.float32))
    tile = tucker.ClusterTile(4, 4, 32, 4, 4, 8, max(_splits()))
    a = tucker.core_conv2d(x, w, 1, 1, variant="cluster", tile=tile)
    b = tucker.core_conv2d(x, w, 1, 1, variant="cluster", tile=tile)
    assert bool((a == b).all())                               # fixed-order cluster sums, no atomics


@pytest.mark.parametrize("variant", [None, "cluster", "igemm"])
def test_default_tiles_and_igemm_variant(rng, variant):
    _check(rng, (1, 64, 28, 28), (32, 64, 3, 3), 1, 1, variant=variant)
    _check(rng, (1, 64, 28, 28), (32, 64, 3, 3), 1, 1, variant="tdc")


def test_large_filters_fall_back_or_refuse(rng, caplog):
    import logging

    _check(rng, (1, 16, 9, 9), (8, 16, 5, 5), 1, 2)                  # the cluster kernel
    with caplog.at_level(logging.INFO, logger="tensorconv.ops.tucker"):
        _check(rng, (1, 16, 12, 12), (8, 16, 9, 9), 1, 4)
    assert "falls back to igemm" in caplog.text
    import cupy as cp

    with pytest.raises(ValueError, match="3x3 filters only"):
        tucker.core_conv2d(cp.ones((1, 16, 9, 9), cp.float32), cp.ones((8, 16, 5, 5), cp.float32),
                           variant="tdc")
    with pytest.raises(ValueError, match="filters up to 7x7"):
        tucker.core_conv2d(cp.ones((1, 16, 12, 12), cp.float32),
                           cp.ones((8, 16, 9, 9), cp.float32), variant="cluster")


def test_bad_input_before_launch():
    import cupy as cp

    x = cp.ones((1, 16, 14, 14), cp.float32)
    w = cp.ones((8, 16, 3, 3), cp.float32)
    out = cp.full((1, 8, 14, 14), cp.nan, cp.float32)
    wide = cp.ones((1, 2048, 14, 14), cp.float32)  # a 2048-channel cube of 10 x 6 is 480 KiB
    with pytest.raises(ValueError, match="shared memory"):
        tucker.core_conv2d(wide, cp.ones((8, 2048, 3, 3), cp.float32), 1, 1, variant="tdc",
                           tile=tucker.CoreTile(8, 4, 2048), out=out)
    with pytest.raises(ValueError, match="tile.tc"):
        tucker.core_conv2d(x, w, 1, 1, variant="tdc", tile=tucker.CoreTile(2, 2, 0), out=out)
    with pytest.raises(ValueError, match="tile sides"):
        tucker.core_conv2d(x, w, 1, 1, variant="tdc", tile=tucker.CoreTile(3, 2, 4), out=out)
    with pytest.raises(ValueError, match="w_crsn has shape"):
        tucker.core_conv2d(x, w, 1, 1, variant="tdc", w_crsn=cp.ones((8, 3, 3, 16), cp.float32),
                           out=out)
    with pytest.raises(ValueError, match="variant must be"):
        tucker.core_conv2d(x, w, 1, 1, variant="fft", out=out)
    with pytest.raises(ValueError, match="does not fit variant='cluster'"):
        tucker.core_conv2d(x, w, 1, 1, variant="cluster", tile=tucker.CoreTile(2, 2, 4), out=out)
    with pytest.raises(ValueError, match="tile.splits"):
        tucker.core_conv2d(x, w, 1, 1, tile=tucker.ClusterTile(4, 4, 8, 2, 2, 8, 3), out=out)
    with pytest.raises(ValueError, match="multiple of tile.nt"):
        tucker.core_conv2d(x, w, 1, 1, tile=tucker.ClusterTile(4, 4, 6, 2, 2, 8, 1), out=out)
    with pytest.raises(ValueError, match="threads"):
        tucker.core_conv2d(x, w, 1, 1, tile=tucker.ClusterTile(1, 4, 64, 8, 2, 8, 1), out=out)
    with pytest.raises(ValueError, match="stride 1 or 2"):
        tucker.core_conv2d(x, w, 3, 1, variant="cluster", out=out)
    with pytest.raises(ValueError, match="not available with variant='tdc'"):
        tucker.core_conv2d(x, w, 1, 1, variant="tdc", relu=True, out=out)
    with pytest.raises(ValueError, match="residual has shape"):
        tucker.core_conv2d(x, w, 1, 1, variant="cluster", residual=cp.ones((1, 8, 7, 7), cp.float32),
                           out=out)
    with pytest.raises(ValueError, match="bias"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", bias=cp.ones(9, cp.float32), out=out)
    with pytest.raises(TypeError, match="runs on the GPU"):
        tucker.core_conv2d(np.ones((1, 16, 14, 14), np.float32), np.ones((8, 16, 3, 3), np.float32))
    assert bool(cp.isnan(out).all())


def test_oracle_and_model(rng, tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x = cp.asarray(rng.standard_normal((1, 32, 14, 14)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((32, 32, 3, 3)).astype(np.float32))
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    best, times = oracle.oracle_tile(x, w, geom, repeat=3)
    assert best in times and times[best] == min(times.values())
    again, cached = oracle.oracle_tile(x, w, geom)
    assert again == best and cached == {}            # from the tune cache
    model = tdc_model.choose_tile(geom)
    assert model in times                             # a valid, timed candidate


def test_cluster_tuner_and_cache(rng, tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x = cp.asarray(rng.standard_normal((1, 32, 14, 14)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((48, 32, 3, 3)).astype(np.float32))
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    assert oracle.known_cluster_tile(geom) is None
    best, times = oracle.tune_cluster_tile(x, w, geom, candidates=6, repeat=3)
    assert len(times) == 6 and times[best] == min(times.values())
    again, cached = oracle.tune_cluster_tile(x, w, geom)
    assert again == best and cached == {}
    assert oracle.known_cluster_tile(geom) == best
    _check(rng, (1, 32, 14, 14), (48, 32, 3, 3), 1, 1)   # the default path picks the tuned tile
