"""A small three-stage CNN for the quickstart and for tests (runs in seconds on a CPU)."""

from __future__ import annotations

import numpy as np

from tensorconv.nn.layers import (
    BatchNorm2d,
    Conv2d,
    GlobalAvgPool2d,
    Linear,
    MaxPool2d,
    ReLU,
    Sequential,
)
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module


class SmallCNN(Module):
    """Three conv-BN-ReLU stages (max-pool between them), global pooling, one linear layer."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths=(16, 32, 64),
                 seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes, self.min_size = in_channels, num_classes, 4
        layers, cin = [], in_channels
        for i, w in enumerate(widths):
            if i:
                layers.append(MaxPool2d(2, 2))
            layers += [Conv2d(cin, w, 3, 1, 1, bias=False, rng=rng), BatchNorm2d(w), ReLU()]
            cin = w
        self.features = Sequential(*layers)
        self.gap = GlobalAvgPool2d()
        self.fc = Linear(cin, num_classes, rng=rng)

    def forward(self, x):
        check_input(self, x)
        return self.fc(self.gap(self.features(x)))


def small_cnn(in_channels: int = 1, num_classes: int = 10, seed: int = 0) -> SmallCNN:
    return SmallCNN(in_channels, num_classes, seed=seed)
