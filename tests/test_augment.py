"""Batches gathered and augmented on the device (issue 26) on the CPU: the op's reference
against the training loop's host augmentation for the same draws, bad input, and a training
run through the device path equal to one through the host path."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.ops.augment import gather_augment
from training.train import TrainConfig, augment_batch, train


@pytest.mark.parametrize("trial", range(4))
def test_the_reference_is_the_host_augmentation_for_the_same_draws(rng, trial):
    n, c, h, w = (int(v) for v in rng.integers(1, 9, 4))
    images = rng.standard_normal((n + 3, c, h + 2, w + 2)).astype(np.float32)
    index = rng.integers(0, n + 3, n).astype(np.int32)
    seed = int(rng.integers(1 << 30))
    want = augment_batch(images[index], np.random.default_rng(seed), fill=-0.5)
    draws = np.random.default_rng(seed)
    oy, ox = draws.integers(0, 9, size=(2, n))
    flip = draws.random(n) < 0.5
    got = gather_augment(images, index, oy.astype(np.int32), ox.astype(np.int32), flip,
                         pad=4, fill=-0.5)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(gather_augment(images, index), images[index])


def test_bad_input_is_refused_by_name():
    images = np.zeros((4, 1, 5, 5), np.float32)
    idx = np.array([0, 3], np.int32)
    oy = ox = np.array([0, 8], np.int32)
    flip = np.array([True, False])
    with pytest.raises(ValueError, match="index must lie"):
        gather_augment(images, np.array([0, 4], np.int32))
    with pytest.raises(TypeError, match="index must be int32"):
        gather_augment(images, idx.astype(np.int64))
    with pytest.raises(ValueError, match="together"):
        gather_augment(images, idx, oy, ox)
    with pytest.raises(ValueError, match="oy and ox must lie in 0..8"):
        gather_augment(images, idx, oy + 1, ox, flip)
    with pytest.raises(TypeError, match="flip must be bool or uint8"):
        gather_augment(images, idx, oy, ox, flip.astype(np.int32))
    with pytest.raises(ValueError, match="ox has 1 entries"):
        gather_augment(images, idx, oy, ox[:1], flip)
    with pytest.raises(ValueError, match="GPU path only"):
        gather_augment(images, idx, out=np.zeros((2, 1, 5, 5), np.float32))


@pytest.mark.parametrize("augment", [True, False])
def test_training_through_the_device_path_equals_the_host_path(tmp_path, augment):
    def run(device_data, name):
        cfg = TrainConfig(model="small_cnn", dataset="synthetic", epochs=2, batch_size=32,
                          lr=0.05, train_limit=128, test_limit=64, pad_to=8, device="cpu",
                          warmup_epochs=0, augment=augment, device_data=device_data)
        return train(cfg, tmp_path / name, progress=False)

    host, dev = run(False, "host.npz"), run(True, "dev.npz")
    assert host.step_losses == dev.step_losses
    for a, b in zip(host.model.parameters(), dev.model.parameters()):
        np.testing.assert_array_equal(a.data, b.data)
