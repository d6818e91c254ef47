"""``nn.precompile`` off the GPU: the layer walk and the kernel list (on an H100's facts)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend
from tensorconv.checks import conv_geometry
from tensorconv.nn import get_model
from tensorconv.nn.layers import Conv2d, Linear
from tensorconv.nn.precompile import layer_inputs, training_kernels
from tensorconv.ops import direct_conv
from tensorconv.ops.conv_algorithm import choose_algorithm
from tests.helpers import device_facts


def test_the_walk_sees_every_layer_once_and_changes_nothing():
    model = get_model("resnet20", in_channels=1, num_classes=10, seed=0)
    before = {k: v.copy() for k, v in model.state_dict().items()}
    seen = layer_inputs(model, (1, 32, 32))
    layers = [m for m in model.modules() if isinstance(m, (Conv2d, Linear))]
    assert sorted(map(id, (s[0] for s in seen))) == sorted(map(id, layers))
    assert seen[0][1:] == ((1, 1, 32, 32), False)     # the images need no gradient
    assert all(grad for _, _, grad in seen[1:])
    assert seen[-1][1] == (1, 64) and isinstance(seen[-1][0], Linear)
    assert model.training and all("forward" not in vars(m) for m in layers)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_the_kernel_list_follows_the_layers(monkeypatch):
    monkeypatch.setattr(backend, "device_facts", lambda *a: device_facts())
    model = get_model("resnet20", in_channels=1, num_classes=10, seed=0)
    refs = training_kernels(model, (128, 1, 32, 32), augment=True)
    files = {r.file for r in refs}
    assert {"batchnorm.cu", "softmax_xent.cu", "sgd.cu", "augment.cu"} <= files
    assert "dropout.cu" not in files and "pool.cu" not in files
    # each mode of a layer as the op would choose it: the stem's forward and weight
    # gradient, the next layer's data gradient at the training batch
    stem = conv_geometry((128, 1, 32, 32), (16, 1, 3, 3), 1, 1)
    inner = conv_geometry((128, 16, 32, 32), (16, 16, 3, 3), 1, 1)
    for geom, mode in ((stem, 0), (stem, 2), (inner, 1)):
        assert set(direct_conv.kernels(geom, choose_algorithm(geom, mode), None, mode)) <= refs
    assert training_kernels(model, (128, 1, 32, 32)) < refs     # no gatherer without augment


@pytest.mark.parametrize("bad", [(128, 1, 32), (0, 1, 32, 32), "128x1x32x32"])
def test_a_bad_batch_shape_is_said(bad):
    model = get_model("small_cnn", in_channels=1, num_classes=10, seed=0)
    with pytest.raises((ValueError, TypeError), match="batch_shape"):
        training_kernels(model, bad)


def test_a_model_of_the_same_structure_is_not_walked_twice(monkeypatch):
    from tensorconv import cuda
    from tensorconv.nn import precompile

    monkeypatch.setattr(backend, "device_facts", lambda *a: device_facts())
    built, walks = [], []
    monkeypatch.setattr(cuda, "compile_all", lambda refs, desc: built.append(len(refs)) or 7)
    walk = precompile.layer_inputs
    monkeypatch.setattr(precompile, "layer_inputs", lambda *a: walks.append(1) or walk(*a))
    monkeypatch.setattr(precompile, "_DONE", set())
    first = get_model("resnet20", in_channels=1, num_classes=10, seed=0)
    again = get_model("resnet20", in_channels=1, num_classes=10, seed=1)   # other weights
    assert precompile.compile_training(first, (64, 1, 32, 32), augment=True) == 7
    assert precompile.compile_training(again, (64, 1, 32, 32), augment=True) == 0
    assert len(walks) == len(built) == 1
    # another batch, other options or another model: walked and compiled again
    precompile.compile_training(again, (32, 1, 32, 32), augment=True)
    precompile.compile_training(again, (32, 1, 32, 32), augment=False)
    precompile.compile_training(get_model("resnet18", in_channels=1, num_classes=10),
                                (32, 1, 32, 32), augment=False)
    assert len(walks) == len(built) == 4
