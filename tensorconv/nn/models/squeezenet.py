"""SqueezeNet 1.0 (Iandola et al., 2016), as torchvision builds it: a 7x7/2 convolution,
eight fire modules — a 1x1 "squeeze" convolution feeding a 1x1 and a 3x3 "expand"
convolution whose outputs are concatenated over channels — between 3x3/2 max pools in
ceil mode, and a 1x1 convolution to the classes before a global average pool.  No batch
norm; every convolution has a bias and a ReLU after it.

The module and parameter names are torchvision's (``features.3.squeeze.weight``,
``classifier.1.bias``), so its state dict loads as it is.  This is the second network of
the batch-1 tensor-core study (Sun et al.); at 224x224 its fire modules run on 54x54,
27x27 and 13x13 maps.
"""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import functions as F
from tensorconv.nn.layers import Conv2d, Dropout, GlobalAvgPool2d, MaxPool2d, ReLU, Sequential
from tensorconv.nn.models.resnet import check_input
from tensorconv.nn.module import Module

# (squeeze, expand 1x1, expand 3x3) of fire2 ... fire9, "M" for a 3x3/2 ceil-mode max pool
FIRES_1_0 = ((16, 64, 64), (16, 64, 64), (32, 128, 128), "M", (32, 128, 128), (48, 192, 192),
             (48, 192, 192), (64, 256, 256), "M", (64, 256, 256))


class Fire(Module):
    """``concat(relu(expand1x1(s)), relu(expand3x3(s)))`` over channels, where
    ``s = relu(squeeze(x))``: (N, C, H, W) -> (N, e1 + e3, H, W)."""

    def __init__(self, cin: int, squeeze: int, e1: int, e3: int, rng):
        super().__init__()
        self.squeeze = Conv2d(cin, squeeze, 1, rng=rng)
        self.squeeze_activation = ReLU()
        self.expand1x1 = Conv2d(squeeze, e1, 1, rng=rng)
        self.expand1x1_activation = ReLU()
        self.expand3x3 = Conv2d(squeeze, e3, 3, padding=1, rng=rng)
        self.expand3x3_activation = ReLU()
        self.out_channels = e1 + e3

    def forward(self, x):
        s = self.squeeze_activation(self.squeeze(x))
        return F.concat([self.expand1x1_activation(self.expand1x1(s)),
                         self.expand3x3_activation(self.expand3x3(s))], axis=1)


class SqueezeNet(Module):
    """SqueezeNet 1.0 for (N, ``in_channels``, H, W) inputs, H and W at least 29."""

    def __init__(self, in_channels: int = 3, num_classes: int = 1000, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.in_channels, self.num_classes = in_channels, num_classes
        # the smallest input whose last pool still has a 3x3 window: 29 -> 12 -> 6 -> 3 -> 1
        self.min_size = 29
        parts, c = [Conv2d(in_channels, 96, 7, 2, rng=rng), ReLU(),
                    MaxPool2d(3, 2, ceil_mode=True)], 96
        for spec in FIRES_1_0:
            if spec == "M":
                parts.append(MaxPool2d(3, 2, ceil_mode=True))
            else:
                parts.append(Fire(c, *spec, rng))
                c = parts[-1].out_channels
        self.features = Sequential(*parts)
        final = Conv2d(c, num_classes, 1, rng=rng)
        self.classifier = Sequential(Dropout(0.5, seed=seed), final, ReLU(), GlobalAvgPool2d())
        # torchvision's initialisation: He-uniform over the fan-in (the fan-out rule of our
        # Conv2d grows the activations at every squeeze: no batch norm resets them here),
        # the final layer small so that the first logits are near zero
        for m in self.modules():
            if isinstance(m, Conv2d):
                shape = m.weight.data.shape
                if m is final:
                    w = rng.standard_normal(shape) * 0.01
                else:
                    bound = np.sqrt(6.0 / (shape[1] * shape[2] * shape[3]))
                    w = rng.uniform(-bound, bound, shape)
                m.weight.data = w.astype(np.float32)

    def forward(self, x):
        check_input(self, x)
        return self.classifier(self.features(x))


def squeezenet1_0(in_channels: int = 3, num_classes: int = 1000, seed: int = 0) -> SqueezeNet:
    return SqueezeNet(in_channels, num_classes, seed)
