"""CP-decomposed convolution layers: ``CPConv2d`` and ``cpize``.

``CPConv2d`` runs the paper's sequence (Reustle et al., eq. 7) as four small
convolutions: a 1x1 contraction C -> R with S, a (kh x 1) per-rank
convolution with H, a (1 x kw) per-rank convolution with W (the partial outer
products over R make them depthwise), and a 1x1 contraction R -> N with T.
Stride and padding split between the two spatial stages, which gives exactly
the strided, padded convolution with the reconstructed kernel.  It trains
through the autograd; at inference the engine runs it as one launch of the
paper's fused kernel (:func:`tensorconv.ops.cp.cp_conv2d`).
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import pair
from tensorconv.decomp import cp as cpd
from tensorconv.nn.layers import Conv2d
from tensorconv.nn.module import Module


class CPConv2d(Module):
    """Rank-R CP-format convolution C -> N with a kh x kw filter."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, rank: int, stride=1,
                 padding=0, bias: bool = False, rng=None):
        super().__init__()
        if not isinstance(rank, (int, np.integer)) or rank < 1:
            raise ValueError(f"rank must be a positive int, got {rank!r}")
        kh, kw = pair(kernel_size, "kernel_size", minimum=1)
        (sh, sw), (ph, pw) = pair(stride, "stride", minimum=1), pair(padding, "padding", minimum=0)
        self.contract_in = Conv2d(in_channels, rank, 1, bias=False, rng=rng)
        self.conv_h = Conv2d(rank, rank, (kh, 1), (sh, 1), (ph, 0), groups=rank, bias=False, rng=rng)
        self.conv_w = Conv2d(rank, rank, (1, kw), (1, sw), (0, pw), groups=rank, bias=False, rng=rng)
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
        self.contract_in.weight.data = xp.ascontiguousarray(xp.asarray(f.s).T[:, :, None, None].astype(dt))
        self.conv_h.weight.data = xp.ascontiguousarray(xp.asarray(f.h).T[:, None, :, None].astype(dt))
        self.conv_w.weight.data = xp.ascontiguousarray(xp.asarray(f.w).T[:, None, None, :].astype(dt))
        self.contract_out.weight.data = xp.ascontiguousarray(xp.asarray(f.t)[:, :, None, None].astype(dt))

    @classmethod
    def from_conv(cls, conv: Conv2d, rank: int, *, n_iter_max: int = 200) -> tuple["CPConv2d", float]:
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


def cpize(model, rank: int, *, min_channels: int = 16, decompose: bool = True) -> dict:
    """Replace every dense R x S convolution (>= ``min_channels`` in and out) by a
    rank-``rank`` ``CPConv2d``, in place.

    With ``decompose`` the factors come from CP-ALS on the layer's kernel and the
    result is ``{name: relative reconstruction error}``; without it the new layers keep
    their random initialisation (weights about to be loaded from a checkpoint) and the
    result is ``{name: nan}``.
    """
    from tensorconv.nn.tucker import tucker_candidates

    errors = {}
    modules = dict(model.named_modules())
    for name, conv in tucker_candidates(model, min_channels).items():
        if decompose:
            layer, errors[name] = CPConv2d.from_conv(conv, rank)
        else:
            layer = CPConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, rank,
                             conv.stride, conv.padding, bias=conv.bias is not None)
            errors[name] = float("nan")
        parent_name, _, attr = name.rpartition(".")
        setattr(modules[parent_name + "." if parent_name else ""], attr, layer)
    return errors


# ---- inference: the engine runs a CPConv2d as one fused-kernel launch, the batch norm folded
# into T and the bias, the residual and ReLU in the kernel's epilogue; ranks above the
# kernel's template limit run as the four small convolutions
def _register_engine_planner():
    from tensorconv.nn import engine
    from tensorconv.ops import cp as cpops
    from tensorconv.tuning import cp_tuner

    @engine.register_conv_planner(CPConv2d)
    def plan_cp(m: CPConv2d, plan, x, *, bn=None, relu=False, residual=None):
        if m.rank > cpops.MAX_RANK:
            y = engine.plan_conv(m.contract_in, plan, x)
            y = engine.plan_conv(m.conv_w, plan, engine.plan_conv(m.conv_h, plan, y))
            return engine.plan_conv(m.contract_out, plan, y, bn=bn, relu=relu, residual=residual)
        xp = plan.xp
        f = m.factors()
        t, b = engine.fold_bn(f.t, None if m.contract_out.bias is None else
                              m.contract_out.bias.data, bn)
        s, h, w = (plan.keep(xp.ascontiguousarray(xp.asarray(a, np.float32)))
                   for a in (f.s, f.h, f.w))
        t, b = plan.keep(xp.asarray(t)), (None if b is None else plan.keep(xp.asarray(b)))
        stride = pair(m.stride, "stride", minimum=1)
        padding = pair(m.padding, "padding", minimum=0)
        tile = cp_tuner.known_tile(x, (s, h, w, t), stride, padding)
        kh, kw = m.kernel_size
        oh = (x.shape[2] + 2 * padding[0] - kh) // stride[0] + 1
        ow = (x.shape[3] + 2 * padding[1] - kw) // stride[1] + 1
        out = plan.alloc((x.shape[0], m.out_channels, oh, ow))
        plan.add(lambda: cpops.cp_conv2d(x, s, h, w, t, stride, padding, bias=b,
                                         residual=residual, relu=relu, tile=tile, out=out),
                 f"cp fused R={m.rank} {m.in_channels}->{m.out_channels} on {tuple(x.shape)}")
        return out


_register_engine_planner()
