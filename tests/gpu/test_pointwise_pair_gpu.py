"""The chained-1x1 kernel (kernels_cu/pointwise_pair.cu) against two reference.conv2d calls."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, reference
from tensorconv.ops import pointwise_pair as pair
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


def _fitting(c, m, j):
    """The tiles that fit ``c`` -> ``m`` -> ``j`` channels on this device."""
    return pair.candidates(pair.Problem(1, 1, c, m, j), backend.device_facts())


def _tile_id(t):
    return f"p{t.p}cl{t.cl}{'mma' if t.mma else ''}"


def _case(rng, trial, n, c, m, j, h, w):
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    w1 = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    w2 = (rng.standard_normal((j, m, 1, 1)) / np.sqrt(m)).astype(np.float32)
    b1 = rng.standard_normal(m).astype(np.float32) if trial % 2 else None
    b2 = rng.standard_normal(j).astype(np.float32) if trial % 3 == 0 else None
    res = rng.standard_normal((n, m, h, w)).astype(np.float32) if trial >= 1 else None
    relu1, relu2 = trial != 2, trial == 3
    f64 = lambda a: None if a is None else a.astype(np.float64)  # noqa: E731
    y = reference.conv2d(f64(x), f64(w1), f64(b1))
    if res is not None:
        y = y + res
    if relu1:
        y = np.maximum(y, 0)
    z = reference.conv2d(y, f64(w2), f64(b2))
    if relu2:
        z = np.maximum(z, 0)
    return (x, w1, w2, b1, b2, res, relu1, relu2), y, z


@pytest.mark.parametrize("tile", pair.TILES, ids=_tile_id)
@pytest.mark.parametrize("trial", sweep(4, 2))
def test_random_shapes(rng, tile, trial):
    """Every tile (FMA and mma) on random shapes: planes with H*W a multiple of 4 or not
    (16- or 4-byte copies), channel counts not multiples of 4, 8, 16 or of the slice,
    ragged pixel tiles,
    batch > 1, with or without biases / residual / either ReLU; NaN-poisoned outputs;
    bitwise repeatable (the cluster adds its partials in rank order)."""
    import cupy as cp

    n = int(rng.integers(1, 3))
    c, m, j = (int(rng.integers(1, 200)) for _ in range(3))
    # no empty slice (the op refuses those tiles)
    lowest = next(mm for mm in range(1, 1024) if (tile.cl - 1) * tile.slice(mm) < mm)
    m = max(m, lowest)
    while tile not in _fitting(c, m, j):  # wide layers with large tiles: narrow them
        c, j = max(1, c // 2), max(1, j // 2)
        m = max(m // 2, lowest)
    h, w = int(rng.integers(1, 30)), int(rng.integers(1, 30))
    if trial == 0:
        w = 4 * int(rng.integers(1, 8))
    (x, w1, w2, b1, b2, res, relu1, relu2), y_ref, z_ref = _case(rng, trial, n, c, m, j, h, w)
    g = lambda a: None if a is None else cp.asarray(a)  # noqa: E731
    y = cp.full(y_ref.shape, cp.nan, cp.float32)
    z = cp.full(z_ref.shape, cp.nan, cp.float32)
    args = (g(x), g(w1), g(w2), g(b1), g(b2))
    kw = dict(residual=g(res), relu1=relu1, relu2=relu2, tile=tile)
    packed = pair.pack_weights(args[1], args[2], tile) if trial % 2 else None
    pair.conv1x1_pair(*args, **kw, packed=packed, y_out=y, z_out=z)
    assert not cp.isnan(y).any() and not cp.isnan(z).any()
    assert rel_err(y.get(), y_ref) <= 1e-5, (n, c, m, j, h, w, tile)
    assert rel_err(z.get(), z_ref) <= 1e-5, (n, c, m, j, h, w, tile)
    y2, z2 = pair.conv1x1_pair(*args, **kw)
    assert cp.array_equal(y2, y) and cp.array_equal(z2, z)


@pytest.mark.parametrize("tile", pair.TILES, ids=_tile_id)
def test_projection_shortcut_in_the_first_product(rng, tile):
    """skip_x / skip_w: a residual block's 1x1 projection shortcut (stride 1 or 2, odd
    input sizes) gathered as more rows of the first product, on every tile; against the
    reference with the shortcut as a residual; NaN-poisoned outputs."""
    import cupy as cp

    stride = int(rng.integers(1, 3))
    n, c, c2, j = int(rng.integers(1, 3)), int(rng.integers(1, 90)), int(rng.integers(1, 90)), \
        int(rng.integers(1, 90))
    lowest = next(mm for mm in range(1, 1024) if (tile.cl - 1) * tile.slice(mm) < mm)
    m = max(int(rng.integers(1, 120)), lowest)
    while tile not in _fitting(c + c2, m, j):  # not every m >= lowest has full slices
        c, c2, j = max(1, c // 2), max(1, c2 // 2), max(1, j // 2)
        m = max(m // 2, lowest)
    h2, w2 = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    h, w = (h2 - 1) // stride + 1, (w2 - 1) // stride + 1
    (x, w1, wz, b1, b2, _, relu1, relu2), _, _ = _case(rng, 3, n, c, m, j, h, w)
    xs = rng.standard_normal((n, c2, h2, w2)).astype(np.float32)
    ws = (rng.standard_normal((m, c2, 1, 1)) / np.sqrt(c2)).astype(np.float32)
    f64 = lambda a: None if a is None else a.astype(np.float64)  # noqa: E731
    y_ref = reference.conv2d(f64(x), f64(w1), f64(b1)) + \
        reference.conv2d(f64(xs), f64(ws), stride=stride)
    y_ref = np.maximum(y_ref, 0) if relu1 else y_ref
    z_ref = reference.conv2d(y_ref, f64(wz), f64(b2))
    z_ref = np.maximum(z_ref, 0) if relu2 else z_ref
    g = lambda a: None if a is None else cp.asarray(a)  # noqa: E731
    y = cp.full(y_ref.shape, cp.nan, cp.float32)
    z = cp.full(z_ref.shape, cp.nan, cp.float32)
    pair.conv1x1_pair(g(x), g(w1), g(wz), g(b1), g(b2), skip_x=g(xs), skip_w=g(ws),
                      skip_stride=stride, relu1=relu1, relu2=relu2, tile=tile, y_out=y, z_out=z)
    assert not cp.isnan(y).any() and not cp.isnan(z).any()
    assert rel_err(y.get(), y_ref) <= 1e-5, (n, c, c2, m, j, h2, w2, stride, tile)
    assert rel_err(z.get(), z_ref) <= 1e-5, (n, c, c2, m, j, h2, w2, stride, tile)


@pytest.mark.parametrize("shape", [(251, 512, 251, 7), (125, 256, 125, 14), (31, 64, 31, 56)],
                         ids=["stage4", "stage3", "stage1"])
def test_resnet18_tucker_pairs_with_default_tile(rng, shape):
    """The shapes a Tucker ResNet-18 (65 % fewer MACs) chains, on the default tile."""
    import cupy as cp

    c, m, j, hw = shape
    (x, w1, w2, b1, b2, res, relu1, relu2), y_ref, z_ref = _case(rng, 1, 1, c, m, j, hw, hw)
    g = lambda a: None if a is None else cp.asarray(a)  # noqa: E731
    y, z = pair.conv1x1_pair(g(x), g(w1), g(w2), g(b1), g(b2), residual=g(res), relu1=relu1)
    assert rel_err(y.get(), y_ref) <= 1e-5 and rel_err(z.get(), z_ref) <= 1e-5


def test_bad_input_before_launch():
    import cupy as cp

    x = cp.ones((1, 8, 5, 5), cp.float32)
    w1, w2 = cp.ones((12, 8, 1, 1), cp.float32), cp.ones((6, 12, 1, 1), cp.float32)
    y, z = cp.full((1, 12, 5, 5), 7.0, cp.float32), cp.full((1, 6, 5, 5), 7.0, cp.float32)
    with pytest.raises(ValueError, match="tile must be one of"):
        pair.conv1x1_pair(x, w1, w2, tile=pair.Tile(4, 8), y_out=y, z_out=z)  # empty slices
    with pytest.raises(ValueError, match="packed weights are for another tile"):
        pair.conv1x1_pair(x, w1, w2, tile=pair.Tile(8, 2), y_out=y, z_out=z,
                          packed=pair.pack_weights(w1, w2, pair.Tile(8, 1)))
    with pytest.raises(ValueError, match="residual has shape"):
        pair.conv1x1_pair(x, w1, w2, residual=cp.ones((1, 12, 4, 5), cp.float32), y_out=y, z_out=z)
    with pytest.raises(ValueError, match="z_out has shape"):
        pair.conv1x1_pair(x, w1, w2, y_out=y, z_out=cp.empty((1, 5, 5, 5), cp.float32))
    with pytest.raises(ValueError, match="skip_x and skip_w go together"):
        pair.conv1x1_pair(x, w1, w2, skip_x=x, y_out=y, z_out=z)
    with pytest.raises(ValueError, match=r"the shortcut maps skip_x \(1, 8, 5, 5\)"):
        pair.conv1x1_pair(x, w1, w2, skip_x=x, skip_w=cp.ones((12, 8, 1, 1), cp.float32),
                          skip_stride=2, y_out=y, z_out=z)
    with pytest.raises(ValueError, match="do not fit"):
        pair.conv1x1_pair(cp.ones((1, 20000, 1, 1), cp.float32),
                          cp.ones((8, 20000, 1, 1), cp.float32), cp.ones((8, 8, 1, 1), cp.float32))
    assert bool((y == 7.0).all()) and bool((z == 7.0).all())
