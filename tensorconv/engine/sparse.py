"""Planning pruned convolutions (``SparseConv2d``) on the sparse kernels.

The batch norm after the layer folds in as a per-row scale, which keeps every zero, so the
folded kernel keeps the layer's layouts.  Which launch sequence runs is one choice
(:func:`tensorconv.engine.choice.one_launch_or_parts`): the sparse kernels
(:mod:`tensorconv.ops.sparse_conv`) on each of the layer's layouts (Algorithm 1 at each
threshold t2, the paper's "run all reorganisations and keep the fastest") against the
dense convolution of the folded kernel (:mod:`tensorconv.engine.dense`), for a layer
pruned too little to gain.  Untuned and unstored, the sparse kernels run on the layer's
first layout.  The key holds every layout's digest: the sizes alone do not say how a
pruned layer runs.
"""

from __future__ import annotations

import functools

from tensorconv import backend
from tensorconv.blocksparse import pack
from tensorconv.checks import conv_geometry
from tensorconv.engine.choice import plan_one_launch_or_parts
from tensorconv.engine.dense import DENSE_FILES, plan_folded_conv2d
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.plan import Plan, Step
from tensorconv.nn.sparse import SparseConv2d
from tensorconv.ops import sparse_conv

SPARSE_FILES = (sparse_conv.FILE,) + DENSE_FILES


def plan_sparse_conv2d(m: SparseConv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    bias = None if m.bias is None else m.bias.data
    w, b = fold_bn(m.packed.to_kernel(), bias, bn)
    wd = plan.keep(plan.xp.asarray(w))
    bd = None if b is None else plan.keep(plan.xp.asarray(b))
    geom = conv_geometry(tuple(x.shape), m.packed.shape, m.stride, m.padding)
    dense = functools.partial(plan_folded_conv2d, m, x=x, w=wd, b=bd, relu=relu,
                              residual=residual)
    if sparse_conv.supported(geom) is not None:
        return dense(plan=plan)
    folded = [pack(w, v.layout) for v in m.variants]   # the same zeros: one scale per row
    facts = backend.device_facts()
    pieces = [sparse_conv.default_pieces(v, geom, facts) for v in folded]
    out = plan.alloc(geom.output_shape)

    @functools.cache
    def launch(i: int) -> Step:
        weights = plan.keep(sparse_conv.pack_weights(folded[i], (geom.h, geom.w), plan.xp))
        lay = folded[i].layout
        return Step(lambda: sparse_conv.run(x, weights, out, geom, pieces[i],
                                            (bd, residual, bool(relu))),
                    f"sparse conv {lay.shape} on {tuple(x.shape)}: {len(lay.blocks)} blocks, "
                    f"{lay.indices.size} in the remainder",
                    sparse_conv.layer_kernels(pieces[i], geom))

    digests = ",".join(v.layout.digest() for v in folded)
    return plan_one_launch_or_parts(
        plan, "sparse_conv", SPARSE_FILES, f"{geom}|res{residual is not None}|{digests}",
        launch=launch, out=out, plan_parts=lambda q: dense(plan=q),
        tiles=lambda: list(range(len(folded))), decode=int, encode=int, default=0,
        allowed=range(len(folded)),
        candidate_kernels=lambda: [k for p in pieces
                                   for k in sparse_conv.layer_kernels(p, geom)])
