"""VGG-16 and VGG-19 with batch norm, CIFAR-style (32x32 inputs, one linear classifier)."""

from __future__ import annotations

import numpy as np

from tensorconv.nn.layers import BatchNorm2d, Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module

VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")
VGG19_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
                512, 512, 512, 512, "M")


class VGG(Module):
    def __init__(self, config=VGG16_CONFIG, in_channels: int = 3, num_classes: int = 10,
                 seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes, self.min_size = in_channels, num_classes, 32
        layers, cin = [], in_channels
        for v in config:
            if v == "M":
                layers.append(MaxPool2d(2, 2))
            else:
                layers += [Conv2d(cin, v, 3, 1, 1, bias=False, rng=rng), BatchNorm2d(v), ReLU()]
                cin = v
        self.features = Sequential(*layers)
        self.flatten = Flatten()
        self.fc = Linear(cin, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        return self.fc(self.flatten(self.features(x)))


def vgg16(in_channels: int = 3, num_classes: int = 10, seed: int = 0) -> VGG:
    """VGG-16-BN for 32x32 inputs (the five pools leave 1x1x512)."""
    return VGG(VGG16_CONFIG, in_channels, num_classes, seed)


def vgg19(in_channels: int = 3, num_classes: int = 10, seed: int = 0) -> VGG:
    """VGG-19-BN for 32x32 inputs."""
    return VGG(VGG19_CONFIG, in_channels, num_classes, seed)
