"""Planning a CP-format layer: one launch of the fused kernel (the paper's Algorithm 2), the
batch norm folded into T and the bias, the residual and ReLU in the kernel's epilogue, on
its tuned tile where one is stored (:mod:`tensorconv.tuning.cp_tuner`); ranks above the
kernel's template limit run as the layer's four small convolutions."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.plan import Plan
from tensorconv.engine.registry import plan_conv
from tensorconv.nn.cp import CPConv2d
from tensorconv.ops import cp_conv


def plan_cp(m: CPConv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    if m.rank > cp_conv.MAX_RANK:
        y = plan_conv(m.contract_in, plan, x)
        y = plan_conv(m.conv_w, plan, plan_conv(m.conv_h, plan, y))
        return plan_conv(m.contract_out, plan, y, bn=bn, relu=relu, residual=residual)
    xp = plan.xp
    f = m.factors()
    t, b = fold_bn(f.t, None if m.contract_out.bias is None else m.contract_out.bias.data, bn)
    s, h, w = (plan.keep(xp.ascontiguousarray(xp.asarray(a, np.float32)))
               for a in (f.s, f.h, f.w))
    t, b = plan.keep(xp.asarray(t)), (None if b is None else plan.keep(xp.asarray(b)))
    factors = (s, h, w, t)
    p = cp_conv.problem(x.shape, factors, m.stride, m.padding)
    tile = cp_conv.tuned_tile(p)
    out = plan.alloc(p.output_shape)
    plan.add(lambda: cp_conv.cp_conv2d(x, *factors, p.stride, p.padding, bias=b,
                                       residual=residual, relu=relu, tile=tile, out=out),
             f"cp fused R={m.rank} {m.in_channels}->{m.out_channels} on {tuple(x.shape)}",
             cp_conv.kernels(p, tile or cp_conv.default_tile(p, backend.device_facts())))
    return out
