"""Planning sliding-channel convolutions and depthwise-separable blocks: an ``SCCConv2d``
as its dense-masked 1x1 weights (BN folded) on the dense path; a ``Separable`` block as its
depthwise convolution (its BN and ReLU fused) then its pointwise stage with whatever BN,
residual and ReLU follow the block."""

from __future__ import annotations

from tensorconv import backend
from tensorconv.engine.dense import plan_folded_conv2d
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.plan import Plan
from tensorconv.engine.registry import plan_conv
from tensorconv.nn.scc import SCCConv2d, Separable
from tensorconv.reference.scc import dense_weights


def plan_scc_conv(m: SCCConv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    dense = dense_weights(backend.to_host(m.weight.data), m.geom)[:, :, None, None]
    w, b = fold_bn(dense, None if m.bias is None else m.bias.data, bn)
    w = plan.keep(plan.xp.asarray(w))
    b = None if b is None else plan.keep(plan.xp.asarray(b))
    return plan_folded_conv2d(m, plan, x, w, b, relu, residual)


def plan_separable(m: Separable, plan: Plan, x, *, bn=None, relu=False, residual=None):
    y = plan_conv(m.depthwise, plan, x, bn=m.bn, relu=True)
    return plan_conv(m.pointwise, plan, y, bn=bn, relu=relu, residual=residual)
