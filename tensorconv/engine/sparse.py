"""Planning pruned convolutions (``SparseConv2d``): the kernel its dense blocks and CSR
remainder hold, with the batch norm after it folded in (a per-row scale keeps every zero),
on the dense convolution path (:mod:`tensorconv.engine.dense`)."""

from __future__ import annotations

from tensorconv.engine.dense import plan_folded_conv2d
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.plan import Plan
from tensorconv.nn.sparse import SparseConv2d


def plan_sparse_conv2d(m: SparseConv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    w, b = fold_bn(m.packed.to_kernel(), None if m.bias is None else m.bias.data, bn)
    w = plan.keep(plan.xp.asarray(w))
    b = None if b is None else plan.keep(plan.xp.asarray(b))
    return plan_folded_conv2d(m, plan, x, w, b, relu, residual)
