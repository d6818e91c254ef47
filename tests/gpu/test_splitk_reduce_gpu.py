"""The split reduction every split-K kernel shares (``conv2d_splitk_reduce``): each of its
three ways of summing (one thread a value; a block's warps a value, one lane or four lanes
a value) against NumPy, outputs poisoned, the same bits on a second run."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.ops import _igemm
from tensorconv.ops._igemm import reduce_flat
from tensorconv.ops._launch import cdiv

pytestmark = pytest.mark.gpu
SMS = 132


def _way(total: int, splits: int) -> str:
    blocks = _igemm.reduce_blocks(total, splits, SMS)
    if splits < _igemm.SHARE_SPLITS:
        return "thread"
    return "four lanes" if blocks > cdiv(total, 32) else "one lane"


@pytest.mark.parametrize("total, splits", [
    (2048, 391), (8, 70), (5, 64), (999, 100), (16384, 100), (300, 20), (4097, 16),
    (5000, 8), (1, 1), (37, 15)])
def test_reduce_sums_every_split_in_a_fixed_order(total, splits, rng):
    cp = pytest.importorskip("cupy")
    partial = cp.asarray(rng.standard_normal((splits, total), dtype=np.float32))
    out = cp.full(total, np.nan, dtype=cp.float32)
    reduce_flat(partial, out, splits, total, SMS)
    want = cp.asnumpy(partial).astype(np.float64).sum(axis=0)
    got = cp.asnumpy(out)
    assert np.isfinite(got).all(), _way(total, splits)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(splits))
    again = cp.full(total, np.nan, dtype=cp.float32)
    reduce_flat(partial, again, splits, total, SMS)
    assert cp.array_equal(out, again)


def test_each_way_is_covered():
    ways = {_way(t, s) for t, s in [(2048, 391), (16384, 100), (5000, 8)]}
    assert ways == {"thread", "one lane", "four lanes"}
