"""ResNets: CIFAR-style ResNet-20 and ResNet-18, ImageNet-style ResNet-18 and ResNet-50.

Shortcuts that change shape are 1x1 convolutions with BN (option B of He et al.).
"""

from __future__ import annotations

import numpy as np

from tensorconv.nn.layers import (
    BatchNorm2d,
    Conv2d,
    GlobalAvgPool2d,
    Identity,
    Linear,
    MaxPool2d,
    ReLU,
    Sequential,
)
from tensorconv.nn.module import Module


def check_input(model, x) -> None:
    """A model's input must be (N, in_channels, H, W) with H, W at least ``min_size``."""
    if x.ndim != 4 or x.shape[1] != model.in_channels or min(x.shape[2:]) < model.min_size:
        raise ValueError(f"{type(model).__name__} expects input (N, {model.in_channels}, H, W) "
                         f"with H, W >= {model.min_size}, got {tuple(x.shape)}")


class BasicBlock(Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int, rng):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = Conv2d(cin, width, 3, stride, 1, bias=False, rng=rng)
        self.bn1 = BatchNorm2d(width)
        self.conv2 = Conv2d(width, cout, 3, 1, 1, bias=False, rng=rng)
        self.bn2 = BatchNorm2d(cout)
        self.shortcut = (Sequential(Conv2d(cin, cout, 1, stride, bias=False, rng=rng),
                                    BatchNorm2d(cout))
                         if stride != 1 or cin != cout else Identity())

    def forward(self, x):
        y = self.bn1(self.conv1(x), relu=True)
        return self.bn2(self.conv2(y), relu=True, residual=self.shortcut(x))


class Bottleneck(Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, rng):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = Conv2d(cin, width, 1, bias=False, rng=rng)
        self.bn1 = BatchNorm2d(width)
        self.conv2 = Conv2d(width, width, 3, stride, 1, bias=False, rng=rng)
        self.bn2 = BatchNorm2d(width)
        self.conv3 = Conv2d(width, cout, 1, bias=False, rng=rng)
        self.bn3 = BatchNorm2d(cout)
        self.shortcut = (Sequential(Conv2d(cin, cout, 1, stride, bias=False, rng=rng),
                                    BatchNorm2d(cout))
                         if stride != 1 or cin != cout else Identity())

    def forward(self, x):
        y = self.bn1(self.conv1(x), relu=True)
        y = self.bn2(self.conv2(y), relu=True)
        return self.bn3(self.conv3(y), relu=True, residual=self.shortcut(x))


class ResNet(Module):
    """A ResNet of ``block`` s.

    Parameters
    ----------
    block : BasicBlock or Bottleneck
    layers : list of int
        Blocks per stage; the first block of every stage after the first has stride 2.
    widths : list of int
        Width of each stage.
    stem : {"cifar", "imagenet"}
        3x3 stride-1 conv (32x32 inputs) or 7x7 stride-2 conv + 3x3 max-pool (224x224).
    """

    def __init__(self, block, layers, widths, stem: str = "cifar", in_channels: int = 3,
                 num_classes: int = 10, seed: int = 0):
        super().__init__()
        if stem not in ("cifar", "imagenet"):
            raise ValueError(f"stem must be 'cifar' or 'imagenet', got {stem!r}")
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes = in_channels, num_classes
        self.min_size = 8 if stem == "cifar" else 32
        w0 = widths[0]
        if stem == "cifar":
            self.stem = Sequential(Conv2d(in_channels, w0, 3, 1, 1, bias=False, rng=rng),
                                   BatchNorm2d(w0), ReLU())
            self.pool = Identity()
        else:
            self.stem = Sequential(Conv2d(in_channels, w0, 7, 2, 3, bias=False, rng=rng),
                                   BatchNorm2d(w0), ReLU())
            self.pool = MaxPool2d(3, 2, 1)
        stages, cin = [], w0
        for i, (n, width) in enumerate(zip(layers, widths)):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1, rng))
                cin = width * block.expansion
            stages.append(Sequential(*blocks))
        self.stages = Sequential(*stages)
        self.gap = GlobalAvgPool2d()
        self.fc = Linear(cin, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        y = self.pool(self.stem(x))
        return self.fc(self.gap(self.stages(y)))


def resnet20(in_channels: int = 3, num_classes: int = 10, seed: int = 0) -> ResNet:
    """CIFAR ResNet-20: 3 stages of 3 basic blocks, widths 16/32/64 (0.27 M parameters)."""
    return ResNet(BasicBlock, [3, 3, 3], [16, 32, 64], "cifar", in_channels, num_classes, seed)


def resnet18(in_channels: int = 3, num_classes: int = 10, seed: int = 0,
             stem: str = "cifar") -> ResNet:
    """ResNet-18 (widths 64..512); ``stem="imagenet"`` for 224x224 inputs."""
    return ResNet(BasicBlock, [2, 2, 2, 2], [64, 128, 256, 512], stem, in_channels,
                  num_classes, seed)


def resnet50(in_channels: int = 3, num_classes: int = 1000, seed: int = 0,
             stem: str = "imagenet") -> ResNet:
    """ResNet-50 with bottleneck blocks (expansion 4)."""
    return ResNet(Bottleneck, [3, 4, 6, 3], [64, 128, 256, 512], stem, in_channels,
                  num_classes, seed)
