"""The CP-decomposed convolution layer: ``CPConv2d`` (a model's convolutions turn into it
through :func:`tensorconv.compress.cp.cpize`).

``CPConv2d`` runs the paper's sequence (Reustle et al., eq. 7) as four small
convolutions: a 1x1 contraction C -> R with S, a (kh x 1) per-rank
convolution with H, a (1 x kw) per-rank convolution with W (the partial outer
products over R make them depthwise), and a 1x1 contraction R -> N with T.
Stride and padding split between the two spatial stages, which gives exactly
the strided, padded convolution with the reconstructed kernel.  It trains
through the autograd; at inference the engine runs it as one launch of the
paper's fused kernel (:func:`tensorconv.ops.cp_conv2d`, :mod:`tensorconv.engine.cp`).
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_int, pair
from tensorconv.decomp import cp as cpd
from tensorconv.nn.layers import Conv2d
from tensorconv.nn.module import Module


class CPConv2d(Module):
    """Rank-R CP-format convolution C -> N with a kh x kw filter."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, rank: int, stride=1,
                 padding=0, bias: bool = False, rng=None):
        super().__init__()
        rank = check_int(rank, "rank", minimum=1)
        kh, kw = pair(kernel_size, "kernel_size", minimum=1)
        (sh, sw), (ph, pw) = pair(stride, "stride", minimum=1), pair(padding, "padding", minimum=0)
        self.contract_in = Conv2d(in_channels, rank, 1, bias=False, rng=rng)
        self.conv_h = Conv2d(rank, rank, (kh, 1), (sh, 1), (ph, 0), groups=rank, bias=False,
                             rng=rng)
        self.conv_w = Conv2d(rank, rank, (1, kw), (1, sw), (0, pw), groups=rank, bias=False,
                             rng=rng)
        self.contract_out = Conv2d(rank, out_channels, 1, bias=bias, rng=rng)
        self.in_channels, self.out_channels, self.rank = in_channels, out_channels, int(rank)
        self.kernel_size, self.stride, self.padding = (kh, kw), stride, padding
        self.macs = 0

    def forward(self, x):
        y = self.contract_out(self.conv_w(self.conv_h(self.contract_in(x))))
        self.macs = sum(m.macs for m in (self.contract_in, self.conv_h, self.conv_w,
                                         self.contract_out))
        return y

    def factors(self) -> cpd.CPFactors:
        """The layer's S, H, W, T (views of its weights)."""
        return cpd.CPFactors(self.contract_in.weight.data[:, :, 0, 0].T,
                             self.conv_h.weight.data[:, 0, :, 0].T,
                             self.conv_w.weight.data[:, 0, 0, :].T,
                             self.contract_out.weight.data[:, :, 0, 0])

    def load_factors(self, f: cpd.CPFactors) -> None:
        """Set the weights from CP factors S (C x R), H (kh x R), W (kw x R), T (N x R)."""
        xp = self.contract_in.weight.xp
        want = {"s": (self.in_channels, self.rank), "h": (self.kernel_size[0], self.rank),
                "w": (self.kernel_size[1], self.rank), "t": (self.out_channels, self.rank)}
        for name, shape in want.items():
            got = tuple(getattr(f, name).shape)
            if got != shape:
                raise ValueError(f"factor {name.upper()} has shape {got}; this layer needs {shape}")
        dt = self.contract_in.weight.dtype
        def weight(a):
            return xp.ascontiguousarray(a.astype(dt))

        self.contract_in.weight.data = weight(xp.asarray(f.s).T[:, :, None, None])
        self.conv_h.weight.data = weight(xp.asarray(f.h).T[:, None, :, None])
        self.conv_w.weight.data = weight(xp.asarray(f.w).T[:, None, None, :])
        self.contract_out.weight.data = weight(xp.asarray(f.t)[:, :, None, None])

    @classmethod
    def from_conv(cls, conv: Conv2d, rank: int, *,
                  n_iter_max: int = 200) -> tuple["CPConv2d", float]:
        """CP-decompose a trained conv; return the layer and the relative reconstruction error."""
        if conv.groups != 1 or conv.dilation not in (1, (1, 1)):
            raise ValueError("only dense, undilated convolutions have a CP format here")
        w = conv.weight.data
        w64 = w.astype(np.float64) if backend.array_module(w) is np else w
        f = cpd.parafac(w64, rank, n_iter_max=n_iter_max)
        layer = cls(conv.in_channels, conv.out_channels, conv.kernel_size, rank, conv.stride,
                    conv.padding, bias=conv.bias is not None)
        if backend.array_module(w) is not np:
            layer.to("gpu")
        layer.load_factors(f)
        if conv.bias is not None:
            layer.contract_out.bias.data = conv.bias.data.copy()
        return layer, cpd.relative_error(w64, f)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"rank={self.rank}, stride={self.stride}, padding={self.padding}")
