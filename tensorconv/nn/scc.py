"""The sliding-channel convolution layer (DSXplore's SCC, Wang et al., IPDPS'21):
``SCCConv2d``, a 1x1 convolution whose filter k reads only the ``U = Cin / cg`` channels
of its window, windows sliding by ``U - round(co * U)`` channels and wrapping around
(:mod:`tensorconv.reference.scc`).  It replaces the pointwise convolution of a
depthwise-separable block (DW + SCC): ``Separable`` is that block."""

from __future__ import annotations

import math

import numpy as np

from tensorconv.autograd import functions as F
from tensorconv.checks import check_bool, check_choice
from tensorconv.nn.layers import BatchNorm2d, Conv2d, ReLU
from tensorconv.nn.module import Module, Parameter
from tensorconv.reference.scc import scc_geometry


class SCCConv2d(Module):
    """Sliding-channel convolution Cin -> Cout with ``cg`` channel groups and overlap ``co``.

    Parameters
    ----------
    in_channels, out_channels : int
    cg : int
        Channel groups: each filter reads ``in_channels / cg`` channels.
    co : float in [0, 1)
        Share of a window that overlaps the next filter's.
    bias : bool
    rng : numpy Generator, optional

    Attributes
    ----------
    impl : {"auto", "kernels", "dense", "channel_stack", "conv_stack"}
        How the forward and backward run: the SCC kernels where they can ("auto"), the
        kernels, the dense-masked 1x1, or the paper's two operator stacks (Base, Opt) —
        the experiments compare them; the result is the same.
    """

    IMPLS = ("auto", "kernels", "dense", "channel_stack", "conv_stack")

    def __init__(self, in_channels: int, out_channels: int, cg: int, co: float,
                 bias: bool = False, rng=None):
        super().__init__()
        self.impl = "auto"
        self.geom = scc_geometry(in_channels, out_channels, cg, co)
        check_bool(bias, "bias")
        rng = rng if rng is not None else np.random.default_rng(0)
        std = math.sqrt(2.0 / out_channels)            # He, fan-out, as our Conv2d
        self.weight = Parameter((rng.standard_normal((out_channels, self.geom.u)) * std)
                                .astype(np.float32))
        self.bias = Parameter(np.zeros(out_channels, np.float32)) if bias else None
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = (1, 1), (1, 1), (0, 0)
        self.groups, self.dilation = 1, (1, 1)
        self.macs = 0

    def forward(self, x):
        impl = check_choice(self.impl, "impl", self.IMPLS)
        if impl in ("channel_stack", "conv_stack"):
            y = getattr(F, f"scc_{impl}")(x, self.weight, self.geom, self.bias)
        else:
            y = F.scc_conv(x, self.weight, self.geom, self.bias, impl=impl)
        self.macs = self.geom.macs(y.shape[0] * y.shape[2] * y.shape[3])
        return y

    def num_macs(self) -> int:
        return self.macs

    def extra_repr(self) -> str:
        g = self.geom
        return f"{g.cin}, {g.cout}, cg={g.cg}, co={g.co:g}, window={g.u}, stride={g.stride}"


class Separable(Module):
    """A depthwise-separable replacement of a k x k convolution: a depthwise k x k
    convolution (the original's stride and padding), batch norm and ReLU, then a pointwise
    stage — ``SCCConv2d`` (DW + SCC), a grouped 1x1 (DW + GPW) or a full 1x1 (DW + PW)."""

    def __init__(self, conv, pointwise: Module, rng=None):
        super().__init__()
        c = conv.in_channels
        self.depthwise = Conv2d(c, c, conv.kernel_size, conv.stride, conv.padding, groups=c,
                                bias=False, rng=rng)
        self.bn = BatchNorm2d(c)
        self.relu = ReLU()
        self.pointwise = pointwise
        self.in_channels, self.out_channels = c, pointwise.out_channels
        self.kernel_size, self.stride, self.padding = conv.kernel_size, conv.stride, conv.padding

    def forward(self, x):
        return self.pointwise(self.bn(self.depthwise(x), relu=True))
