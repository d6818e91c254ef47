"""Winograd's F(2x2, 3x3) as a pass of ``ops.conv2d`` (``algorithm="winograd"``): the
forward with its epilogue and the stride-1 data gradient against the float64 reference on
random shapes, outputs poisoned; the default at a training batch; replays of a captured
graph give the eager step's bits."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, precision, reference
from tensorconv.checks import conv_geometry
from tests.helpers import fp32_tol, rel_err, sweep

pytestmark = pytest.mark.gpu


def _case(rng):
    n, c, k = (int(v) for v in (rng.integers(1, 5), rng.integers(1, 70), rng.integers(1, 70)))
    h, w = (int(v) for v in rng.integers(1, 40, size=2))
    pad = int(rng.integers(0, 3))
    if h + 2 * pad < 3 or w + 2 * pad < 3:
        pad = 2
    return (n, c, h, w), (k, c, 3, 3), pad


@pytest.mark.parametrize("trial", sweep(16, 6))
def test_forward_and_data_gradient_random_shapes(rng, trial):
    import cupy as cp

    xs, ws, pad = _case(rng)
    geom = conv_geometry(xs, ws, 1, pad)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    res = rng.standard_normal(geom.output_shape).astype(np.float32)
    f64 = [a.astype(np.float64) for a in (x, w, gy, b, res)]
    want_y = np.maximum(reference.conv2d(f64[0], f64[1], f64[3], padding=pad) + f64[4], 0)
    want_gx = reference.conv2d_backward_data(f64[2], f64[1], xs, padding=pad)
    for prec, tol in (("fp32", fp32_tol(xs[1] * 9)), ("tf32", 3e-3)):
        with precision.using(prec):
            y = cp.full(geom.output_shape, cp.nan, cp.float32)
            ops.conv2d(cp.asarray(x), cp.asarray(w), cp.asarray(b), padding=pad, relu=True,
                       residual=cp.asarray(res), out=y, algorithm="winograd")
            gx = cp.full(xs, cp.nan, cp.float32)
            ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(w), xs, padding=pad, out=gx,
                                     algorithm="winograd")
        assert rel_err(y.get(), want_y) <= tol, (prec, xs, ws, pad)
        assert rel_err(gx.get(), want_gx) <= max(tol, fp32_tol(ws[0] * 9)), (prec, xs, ws, pad)


def test_default_at_a_training_batch_matches_the_gemm(rng):
    import cupy as cp

    xs, ws = (128, 16, 32, 32), (16, 16, 3, 3)
    geom = conv_geometry(xs, ws, 1, 1)
    assert ops.direct_conv.choose_algorithm(geom, 0) == "winograd"
    assert ops.direct_conv.choose_algorithm(geom, 1) == "winograd"
    x = cp.asarray(rng.standard_normal(xs).astype(np.float32))
    w = cp.asarray(rng.standard_normal(ws).astype(np.float32))
    y, ref = ops.conv2d(x, w, padding=1), ops.conv2d(x, w, padding=1, algorithm="igemm_tf32x3")
    assert rel_err(y.get(), ref.get()) <= 2 * fp32_tol(16 * 9)
    gx = ops.conv2d_backward_data(y, w, xs, padding=1)
    gref = ops.conv2d_backward_data(y, w, xs, padding=1, algorithm="igemm_tf32x3")
    assert rel_err(gx.get(), gref.get()) <= 2 * fp32_tol(16 * 9)


def test_captured_replay_gives_the_eager_bits(rng):
    """The packing (adds, halvings, copies) and the kernel run inside a CUDA graph, and a
    replay gives the eager call's result bit for bit (a captured training step's need)."""
    import cupy as cp

    from tensorconv.graph import CapturedGraph

    xs, ws = (64, 32, 16, 16), (32, 32, 3, 3)
    x = cp.asarray(rng.standard_normal(xs).astype(np.float32))
    w = cp.asarray(rng.standard_normal(ws).astype(np.float32))
    y, gx = cp.empty(xs, cp.float32), cp.empty(xs, cp.float32)

    def step():
        ops.conv2d(x, w, padding=1, out=y, algorithm="winograd")
        ops.conv2d_backward_data(y, w, xs, padding=1, out=gx, algorithm="winograd")

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        step()
        stream.synchronize()
        eager_y, eager_gx = y.copy(), gx.copy()
        y.fill(cp.nan)
        gx.fill(cp.nan)
        graph = CapturedGraph(stream, step, programmatic=False)
        graph.launch(stream)
        stream.synchronize()
    np.testing.assert_array_equal(y.get(), eager_y.get())
    np.testing.assert_array_equal(gx.get(), eager_gx.get())


@pytest.mark.parametrize("n,c", [(1, 1), (6, 11), (16, 16), (40, 70), (64, 3)])
def test_device_packing_gives_the_host_packings_bits(rng, n, c):
    """``winograd_pack_weights`` (one launch) against the host transform and fragment order,
    bit for bit, forward and flipped (the data gradient's filters), zeros past the edges."""
    import cupy as cp

    from tensorconv.ops import winograd_conv as winograd

    w = (rng.standard_normal((n, c, 3, 3)) * 10.0 ** rng.integers(-3, 4, (n, c, 1, 1)))
    w = w.astype(np.float32)
    for flip in (False, True):
        got = winograd.pack_weights(cp.asarray(w), flip=flip).get()
        np.testing.assert_array_equal(got, winograd.pack_weights(w, flip=flip))
