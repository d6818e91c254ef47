"""The softmax cross-entropy kernels against float64, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n,c,scale", [(1, 1, 1.0), (3, 7, 1.0), (128, 10, 4.0),
                                       (37, 33, 30.0), (1000, 10, 1.0), (9, 1000, 8.0)])
def test_loss_and_gradient_against_float64(rng, n, c, scale, label_dtype):
    import cupy as cp

    logits = (rng.standard_normal((n, c)) * scale + 20).astype(np.float32)  # far from 0
    labels = rng.integers(0, c, n).astype(label_dtype)
    want_loss, want_logp = reference.softmax_cross_entropy(logits.astype(np.float64), labels)
    z, y = cp.asarray(logits), cp.asarray(labels)
    logp = cp.full((n, c), np.nan, np.float32)
    loss, out = ops.softmax_xent_forward(z, y, logp=logp)
    assert out is logp and loss.shape == () and loss.dtype == np.float32
    assert abs(float(loss) - want_loss) <= 1e-5 * max(1.0, abs(want_loss))
    assert rel_err(logp.get(), want_logp) < 1e-5
    gy = cp.asarray(np.float32(0.5))
    g = cp.full((n, c), np.nan, np.float32)
    assert ops.softmax_xent_backward(logp, y, gy, out=g) is g
    want_g = reference.softmax_cross_entropy_backward(want_logp, labels, 0.5)
    assert rel_err(g.get(), want_g) < 1e-5
    again, _ = ops.softmax_xent_forward(z, y)
    assert float(again) == float(loss)          # rows summed in a fixed order


def test_a_label_out_of_range_makes_the_loss_nan():
    import cupy as cp

    z = cp.zeros((4, 3), cp.float32)
    loss, _ = ops.softmax_xent_forward(z, cp.asarray([0, 1, 3, 2]))
    assert np.isnan(float(loss))


def test_the_autograd_node_runs_the_kernels_as_the_formulas(rng):
    import cupy as cp

    logits = rng.standard_normal((64, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    grads = []
    for xp in (np, cp):
        t = Tensor(xp.asarray(logits), True)
        loss = F.softmax_cross_entropy(t, xp.asarray(labels), check=False)
        loss.backward()
        grads.append((float(loss.item()), cp.asnumpy(t.grad)))
    assert abs(grads[0][0] - grads[1][0]) < 1e-6
    assert rel_err(grads[1][1], grads[0][1]) < 1e-5


def test_bad_input_on_gpu():
    import cupy as cp

    z = cp.zeros((3, 4), cp.float32)
    with pytest.raises(TypeError, match="labels must be an array on the device of logits"):
        ops.softmax_xent_forward(z, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="logp has shape"):
        ops.softmax_xent_forward(z, cp.asarray([0, 1, 2]), logp=cp.empty((3, 5), cp.float32))
