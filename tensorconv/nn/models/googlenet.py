"""GoogLeNet (Szegedy et al., CVPR'15) with batch norm after every convolution: nine
inception modules whose four branches — a 1x1, a 1x1 then 3x3, a 1x1 then a real 5x5, and
a 3x3 max pool then 1x1 — are concatenated over channels (Table 1 of the paper's widths).

``stem="cifar"`` (32x32 inputs, the sparse-convolution paper's CIFAR-10 model) replaces the
ImageNet stem by one 3x3 convolution to 192 channels and keeps the inner max pools;
``stem="imagenet"`` is the paper's 7x7/2 stem.
"""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import functions as F
from tensorconv.checks import check_choice
from tensorconv.nn.layers import (
    BatchNorm2d,
    Conv2d,
    Dropout,
    GlobalAvgPool2d,
    Linear,
    MaxPool2d,
    ReLU,
    Sequential,
)
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module

# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection) of each inception module,
# with "M" for a 3x3/2 max pool between them
INCEPTIONS = ((64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "M",
              (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64),
              (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
              (256, 160, 320, 32, 128, 128), "M",
              (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128))


def _conv_bn_relu(cin: int, cout: int, k: int, rng, stride: int = 1) -> list:
    return [Conv2d(cin, cout, k, stride, k // 2, bias=False, rng=rng), BatchNorm2d(cout), ReLU()]


class Inception(Module):
    """Four branches over the same input, concatenated over channels."""

    def __init__(self, cin: int, n1: int, n3r: int, n3: int, n5r: int, n5: int, pool: int, rng):
        super().__init__()
        self.branch1 = Sequential(*_conv_bn_relu(cin, n1, 1, rng))
        self.branch3 = Sequential(*_conv_bn_relu(cin, n3r, 1, rng), *_conv_bn_relu(n3r, n3, 3, rng))
        self.branch5 = Sequential(*_conv_bn_relu(cin, n5r, 1, rng), *_conv_bn_relu(n5r, n5, 5, rng))
        self.branch_pool = Sequential(MaxPool2d(3, 1, 1), *_conv_bn_relu(cin, pool, 1, rng))
        self.out_channels = n1 + n3 + n5 + pool

    def branches(self) -> tuple:
        return self.branch1, self.branch3, self.branch5, self.branch_pool

    def forward(self, x):
        return F.concat([b(x) for b in self.branches()], axis=1)


class GoogLeNet(Module):
    def __init__(self, stem: str = "cifar", in_channels: int = 3, num_classes: int = 10,
                 seed: int = 0):
        super().__init__()
        check_choice(stem, "stem", ("cifar", "imagenet"))
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes = in_channels, num_classes
        if stem == "cifar":
            self.stem = Sequential(*_conv_bn_relu(in_channels, 192, 3, rng))
            self.min_size = 8
        else:
            self.stem = Sequential(*_conv_bn_relu(in_channels, 64, 7, rng, stride=2),
                                   MaxPool2d(3, 2, 1), *_conv_bn_relu(64, 64, 1, rng),
                                   *_conv_bn_relu(64, 192, 3, rng), MaxPool2d(3, 2, 1))
            self.min_size = 32
        parts, c = [], 192
        for spec in INCEPTIONS:
            if spec == "M":
                parts.append(MaxPool2d(3, 2, 1))
            else:
                parts.append(Inception(c, *spec, rng))
                c = parts[-1].out_channels
        self.inceptions = Sequential(*parts)
        self.gap = GlobalAvgPool2d()
        self.dropout = Dropout(0.4, seed=seed)
        self.fc = Linear(c, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        return self.fc(self.dropout(self.gap(self.inceptions(self.stem(x)))))


def googlenet(in_channels: int = 3, num_classes: int = 10, seed: int = 0,
              stem: str = "cifar") -> GoogLeNet:
    return GoogLeNet(stem, in_channels, num_classes, seed)
