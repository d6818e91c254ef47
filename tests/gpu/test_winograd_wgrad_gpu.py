"""The Winograd weight gradient (``conv2d_backward_weight(algorithm="winograd")``): each
transform kernel against its float64 NumPy walk, the whole against the float64 reference on
random shapes (odd planes, padding 0-2, one image, odd channels) at fp32 and tf32, outputs
poisoned; deterministic; captured in a CUDA graph; bad options raise before a launch."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.graph import CapturedGraph
from tensorconv.ops import winograd_wgrad as ww
from tests.helpers import fp32_tol, rel_err, sweep

pytestmark = pytest.mark.gpu


def _case(rng):
    n, c, k = int(rng.integers(1, 5)), int(rng.integers(1, 70)), int(rng.integers(1, 70))
    h, w = int(rng.integers(1, 30)), int(rng.integers(1, 30))
    pad = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    h, w = max(h, 3 - 2 * pad[0]), max(w, 3 - 2 * pad[1])
    return conv_geometry((n, c, h, w), (k, c, 3, 3), 1, pad)


def _arrays(rng, geom):
    x = rng.standard_normal((geom.n, geom.c, geom.h, geom.w)).astype(np.float32)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    return x, gy


def _want(x, gy, geom):
    return reference.conv2d_backward_weight(x.astype(np.float64), gy.astype(np.float64),
                                            (geom.k, geom.c, 3, 3), geom.stride, geom.padding)


def _run(x, gy, geom):
    import cupy as cp

    gw = cp.full((geom.k, geom.c, 3, 3), cp.nan, cp.float32)
    ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), gw.shape, 1, geom.padding,
                               out=gw, algorithm="winograd")
    return gw.get()


@pytest.mark.parametrize("trial", sweep(24, 8))
def test_random_shapes_fp32_and_tf32(rng, trial):
    geom = _case(rng)
    x, gy = _arrays(rng, geom)
    want = _want(x, gy, geom)
    got = _run(x, gy, geom)
    assert rel_err(got, want) <= fp32_tol(geom.n * geom.oh * geom.ow), geom
    with precision.using("tf32"):
        assert rel_err(_run(x, gy, geom), want) <= 3e-3, geom


def test_each_transform_against_its_walk(rng):
    """The three kernels one at a time, outputs poisoned, against the NumPy walk."""
    import cupy as cp

    from tensorconv import cuda

    geom = conv_geometry((3, 5, 9, 7), (6, 5, 3, 3), 1, (2, 1))
    x, gy = _arrays(rng, geom)
    th, tw = ww.tiles(geom)
    t = geom.n * th * tw
    i32 = np.int32
    inputs, grads, filters = (cuda.load(cuda.kernel_ref(ww.FILE, name)) for name in ww.NAMES)
    u = cp.full(16 * geom.c * t, cp.nan, cp.float32)
    inputs((4,), (64,), (cp.asarray(x), u, i32(geom.n), i32(geom.c), i32(geom.h), i32(geom.w),
                         i32(th), i32(tw), i32(2), i32(1)))
    np.testing.assert_allclose(u.get().reshape(16, geom.c, geom.n, th, tw),
                               ww.transform_inputs(x, geom), rtol=1e-6, atol=1e-5)
    v = cp.full(16 * geom.k * t, cp.nan, cp.float32)
    grads((3,), (64,), (cp.asarray(gy), v, i32(geom.n), i32(geom.k), i32(geom.oh),
                        i32(geom.ow), i32(th), i32(tw)))
    np.testing.assert_allclose(v.get().reshape(16, geom.k, geom.n, th, tw),
                               ww.transform_grads(gy, geom), rtol=1e-6, atol=1e-5)
    m = rng.standard_normal((16, geom.k, geom.c)).astype(np.float32)
    gw = cp.full((geom.k, geom.c, 3, 3), cp.nan, cp.float32)
    filters((2,), (16,), (cp.asarray(m), gw, i32(geom.k), i32(geom.c)))
    np.testing.assert_allclose(gw.get(), ww.transform_filters(m), rtol=1e-5, atol=1e-5)


def test_training_layers_deterministic_and_captured(rng):
    """ResNet-18's deeper layer shapes at batch 32: within fp32's error, the same bits twice
    and from a replayed CUDA graph."""
    import cupy as cp

    for xs, ws in [((32, 128, 16, 16), (128, 128, 3, 3)), ((32, 256, 8, 8), (256, 256, 3, 3)),
                   ((8, 64, 33, 31), (72, 64, 3, 3))]:
        geom = conv_geometry(xs, ws, 1, 1)
        x, gy = _arrays(rng, geom)
        got = _run(x, gy, geom)
        assert rel_err(got, _want(x, gy, geom)) <= fp32_tol(geom.n * geom.oh * geom.ow)
        np.testing.assert_array_equal(got, _run(x, gy, geom))
        dx, dg = cp.asarray(x), cp.asarray(gy)
        out = cp.full(ws, cp.nan, cp.float32)
        fn = lambda: ops.conv2d_backward_weight(dx, dg, ws, 1, 1, out=out,  # noqa: E731
                                                algorithm="winograd")
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            fn()   # the stream's scratch buffer, sized before capture
            stream.synchronize()
            graph = CapturedGraph(stream, fn, programmatic=False)
            out.fill(cp.nan)
            graph.launch(stream)
            stream.synchronize()
        np.testing.assert_array_equal(out.get(), got)


def test_bad_options_raise_before_a_launch(rng):
    import cupy as cp

    x = cp.zeros((2, 4, 8, 8), cp.float32)
    gy = cp.zeros((2, 4, 8, 8), cp.float32)
    with pytest.raises(ValueError, match="3x3 filters at stride 1"):
        ops.conv2d_backward_weight(x, cp.zeros((2, 4, 4, 4), cp.float32), (4, 4, 3, 3), 2, 1,
                                   algorithm="winograd")
    with pytest.raises(ValueError, match="3x3 filters"):
        ops.conv2d_backward_weight(x, gy, (4, 4, 1, 1), algorithm="winograd")
    with pytest.raises(ValueError, match="dilation nor groups"):
        ops.conv2d_backward_weight(x, gy, (4, 2, 3, 3), 1, 1, groups=2, algorithm="winograd")
    with pytest.raises(ValueError, match="tile and splits"):
        ops.conv2d_backward_weight(x, gy, (4, 4, 3, 3), 1, 1, splits=2, algorithm="winograd")
