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


def test_reprune_refuses_bad_arguments(rng):
    with pytest.raises(ValueError, match="b3 must be <= 1"):
        rp.reprune(_layer(rng), 1.5)
    with pytest.raises(TypeError, match="packed must be a BlockSparse"):
        rp.reprune(np.ones((2, 2)), 0.1)
    with pytest.raises(ValueError, match="costs and benefits must be >= 0"):
        rp.knapsack([-1], [1], 3)
