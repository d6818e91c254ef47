"""The weight gradient's split (``ops.wgrad_splits``): whole waves, the partials' cost,
its limits (CPU only)."""

from __future__ import annotations

import pytest

from tensorconv.ops import wgrad_splits as ws
from tensorconv.ops._launch import cdiv


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_the_pick_is_the_least_estimate_within_its_limits(precision):
    for blocks, resident, rows, steps, outputs in [(5, 132, 128, 2048, 73728),
                                                   (1, 132, 128, 2048, 8192),
                                                   (72, 132, 128, 128, 1179648),
                                                   (5, 264, 64, 8192, 36864), (3, 264, 32, 7, 96)]:
        s = ws.wgrad_splits(blocks, resident, rows, steps, outputs, precision)
        top = max(1, min(ws.MAX_SPLITS, steps // ws.MIN_SLICES))
        assert 1 <= s <= top
        est = [ws.estimate_us(v, blocks, resident, rows, steps, outputs, precision)
               for v in range(1, top + 1)]
        assert est[s - 1] == min(est) and est.index(min(est)) == s - 1


def test_a_split_that_spills_into_another_wave_is_not_taken():
    """Five 128-row tiles, 132 resident blocks: 26 splits (130 blocks, one wave), not 27-52
    (a second wave for a little more depth each); on the H200 26 ran 109.7 µs, 32 179.4."""
    s = ws.wgrad_splits(5, 132, 128, 2048, 128 * 576, "fp32")
    assert s == 26 and 5 * s <= 132
    est = [ws.estimate_us(v, 5, 132, 128, 2048, 128 * 576, "fp32") for v in range(26, 53)]
    assert all(e > est[0] for e in est[1:])


def test_one_tile_over_a_deep_reduction_fills_the_gpu():
    s = ws.wgrad_splits(1, 132, 128, 2048, 128 * 64, "fp32")
    assert 66 <= s <= 132 and cdiv(2048, cdiv(2048, s)) <= 132   # one wave, at least half


def test_short_reductions_and_partials_limit_the_split():
    assert ws.wgrad_splits(3, 132, 128, 7, 1000, "fp32") == 1       # under MIN_SLICES slices
    assert ws.wgrad_splits(1, 132, 128, 10 ** 6, 64, "fp32") <= ws.MAX_SPLITS
    # the same tiles with partials a thousand times larger split fewer ways
    few = ws.wgrad_splits(5, 132, 128, 2048, 73728 * 1000, "fp32")
    assert few < ws.wgrad_splits(5, 132, 128, 2048, 73728, "fp32")


def test_estimates_count_whole_waves_and_splits_as_made():
    one = ws.estimate_us(1, 132, 132, 128, 64, 1000, "fp32")
    assert ws.estimate_us(1, 133, 132, 128, 64, 1000, "fp32") == pytest.approx(2 * one)
    # 3 splits of 4 slices are made as 2 of 2 (none empty): the same estimate
    assert ws.estimate_us(3, 1, 132, 128, 4, 10, "fp32") == ws.estimate_us(2, 1, 132, 128, 4, 10,
                                                                          "fp32")
    assert ws.estimate_us(4, 1, 132, 128, 64, 0, "tf32") < ws.estimate_us(4, 1, 132, 128, 64, 0,
                                                                         "fp32")
