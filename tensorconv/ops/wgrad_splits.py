"""How many ways the tensor-core implicit GEMM splits a weight gradient's reduction
(:mod:`tensorconv.ops.igemm_tf32x3`, mode 2).

A weight gradient is a short, wide-reduced GEMM (K x C*R*S outputs, N*OH*OW deep): its
few output tiles fill the GPU only split along the reduction, and each split adds a
partial tile that the reduction kernel reads back.  :func:`wgrad_splits` picks the split
of least estimated time, counting whole waves of resident blocks (a wave's tail costs a
whole wave), each block's 16-deep slices plus a fixed cost, and the partials' traffic.
The constants were fitted to the H200's times of ResNet-18's weight gradients over two
or three splits each (fp32, batch 128), where it ranked the fastest first; on a sweep of
1-256 splits of ResNet-18's and ResNet-20's it then picked splits no one had timed
(26, 14, 7, 5, 52), where the rule before it (about four blocks per SM) took 1.07-1.70x
as long, fp32 and tf32 (but ResNet-18's 512-channel layer at tf32: 3 splits, 3 % slower
than its 4), and came within 6 % of the sweep's best on all but one (ResNet-20's stride-2
32 -> 64 layer at fp32: 11 %; ``docs/notes/igemm_tf32x3.md``).  tf32's slice is about
half as long.
"""

from __future__ import annotations

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
