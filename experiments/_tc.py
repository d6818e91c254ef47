"""The convolution layers of the tensor-core batch-1 study (Sun et al., Figs 2-3).

The 33 distinct convolutions of torchvision's ResNet-18 (11) and SqueezeNet 1.0 (22) at
224x224: two layers are the same when their input channels, output channels, filter,
stride, padding and input plane agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One convolution: ``c`` -> ``k`` channels, an ``r`` x ``r`` filter, on an ``h`` x ``h``
    input."""

    model: str
    name: str
    c: int
    k: int
    r: int
    stride: int
    padding: int
    h: int

    @property
    def out(self) -> int:
        return (self.h + 2 * self.padding - self.r) // self.stride + 1

    def key(self) -> tuple:
        return self.c, self.k, self.r, self.stride, self.padding, self.h


def _resnet18() -> list[Layer]:
    out = [Layer("resnet18", "conv1", 3, 64, 7, 2, 3, 224),
           Layer("resnet18", "layer1.conv", 64, 64, 3, 1, 1, 56)]
    c, h = 64, 56
    for i, k in enumerate((128, 256, 512), start=2):
        out += [Layer("resnet18", f"layer{i}.0.conv1", c, k, 3, 2, 1, h),
                Layer("resnet18", f"layer{i}.conv", k, k, 3, 1, 1, h // 2),
                Layer("resnet18", f"layer{i}.0.downsample", c, k, 1, 2, 0, h)]
        c, h = k, h // 2
    return out


def _squeezenet10() -> list[Layer]:
    # (input channels, squeeze, expand) of fire2..fire9, and the plane each runs on
    fires = [(96, 16, 64, 54), (128, 16, 64, 54), (128, 32, 128, 54), (256, 32, 128, 27),
             (256, 48, 192, 27), (384, 48, 192, 27), (384, 64, 256, 27), (512, 64, 256, 13)]
    out = [Layer("squeezenet1_0", "features.0", 3, 96, 7, 2, 0, 224)]
    for i, (c, s, e, h) in enumerate(fires, start=2):
        out += [Layer("squeezenet1_0", f"fire{i}.squeeze", c, s, 1, 1, 0, h),
                Layer("squeezenet1_0", f"fire{i}.expand1x1", s, e, 1, 1, 0, h),
                Layer("squeezenet1_0", f"fire{i}.expand3x3", s, e, 3, 1, 1, h)]
    out.append(Layer("squeezenet1_0", "classifier.1", 512, 1000, 1, 1, 0, 13))
    return out


def distinct(layers) -> list[Layer]:
    """The first layer of each shape, in order."""
    seen, out = set(), []
    for layer in layers:
        if (layer.model, layer.key()) not in seen:
            seen.add((layer.model, layer.key()))
            out.append(layer)
    return out


LAYERS = distinct(_resnet18()) + distinct(_squeezenet10())
