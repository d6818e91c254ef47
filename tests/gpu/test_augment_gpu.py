"""The batch gather-and-augment kernel on the GPU against its reference (random shapes,
poisoned outputs, both modes), and GPU training through it equal to the host path."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("trial", range(6))
def test_kernel_matches_the_reference(rng, trial):
    import cupy as cp

    from tensorconv.ops.augment import gather_augment

    n, c, h, w = (int(v) for v in rng.integers(1, 40, 4))
    pad = int(rng.integers(0, 6))
    images = rng.standard_normal((n + 5, c, h, w)).astype(np.float32)
    index = rng.integers(0, n + 5, n).astype(np.int32)
    oy, ox = rng.integers(0, 2 * pad + 1, (2, n)).astype(np.int32)
    flip = rng.random(n) < 0.5
    for aug in ((oy, ox, flip), (None, None, None)):
        want = gather_augment(images, index, *aug, pad=pad, fill=-1.25)
        out = cp.full(want.shape, cp.nan, cp.float32)
        dev = [None if a is None else cp.asarray(a) for a in aug]
        gather_augment(cp.asarray(images), cp.asarray(index), *dev, pad=pad, fill=-1.25,
                       out=out)
        np.testing.assert_array_equal(out.get(), want)


def test_gpu_training_through_the_device_path_equals_the_host_path(tmp_path):
    from training.train import TrainConfig, train

    def run(device_data):
        cfg = TrainConfig(model="resnet20", dataset="synthetic", epochs=1, batch_size=64,
                          lr=0.05, train_limit=512, test_limit=128, pad_to=32, device="gpu",
                          warmup_epochs=0, device_data=device_data)
        return train(cfg, None, progress=False, log_every=1)

    host, dev = run(False), run(True)
    np.testing.assert_allclose([v for _, v in dev.step_losses],
                               [v for _, v in host.step_losses], rtol=1e-6)
