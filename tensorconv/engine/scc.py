"""Planning sliding-channel convolutions and depthwise-separable blocks.

An ``SCCConv2d`` (BN folded: a per-filter scale of its U weights) runs on the SCC forward
kernel with bias and ReLU fused, or as its dense-masked 1x1 weights on the dense path —
one choice (:func:`tensorconv.engine.choice.one_launch_or_parts`), the kernel untuned; a
residual after it takes the dense path (the kernel adds none).  A ``Separable`` block is
its depthwise convolution (its BN and ReLU fused) then its pointwise stage with whatever
BN, residual and ReLU follow the block."""

from __future__ import annotations

from tensorconv import backend
from tensorconv.engine.choice import plan_one_launch_or_parts
from tensorconv.engine.dense import DENSE_FILES, plan_folded_conv2d
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.plan import Plan, Step
from tensorconv.engine.registry import plan_conv
from tensorconv.nn.scc import SCCConv2d, Separable
from tensorconv.ops import scc_conv
from tensorconv.reference.scc import dense_weights


def plan_scc_conv(m: SCCConv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    g = m.geom
    ws, bs = fold_bn(backend.to_host(m.weight.data), None if m.bias is None else m.bias.data,
                     bn)
    b = None if bs is None else plan.keep(plan.xp.asarray(bs))

    def dense(q: Plan):
        w = q.keep(q.xp.asarray(dense_weights(ws, g)[:, :, None, None]))
        return plan_folded_conv2d(m, q, x, w, b, relu, residual)

    if residual is not None:
        return dense(plan)
    w = plan.keep(plan.xp.asarray(ws))
    out = plan.alloc((x.shape[0], g.cout, x.shape[2], x.shape[3]))

    def launch(_tile) -> Step:
        return Step(lambda: scc_conv.scc_conv2d(x, w, g, b, relu=bool(relu), out=out),
                    f"scc {g.cin}->{g.cout} cg{g.cg} co{g.co:g} on {tuple(x.shape)}",
                    (scc_conv.forward_kernel(g, x.shape[0] * x.shape[2] * x.shape[3]),))

    return plan_one_launch_or_parts(
        plan, "scc_path", (scc_conv.FILE,) + DENSE_FILES,
        f"{g}|{tuple(x.shape)}|relu{bool(relu)}", launch=launch, out=out, plan_parts=dense,
        tiles=lambda: [0], decode=int, encode=int, default=0, allowed=(0,))


def plan_separable(m: Separable, plan: Plan, x, *, bn=None, relu=False, residual=None):
    y = plan_conv(m.depthwise, plan, x, bn=m.bn, relu=True)
    return plan_conv(m.pointwise, plan, y, bn=bn, relu=relu, residual=residual)
