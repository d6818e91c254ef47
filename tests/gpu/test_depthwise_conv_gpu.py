"""The depthwise kernels (forward, both gradients) against the float64 NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import depthwise_conv, direct_conv
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu
TOL = 1e-5


def _random_case(rng):
    """A depthwise layer depthwise_conv takes: any filter size it is built for, channel
    multiplier 1-3, stride 1-3 (unequal too), padding up to past the filter, dilation 1-2,
    odd sizes, 1x1 maps."""
    while True:
        r = int(rng.choice([1, 3, 5, 7]))
        c, mult = int(rng.integers(1, 40)), int(rng.choice([1, 1, 2, 3]))
        n, h, w = int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
        kw = dict(stride=(int(rng.integers(1, 4)), int(rng.choice([1, int(rng.integers(1, 4))]))),
                  padding=(int(rng.integers(0, r)), int(rng.integers(0, r))),
                  dilation=int(rng.choice([1, 1, 2])), groups=c)
        try:
            geom = conv_geometry((n, c, h, w), (c * mult, 1, r, r), **kw)
        except ValueError:
            continue
        assert depthwise_conv.supported(geom) is None
        return geom, kw


def _arrays(rng, geom):
    x = rng.standard_normal((geom.n, geom.c, geom.h, geom.w)).astype(np.float32)
    w = rng.standard_normal((geom.k, 1, geom.r, geom.s)).astype(np.float32)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    return x, w, gy


@pytest.mark.parametrize("trial", sweep(60, 20))
def test_three_passes_random_shapes(rng, trial):
    import cupy as cp

    geom, kw = _random_case(rng)
    x, w, gy = _arrays(rng, geom)
    b = rng.standard_normal(geom.k).astype(np.float32)
    res = rng.standard_normal(geom.output_shape).astype(np.float32) if trial % 2 else None
    relu = bool(trial % 3 == 0)
    splits = [None, 1, int(rng.integers(2, 65))][trial % 3]
    y = cp.full(geom.output_shape, cp.nan, cp.float32)   # poisoned: all must be written
    gx = cp.full(x.shape, cp.nan, cp.float32)
    gw = cp.full(w.shape, cp.nan, cp.float32)
    d = dict(algorithm="depthwise", **kw)
    ops.conv2d(cp.asarray(x), cp.asarray(w), cp.asarray(b), relu=relu, out=y,
               residual=None if res is None else cp.asarray(res), **d)
    ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(w), x.shape, out=gx, **d)
    ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), w.shape, out=gw, splits=splits,
                               **d)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    ref = reference.conv2d(x64, w64, b.astype(np.float64), **kw)
    ref = ref + (0 if res is None else res)
    ref = np.maximum(ref, 0) if relu else ref
    for got, want, what in ((y, ref, "y"),
                            (gx, reference.conv2d_backward_data(gy64, w64, x.shape, **kw), "gx"),
                            (gw, reference.conv2d_backward_weight(x64, gy64, w.shape, **kw),
                             "gw")):
        got = got.get()
        assert not np.isnan(got).any(), f"unwritten {what} for {geom}"
        assert rel_err(got, want) <= TOL, (what, geom, splits)


@pytest.mark.parametrize("shape,r,kw", [
    ((128, 64, 32, 32), 3, dict(padding=1)),              # DW+SCC VGG's first layer
    ((16, 512, 4, 4), 3, dict(padding=1)),                # a deep 4x4 layer, many planes
    ((2, 32, 112, 112), 3, dict(stride=2, padding=1)),    # MobileNet's strided layers
    ((3, 24, 57, 57), 5, dict(stride=2, padding=2)),
    ((2, 8, 200, 300), 7, dict(padding=3)),               # a plane near the 2**16 limit
])
def test_network_shapes_by_default(rng, shape, r, kw):
    """The default algorithm of all three passes is "depthwise" here, and right."""
    import cupy as cp

    geom = conv_geometry(shape, (shape[1], 1, r, r), groups=shape[1], **kw)
    assert {direct_conv.choose_algorithm(geom, m) for m in (0, 1, 2)} == {"depthwise"}
    x, w, gy = _arrays(rng, geom)
    kw = dict(groups=shape[1], **kw)
    y = ops.conv2d(cp.asarray(x), cp.asarray(w), **kw)
    gx = ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(w), x.shape, **kw)
    gw = ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), w.shape, **kw)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    assert rel_err(y.get(), reference.conv2d(x64, w64, **kw)) <= TOL
    assert rel_err(gx.get(), reference.conv2d_backward_data(gy64, w64, x.shape, **kw)) <= TOL
    assert rel_err(gw.get(), reference.conv2d_backward_weight(x64, gy64, w.shape, **kw)) <= TOL


def test_weight_gradient_is_deterministic_and_split_free(rng):
    import cupy as cp

    geom = conv_geometry((64, 48, 20, 20), (96, 1, 3, 3), padding=1, groups=48)
    x, w, gy = (cp.asarray(a) for a in _arrays(rng, geom))
    runs = [ops.conv2d_backward_weight(x, gy, w.shape, padding=1, groups=48, splits=s)
            for s in (7, 7, None)]
    assert bool((runs[0] == runs[1]).all())           # bit for bit, run to run
    assert rel_err(runs[0].get(), runs[2].get()) <= 1e-6


def test_forward_alone_and_torch_tensors(rng):
    import cupy as cp

    geom = conv_geometry((2, 6, 9, 11), (12, 1, 3, 3), padding=1, groups=6)
    x, w, _ = _arrays(rng, geom)
    y = ops.depthwise_conv2d(cp.asarray(x), cp.asarray(w), padding=1, relu=True)
    ref = np.maximum(reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1,
                                      groups=6), 0)
    assert rel_err(y.get(), ref) <= TOL
    torch = pytest.importorskip("torch")
    yt = ops.depthwise_conv2d(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda(),
                              padding=1, relu=True)
    assert rel_err(yt.get(), y.get()) == 0.0


def test_bad_input_leaves_outputs_untouched():
    import cupy as cp

    x = cp.ones((1, 4, 8, 8), cp.float32)
    out = cp.full((1, 4, 8, 8), cp.nan, cp.float32)
    dense = cp.ones((4, 4, 3, 3), cp.float32)
    with pytest.raises(ValueError, match="algorithm='depthwise': not depthwise"):
        ops.conv2d(x, dense, padding=1, out=out, algorithm="depthwise")
    dw = cp.ones((4, 1, 3, 3), cp.float32)
    with pytest.raises(ValueError, match="splits the weight gradient only"):
        ops.conv2d(x, dw, padding=1, groups=4, out=out, algorithm="depthwise", splits=2)
    with pytest.raises(ValueError, match="splits must be"):
        ops.conv2d_backward_weight(x, out, dw.shape, padding=1, groups=4,
                                   algorithm="depthwise", splits=257)
    with pytest.raises(ValueError, match="4x2 filters"):
        ops.depthwise_conv2d(x, cp.ones((4, 1, 4, 2), cp.float32))
    with pytest.raises(ValueError, match="out has shape"):
        ops.depthwise_conv2d(x, dw, padding=1, out=cp.empty((1, 4, 8, 7), cp.float32))
    assert bool(cp.isnan(out).all())
