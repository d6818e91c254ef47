"""MobileNetV1: a stem convolution and 13 depthwise-separable blocks."""

from __future__ import annotations

import numpy as np

from tensorconv.nn.layers import BatchNorm2d, Conv2d, GlobalAvgPool2d, Linear, ReLU, Sequential
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module

# (output channels, stride) of each depthwise-separable block
MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                       (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def _conv_bn_relu(cin, cout, k, stride, groups, rng):
    return [Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False, rng=rng),
            BatchNorm2d(cout), ReLU()]


class MobileNetV1(Module):
    """``width`` scales every channel count; ``stem_stride`` 1 suits 32x32 inputs."""

    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: float = 1.0,
                 stem_stride: int = 1, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes, self.min_size = in_channels, num_classes, 32
        c = max(8, int(32 * width))
        layers = _conv_bn_relu(in_channels, c, 3, stem_stride, 1, rng)
        for cout, stride in MOBILENET_V1_BLOCKS:
            cout = max(8, int(cout * width))
            layers += _conv_bn_relu(c, c, 3, stride, c, rng)      # depthwise
            layers += _conv_bn_relu(c, cout, 1, 1, 1, rng)        # pointwise
            c = cout
        self.features = Sequential(*layers)
        self.gap = GlobalAvgPool2d()
        self.fc = Linear(c, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        return self.fc(self.gap(self.features(x)))


def mobilenet_v1(in_channels: int = 3, num_classes: int = 10, seed: int = 0,
                 width: float = 1.0, stem_stride: int = 1) -> MobileNetV1:
    return MobileNetV1(in_channels, num_classes, width, stem_stride, seed)
