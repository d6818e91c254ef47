"""The autograd and training on CuPy agree with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.nn import get_model
from tensorconv.nn.optim import SGD
from tests.helpers import random_conv_case, rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("trial", range(8))
def test_conv_function_gradients_match_cpu(rng, trial):
    """Output and gradients against the CPU's, each error measured against the size of its
    sums' terms (the same pass on magnitudes): a sum that cancels to near zero (a bias
    gradient over 39 pixels of one channel, seed 175) says nothing of the kernels' order
    of addition, which is all that differs."""
    import cupy as cp

    xs, ws, kw = random_conv_case(rng, max_hw=20, max_channels=24)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)

    def run(xp, arrays, magnitudes=False):
        tx, tw, tb = (Tensor(xp.asarray(a), requires_grad=True) for a in arrays)
        y = F.conv2d(tx, tw, tb, **kw)
        gy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
        y.backward(xp.asarray(np.abs(gy) if magnitudes else gy))
        return [cp.asnumpy(a) for a in (y.data, tx.grad, tw.grad, tb.grad)]

    cpu, gpu = run(np, (x, w, b)), run(cp, (x, w, b))
    size = run(np, (np.abs(x), np.abs(w), np.abs(b)), magnitudes=True)
    for name, c, g, m in zip(("y", "gx", "gw", "gb"), cpu, gpu, size):
        err = np.linalg.norm(g.astype(np.float64) - c) / max(np.linalg.norm(m), 1e-300)
        assert err < 1e-5, (name, err, rel_err(g, c))


def _one_step_then_loss(xp, x, y):
    model = get_model("resnet20", in_channels=1, num_classes=10, seed=3)
    if xp is not np:
        model.to("gpu")
    opt = SGD(model.parameters(), 0.1, 0.9, True, 5e-4)
    xt, yt = Tensor(xp.asarray(x)), xp.asarray(y)
    loss0 = F.softmax_cross_entropy(model(xt), yt)
    opt.zero_grad()
    loss0.backward()
    opt.step()
    loss1 = F.softmax_cross_entropy(model(xt), yt)
    return loss0.item(), loss1.item()


def test_training_step_matches_cpu(rng):
    import cupy as cp

    x = rng.standard_normal((32, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    cpu = _one_step_then_loss(np, x, y)
    gpu = _one_step_then_loss(cp, x, y)
    assert abs(cpu[0] - gpu[0]) < 2e-5, (cpu, gpu)
    # one lr-0.1 step moves the loss by ~0.4; float32 summation order (amplified through
    # 19 batch norms) leaves ~1e-4 between the devices, a wrong gradient far more
    assert abs(cpu[1] - gpu[1]) < 5e-4 and abs(cpu[0] - cpu[1]) > 1e-2, (cpu, gpu)


def test_module_device_roundtrip():
    model = get_model("small_cnn")
    before = model.state_dict()
    model.to("gpu")
    assert model.xp.__name__ == "cupy"
    model.to("cpu")
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
