"""The fused one-launch Tucker layer (kernels_cu/tucker_layer.cu) on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import tucker_layer as tl
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


def _reference(x, u1, core, u3, bias, stride, padding, residual, relu):
    f = [a.astype(np.float64) for a in (x, u1, core, u3)]
    y = reference.conv2d(f[0], f[1])
    y = reference.conv2d(y, f[2], stride=stride, padding=padding)
    y = reference.conv2d(y, f[3]) + bias.reshape(1, -1, 1, 1)
    if residual is not None:
        y = y + residual
    return np.maximum(y, 0) if relu else y


def _check(rng, b, c, d1, d2, n, h, w, k, stride, padding, tile=None, residual=False,
           relu=False):
    import cupy as cp

    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    u1 = rng.standard_normal((d1, c, 1, 1)).astype(np.float32)
    core = rng.standard_normal((d2, d1, k, k)).astype(np.float32)
    u3 = rng.standard_normal((n, d2, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    geom = conv_geometry((b, d1, h, w), core.shape, stride, padding)
    res = rng.standard_normal((b, n, geom.oh, geom.ow)).astype(np.float32) if residual else None
    tile = tile or tl.default_tile(tl.Problem(geom, c, n), backend.device_facts())
    packed = tl.pack_weights(u1, core, u3, bias, tile.cluster, xp=cp)
    out = cp.full((b, n, geom.oh, geom.ow), cp.nan, cp.float32)
    tl.tucker_layer_conv2d(cp.asarray(x), packed, stride, padding, tile=tile, out=out, relu=relu,
                    residual=None if res is None else cp.asarray(res))
    ref = _reference(x, u1, core, u3, bias, stride, padding, res, relu)
    assert not bool(cp.isnan(out).any())
    assert rel_err(out.get(), ref) <= 1e-5, (b, c, d1, d2, n, h, w, k, stride, padding, tile)


@pytest.mark.parametrize("trial", sweep(30, 10))
def test_fused_layer_random_shapes_and_tiles(rng, trial):
    b = int(rng.integers(1, 3))
    c, d1, d2, n = (int(v) for v in rng.integers(1, 70, size=4))   # not multiples of 4
    h, w = (int(v) for v in rng.integers(3, 30, size=2))
    k = int(rng.choice([1, 3, 3, 5]))
    stride = int(rng.choice([1, 1, 2]))
    padding = min(int(rng.integers(0, k // 2 + 1)), k)
    if h + 2 * padding < k or w + 2 * padding < k:
        padding = k
    geom = conv_geometry((b, d1, h, w), (d2, d1, k, k), stride, padding)
    tiles = tl.candidates(tl.Problem(geom, c, n), backend.device_facts())
    tile = tiles[int(rng.integers(len(tiles)))]
    _check(rng, b, c, d1, d2, n, h, w, k, stride, padding, tile=tile,
           residual=bool(rng.integers(2)), relu=bool(rng.integers(2)))


@pytest.mark.parametrize("cluster", tl.CLUSTERS)
def test_fused_layer_every_cluster_size(rng, cluster):
    _check(rng, 1, 64, 24, 40, 64, 14, 14, 3, 1, 1, tile=tl.Tile(4, 8, cluster),
           residual=True, relu=True)


def test_fused_layer_default_and_tuned_tiles(rng, tmp_path, monkeypatch):
    import cupy as cp

    from tensorconv.tuning import oracle

    _check(rng, 1, 128, 48, 48, 128, 28, 28, 3, 2, 1)
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x = cp.asarray(rng.standard_normal((1, 32, 14, 14)).astype(np.float32))
    u1, core, u3 = (cp.asarray(rng.standard_normal(s).astype(np.float32))
                    for s in ((16, 32, 1, 1), (16, 16, 3, 3), (32, 16, 1, 1)))
    best, times = oracle.tune_fused_tile(x, u1, core, u3, None, 1, 1, candidates=5, repeat=3)
    assert len(times) == 5 and times[best] == min(times.values())
    assert oracle.tune_fused_tile(x, u1, core, u3, None, 1, 1) == (best, {})


def test_fused_layer_bad_input():
    import cupy as cp

    rng = np.random.default_rng(0)
    u1, core, u3 = (rng.standard_normal(s).astype(np.float32)
                    for s in ((8, 16, 1, 1), (8, 8, 3, 3), (16, 8, 1, 1)))
    packed = tl.pack_weights(u1, core, u3, None, 2, xp=cp)
    x = cp.ones((1, 16, 10, 10), cp.float32)
    out = cp.full((1, 16, 10, 10), cp.nan, cp.float32)
    with pytest.raises(ValueError, match="cluster must be"):
        tl.pack_weights(u1, core, u3, None, 3)
    with pytest.raises(ValueError, match="u1 has 4 output channels"):
        tl.pack_weights(u1[:4], core, u3, None, 2)
    with pytest.raises(ValueError, match=r"x must be \(B, 16, H, W\)"):
        tl.tucker_layer_conv2d(cp.ones((1, 8, 10, 10), cp.float32), packed, 1, 1, out=out)
    with pytest.raises(ValueError, match="packed for clusters of 2"):
        tl.tucker_layer_conv2d(x, packed, 1, 1, tile=tl.Tile(4, 4, 4), out=out)
    wide = tl.pack_weights(np.ones((256, 16, 1, 1), np.float32), np.ones((256, 256, 3, 3),
                                                                         np.float32),
                           np.ones((16, 256, 1, 1), np.float32), None, 1, xp=cp)
    with pytest.raises(ValueError, match="more than 4 items|shared memory"):   # 64 x 256 items
        tl.tucker_layer_conv2d(x, wide, 1, 1, tile=tl.Tile(16, 16, 1), out=out)
    with pytest.raises(ValueError, match="residual has shape"):
        tl.tucker_layer_conv2d(x, packed, 1, 1, residual=cp.ones((1, 16, 5, 5), cp.float32),
                               out=out)
    with pytest.raises(ValueError, match="stride 1 or 2"):
        tl.tucker_layer_conv2d(x, packed, 3, 1, out=out)
    with pytest.raises(TypeError, match="runs on the GPU"):
        tl.tucker_layer_conv2d(np.ones((1, 16, 10, 10), np.float32), packed)
    assert bool(cp.isnan(out).all())
