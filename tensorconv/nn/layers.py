"""Layers: thin modules over :mod:`tensorconv.autograd.functions`."""

from __future__ import annotations

import math

import numpy as np

from tensorconv.autograd import functions as F
from tensorconv.checks import check_bool, check_int, check_real, pair, pool_args
from tensorconv.nn.module import Module, Parameter
from tensorconv.ops.dropout import new_step


def _rng(rng):
    return rng if rng is not None else np.random.default_rng(0)


class Conv2d(Module):
    """2-D convolution layer; He-normal (fan-out) initialisation, as torchvision's ResNets.

    After each forward, ``macs`` holds the multiply-accumulates it did.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, rng=None):
        super().__init__()
        in_channels = check_int(in_channels, "in_channels", minimum=1)
        out_channels = check_int(out_channels, "out_channels", minimum=1)
        groups = check_int(groups, "groups", minimum=1)
        pair(stride, "stride", minimum=1)
        pair(padding, "padding", minimum=0)
        pair(dilation, "dilation", minimum=1)
        check_bool(bias, "bias")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels={in_channels} and "
                             f"out_channels={out_channels}")
        kh, kw = pair(kernel_size, "kernel_size", minimum=1)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = (kh, kw), stride
        self.padding, self.dilation = padding, dilation
        std = math.sqrt(2.0 / (out_channels * kh * kw / groups))
        w = _rng(rng).standard_normal((out_channels, in_channels // groups, kh, kw)) * std
        self.weight = Parameter(w.astype(np.float32))
        self.bias = Parameter(np.zeros(out_channels, np.float32)) if bias else None
        self.macs = 0

    def forward(self, x):
        y = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                     self.groups)
        kh, kw = self.kernel_size
        self.macs = y.size * (self.in_channels // self.groups) * kh * kw
        return y

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}")


class Linear(Module):
    """Fully connected layer, ``U(-1/sqrt(in), 1/sqrt(in))`` initialisation."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, rng=None):
        super().__init__()
        in_features = check_int(in_features, "in_features", minimum=1)
        out_features = check_int(out_features, "out_features", minimum=1)
        check_bool(bias, "bias")
        bound = 1.0 / math.sqrt(in_features)
        rng = _rng(rng)
        self.in_features, self.out_features = in_features, out_features
        shape = (out_features, in_features)
        self.weight = Parameter(rng.uniform(-bound, bound, shape).astype(np.float32))
        self.bias = (Parameter(rng.uniform(-bound, bound, out_features).astype(np.float32))
                     if bias else None)
        self.macs = 0

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        self.macs = y.size * self.in_features
        return y

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}"


class BatchNorm2d(Module):
    def __init__(self, channels: int, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__()
        channels = check_int(channels, "channels", minimum=1)
        momentum = check_real(momentum, "momentum", low=0.0, high=1.0)
        eps = check_real(eps, "eps", low=0.0, low_open=True)
        self.channels, self.momentum, self.eps = channels, momentum, eps
        self.weight = Parameter(np.ones(channels, np.float32))
        self.bias = Parameter(np.zeros(channels, np.float32))
        self.register_buffer("running_mean", np.zeros(channels, np.float32))
        self.register_buffer("running_var", np.ones(channels, np.float32))
        self.group = None   # a communicator: synchronised batch norm (sync_batch_norm)

    def forward(self, x, relu: bool = False, residual=None):
        """``relu=True`` fuses the ReLU that follows into the normalisation kernels;
        ``residual`` (x's shape) is added before it, in the same node
        (:func:`tensorconv.autograd.functions.batch_norm2d`): a residual block's output."""
        return F.batch_norm2d(x, self.weight, self.bias, self.running_mean, self.running_var,
                              training=self.training, momentum=self.momentum, eps=self.eps,
                              relu=relu, group=self.group, residual=residual)

    def extra_repr(self) -> str:
        return str(self.channels)


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class MaxPool2d(Module):
    """Max pooling; ``ceil_mode`` as PyTorch's (the window count rounded up, the last
    window clipped at the border)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        super().__init__()
        pool_args(kernel_size, stride, padding)  # checked now, not at the first forward
        self.args = (kernel_size, stride, padding)
        self.ceil_mode = check_bool(ceil_mode, "ceil_mode")

    def forward(self, x):
        return F.max_pool2d(x, *self.args, ceil_mode=self.ceil_mode)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        pool_args(kernel_size, stride, padding)
        self.args = (kernel_size, stride, padding)

    def forward(self, x):
        return F.avg_pool2d(x, *self.args)


class GlobalAvgPool2d(Module):
    def forward(self, x):
        return F.global_avg_pool2d(x)


class Flatten(Module):
    def forward(self, x):
        return F.flatten(x)


class Identity(Module):
    def forward(self, x):
        return x


class Dropout(Module):
    """Dropout drawn from ``seed`` and a call counter, the buffer ``step``: a run is
    reproducible from ``seed`` on either device, a checkpoint resumes its stream, and a
    captured training step draws a new mask each replay (:mod:`tensorconv.ops.dropout`).
    States saved before the counter existed load with it at 0."""

    def __init__(self, p: float = 0.5, seed: int = 0):
        super().__init__()
        p = check_real(p, "p", low=0.0, high=1.0, high_open=True)
        seed = check_int(seed, "seed", minimum=0)
        self.p, self.seed = p, seed
        self.register_buffer("step", new_step(), optional=True)
        # (rank, ranks) of a data-parallel run, whose ranks take the global batch's rows in
        # order: rank r draws the masks of elements r·x.size on, the one-GPU run's masks
        self.shard = (0, 1)

    def forward(self, x):
        return F.dropout(x, self.p, self.seed, self.step, training=self.training,
                         offset=self.shard[0] * x.size)

    def extra_repr(self) -> str:
        return f"p={self.p}, seed={self.seed}"


class Sequential(Module):
    def __init__(self, *layers: Module):
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    @property
    def in_channels(self) -> int:
        """The first layer's input channels (what an inference engine checks its input by)."""
        return self[0].in_channels

    def forward(self, x):
        layers = list(self)
        i = 0
        while i < len(layers):
            if (isinstance(layers[i], BatchNorm2d) and i + 1 < len(layers)
                    and isinstance(layers[i + 1], ReLU)):
                x = layers[i](x, relu=True)  # BN -> ReLU in one pass
                i += 2
            else:
                x = layers[i](x)
                i += 1
        return x
