"""Performance-aware re-pruning: an exact knapsack, the paper's benefit model, the budget."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorconv import blocksparse as bs
from tensorconv.compress import reprune as rp


def _brute(costs, benefits, cap):
    best = 0
    for pick in itertools.product([0, 1], repeat=len(costs)):
        pick = np.array(pick, bool)
        if costs[pick].sum() <= cap:
            best = max(best, benefits[pick].sum())
    return best


@pytest.mark.parametrize("trial", range(30))
def test_knapsack_is_exact(rng, trial):
    n = int(rng.integers(1, 12))
    costs = rng.integers(0, 8, n) if trial % 3 else rng.choice([2, 3], n)   # many alike
    benefits = rng.integers(0, 5, n)
    cap = int(rng.integers(0, costs.sum() + 2))
    pick = rp.knapsack(costs, benefits, cap)
    assert costs[pick].sum() <= cap
    assert benefits[pick].sum() == _brute(costs, benefits, cap)


def test_knapsack_scales_to_a_big_layer():
    rng = np.random.default_rng(0)
    costs, benefits = rng.integers(1, 30, 200_000), rng.integers(1, 3, 200_000)
    pick = rp.knapsack(costs, benefits, 50_000)
    assert costs[pick].sum() <= 50_000 and pick.sum() > 0


def _layer(rng):
    """A layer with two blocks (one with an all-zero row) and a remainder with lone weights."""
    shape = (12, 4, 1, 1)
    w = np.zeros(shape, np.float32)
    m = bs.kernel_matrix(w)
    m[0:4, 0:2] = rng.uniform(0.5, 1.0, (4, 2))
    m[3, :2] = 0                                      # a block row of zeros
    m[5:9, 2:4] = rng.uniform(0.5, 1.0, (4, 2))
    m[10, 0] = 0.05                                   # lone in its row: benefit C1 + C2
    m[11, 1], m[11, 3] = 0.05, 0.05                   # two in a row: benefit C2 each
    blocks = [(np.arange(4), np.arange(2)), (np.arange(5, 9), np.arange(2, 4))]
    return bs.pack(w, bs.layout_from_pattern(m != 0, shape, blocks))


def test_benefits_follow_the_papers_model(rng):
    items = rp.removal_items(_layer(rng))
    row3 = (items.kind == 0) & (items.block == 0) & (items.index == 3)
    assert items.l2[row3] == 0 and items.benefit[row3] == 1           # C1, no lone column
    csr = items.kind == 2
    assert sorted(items.benefit[csr].tolist()) == [1, 1, 2]           # the lone weight: 2


def test_reprune_takes_free_and_lone_weights_first_within_the_budget(rng):
    packed = _layer(rng)
    total = float((packed.to_matrix().astype(np.float64) ** 2).sum())
    free = rp.reprune(packed, 0.0)
    assert free.rows == 1 and free.weights == 0 and free.removed_l2 == 0   # the zero row only
    small = rp.reprune(packed, 0.0026 / total)        # room for one tiny weight
    assert small.weights == 1 and small.packed.to_matrix()[10, 0] == 0    # the lone one
    for b3 in (0.05, 0.2, 0.5, 1.0):
        r = rp.reprune(packed, b3)
        assert r.removed_l2 <= b3 + 1e-3 / total
        lay = r.packed.layout
        assert lay.mask()[np.ix_(*lay.blocks[0])].all() if lay.blocks else True
        kept = r.packed.to_matrix()
        assert np.all((kept == 0) | (kept == packed.to_matrix()))    # nothing else changed


def test_layout_work_counts_rows_written_and_rows_read(rng):
    lay = _layer(rng).layout
    # blocks: 4 rows + 2 columns and 4 + 2; remainder: rows 10 and 11, three weights
    assert rp.layout_work(lay) == 12 + 2 + 3
    assert rp.layout_work(lay, c1=2, c2=0) == 2 * (8 + 2)


@pytest.mark.parametrize("b3", [0.0, 0.001, 0.05, 0.2, 0.6, 1.0])
def test_magnitude_removal_takes_the_smallest_weights_within_the_budget(rng, b3):
    shape = (24, 6, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    m = bs.kernel_matrix(w)
    blocks = [(np.arange(0, 12), np.arange(0, 20)), (np.arange(8, 24), np.arange(30, 54))]
    packed = bs.pack(w, bs.layout_from_pattern(m != 0, shape, blocks))
    total = float((m.astype(np.float64) ** 2).sum())
    r = rp.reprune(packed, b3, method="magnitude")
    got = r.packed.to_matrix()
    gone = (m != 0) & (got == 0)
    assert np.all((got == 0) | (got == m))                           # nothing else changed
    assert r.removed_l2 == pytest.approx((m[gone].astype(np.float64) ** 2).sum() / total)
    assert r.removed_l2 <= b3 + 1e-9
    kept = np.abs(m[(m != 0) & ~gone])
    assert not gone.any() or not kept.size or np.abs(m[gone]).max() <= kept.min()
    assert r.benefit == rp.layout_work(packed.layout) - rp.layout_work(r.packed.layout)
    assert r.weights == int(np.count_nonzero(gone[packed.layout.csr_rows,
                                                  packed.layout.indices]))
    if b3 == 1.0:
        assert not got.any() and not r.packed.layout.blocks


def test_the_knapsack_frees_more_work_than_magnitude_on_a_costly_block_row(rng):
    packed = _layer(rng)                  # tiny lone remainder weights, a zero block row
    total = float((packed.to_matrix().astype(np.float64) ** 2).sum())
    budget = 0.0051 / total               # two of the three tiny weights
    work = rp.layout_work(packed.layout)
    for method in rp.METHODS:
        r = rp.reprune(packed, budget, method=method)
        assert r.removed_l2 <= budget + 1e-3 / total
    knap = work - rp.layout_work(rp.reprune(packed, budget).packed.layout)
    mag = work - rp.layout_work(rp.reprune(packed, budget, method="magnitude").packed.layout)
    assert knap >= mag


def test_reprune_refuses_bad_arguments(rng):
    with pytest.raises(ValueError, match="method must be one of"):
        rp.reprune(_layer(rng), 0.1, method="greedy")
    with pytest.raises(ValueError, match="b3 must be <= 1"):
        rp.reprune(_layer(rng), 1.5)
    with pytest.raises(TypeError, match="packed must be a BlockSparse"):
        rp.reprune(np.ones((2, 2)), 0.1)
    with pytest.raises(ValueError, match="costs and benefits must be >= 0"):
        rp.knapsack([-1], [1], 3)


def test_dissolving_moves_sparse_blocks_into_the_remainder_and_keeps_every_weight(rng):
    shape = (16, 8, 1, 1)
    m = np.zeros((16, 8), np.float32)
    m[0:8, 0:4] = rng.uniform(0.5, 1.0, (8, 4))               # full: fill 1
    m[8:16, 4:8] = rng.uniform(0.5, 1.0, (8, 4)) * (rng.random((8, 4)) < 0.25)
    m[8, 4] = 0.7                                             # at least one nonzero
    blocks = [(np.arange(8), np.arange(4)), (np.arange(8, 16), np.arange(4, 8))]
    packed = bs.pack(m.reshape(shape), bs.layout_from_pattern(m != 0, shape, blocks))
    sparse_fill = np.count_nonzero(m[8:16, 4:8]) / 32
    assert rp.dissolve_blocks(packed, 0.0) is packed
    kept = rp.dissolve_blocks(packed, sparse_fill + 0.01)
    assert len(kept.layout.blocks) == 1 and np.array_equal(kept.layout.blocks[0][0], np.arange(8))
    assert np.array_equal(kept.to_matrix(), m)                # the same weights, stored once
    assert kept.layout.indices.size == np.count_nonzero(m[8:16, 4:8])
    assert not kept.layout.mask()[8:16, 4:8][m[8:16, 4:8] == 0].any()   # zeros not trainable
    assert len(rp.dissolve_blocks(packed, 1.0).layout.blocks) == 1     # the full one stays
    with pytest.raises(ValueError, match="min_fill"):
        rp.dissolve_blocks(packed, 1.5)
    # re-pruning after dissolving: the sparse block's weights are remainder items now
    r = rp.reprune(packed, 0.2, min_fill=0.5)
    assert len(r.packed.layout.blocks) <= 1 and r.removed_l2 <= 0.2 + 1e-3
    assert r.packed.layout.mask().sum() <= packed.layout.mask().sum()


@pytest.mark.parametrize("trial", range(20))
def test_the_greedy_knapsack_is_within_one_item_of_the_optimum(rng, trial):
    n = int(rng.integers(1, 12))
    costs = rng.uniform(0, 5, n) * (rng.random(n) > 0.1)           # some free items
    benefits = rng.integers(0, 4, n)
    cap = float(rng.uniform(0, costs.sum() + 1))
    pick = rp.greedy_knapsack(costs, benefits, cap)
    assert costs[pick].sum() <= cap + 1e-12
    assert pick[(costs == 0) & (benefits > 0)].all()
    best = max(benefits[np.array(p, bool)].sum()
               for p in itertools.product([0, 1], repeat=n)
               if costs[np.array(p, bool)].sum() <= cap)
    assert benefits[pick].sum() >= best - benefits.max()


def test_auto_solves_small_weights_greedily_and_fills_the_budget(rng):
    shape = (64, 32, 3, 3)
    w = (rng.standard_normal(shape) * 0.01 * (rng.random(shape) < 0.125)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape))
    paper = rp.reprune(packed, 0.2, solver="dp")             # every weight costs 1 unit
    auto = rp.reprune(packed, 0.2)
    assert paper.removed_l2 < 0.1 and 0.19 <= auto.removed_l2 <= 0.2 + 1e-9
    assert auto.weights > paper.weights
    big = (w * 100).astype(np.float32)                       # integer costs resolve these
    packed = bs.pack(big, bs.layout_from_pattern(bs.kernel_matrix(big) != 0, shape))
    assert rp.reprune(packed, 0.2).weights == rp.reprune(packed, 0.2, solver="dp").weights
    with pytest.raises(ValueError, match="solver must be one of"):
        rp.reprune(packed, 0.2, solver="exact")
