"""The softmax cross-entropy op on the CPU: its reference formulas and its checks."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops
from tensorconv.ops import softmax_xent


def _direct(logits, labels):
    """The loss and gradient written out in float64, row by row."""
    n = logits.shape[0]
    loss, grad = 0.0, np.zeros_like(logits, dtype=np.float64)
    for i, row in enumerate(logits.astype(np.float64)):
        p = np.exp(row - row.max())
        p /= p.sum()
        loss -= np.log(p[labels[i]]) / n
        grad[i] = p
        grad[i, labels[i]] -= 1
    return loss, grad / n


@pytest.mark.parametrize("n,c", [(1, 1), (3, 7), (16, 10), (5, 1000)])
def test_reference_path_matches_the_formulas(rng, n, c):
    logits = rng.standard_normal((n, c)) * 5
    labels = rng.integers(0, c, n)
    loss, logp = ops.softmax_xent_forward(logits, labels)
    want_loss, want_grad = _direct(logits, labels)
    assert loss.shape == () and np.isclose(loss, want_loss, rtol=1e-12)
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, rtol=1e-12)
    g = ops.softmax_xent_backward(logp, labels, np.array(2.0))
    np.testing.assert_allclose(g, 2.0 * want_grad, rtol=1e-10, atol=1e-15)


def test_bad_input_is_named():
    z, y = np.zeros((3, 4), np.float32), np.array([0, 1, 2])
    with pytest.raises(ValueError, match="logits must be 2-D"):
        ops.softmax_xent_forward(z[0], y)
    with pytest.raises(TypeError, match="logits must be a floating-point array"):
        ops.softmax_xent_forward(z.astype(np.int32), y)
    with pytest.raises(TypeError, match="labels must be integers"):
        ops.softmax_xent_forward(z, y.astype(np.float32))
    with pytest.raises(ValueError, match=r"labels must have shape \(3,\)"):
        ops.softmax_xent_forward(z, y[:2])
    with pytest.raises(TypeError, match="labels must be a NumPy/CuPy array"):
        ops.softmax_xent_forward(z, [0, 1, 2])
    with pytest.raises(ValueError, match="gy must hold one value"):
        ops.softmax_xent_backward(z, y, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="logp is supported on the GPU path only"):
        ops.softmax_xent_forward(z, y, logp=np.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="out is supported on the GPU path only"):
        ops.softmax_xent_backward(z, y, np.ones((), np.float32), out=np.empty((3, 4)))


def test_kernels_cover_both_label_types():
    assert softmax_xent.instantiations() == sorted(
        f"{k}<{t}>" for k in ("xent_rows", "xent_grad") for t in ("int", "long long"))
    assert {r.name for r in softmax_xent.kernels(np.int32)} == {
        "xent_rows<int>", "xent_mean", "xent_grad<int>"}
