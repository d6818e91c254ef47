"""Batch-norm and multi-tensor SGD kernels against their NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.nn.optim import SGD
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


def _on_gpu(a, misaligned: bool):
    """``a`` on the GPU, C-contiguous; ``misaligned``: starting 4 bytes past a 16-byte
    boundary (a view into a larger buffer), so the kernels cannot take float4 units."""
    import cupy as cp

    if not misaligned:
        return cp.asarray(a)
    buf = cp.empty(a.size + 1, a.dtype)
    view = buf[1:].reshape(a.shape)
    view[...] = cp.asarray(a)
    assert view.flags.c_contiguous and view.data.ptr % 16 == 4
    return view


def _scaled_err(out, ref, scale) -> float:
    """``||out - ref|| / ||scale||``: the error of a sum or blend against the size of its
    terms (``scale``, the sum of their magnitudes), which cancellation cannot shrink."""
    return float(np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(scale))


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape,misaligned", [
    ((128, 16, 32, 32), False), ((128, 16, 32, 32), True), ((3, 5, 7, 9), False),
    ((1, 64, 7, 7), False), ((37, 3, 1, 2), False), ((16, 512, 4, 4), False),
    ((5, 7, 2, 2), True), ((2, 2, 257, 257), False),   # a plane past FastDiv's 2**16
    ((300, 2, 1, 1), False)])
def test_batch_norm_kernels(rng, shape, misaligned, relu, residual):
    """Forward and backward against float64, with the fused ReLU and a residual block's
    shortcut sum (whose gradient, the masked gy, must be exactly gy where y > 0)."""
    import cupy as cp

    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)  # a large mean: no cancellation
    gy = rng.standard_normal(shape).astype(np.float32)
    r = rng.standard_normal(shape).astype(np.float32) if residual else None
    gamma = rng.random(c).astype(np.float32) + 0.5
    beta = rng.standard_normal(c).astype(np.float32)
    rm, rv = rng.standard_normal(c).astype(np.float32), rng.random(c).astype(np.float32) + 0.5
    rm_ref, rv_ref = rm.astype(np.float64), rv.astype(np.float64)
    y_ref, mean_ref, invstd_ref = reference.batch_norm_forward(
        x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64), rm_ref, rv_ref,
        training=True)
    rm_d, rv_d = cp.asarray(rm), cp.asarray(rv)
    y, mean, invstd = ops.batch_norm_forward(_on_gpu(x, misaligned), cp.asarray(gamma),
                                             cp.asarray(beta), rm_d, rv_d, training=True,
                                             relu=relu,
                                             residual=None if r is None else _on_gpu(r, misaligned))
    if residual:
        y_ref = y_ref + r
    if relu:
        y_ref = np.maximum(y_ref, 0)
    assert rel_err(y.get(), y_ref) < 1e-5
    # sums and blends, measured against the size of their terms: with a few channels the
    # results themselves can be near zero by chance (a random seed once gave a running
    # mean past 1e-6 of its own norm), which says nothing of the kernels' rounding
    m = 0.1   # the forward's momentum
    assert _scaled_err(rm_d.get(), rm_ref, (1 - m) * np.abs(rm) + m * np.abs(mean_ref)) < 1e-6
    assert _scaled_err(rv_d.get(), rv_ref, rv_ref) < 1e-6
    grads = ops.batch_norm_backward(_on_gpu(x, misaligned), _on_gpu(gy, misaligned),
                                    mean, invstd, cp.asarray(gamma), training=True,
                                    y=y if relu else None, residual_grad=residual)
    assert len(grads) == 3 + residual
    if relu and not residual:   # the mask recomputed from x: the same bits as y's
        from_x = ops.batch_norm_backward(_on_gpu(x, misaligned), _on_gpu(gy, misaligned),
                                         mean, invstd, cp.asarray(gamma), training=True,
                                         y=y, beta=cp.asarray(beta))
        for a, b in zip(grads, from_x):
            np.testing.assert_array_equal(a.get(), b.get())
    gx, dg, db = grads[:3]
    # the mask comes from the kernel's own output: the forward was checked above
    gy_ref = gy.astype(np.float64) * (y.get() > 0) if relu else gy.astype(np.float64)
    if residual:
        np.testing.assert_array_equal(grads[3].get(), gy_ref.astype(np.float32))
    gx_ref, dg_ref, db_ref = reference.batch_norm_backward(
        x.astype(np.float64), gy_ref, mean_ref, invstd_ref,
        gamma.astype(np.float64), training=True)
    assert rel_err(gx.get(), gx_ref) < 1e-4
    xhat = (x.astype(np.float64) - mean_ref[:, None, None]) * invstd_ref[:, None, None]
    assert _scaled_err(dg.get(), dg_ref, np.abs(gy_ref * xhat).sum(axis=(0, 2, 3))) < 1e-6
    assert _scaled_err(db.get(), db_ref, np.abs(gy_ref).sum(axis=(0, 2, 3))) < 1e-6


@pytest.mark.parametrize("shape", [(64, 8, 6, 6), (9, 3, 5, 5)])
def test_batch_norm_relu_mask_from_x_on_ties(rng, shape):
    """Integer inputs (many values on one side of zero by a rounding, many equal) and a
    beta that puts the ReLU's threshold among them: the mask recomputed from x drops gy
    exactly where the forward's output is 0; with a residual it cannot be recomputed."""
    import cupy as cp

    c = shape[1]
    x = cp.asarray(rng.integers(-3, 4, shape).astype(np.float32))
    gy = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    gamma = cp.asarray(rng.random(c).astype(np.float32) + 0.5)
    beta = cp.asarray(rng.integers(-2, 3, c).astype(np.float32) * 0.25)
    y, mean, invstd = ops.batch_norm_forward(x, gamma, beta, cp.zeros(c, cp.float32),
                                             cp.ones(c, cp.float32), training=True, relu=True)
    assert 0 < int((y == 0).sum()) < y.size
    want = ops.batch_norm_backward(x, gy, mean, invstd, gamma, training=True, y=y)
    got = ops.batch_norm_backward(x, gy, mean, invstd, gamma, training=True, y=y, beta=beta)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a.get(), b.get())
    with pytest.raises(ValueError, match="residual"):   # its ReLU read a residual too
        ops.batch_norm_backward(x, gy, mean, invstd, gamma, training=True, y=y, beta=beta,
                                residual_grad=True)


@pytest.mark.parametrize("relu", [False, True])
def test_batch_norm_apply_with_a_residual_writes_every_output(rng, relu):
    """``batch_norm_apply(residual=)`` into a NaN-poisoned ``out``: every value written,
    equal to the affine map, the sum and the ReLU done apart (one rounding each)."""
    import cupy as cp

    n, c, h, w = 3, 5, 7, 9
    x, r = (cp.asarray(rng.standard_normal((n, c, h, w)).astype(np.float32)) for _ in range(2))
    mean, gamma, beta = (cp.asarray(rng.standard_normal(c).astype(np.float32)) for _ in range(3))
    invstd = cp.asarray(rng.random(c).astype(np.float32) + 0.5)
    out = cp.full(x.shape, np.nan, np.float32)
    ops.batch_norm_apply(x, mean, invstd, gamma, beta, relu=relu, out=out, residual=r)
    alone = ops.batch_norm_apply(x, mean, invstd, gamma, beta)
    want = alone + r
    if relu:
        want = cp.maximum(want, 0)
    np.testing.assert_array_equal(out.get(), want.get())
    with pytest.raises(ValueError, match="residual"):
        ops.batch_norm_apply(x, mean, invstd, gamma, beta, residual=r[:, :4])


def test_batch_norm_node_with_a_residual_matches_add_and_relu_on_gpu(rng):
    """The one-node residual block output (kernels) against batch norm, Add and ReLU as
    separate nodes on the GPU: values and every gradient bit for bit."""
    import cupy as cp

    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    shape, c = (8, 16, 8, 8), 16
    arrays = [rng.standard_normal(shape).astype(np.float32), rng.random(c).astype(np.float32)
              + 0.5, rng.standard_normal(c).astype(np.float32),
              rng.standard_normal(shape).astype(np.float32)]
    gy = cp.asarray(rng.standard_normal(shape).astype(np.float32))

    def run(one_node):
        ts = [Tensor(cp.asarray(a), True) for a in arrays]
        stats = (cp.zeros(c, cp.float32), cp.ones(c, cp.float32))
        y = (F.batch_norm2d(*ts[:3], *stats, training=True, relu=True, residual=ts[3])
             if one_node else F.relu(F.batch_norm2d(*ts[:3], *stats, training=True) + ts[3]))
        y.backward(gy)
        return [y.data.get()] + [t.grad.get() for t in ts]

    for one, sep in zip(run(True), run(False)):
        np.testing.assert_array_equal(one, sep)


def test_batch_norm_bad_input():
    import cupy as cp

    x = cp.ones((2, 3, 4, 4), cp.float32)
    with pytest.raises(ValueError, match="gamma has 2 entries"):
        ops.batch_norm_forward(x, cp.ones(2, cp.float32), cp.ones(3, cp.float32),
                               cp.zeros(3, cp.float32), cp.ones(3, cp.float32), training=True)
    with pytest.raises(ValueError, match="beta recomputes"):
        ops.batch_norm_backward(x, x, cp.zeros(3, cp.float32), cp.ones(3, cp.float32),
                                cp.ones(3, cp.float32), training=True,
                                beta=cp.zeros(3, cp.float32))
    with pytest.raises(ValueError, match="beta has 2 entries"):
        ops.batch_norm_backward(x, x, cp.zeros(3, cp.float32), cp.ones(3, cp.float32),
                                cp.ones(3, cp.float32), training=True, y=x,
                                beta=cp.zeros(2, cp.float32))
    with pytest.raises(ValueError, match="more than one value"):
        ops.batch_norm_forward(cp.ones((1, 3, 1, 1), cp.float32), cp.ones(3, cp.float32),
                               cp.ones(3, cp.float32), cp.zeros(3, cp.float32),
                               cp.ones(3, cp.float32), training=True)


@pytest.mark.parametrize("nesterov,decoupled", [(False, False), (True, False), (True, True)])
def test_fused_sgd_matches_numpy(rng, nesterov, decoupled):
    import cupy as cp

    from tensorconv.nn.module import Parameter

    # sizes across the kernel's chunks: under one, one exactly, one and a bit, many
    shapes = [(16, 3, 3, 3), (16,), (10, 64), (1,), (4097,), (2048,), (64, 64, 3, 3), (3,)]
    data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    results = []
    for xp in (np, cp):
        params = [Parameter(xp.array(d)) for d in data]  # copies: the NumPy run updates in place
        opt = SGD(params, 0.1, 0.9, nesterov, 5e-2, decoupled)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = xp.asarray(g)
            opt.step()
        results.append([cp.asnumpy(p.data) for p in params])
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_sgd_kernel_bad_input():
    import cupy as cp

    with pytest.raises(ValueError, match="non-empty"):
        ops.sgd_multi_tensor([], [], [], lr=0.1, momentum=0.9, weight_decay=0, nesterov=False,
                             decoupled=False)
    p = cp.zeros(3, cp.float32)
    with pytest.raises(TypeError, match="grads\\[0\\]"):
        ops.sgd_multi_tensor([p], [cp.zeros(3, cp.float64)], [p], lr=0.1, momentum=0.9,
                             weight_decay=0, nesterov=False, decoupled=False)
