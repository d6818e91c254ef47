"""The Tucker-format convolution layer (TDC): ``TuckerConv2d``.

A ``TuckerConv2d`` runs a 1x1 convolution C -> D1, the core R x S convolution
D1 -> D2 (with the layer's stride and padding) and a 1x1 convolution D2 -> N;
it trains through the autograd like any layer and runs on the TDC core kernels
in the inference engine (:mod:`tensorconv.engine.tucker`).  Turning a model's
convolutions into this format is :mod:`tensorconv.compress.tucker`.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_int, is_int
from tensorconv.decomp import tucker as td
from tensorconv.nn.layers import Conv2d
from tensorconv.nn.module import Module


class TuckerConv2d(Module):
    """Tucker-format convolution with ranks (D1, D2).

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size : int or (int, int)
    ranks : (D1, D2)
        Input and output channels of the core convolution.
    stride, padding : as :class:`Conv2d`
    bias : bool
    rng : numpy Generator, optional
        For the random initialisation (training a Tucker model from scratch).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, ranks, stride=1,
                 padding=0, bias: bool = False, rng=None):
        super().__init__()
        if not isinstance(ranks, (tuple, list)) or len(ranks) != 2 or not all(map(is_int, ranks)):
            raise TypeError(f"ranks must be a pair of ints (D1, D2), got {ranks!r}")
        in_channels = check_int(in_channels, "in_channels", minimum=1)
        out_channels = check_int(out_channels, "out_channels", minimum=1)
        d1, d2 = (int(r) for r in ranks)
        if not (1 <= d1 <= in_channels and 1 <= d2 <= out_channels):
            raise ValueError(f"ranks (D1, D2) = {(d1, d2)} must lie in 1..{in_channels} and "
                             f"1..{out_channels}")
        self.first = Conv2d(in_channels, d1, 1, bias=False, rng=rng)
        self.core = Conv2d(d1, d2, kernel_size, stride, padding, bias=False, rng=rng)
        self.last = Conv2d(d2, out_channels, 1, bias=bias, rng=rng)
        self.in_channels, self.out_channels, self.ranks = in_channels, out_channels, (d1, d2)
        self.kernel_size, self.stride, self.padding = self.core.kernel_size, stride, padding
        self.macs = 0

    def forward(self, x):
        y = self.last(self.core(self.first(x)))
        self.macs = self.first.macs + self.core.macs + self.last.macs
        return y

    def num_macs(self) -> int:
        return self.macs

    @classmethod
    def from_conv(cls, conv: Conv2d, ranks, *, method: str = "hooi") -> "TuckerConv2d":
        """Decompose a trained ``Conv2d`` (HOOI or truncated HOSVD) into a ``TuckerConv2d``."""
        if conv.groups != 1 or conv.dilation not in (1, (1, 1)):
            raise ValueError("only dense, undilated convolutions have a Tucker format here")
        w = conv.weight.data
        if method == "hooi":
            f = td.partial_tucker(w.astype(np.float64) if backend.array_module(w) is np else w,
                                  ranks)
        elif method == "hosvd":
            f = td.hosvd(w, ranks)
        else:
            raise ValueError(f"method must be 'hooi' or 'hosvd', got {method!r}")
        layer = cls(conv.in_channels, conv.out_channels, conv.kernel_size, ranks, conv.stride,
                    conv.padding, bias=conv.bias is not None)
        xp = backend.array_module(w)
        dt = w.dtype
        layer.first.weight.data = xp.ascontiguousarray(f.u_in.T[:, :, None, None].astype(dt))
        layer.core.weight.data = xp.ascontiguousarray(f.core.astype(dt))
        layer.last.weight.data = xp.ascontiguousarray(f.u_out[:, :, None, None].astype(dt))
        if conv.bias is not None:
            layer.last.bias.data = conv.bias.data.copy()
        return layer

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"ranks={self.ranks}, stride={self.stride}, padding={self.padding}")
