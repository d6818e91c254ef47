"""Planning pruned convolutions (``SparseConv2d``) on the sparse kernels.

The batch norm after the layer folds in as a per-row scale, which keeps every zero, so the
folded kernel keeps the layer's layouts.  Which launch sequence runs is one choice
(:func:`tensorconv.engine.choice.one_launch_or_parts`): the sparse kernels
(:mod:`tensorconv.ops.sparse_conv`) on each of the layer's layouts (Algorithm 1 at each
threshold t2, and no blocks at all: the paper's "run all reorganisations and keep the
fastest", :func:`tensorconv.compress.sparse.sparsify`) against the
dense convolution of the folded kernel (:mod:`tensorconv.engine.dense`), for a layer
pruned too little to gain.  Untuned and unstored, the sparse kernels run on the layer's
first layout.  Where the remainder's kernel has several tiles or stagings
(:func:`tensorconv.ops.sparse_conv.remainder_choices`), a tuned plan also times each on
the fastest layout.  The key holds every layout's digest: the sizes alone do not say how
a pruned layer runs.
"""

from __future__ import annotations

import functools

from tensorconv import backend, cuda, timing
from tensorconv.blocksparse import pack
from tensorconv.checks import conv_geometry
from tensorconv.engine.choice import plan_one_launch_or_parts
from tensorconv.engine.dense import DENSE_FILES, plan_folded_conv2d
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.plan import Plan, Step
from tensorconv.nn.sparse import SparseConv2d
from tensorconv.ops import (
    sparse_conv,
    sparse_pairs_tc,
    sparse_tc_remainder,
    sparse_unrolled,
    sparse_unrolled_direct,
)

SPARSE_FILES = (sparse_conv.FILE, sparse_tc_remainder.FILE, sparse_unrolled.FILE,
                sparse_unrolled_direct.FILE, sparse_pairs_tc.FILE) + DENSE_FILES

IN_PLAN_FMAS = 24_000
"""A layer whose chosen remainder runs code unrolled for its weights of at least this many
multiply-add instructions (:func:`tensorconv.ops.sparse_conv.body_fmas`) is weighed again
in the whole plan against the rules' tile on the same layout, then against the dense
convolution (its step's ``fallbacks``, :func:`tensorconv.engine.passes.choose_fallbacks`).
In ResNet-18-8x's plans at batch 32 (H200) bodies of 35,600-36,900 took 11-19 µs longer
in the graph than alone, and one lost to the tiled kernel it had tied alone (33.8 against
34.7 µs alone; the plan 22 µs faster with the tiled kernel); bodies up to 18,400 kept
their time."""


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
    choices = sparse_conv.remainder_choices(geom, facts.sm_count)    # (tile, staging)
    out = plan.alloc(geom.output_shape)

    @functools.cache
    def weights(i: int):
        return plan.keep(sparse_conv.pack_weights(folded[i], (geom.h, geom.w), plan.xp))

    @functools.cache
    def launch(choice: tuple[int, int]) -> Step:
        i, j = choice
        lay, (tile, staging) = folded[i].layout, choices[j]
        step = Step(lambda: sparse_conv.run(x, weights(i), out, geom, pieces[i],
                                            (bd, residual, bool(relu)), remainder_tile=tile,
                                            remainder_staging=staging),
                    f"sparse conv {lay.shape} on {tuple(x.shape)}: {len(lay.blocks)} blocks, "
                    f"{lay.indices.size} in the remainder on {names[j]}",
                    sparse_conv.layer_kernels(pieces[i], geom, tile=tile, weights=weights(i),
                                              epilogue=(bd, residual, bool(relu))))
        made[id(step)] = choice
        return step

    made: dict = {}

    def candidates() -> list[tuple[int, int]]:
        """Every layout on the rules' tile and staging; then, where the remainder has
        others, each of them on the fastest layout (timing every pair would multiply
        the two) where it fits (the unrolled kernel's code grows with the nonzeros)."""
        first = [(i, 0) for i in range(len(folded))]
        if len(choices) == 1:
            return first
        best = first[0]
        if len(first) > 1:
            cuda.compile_all([k for c in first for k in launch(c).kernels],
                             desc="compiling the sparse kernels")
            best = min(first,
                       key=lambda c: timing.time_graph(launch(c).run, repeat=10).median_us)
        nnz = folded[best[0]].layout.indices.size
        return first + [(best[0], j) for j in range(1, len(choices))
                        if sparse_conv.fits(geom, choices[j][0], nnz)]

    names = [sparse_conv.choice_name(*c) for c in choices]

    def decode(stored) -> tuple[int, int]:
        i, name = stored
        return int(i), names.index(name)    # ValueError on a tile not timed here: a miss

    digests = ",".join(v.layout.digest() for v in folded)
    y = plan_one_launch_or_parts(
        plan, "sparse_conv", SPARSE_FILES, f"{geom}|res{residual is not None}|{digests}",
        launch=launch, out=out, plan_parts=lambda q: dense(plan=q),
        tiles=candidates, decode=decode, encode=lambda c: [c[0], names[c[1]]],
        default=(0, 0), allowed={(i, j) for i in range(len(folded)) for j in range(len(choices))},
        candidate_kernels=lambda: [k for p in pieces for t, _ in choices
                                   for k in sparse_conv.layer_kernels(p, geom, tile=t)])
    step = plan.steps[-1] if y is out else None
    if step is not None and id(step) in made:
        i, j = made[id(step)]
        if j and sparse_conv.body_fmas(choices[j][0], folded[i].layout.indices.size) \
                >= IN_PLAN_FMAS:
            side = plan.side()
            dense(plan=side, out=out)   # its own choices stored when the layer's were timed
            # the rules' tile (code not tied to the weights), then the dense convolution
            step.fallbacks = (launch((i, 0)),) + tuple(side.steps)
    return y
