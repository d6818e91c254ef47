"""VGG-16 and VGG-19 with batch norm, CIFAR-style (32x32 inputs, one linear classifier);
``head="gap"`` pools globally before it, for larger inputs (ImageNet shapes)."""

from __future__ import annotations

import numpy as np

from tensorconv.checks import check_choice
from tensorconv.nn.layers import (
    BatchNorm2d,
    Conv2d,
    Flatten,
    GlobalAvgPool2d,
    Linear,
    MaxPool2d,
    ReLU,
    Sequential,
)
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module

VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")
VGG19_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
                512, 512, 512, 512, "M")


class VGG(Module):
    """``head``: "flatten" (32x32 inputs: the five pools leave 1x1) or "gap" (a global
    average pool first: any input of at least 32x32)."""

    def __init__(self, config=VGG16_CONFIG, in_channels: int = 3, num_classes: int = 10,
                 seed: int = 0, head: str = "flatten"):
        super().__init__()
        check_choice(head, "head", ("flatten", "gap"))
        rng = np.random.default_rng(seed)
        self.head = head
        self.in_channels, self.num_classes, self.min_size = in_channels, num_classes, 32
        layers, cin = [], in_channels
        for v in config:
            if v == "M":
                layers.append(MaxPool2d(2, 2))
            else:
                layers += [Conv2d(cin, v, 3, 1, 1, bias=False, rng=rng), BatchNorm2d(v), ReLU()]
                cin = v
        self.features = Sequential(*layers)
        if head == "flatten":
            self.flatten = Flatten()
        else:
            self.gap = GlobalAvgPool2d()
        self.fc = Linear(cin, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        y = self.features(x)
        return self.fc(self.flatten(y) if self.head == "flatten" else self.gap(y))


def vgg16(in_channels: int = 3, num_classes: int = 10, seed: int = 0,
          head: str = "flatten") -> VGG:
    """VGG-16-BN for 32x32 inputs (the five pools leave 1x1x512), or any with ``head="gap"``."""
    return VGG(VGG16_CONFIG, in_channels, num_classes, seed, head)


def vgg19(in_channels: int = 3, num_classes: int = 10, seed: int = 0,
          head: str = "flatten") -> VGG:
    """VGG-19-BN for 32x32 inputs, or any with ``head="gap"``."""
    return VGG(VGG19_CONFIG, in_channels, num_classes, seed, head)
