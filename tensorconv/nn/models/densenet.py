"""DenseNet-121 (growth 32, blocks 6/12/24/16, bottleneck 4k, compression 0.5)."""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import functions as F
from tensorconv.nn.layers import (
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    GlobalAvgPool2d,
    Identity,
    Linear,
    MaxPool2d,
    ReLU,
    Sequential,
)
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module


class DenseLayer(Module):
    """BN-ReLU-1x1 conv (bn_size*k) - BN-ReLU-3x3 conv (k); output concatenated to input."""

    def __init__(self, cin: int, growth: int, bn_size: int, rng):
        super().__init__()
        self.bn1 = BatchNorm2d(cin)
        self.conv1 = Conv2d(cin, bn_size * growth, 1, bias=False, rng=rng)
        self.bn2 = BatchNorm2d(bn_size * growth)
        self.conv2 = Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False, rng=rng)

    def forward(self, x):
        y = self.conv1(self.bn1(x, relu=True))
        y = self.conv2(self.bn2(y, relu=True))
        return F.concat([x, y], axis=1)


class Transition(Module):
    def __init__(self, cin: int, cout: int, rng):
        super().__init__()
        self.bn = BatchNorm2d(cin)
        self.conv = Conv2d(cin, cout, 1, bias=False, rng=rng)
        self.pool = AvgPool2d(2, 2)

    def forward(self, x):
        return self.pool(self.conv(self.bn(x, relu=True)))


class DenseNet(Module):
    def __init__(self, blocks=(6, 12, 24, 16), growth: int = 32, bn_size: int = 4,
                 compression: float = 0.5, stem: str = "imagenet", in_channels: int = 3,
                 num_classes: int = 1000, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes = in_channels, num_classes
        c = 2 * growth
        if stem == "imagenet":
            self.stem = Sequential(Conv2d(in_channels, c, 7, 2, 3, bias=False, rng=rng),
                                   BatchNorm2d(c), ReLU())
            self.pool, self.min_size = MaxPool2d(3, 2, 1), 32
        else:
            self.stem = Sequential(Conv2d(in_channels, c, 3, 1, 1, bias=False, rng=rng),
                                   BatchNorm2d(c), ReLU())
            self.pool, self.min_size = Identity(), 8
        parts = []
        for i, n in enumerate(blocks):
            for _ in range(n):
                parts.append(DenseLayer(c, growth, bn_size, rng))
                c += growth
            if i < len(blocks) - 1:
                cout = int(c * compression)
                parts.append(Transition(c, cout, rng))
                c = cout
        self.features = Sequential(*parts)
        self.bn = BatchNorm2d(c)
        self.gap = GlobalAvgPool2d()
        self.fc = Linear(c, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        y = self.pool(self.stem(x))
        y = self.bn(self.features(y), relu=True)
        return self.fc(self.gap(y))


def densenet121(in_channels: int = 3, num_classes: int = 1000, seed: int = 0,
                stem: str = "imagenet") -> DenseNet:
    return DenseNet((6, 12, 24, 16), 32, 4, 0.5, stem, in_channels, num_classes, seed)


def densenet201(in_channels: int = 3, num_classes: int = 1000, seed: int = 0,
                stem: str = "imagenet") -> DenseNet:
    """DenseNet-201: blocks of 6, 12, 48 and 32 layers, growth 32."""
    return DenseNet((6, 12, 48, 32), 32, 4, 0.5, stem, in_channels, num_classes, seed)
