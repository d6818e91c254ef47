"""Turning a pruned model's convolutions into ``SparseConv2d`` layers — each pruned kernel's
nonzeros reorganised by Algorithm 1 into dense blocks and a CSR remainder (Rumi et al.,
PACT'20, §4) — and the masks of its performance-aware re-pruning (§5)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend
from tensorconv.blocksparse import kernel_matrix, layout_from_pattern, pack
from tensorconv.checks import check_bool, check_int, check_real
from tensorconv.compress.prune import prune_candidates
from tensorconv.compress.reprune import dissolve_blocks, reprune
from tensorconv.compress.tucker import replace_layers
from tensorconv.decomp.blocks import extract_blocks
from tensorconv.nn.sparse import SparseConv2d


@dataclass(frozen=True)
class LayerReport:
    """What :func:`sparsify` did to one layer, for each threshold ``t2`` tried: the share of
    nonzeros in dense blocks, the blocks' fill, how many blocks, Algorithm 1's seconds."""

    density: float
    t2: int
    blocks: int
    in_blocks: float
    fill: float
    seconds: float


def _thresholds(t2) -> tuple:
    values = (t2,) if isinstance(t2, (int, np.integer)) and not isinstance(t2, bool) else t2
    try:
        values = tuple(values)
    except TypeError:
        raise TypeError(f"t2 must be an int or a sequence of ints, got {t2!r}") from None
    if not values:
        raise ValueError("t2 must name at least one threshold")
    for i, v in enumerate(values):
        check_int(v, f"t2[{i}]", minimum=1)
    return tuple(dict.fromkeys(int(v) for v in values))


def sparsify(model, *, blocks: bool = True, t1: int = 8, t2=8, b1: int = 8, b2: int = 8,
             seed: int = 0, min_gain: float = 0.0) -> dict:
    """Replace every prunable convolution of ``model`` (:func:`prune_candidates`) by a
    ``SparseConv2d`` holding its nonzeros, in place; all layers are built before any is
    replaced.  Returns {name: [LayerReport per layout]}.

    ``blocks=False`` keeps every nonzero in the CSR remainder (no partitioner needed);
    otherwise Algorithm 1 (:func:`tensorconv.decomp.blocks.extract_blocks`) with ``t1``,
    ``b1``, ``b2``, ``seed``, ``min_gain`` (0: the paper's loop) and each threshold of
    ``t2`` (an int or a sequence, e.g. the paper's (4, 8, 12, 16)): the layer keeps every
    distinct layout, the first as its ``packed``, and the engine runs the fastest (or the
    dense kernel, if that is faster).  With blocks, the layout with no blocks at all is
    kept too (last, where no threshold gave it already): a reorganisation the paper's
    "run all and keep the fastest" includes in effect, and the fastest on most layers of
    the trained ResNet-18-8x masks (its 512x512 4x4 layer re-pruned: 42.7 µs with no
    blocks, 54.8 at t2 = 16, H200).  The report has a row per threshold only.
    """
    check_bool(blocks, "blocks")
    check_real(min_gain, "min_gain", low=0.0, high=1.0, high_open=True)
    thresholds = _thresholds(t2)
    layers, report = {}, {}
    for name, conv in prune_candidates(model).items():
        w = backend.to_host(conv.weight.data)
        pattern = kernel_matrix(w) != 0
        layouts, report[name] = {}, []
        for t in thresholds if blocks else ():
            found = extract_blocks(pattern, w.shape, t1=t1, t2=t, b1=b1, b2=b2, seed=seed,
                                   min_gain=min_gain)
            layouts.setdefault(found.layout.digest(), found.layout)
            report[name].append(LayerReport(float(pattern.mean()), t, len(found.layout.blocks),
                                            found.in_blocks, found.fill, found.seconds))
        layout = layout_from_pattern(pattern, w.shape)
        layouts.setdefault(layout.digest(), layout)
        if not blocks:
            report[name].append(LayerReport(float(pattern.mean()), 0, 0, 0.0, 0.0, 0.0))
        packed = [pack(w, lay) for lay in layouts.values()]
        bias = None if conv.bias is None else backend.to_host(conv.bias.data)
        layers[name] = SparseConv2d(packed[0], conv.stride, conv.padding, bias,
                                    variants=packed[1:])
        if model.xp is not np:
            layers[name].to("gpu")
    replace_layers(model, layers)
    return report


def reprune_layers(model, b3s, methods=("knapsack",), *, t1: int = 8, t2: int = 8,
                   b1: int = 8, b2: int = 8, seed: int = 0, min_fill: float = 0.0) -> dict:
    """Algorithm 1 once on each pruned convolution of ``model``, then re-pruning
    (:func:`tensorconv.compress.reprune.reprune`, blocks filled under ``min_fill``
    dissolved first) at each budget of ``b3s`` by each of ``methods``.  Returns
    {name: (the layer re-pruning starts from — Algorithm 1's, its blocks filled under
    ``min_fill`` dissolved — {(method, b3): Repruned})}."""
    out = {}
    for name, conv in prune_candidates(model).items():
        w = backend.to_host(conv.weight.data)
        found = extract_blocks(kernel_matrix(w) != 0, w.shape, t1=t1, t2=t2, b1=b1, b2=b2,
                               seed=seed)
        packed = dissolve_blocks(pack(w, found.layout), min_fill)
        out[name] = (packed, {(m, b3): reprune(packed, b3, method=m, min_fill=min_fill)
                              for m in methods for b3 in b3s})
    return out


def reprune_masks(model, b3: float, *, t1: int = 8, t2: int = 8, b1: int = 8, b2: int = 8,
                  seed: int = 0, min_fill: float = 0.0,
                  layers: dict | None = None) -> tuple[dict, dict]:
    """Performance-aware re-pruning of every pruned convolution of ``model`` (§5): Algorithm 1
    on its nonzeros, then the knapsack within ``b3`` of its squared norm (``layers``: a
    :func:`reprune_layers` result holding ``("knapsack", b3)``, instead of running them
    again).  Returns the masks to retrain under — every cell of every remaining block and
    the remainder's nonzeros, {name: bool (K, C, R, S)} — and {name: Repruned}."""
    if layers is None:
        layers = reprune_layers(model, (b3,), t1=t1, t2=t2, b1=b1, b2=b2, seed=seed,
                                min_fill=min_fill)
    masks, report = {}, {}
    for name, (packed, runs) in layers.items():
        report[name] = runs[("knapsack", b3)]
        masks[name] = report[name].packed.layout.mask().reshape(packed.layout.shape)
    return masks, report
