"""``nn.precompile``: after :func:`compile_training`, a training step of the model compiles
no kernel of ours that it did not list (every kernel it launches was built in parallel)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("model_name,prec", [("resnet20", "fp32"), ("resnet20", "tf32"),
                                             ("resnet18", "fp32"), ("googlenet", "fp32"),
                                             ("vgg16", "tf32"), ("small_cnn", "fp32")])
def test_a_step_after_compile_training_compiles_nothing_more(rng, model_name, prec):
    import cupy as cp

    from tensorconv import cuda, precision
    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F
    from tensorconv.data import Dataset
    from tensorconv.nn import get_model
    from tensorconv.nn.optim import SGD
    from tensorconv.nn.precompile import compile_training
    from training.device_data import DeviceBatches

    batch = 32
    with precision.using(prec):
        model = get_model(model_name, in_channels=1, num_classes=10, seed=0)
        compile_training(model, (batch, 1, 32, 32), augment=True)
        model.to("gpu")
        before = set(cuda._LOADED)
        opt = SGD(model.parameters(), 0.05, 0.9, True, 5e-4)
        data = Dataset(rng.standard_normal((64, 1, 32, 32)).astype(np.float32),
                       rng.integers(0, 10, 64).astype(np.int64), tuple("abcdefghij"))
        batches = DeviceBatches(data, cp, batch, True, 0.0)
        batches.start_epoch(np.random.default_rng(0), 2)
        x, y = batches.batch(0)
        loss = F.softmax_cross_entropy(model(Tensor(x)), y, check=False)
        opt.zero_grad()
        loss.backward()
        opt.step()
        cp.cuda.Device().synchronize()
    new = sorted((k[1], k[2]) for k in set(cuda._LOADED) - before)
    assert not new, f"compiled during the step, not listed: {new}"
    assert np.isfinite(float(loss.data))
