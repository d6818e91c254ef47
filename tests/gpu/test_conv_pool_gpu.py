"""The fused conv + max-pool kernel (kernels_cu/conv_maxpool.cu) against the references."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import conv_maxpool as conv_pool
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


def _fitting(x_shape, w_shape, stride, pad, pk, ps, pp):
    """The tiles that fit these sizes on this device."""
    p = conv_pool.Problem(conv_geometry(x_shape, w_shape, stride, pad), (pk, pk), (ps, ps),
                          (pp, pp))
    return conv_pool.candidates(p, backend.device_facts())


STEM = (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 3, 2, 1


def _case(rng, tile, trial):
    """Sizes for which ``tile`` fits: trial 0 is the ImageNet stem (where it fits), the rest random
    (odd sizes, strides 1-2, filters 1-7, pool windows 2-3 with strides 1-3, channels
    not multiples of the tile)."""
    if trial == 0 and tile in _fitting(*STEM):
        return STEM
    while True:
        r = int(rng.choice([1, 3, 5, 7]))
        stride, pad = int(rng.integers(1, 3)), int(rng.integers(0, r // 2 + 1))
        pk = int(rng.integers(2, 4))
        ps, pp = int(rng.integers(1, pk + 1)), int(rng.integers(0, pk // 2 + 1))
        n, c, m = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 90))
        h, w = (int(v) for v in rng.integers(r, 50, size=2))
        oh, ow = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
        case = (n, c, h, w), (m, c, r, r), stride, pad, pk, ps, pp
        if min(oh, ow) + 2 * pp >= pk and tile in _fitting(*case):
            return case


@pytest.mark.parametrize("tile", conv_pool.TILES, ids=lambda t: f"{t.th}x{t.tw}nb{t.nb}")
@pytest.mark.parametrize("trial", sweep(8, 2))
def test_random_shapes(rng, tile, trial):
    """Every tile against conv -> ReLU -> max pool in float64, NaN-poisoned output;
    bitwise repeatable; with and without bias and ReLU."""
    import cupy as cp

    x_shape, w_shape, stride, pad, pk, ps, pp = _case(rng, tile, trial)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if trial % 2 else None
    relu = trial % 3 != 1
    y = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                         None if b is None else b.astype(np.float64), stride, pad)
    ref = reference.pool2d(np.maximum(y, 0) if relu else y, (pk, pk), (ps, ps), (pp, pp), "max")
    args = (cp.asarray(x), cp.asarray(w), None if b is None else cp.asarray(b), stride, pad,
            pk, ps, pp)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    ops.conv2d_maxpool(*args, relu=relu, tile=tile, out=out)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (x_shape, w_shape, stride, pad, pk, ps, pp, tile)
    again = ops.conv2d_maxpool(*args, relu=relu, tile=tile,
                               packed=conv_pool.pack_weights(args[1], tile))
    assert cp.array_equal(again, out)


@pytest.mark.parametrize("relu", [False, True])
def test_nan_as_the_two_launches(relu):
    """A NaN input gives what the conv kernel then the pooling kernel give: it reaches
    exactly the windows whose conv outputs it reaches (the K padding reads a zero plane,
    never a neighbour's value), and ReLU turns it into 0 before pooling."""
    import cupy as cp

    rng = np.random.default_rng(5)
    x = cp.asarray(rng.standard_normal((1, 3, 64, 64)).astype(np.float32))
    x[0, 1, 20, 30] = x[0, 2, 50, 7] = cp.nan
    w = cp.asarray(rng.standard_normal((64, 3, 7, 7)).astype(np.float32) / 10)
    b = cp.asarray(rng.standard_normal(64).astype(np.float32))
    conv = ops.conv2d(x, w, b, 2, 3, relu=relu)
    two = ops.pool2d(conv, 3, 2, 1, mode="max").get()
    for tile in _fitting((1, 3, 64, 64), (64, 3, 7, 7), 2, 3, 3, 2, 1):
        one = ops.conv2d_maxpool(x, w, b, 2, 3, 3, 2, 1, relu=relu, tile=tile).get()
        assert np.array_equal(np.isnan(one), np.isnan(two)), tile
        assert np.isnan(two).any() != relu
        fin = np.isfinite(two)
        assert rel_err(one[fin], two[fin]) <= 1e-5, tile


def test_bad_input_before_launch():
    import cupy as cp

    x, w = cp.ones((1, 3, 32, 32), cp.float32), cp.ones((16, 3, 7, 7), cp.float32)
    out = cp.full((1, 16, 8, 8), 7.0, cp.float32)
    with pytest.raises(ValueError, match="out has shape"):
        ops.conv2d_maxpool(x, w, None, 2, 3, 3, 2, 1, out=cp.empty((1, 16, 9, 8), cp.float32))
    with pytest.raises(TypeError, match="different device"):
        ops.conv2d_maxpool(x, w.get(), None, 2, 3, 3, 2, 1)
    with pytest.raises(ValueError, match="tile must be one of"):
        ops.conv2d_maxpool(x, w, None, 2, 3, 3, 2, 1, out=out,
                           tile=conv_pool.Tile(3, 3, 16))
    with pytest.raises(ValueError, match="packed has shape"):
        ops.conv2d_maxpool(x, w, None, 2, 3, 3, 2, 1, out=out, packed=cp.zeros((1, 19, 32, 4)))
    with pytest.raises(ValueError, match="equal strides"):
        ops.conv2d_maxpool(x, w, None, (2, 1), 3, 3, 2, 1)
    with pytest.raises(ValueError, match="square pooling"):
        ops.conv2d_maxpool(x, w, None, 2, 3, (3, 2), 2, 1)
    with pytest.raises(ValueError, match="do not fit shared memory"):
        ops.conv2d_maxpool(cp.ones((1, 512, 16, 16), cp.float32),
                           cp.ones((16, 512, 7, 7), cp.float32), None, 2, 3, 3, 2, 1)
    with pytest.raises(ValueError, match="at most half"):
        ops.conv2d_maxpool(x, w, None, 2, 3, 3, 2, 2, out=out)
    assert bool((out == 7.0).all())
