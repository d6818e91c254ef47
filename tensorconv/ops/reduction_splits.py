"""How many ways the tensor-core implicit GEMM (:mod:`tensorconv.ops.igemm_tf32x3`) splits
a reduction that its output tiles alone leave the GPU short of blocks for.

A weight gradient (mode 2) is a short, wide-reduced GEMM (K x C*R*S outputs, N*OH*OW
deep): its few output tiles fill the GPU only split along the reduction, and each split
adds a partial tile that the reduction kernel reads back.  :func:`wgrad_splits` picks the
split of least estimated time, counting whole waves of resident blocks (a wave's tail
costs a whole wave), each block's 16-deep slices plus a fixed cost, and the partials'
traffic.  The constants were fitted to the H200's times of ResNet-18's weight gradients
over two or three splits each (fp32, batch 128), where it ranked the fastest first; on a
sweep of 1-256 splits of ResNet-18's and ResNet-20's it then picked splits no one had
timed (26, 14, 7, 5, 52), where the rule before it (about four blocks per SM) took
1.07-1.70x as long, fp32 and tf32 (but ResNet-18's 512-channel layer at tf32: 3 splits,
3 % slower than its 4), and came within 6 % of the sweep's best on all but one
(ResNet-20's stride-2 32 -> 64 layer at fp32: 11 %; ``docs/notes/igemm_tf32x3.md``).
tf32's slice is about half as long.

A strided data gradient by phase (mode 3) runs one GEMM per phase in one launch, and the
phases differ in taps (4, 2, 2, 1 at 3x3, stride 2; 1, 0, 0, 0 at 1x1), so its blocks
differ in length: whole waves overstate a split's cost there.  :func:`phase_splits`
instead places the blocks in launch order on the earliest free of the resident slots (the
same slice, block and partial costs) and takes the split whose last block ends first.
On the H200 (12 strided layers of ResNet-18, ResNet-20 and ImageNet-shaped ResNet-18,
fp32 and tf32, splits 1-16 timed at the default block height) it named the fastest split,
or one within 3 %, on 23 of 24; the other (ResNet-18's 256 -> 512 3x3 layer at tf32: 2
splits) ran 5 % slower than the best (3).  The rule before it (split until two waves) ran
ResNet-20's stride-2 32 -> 64 layer 1.45-1.60x slower and the batch-32 ImageNet-shaped
256 -> 512 layer 1.22x (``docs/notes/igemm_tf32x3.md``).
"""

from __future__ import annotations

import heapq

from tensorconv.ops._igemm import MAX_SPLITS
from tensorconv.ops._launch import cdiv

SLICE_US = {"fp32": 1.3, "tf32": 0.7}   # one 16-deep slice of a 128-row block
BLOCK_US = 8.0                           # a block's fixed cost: its prologue, epilogue, partial
PARTIAL_US = 1e-6                        # per partial float written and read back
MIN_SLICES = 8                           # the shortest split considered


def estimate_us(splits: int, blocks: int, resident: int, rows: int, steps: int,
                outputs: int, precision: str) -> float:
    """Estimated time of ``blocks`` output tiles of ``rows`` rows split ``splits`` ways over
    ``steps`` 16-deep slices, ``resident`` blocks at a time, ``outputs`` floats per split."""
    per_split = cdiv(steps, splits)
    splits = cdiv(steps, per_split)   # as split_depth makes them: none empty
    waves = cdiv(blocks * splits, resident)
    block = SLICE_US[precision] * rows / 128 * per_split + BLOCK_US
    return waves * block + (PARTIAL_US * splits * outputs if splits > 1 else 0.0)


def wgrad_splits(blocks: int, resident: int, rows: int, steps: int, outputs: int,
                 precision: str) -> int:
    """The split of least :func:`estimate_us`, from 1 to :data:`MAX_SPLITS`, each split
    at least :data:`MIN_SLICES` slices long (ties: the fewest splits).

    Parameters
    ----------
    blocks : int
        Output tiles (column tiles x row tiles x groups).
    resident : int
        Blocks the device runs at once.
    rows : int
        The tiles' rows (16-128).
    steps : int
        16-deep slices of the reduction.
    outputs : int
        Floats of one split's partial result (K x C/groups x R x S).
    precision : str
        ``"fp32"`` (3xTF32) or ``"tf32"``.
    """
    top = max(1, min(MAX_SPLITS, steps // MIN_SLICES))
    return min(range(1, top + 1), key=lambda s: (
        estimate_us(s, blocks, resident, rows, steps, outputs, precision), s))


def phase_estimate_us(splits: int, phases: list[tuple[int, int]], resident: int, rows: int,
                      outputs: int, precision: str) -> float:
    """Estimated time of a launch of ``phases`` ((blocks, 16-deep slices) each, in launch
    order) split ``splits`` ways over the longest phase's slices, ``resident`` blocks at a
    time, each block placed on the earliest free slot; ``outputs`` floats per split."""
    steps = max(s for _, s in phases)
    per_split = cdiv(steps, splits)
    splits = cdiv(steps, per_split)
    slice_us = SLICE_US[precision] * rows / 128
    free = [(0.0, resident)]   # a heap of (time, slots) free from then
    for blocks, phase_steps in phases:
        for split in range(splits):
            depth = max(0, min(per_split, phase_steps - split * per_split))
            cost, left = depth * slice_us + BLOCK_US, blocks
            while left:
                at, slots = heapq.heappop(free)
                take = min(slots, left)
                if slots > take:
                    heapq.heappush(free, (at, slots - take))
                heapq.heappush(free, (at + cost, take))
                left -= take
    return max(at for at, _ in free) + (PARTIAL_US * splits * outputs if splits > 1 else 0.0)


def phase_splits(phases: list[tuple[int, int]], resident: int, rows: int, outputs: int,
                 precision: str, limit: int = MAX_SPLITS) -> int:
    """The split of least :func:`phase_estimate_us` for a phase-split data gradient, from
    1 to ``limit``, each split at least :data:`MIN_SLICES` slices of the longest phase
    (ties: the fewest splits).

    Parameters
    ----------
    phases : list of (int, int)
        Per phase in launch order: its output tiles (column tiles x row tiles x groups)
        and its reduction's 16-deep slices (0 for a phase no tap reaches).
    resident : int
        Blocks the device runs at once.
    rows : int
        The tiles' rows (16-128).
    outputs : int
        Floats of one split's partial result (N x C x H x W: every phase's).
    precision : str
        ``"fp32"`` (3xTF32) or ``"tf32"``.
    limit : int
        The most splits considered.
    """
    steps = max(s for _, s in phases)
    top = max(1, min(limit, MAX_SPLITS, steps // MIN_SLICES))
    return min(range(1, top + 1), key=lambda s: (
        phase_estimate_us(s, phases, resident, rows, outputs, precision), s))
