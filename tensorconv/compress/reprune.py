"""Performance-aware re-pruning (Rumi et al., PACT'20, §5).

After Algorithm 1 has put a pruned layer's nonzeros into dense blocks and a CSR remainder,
some weights cost far more time than they are worth: a block row writes an output row, a
lone remainder weight reads a whole input row.  Re-pruning removes the weights whose removal
frees the most memory traffic while their squared norm stays within ``B3`` times the layer's:

* a dense block can lose only a whole row (benefit ``C1``: one output row not written; plus
  ``C2`` for each block column in which it is the only nonzero: one input row not read) or a
  whole column (``C2``, plus ``C1`` for each block row it is the only nonzero of);
* a remainder weight can go alone (``C2``; plus ``C1`` when it is its row's only weight).

The choice is the 0/1 knapsack of eq. 1: costs ``ceil(1000 w^2)`` summed over an item, the
capacity ``ceil(1000 B3 sum w^2)``, solved exactly by dynamic programming (:func:`knapsack`).
Rows and columns of one block may both be chosen; their common cells then count twice
against the budget, so the removed norm never exceeds it.  After re-pruning every cell of
every block is trainable (:meth:`~tensorconv.blocksparse.Layout.mask`).

Beyond the paper, ``min_fill``: a block whose cells are mostly zeros is first dissolved
into the remainder (:func:`dissolve_blocks`).  The paper's blocks hold most of their cells;
Algorithm 1 on an ADMM-pruned ResNet-18's deep layers returns blocks a sixth full, and
making every cell of those trainable multiplied the retrained layers' weights up to five
times (density 0.12 -> 0.63), each cell then costing its share of a dense GEMM.  And where
the paper's integer costs cannot weigh a layer's small weights, the knapsack is solved
greedily on the true costs (``solver``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorconv.blocksparse import INDEX, BlockSparse, Layout, layout_from_pattern, pack
from tensorconv.checks import check_int, check_real

SCALE = 1000  # the paper's integer scale of squared weights
# "auto" solves by dynamic programming where the integer costs ceil(1000 w^2) add up to
# within this factor of the true ones, else greedily on the true costs: a trained deep
# layer's weights (|w| ~ 0.01) each cost ceil(0.1) = 1 unit, and the budget then counts
# weights instead of weighing their norm (ResNet-18-8x: under a tenth of B3 removed).
ROUNDING = 1.1
SOLVERS = ("auto", "dp", "greedy")


def _knapsack_items(costs, benefits, dtype) -> tuple:
    """Checked ``costs`` and ``benefits`` as ``dtype`` arrays, and the free items (no cost,
    some benefit) every solution takes."""
    costs, benefits = np.asarray(costs, dtype), np.asarray(benefits, dtype)
    if costs.shape != benefits.shape or costs.ndim != 1:
        raise ValueError("costs and benefits must be 1-D arrays of one length")
    if costs.size and (costs.min() < 0 or benefits.min() < 0):
        raise ValueError("costs and benefits must be >= 0")
    return costs, benefits, (costs == 0) & (benefits > 0)


def knapsack(costs, benefits, capacity: int) -> np.ndarray:
    """The 0/1 knapsack: a bool array choosing items of total ``costs`` <= ``capacity`` with
    the largest total ``benefits`` (both non-negative integers).

    Exact dynamic programming over the capacity.  Items alike in (cost, benefit) are
    merged into power-of-two bundles first (the bounded-knapsack split), so thousands of
    single weights cost a few dozen rows of the table; free items are always taken.
    """
    costs, benefits, chosen = _knapsack_items(costs, benefits, np.int64)
    capacity = check_int(capacity, "capacity", minimum=0)
    useful = np.nonzero((costs > 0) & (costs <= capacity) & (benefits > 0))[0]
    if useful.size == 0:
        return chosen
    pairs, inverse = np.unique(np.stack([costs[useful], benefits[useful]], 1), axis=0,
                               return_inverse=True)
    inverse = inverse.reshape(-1)
    bundles = []                                 # (pair index, how many items, cost, benefit)
    for p, (c, b) in enumerate(pairs):
        left, k = int(np.count_nonzero(inverse == p)), 1
        while left > 0:
            take = min(k, left)
            bundles.append((p, take, int(c) * take, int(b) * take))
            left, k = left - take, k * 2
    best = np.zeros(capacity + 1, np.int64)
    taken = []
    for _, _, c, b in bundles:
        if c > capacity:
            taken.append(None)
            continue
        with_it = best[:-c] + b if c else best + b
        better = np.zeros(capacity + 1, bool)
        better[c:] = with_it > best[c:]
        best[c:] = np.where(better[c:], with_it, best[c:])
        taken.append(np.packbits(better))
    count = np.zeros(len(pairs), np.int64)
    room = int(np.argmax(best))
    for (p, take, c, _), bits in zip(reversed(bundles), reversed(taken)):
        if bits is not None and np.unpackbits(bits, count=capacity + 1)[room]:
            count[p] += take
            room -= c
    for p in range(len(pairs)):            # which items of a pair: any count of them
        members = useful[inverse == p]
        chosen[members[:count[p]]] = True
    return chosen


def greedy_knapsack(costs, benefits, capacity: float) -> np.ndarray:
    """The 0/1 knapsack on real ``costs``: items by benefit per unit of cost, best first,
    each taken while it fits (free items always).  Optimal for the fractional problem, so
    within the largest single benefit of the 0/1 optimum: where every item is small against
    the capacity (thousands of weights in a layer's budget) as good as exact, with no
    rounding of the costs."""
    costs, benefits, chosen = _knapsack_items(costs, benefits, np.float64)
    capacity = check_real(capacity, "capacity", low=0.0)
    useful = np.nonzero((costs > 0) & (benefits > 0))[0]
    order = useful[np.argsort(costs[useful] / benefits[useful], kind="stable")]
    room = capacity
    for i in order:         # a prefix in ratio order, then whatever smaller still fits
        if costs[i] <= room:
            chosen[i] = True
            room -= costs[i]
    return chosen


@dataclass(frozen=True)
class Items:
    """The removal candidates of a layer: ``kind`` 0 block row, 1 block column, 2 remainder
    weight; ``block`` (-1 for the remainder) and ``index`` (position in the block's rows or
    columns, or in the remainder's entries); squared-norm ``l2`` and ``benefit``."""

    kind: np.ndarray
    block: np.ndarray
    index: np.ndarray
    l2: np.ndarray
    benefit: np.ndarray


def removal_items(packed: BlockSparse, c1: int = 1, c2: int = 1) -> Items:
    """Every block row, block column and remainder weight of ``packed`` with its cost (sum
    of squares) and benefit (``c1`` per output row, ``c2`` per input row no longer touched)."""
    kind, block, index, l2, benefit = [], [], [], [], []
    for b, v in enumerate(packed.values):
        nz = v != 0
        sq = v.astype(np.float64) ** 2
        lone_in_col = nz & (nz.sum(axis=0, keepdims=True) == 1)
        lone_in_row = nz & (nz.sum(axis=1, keepdims=True) == 1)
        rows, cols = v.shape
        kind += [0] * rows + [1] * cols
        block += [b] * (rows + cols)
        index += list(range(rows)) + list(range(cols))
        l2 += list(sq.sum(axis=1)) + list(sq.sum(axis=0))
        benefit += list(c1 + c2 * lone_in_col.sum(axis=1)) + list(c2 + c1 * lone_in_row.sum(0))
    lay = packed.layout
    per_row = np.diff(lay.indptr)[lay.csr_rows]
    n = lay.indices.size
    kind += [2] * n
    block += [-1] * n
    index += list(range(n))
    l2 += list(packed.data.astype(np.float64) ** 2)
    benefit += list(c2 + c1 * (per_row == 1))
    return Items(np.asarray(kind, np.int8), np.asarray(block, INDEX), np.asarray(index, INDEX),
                 np.asarray(l2, np.float64), np.asarray(benefit, np.int64))


@dataclass(frozen=True)
class Repruned:
    """The re-pruned layer: its ``packed`` weights and their layout, the squared norm
    removed as a share of the layer's (``removed_l2``), the total ``benefit``, and how many
    block rows, block columns and remainder weights went."""

    packed: BlockSparse
    removed_l2: float
    benefit: int
    rows: int
    cols: int
    weights: int


METHODS = ("knapsack", "magnitude")


def dissolve_blocks(packed: BlockSparse, min_fill: float) -> BlockSparse:
    """``packed`` with every block whose nonzeros fill less than ``min_fill`` of its cells
    moved into the remainder (its zeros no longer stored); the other blocks as they were."""
    check_real(min_fill, "min_fill", low=0.0, high=1.0)
    keep = [b for b, v in enumerate(packed.values) if np.count_nonzero(v) >= min_fill * v.size]
    if len(keep) == len(packed.values):
        return packed
    blocks = tuple(packed.layout.blocks[b] for b in keep)
    matrix = packed.to_matrix()
    pattern = matrix != 0
    for rows, cols in blocks:
        pattern[np.ix_(rows, cols)] = False
    return pack(matrix.reshape(packed.shape), layout_from_pattern(pattern, packed.shape, blocks))


def layout_work(layout: Layout, c1: int = 1, c2: int = 1) -> int:
    """The benefit model's cost of running ``layout``: ``c1`` per output row written and
    ``c2`` per input row read, by each block (its rows and columns) and by the remainder
    (each of its rows, each of its weights) — what re-pruning lowers."""
    blocks = sum(c1 * rows.size + c2 * cols.size for rows, cols in layout.blocks)
    remainder_rows = int(np.count_nonzero(np.diff(layout.indptr)))
    return int(blocks + c1 * remainder_rows + c2 * layout.indices.size)


def reprune(packed: BlockSparse, b3: float, *, c1: int = 1, c2: int = 1,
            method: str = "knapsack", min_fill: float = 0.0, solver: str = "auto") -> Repruned:
    """Re-prune a block-sparse layer within ``b3`` of its squared norm (eq. 1).

    Parameters
    ----------
    packed : BlockSparse
        The pruned layer after Algorithm 1.
    b3 : float in [0, 1]
        The budget: removed weights' sum of squares <= ``b3`` times the layer's.
    c1, c2 : int
        Benefit of an output row not written, an input row not read (the paper: 1, 1).
    method : {"knapsack", "magnitude"}
        The paper's knapsack over block rows, block columns and remainder weights, or the
        ablation's baseline: the smallest weights one by one, wherever they are, until the
        budget (a block row or column goes only once all its weights have).
    min_fill : float in [0, 1]
        Blocks filled less than this are dissolved into the remainder first
        (:func:`dissolve_blocks`; 0, the paper: none).
    solver : {"auto", "dp", "greedy"}
        The knapsack's: the paper's dynamic programme on costs ``ceil(1000 w^2)``
        (:func:`knapsack`), :func:`greedy_knapsack` on the true costs, or the programme
        where its integer costs total within :data:`ROUNDING` of the true ones.

    Returns
    -------
    Repruned
        ``benefit`` is the knapsack's objective (``"knapsack"``) or the drop in
        :func:`layout_work` (``"magnitude"``).
    """
    if not isinstance(packed, BlockSparse):
        raise TypeError(f"packed must be a BlockSparse, got {type(packed).__name__}")
    check_real(b3, "b3", low=0.0, high=1.0)
    c1, c2 = check_int(c1, "c1", minimum=0), check_int(c2, "c2", minimum=0)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    packed = dissolve_blocks(packed, min_fill)
    total = float(sum((v.astype(np.float64) ** 2).sum() for v in packed.values)
                  + (packed.data.astype(np.float64) ** 2).sum())
    if method == "magnitude":
        return _by_magnitude(packed, b3 * total, total, c1, c2)
    items = removal_items(packed, c1, c2)
    costs = np.ceil(SCALE * items.l2).astype(np.int64)
    if solver == "auto":
        solver = "dp" if costs.sum() <= ROUNDING * SCALE * items.l2.sum() else "greedy"
    chosen = knapsack(costs, items.benefit, math.ceil(SCALE * b3 * total)) \
        if solver == "dp" else greedy_knapsack(items.l2, items.benefit, b3 * total)
    blocks, values = [], []
    for b, ((rows, cols), v) in enumerate(zip(packed.layout.blocks, packed.values)):
        drop_r = items.index[chosen & (items.kind == 0) & (items.block == b)]
        drop_c = items.index[chosen & (items.kind == 1) & (items.block == b)]
        keep_r = np.setdiff1d(np.arange(rows.size), drop_r)
        keep_c = np.setdiff1d(np.arange(cols.size), drop_c)
        if keep_r.size and keep_c.size:
            blocks.append((rows[keep_r], cols[keep_c]))
            values.append(v[np.ix_(keep_r, keep_c)])
    new, removed = _rebuild(packed, blocks, values, ~chosen[items.kind == 2], total)
    return Repruned(new, removed, int(items.benefit[chosen].sum()),
                    int(np.count_nonzero(chosen & (items.kind == 0))),
                    int(np.count_nonzero(chosen & (items.kind == 1))),
                    int(np.count_nonzero(chosen & (items.kind == 2))))


def _by_magnitude(packed: BlockSparse, budget: float, total: float, c1: int,
                  c2: int) -> Repruned:
    """The smallest nonzero weights, blocks' and remainder's alike, while their squared
    norm stays within ``budget``; emptied block rows and columns dropped."""
    sq = np.concatenate([(v.astype(np.float64) ** 2).ravel() for v in packed.values]
                        + [packed.data.astype(np.float64) ** 2])
    order = np.argsort(np.where(sq > 0, sq, np.inf), kind="stable")
    taken = int(np.searchsorted(np.cumsum(sq[order]), budget, side="right"))
    gone = np.zeros(sq.size, bool)
    gone[order[:taken]] = True
    gone &= sq > 0
    blocks, values, start, rows_out, cols_out = [], [], 0, 0, 0
    for (rows, cols), v in zip(packed.layout.blocks, packed.values):
        kept = np.where(gone[start:start + v.size].reshape(v.shape), 0, v).astype(np.float32)
        start += v.size
        keep_r, keep_c = np.flatnonzero(kept.any(axis=1)), np.flatnonzero(kept.any(axis=0))
        rows_out += rows.size - keep_r.size
        cols_out += cols.size - keep_c.size
        if keep_r.size and keep_c.size:
            blocks.append((rows[keep_r], cols[keep_c]))
            values.append(kept[np.ix_(keep_r, keep_c)])
    keep_w = ~gone[start:]
    new, removed = _rebuild(packed, blocks, values, keep_w, total)
    benefit = layout_work(packed.layout, c1, c2) - layout_work(new.layout, c1, c2)
    return Repruned(new, removed, int(benefit), rows_out, cols_out,
                    int(np.count_nonzero(~keep_w)))


def _rebuild(packed: BlockSparse, blocks: list, values: list, keep_w, total: float):
    """The re-pruned layer of kept ``blocks`` (with their ``values``) and remainder weights
    (``keep_w``), and the share of ``total`` squared norm removed."""
    lay = packed.layout
    rows_of = lay.csr_rows[keep_w]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows_of, minlength=lay.rows))])
    layout = Layout(lay.shape, tuple(blocks), indptr.astype(INDEX), lay.indices[keep_w])
    kernel = np.zeros((lay.rows, lay.cols), np.float32)
    for (rows, cols), v in zip(blocks, values):
        kernel[np.ix_(rows, cols)] += v   # a cell two blocks cover holds 0 in all but one
    kernel[rows_of, lay.indices[keep_w]] = packed.data[keep_w]
    new = pack(kernel.reshape(lay.shape), layout)
    removed = float(((packed.to_matrix().astype(np.float64) - new.to_matrix()) ** 2).sum())
    return new, removed / total if total else 0.0
