"""Modules, models, FLOP counting and the optimiser."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor
from tensorconv.nn import BatchNorm2d, Conv2d, Linear, Sequential, count_flops_params, get_model
from tensorconv.nn.models import BasicBlock
from tensorconv.nn.optim import SGD, clip_grad_norm, cosine_lr, step_lr
from tests.helpers import gradcheck_module


@pytest.mark.parametrize("name,shape,classes", [
    ("resnet20", (2, 1, 32, 32), 10), ("resnet18", (2, 1, 32, 32), 10),
    ("vgg16", (2, 1, 32, 32), 10), ("mobilenet_v1", (2, 1, 32, 32), 10),
    ("small_cnn", (2, 1, 28, 28), 10), ("resnet50", (1, 3, 64, 64), 1000),
    ("resnet18_imagenet", (1, 3, 64, 64), 1000), ("vgg16_imagenet", (1, 3, 64, 64), 1000),
    ("vgg19_imagenet", (1, 3, 48, 40), 1000), ("mobilenet_v1_imagenet", (1, 3, 64, 64), 1000),
])
def test_models_forward_shapes(name, shape, classes):
    model = get_model(name, in_channels=shape[1], num_classes=classes)
    model.eval()
    x = Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    assert model(x).shape == (shape[0], classes)


def test_vgg_pooled_globally_equals_flattened_at_32x32_and_takes_any_larger_input():
    flat = get_model("vgg16", in_channels=1)
    pooled = get_model("vgg16", in_channels=1, head="gap")
    flat.eval()
    pooled.eval()
    x = Tensor(np.random.default_rng(0).standard_normal((2, 1, 32, 32)).astype(np.float32))
    assert np.array_equal(flat(x).data, pooled(x).data)       # same weights, 1x1 maps
    big = Tensor(np.ones((1, 1, 64, 64), np.float32))
    assert pooled(big).shape == (1, 10)
    with pytest.raises(ValueError, match="linear"):
        flat(big)                                              # 2x2x512 flattened
    with pytest.raises(ValueError, match="head"):
        get_model("vgg16", head="avg")


def test_densenet121_forward_cifar_stem():
    model = get_model("densenet121", in_channels=1, num_classes=10, stem="cifar")
    model.eval()
    assert model(Tensor(np.ones((1, 1, 32, 32), np.float32))).shape == (1, 10)


def test_googlenet_forward_and_cost():
    model = get_model("googlenet", in_channels=1, num_classes=10)
    model.eval()
    assert model(Tensor(np.ones((1, 1, 32, 32), np.float32))).shape == (1, 10)
    inception = model.inceptions[0]
    assert inception.branch5[3].kernel_size == (5, 5)        # the paper's 5x5, not two 3x3
    big = count_flops_params(get_model("googlenet", stem="imagenet", num_classes=1000),
                             (1, 3, 224, 224))
    # the paper: 1.5 G multiply-adds, 6.8 M parameters (before batch norm)
    assert round(big["macs"] / 1e9, 2) == 1.58 and 6.8e6 < big["params"] < 7.1e6


def test_squeezenet_is_torchvisions_and_its_fire_module_differentiates(rng):
    """SqueezeNet 1.0: torchvision's parameter count and state-dict names, 0.82 G
    multiply-adds at 224x224, ceil-mode pools (54 -> 27), the smallest input refused
    below; a fire module's gradients by finite differences."""
    from tensorconv.nn.models import Fire

    model = get_model("squeezenet1_0")
    big = count_flops_params(model, (1, 3, 224, 224))
    assert big["params"] == 1_248_424 and round(big["macs"] / 1e9, 2) == 0.82
    names = model.state_dict()
    assert "features.3.expand3x3.weight" in names and "classifier.1.bias" in names
    small = get_model("squeezenet1_0", num_classes=10)
    small.eval()
    assert small(Tensor(np.ones((2, 3, 29, 29), np.float32))).shape == (2, 10)
    with pytest.raises(ValueError, match="H, W >= 29"):
        small(Tensor(np.ones((1, 3, 28, 28), np.float32)))
    fire = Fire(5, 3, 4, 2, rng)
    for conv in (fire.squeeze, fire.expand1x1, fire.expand3x3):   # no pre-activation at a
        conv.bias.data = rng.standard_normal(conv.bias.data.shape)  # kink (all-zero input)
    assert gradcheck_module(fire, (2, 5, 6, 5), rng)


def test_known_costs():
    r18 = count_flops_params(get_model("resnet18_imagenet"), (1, 3, 224, 224))
    assert round(r18["macs"] / 1e9, 3) == 1.814 and round(r18["params"] / 1e6, 2) == 11.69
    r50 = count_flops_params(get_model("resnet50"), (1, 3, 224, 224))
    assert round(r50["macs"] / 1e9, 2) == 4.09 and round(r50["params"] / 1e6, 2) == 25.56
    d201 = count_flops_params(get_model("densenet201"), (1, 3, 224, 224))  # torchvision's figures
    assert round(d201["macs"] / 1e9, 2) == 4.29 and d201["params"] == 20_013_928
    r20 = count_flops_params(get_model("resnet20"), (1, 3, 32, 32))
    assert 40e6 < r20["macs"] < 42e6 and r20["flops"] == 2 * r20["macs"]


def test_model_rejects_wrong_input_shape():
    model = get_model("resnet20", in_channels=1)
    with pytest.raises(ValueError, match=r"expects input \(N, 1, H, W\)"):
        model(Tensor(np.zeros((2, 3, 32, 32), np.float32)))
    with pytest.raises(ValueError, match="expects input"):
        model(Tensor(np.zeros((32, 32), np.float32)))


def test_unknown_model():
    with pytest.raises(ValueError, match="name must be one of .*got .alexnet."):
        get_model("alexnet")


def test_block_gradcheck_float64(rng):
    block = BasicBlock(2, 3, 2, rng)
    block.eval()  # running statistics: BN is affine, the check is exact
    gradcheck_module(block, (2, 2, 5, 5), rng)


def test_state_dict_roundtrip_and_errors():
    a, b = get_model("small_cnn", seed=1), get_model("small_cnn", seed=2)
    b.load_state_dict(a.state_dict())
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and np.array_equal(va, vb)
    sd = a.state_dict()
    sd["fc.weight"] = sd["fc.weight"][:5]
    before = b.state_dict()
    with pytest.raises(ValueError, match="shape mismatches"):
        b.load_state_dict(sd)
    with pytest.raises(ValueError, match="missing"):
        b.load_state_dict({})
    assert all(np.array_equal(before[k], v) for k, v in b.state_dict().items())  # untouched


def test_registration_and_modes():
    seq = Sequential(Conv2d(1, 2, 3), BatchNorm2d(2), Linear(4, 3))
    names = [n for n, _ in seq.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
    assert [n for n, _ in seq.named_buffers()] == ["1.running_mean", "1.running_var"]
    seq.eval()
    assert not any(m.training for m in seq.modules())
    assert seq.in_channels == 1          # the first layer's: what an engine checks input by
    with pytest.raises(ValueError, match="groups"):
        Conv2d(3, 4, 3, groups=2)


def _param(value, grad):
    p = Linear(1, 1, bias=False).weight
    p.data = np.array(value, dtype=np.float64)
    p.grad = None if grad is None else np.asarray(grad, dtype=np.asarray(grad).dtype
                                                  if isinstance(grad, np.ndarray) else np.float64)
    return p


def test_sgd_momentum_nesterov_and_decay():
    p = _param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9, nesterov=False, weight_decay=0.1)
    opt.step()                          # g = 0.5 + 0.1 = 0.6, v = 0.6
    assert np.allclose(p.data, 1.0 - 0.06)
    p.grad = np.array([0.5])
    opt.step()                          # g = 0.5 + 0.1*0.94, v = 0.9*0.6 + g
    g = 0.5 + 0.1 * 0.94
    assert np.allclose(p.data, 0.94 - 0.1 * (0.54 + g))

    q = _param([1.0], [0.5])
    SGD([q], lr=0.1, momentum=0.9, nesterov=True).step()  # v = g; step g + mu v = 0.95
    assert np.allclose(q.data, 1.0 - 0.095)

    r = _param([1.0], [0.5])
    SGD([r], lr=0.1, weight_decay=0.1, decoupled=True).step()
    assert np.allclose(r.data, 1.0 * (1 - 0.01) - 0.05)


def test_sgd_state_roundtrip_and_errors():
    p = _param([1.0, 2.0], [0.1, 0.2])
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    other = SGD([_param([0.0, 0.0], [0.0, 0.0])], lr=1.0, momentum=0.9)
    other.load_state_dict(opt.state_dict())
    assert other.lr == 0.1 and other.steps == 1 and np.array_equal(other.velocity[0],
                                                                   opt.velocity[0])
    with pytest.raises(ValueError, match="nesterov"):
        SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="lr must be > 0"):
        SGD([p], lr=0.0)
    with pytest.raises(ValueError, match="momentum must be < 1"):
        SGD([p], lr=0.1, momentum=1.0)
    with pytest.raises(TypeError, match="nesterov must be True or False"):
        SGD([p], lr=0.1, momentum=0.9, nesterov="yes")
    with pytest.raises(ValueError, match="params is empty"):
        SGD([], lr=0.1)


def test_schedules_and_clipping():
    assert step_lr(1.0, 0, (10, 20)) == 1.0 and step_lr(1.0, 15, (10, 20)) == pytest.approx(0.1)
    assert step_lr(1.0, 25, (10, 20)) == pytest.approx(0.01)
    assert cosine_lr(1.0, 0, 100) == 1.0 and cosine_lr(1.0, 100, 100) == pytest.approx(0.0)
    assert cosine_lr(1.0, 50, 100) == pytest.approx(0.5)
    assert cosine_lr(1.0, 0, 100, warmup_steps=10) == pytest.approx(0.1)
    p = _param([0.0, 0.0], [3.0, 4.0])
    assert float(clip_grad_norm([p], 1.0)) == pytest.approx(5.0)
    assert np.allclose(p.grad, [0.6, 0.8])


def test_clipping_stays_on_the_device_and_scales_as_the_host_rule_did(rng):
    """No host read (the norm comes back as an array), and the gradients are those of the
    rule it replaced, bit for bit: scaled by max / (norm + 1e-12) in their own dtype when
    over the bound, untouched at or under it."""
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (7,), (2, 2, 2))]
    total = float(np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads)))
    for bound in (total / 3, total, 2 * total):
        params = [_param(np.zeros_like(g), g.copy()) for g in grads]
        norm = clip_grad_norm(params, bound)
        assert np.ndim(norm) == 0 and float(norm) == total
        for p, g in zip(params, grads):
            want = g * (bound / (total + 1e-12)) if total > bound else g
            assert p.grad.dtype == np.float32
            np.testing.assert_array_equal(p.grad, want)
    assert clip_grad_norm([_param([1.0], None)], 1.0) == 0.0
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm([_param([1.0], [2.0])], 0.0)
