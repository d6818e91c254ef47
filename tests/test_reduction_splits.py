"""The implicit GEMM's reduction splits (``ops.reduction_splits``): the weight gradient's
whole waves, the phase-split data gradient's blocks placed in launch order, the partials'
cost, the limits (CPU only)."""

from __future__ import annotations

import pytest

from tensorconv.ops import reduction_splits as ws
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


# ResNet-18's stride-2 256 -> 512 3x3 data gradient at batch 128 by phase (taps 4, 2, 2, 1:
# 128, 64, 64, 32 slices; 32 blocks of 128 rows each) and ResNet-20's 32 -> 64 (64 blocks
# of 32 rows, 16, 8, 8, 4 slices; two resident an SM).
R18_PHASES = [(32, 128), (32, 64), (32, 64), (32, 32)]
R20_PHASES = [(64, 16), (64, 8), (64, 8), (64, 4)]


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("phases, resident, rows, outputs, limit", [
    (R18_PHASES, 132, 128, 2 ** 21, 64), (R20_PHASES, 264, 32, 2 ** 20, 64),
    ([(26, 32), (26, 0), (26, 0), (26, 0)], 132, 128, 1605632, 64),
    ([(2, 512)], 132, 128, 4096, 5), ([(1, 3)], 132, 16, 10, 64)])
def test_the_phase_pick_is_the_least_estimate_within_its_limits(phases, resident, rows,
                                                                outputs, limit, precision):
    s = ws.phase_splits(phases, resident, rows, outputs, precision, limit)
    top = max(1, min(limit, max(st for _, st in phases) // ws.MIN_SLICES))
    assert 1 <= s <= top
    est = [ws.phase_estimate_us(v, phases, resident, rows, outputs, precision)
           for v in range(1, top + 1)]
    assert est.index(min(est)) == s - 1


def test_a_phase_split_that_fills_a_wave_stays_whole_and_one_short_of_work_splits():
    """Timed on the H200 (docs/notes/igemm_tf32x3.md): ResNet-20's layer ran 25.5 µs whole
    and 37.1 split 3 ways (its 256 blocks nearly fill the 264 slots); ResNet-18's 189.6 µs
    split 3 ways, 203.3 split 2 and slower whole."""
    assert ws.phase_splits(R20_PHASES, 264, 32, 2 ** 20, "fp32") == 1
    assert ws.phase_splits(R18_PHASES, 132, 128, 2 ** 21, "fp32") == 3


def test_phase_blocks_take_the_earliest_free_slot_in_launch_order():
    cost = ws.SLICE_US["fp32"] * 10 + ws.BLOCK_US
    one = ws.phase_estimate_us(1, [(132, 10)], 132, 128, 0, "fp32")
    assert one == pytest.approx(cost)
    assert ws.phase_estimate_us(1, [(133, 10)], 132, 128, 0, "fp32") == pytest.approx(2 * cost)
    # a phase no tap reaches costs its blocks' fixed cost alone
    assert ws.phase_estimate_us(1, [(132, 10), (132, 0)], 132, 128, 0, "fp32") == (
        pytest.approx(cost + ws.BLOCK_US))
    # short blocks after long ones fill the other slots: 66 long, then 132 short
    mixed = ws.phase_estimate_us(1, [(66, 100), (132, 10)], 132, 128, 0, "fp32")
    long = ws.SLICE_US["fp32"] * 100 + ws.BLOCK_US
    assert mixed == pytest.approx(max(long, 2 * cost))
    # a split's partials cost PARTIAL_US a float, and the 16-row blocks' slices an eighth
    two = ws.phase_estimate_us(2, [(1, 16)], 132, 128, 10 ** 6, "fp32")
    assert two == pytest.approx(8 * ws.SLICE_US["fp32"] + ws.BLOCK_US + 2 * ws.PARTIAL_US * 10 ** 6)
    assert ws.phase_estimate_us(1, [(1, 16)], 132, 16, 0, "fp32") == pytest.approx(
        2 * ws.SLICE_US["fp32"] + ws.BLOCK_US)
