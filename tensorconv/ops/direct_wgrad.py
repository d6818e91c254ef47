"""The weight gradient of a thin convolution on the FMA pipes (``kernels_cu/direct_wgrad.cu``).

A 3x3 (or 1x1) layer of a few dozen channels has a weight gradient of a few thousand values
summed over every pixel of the batch.  The implicit GEMM gathers each input value once per
tap and leaves most of a tensor-core tile idle on so few rows; this kernel stages a chunk of
rows of x (with its halo) and of gy in shared memory once (two stages: the next chunk
lands while this one is multiplied) and keeps 4 filters x 2 channels
x R*S sums a thread in registers (at stride 1 along rows a warp walks each row, reusing
the last S - 1 columns' values), in plain fp32 FMAs (exact fp32, deterministic: the
warps' and the splits' sums are added in a fixed order).

It runs as ``ops.conv2d_backward_weight(..., algorithm="direct")`` (``tile`` a
:class:`Tile`, ``splits`` its pixel shares), the default where
:func:`tensorconv.ops.conv_algorithm.choose_algorithm` finds it faster (measured,
``docs/notes/training_speed.md``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops import _igemm
from tensorconv.ops._launch import NULL, cdiv, check_smem, has_tf32_mma
from tensorconv.scratch import workspace

FILE = "direct_wgrad.cu"
Problem = ConvGeometry
THREADS = 256
BK = BC = 16                 # a block's filters and channels (the kernel's dwg::BK, BC)
FILTERS = ((1, 1), (3, 3))   # the filter sizes the kernel is built for
PIXELS = 256                 # output pixels a chunk aims at (a warp takes every 8th column)
BLOCKS_PER_SM = 2            # the default split's target: one wave (122 registers a thread)
_MAX_VALUES = 1 << 31        # int indices inside an image plane and of the flat output


def _odd(v: int) -> int:
    return v | 1


@dataclass(frozen=True)
class Tile:
    """A launch: chunks of ``rows`` output rows of one image, the batch's chunks dealt out
    in ``splits`` runs (each block one run of one 16 x 16 filter x channel tile)."""

    rows: int
    splits: int

    def staged(self, p: Problem) -> tuple[int, int, int, int]:
        """(in_rows, in_w, xplane, gplane): the staged x rows and columns, and the odd
        strides of a staged channel of x and of gy."""
        in_rows = (self.rows - 1) * p.stride[0] + (p.r - 1) * p.dilation[0] + 1
        in_w = (p.ow - 1) * p.stride[1] + (p.s - 1) * p.dilation[1] + 1
        return in_rows, in_w, _odd(in_rows * in_w), _odd(self.rows * p.ow)

    def split(self, p: Problem) -> tuple[int, int]:
        """(chunks a run takes, runs): ``splits`` runs of equal length, none empty."""
        chunks = p.n * cdiv(p.oh, self.rows)
        per = cdiv(chunks, min(self.splits, chunks))
        return per, cdiv(chunks, per)

    def smem_bytes(self, p: Problem) -> int:
        """Two stages of a chunk (one lands while the other is multiplied), or the warps'
        sums where those are larger."""
        _, _, xplane, gplane = self.staged(p)
        return 4 * max(2 * (BC * xplane + BK * gplane), BK * BC * p.r * p.s)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(filter tiles, channel tiles, runs)."""
        return cdiv(p.k, BK), cdiv(p.c, BC), self.split(p)[1]


def supported(p: Problem) -> str | None:
    """Why the kernel cannot compute ``p``'s weight gradient, or None."""
    if p.groups != 1:
        return f"direct weight gradient of a grouped convolution (groups={p.groups})"
    if (p.r, p.s) not in FILTERS:
        return f"the direct weight gradient takes {FILTERS} filters, not {p.r}x{p.s}"
    if max(p.n * p.c * p.h * p.w, p.n * p.k * p.oh * p.ow) >= _MAX_VALUES:
        return "tensors of 2**31 values or more"
    return None


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """About :data:`PIXELS` output pixels a chunk (whole rows, at least one), and runs
    enough for :data:`BLOCKS_PER_SM` blocks an SM over the filter x channel tiles."""
    rows = max(1, min(p.oh, PIXELS // p.ow))
    tiles = cdiv(p.k, BK) * cdiv(p.c, BC)
    return Tile(rows, max(1, cdiv(BLOCKS_PER_SM * facts.sm_count, tiles)))


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """:func:`default_tile` with half and twice its rows and its runs, those that fit."""
    base = default_tile(p, facts)
    tiles = {Tile(rows, splits)
             for rows in (max(1, base.rows // 2), base.rows, min(p.oh, 2 * base.rows))
             for splits in (max(1, base.splits // 2), base.splits, 2 * base.splits)}
    fits = [t for t in tiles
            if t.smem_bytes(p) <= facts.smem_per_block_optin]
    return sorted(fits, key=lambda t: (t != base, t.rows, t.splits))


def check_tile(tile: Tile, p: Problem) -> None:
    """Raise ``ValueError`` naming what is wrong with ``tile`` for ``p``."""
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not a direct_wgrad.Tile")
    if not (1 <= tile.rows <= p.oh) or tile.splits < 1:
        raise ValueError(f"tile {tile} needs 1 <= rows <= OH = {p.oh} and splits >= 1")
    check_smem(tile, tile.smem_bytes(p))


def check_options(p: Problem, mode: int, tile=None, splits=None) -> Tile | None:
    """``ValueError`` unless ``algorithm="direct"`` takes mode ``mode`` of ``p`` with these
    options; returns the tile (``splits`` replacing its runs), or None for the default.
    The forward (mode 0) is ``direct_conv``'s own kernel, which checks its tile."""
    if mode == 1:
        raise ValueError("algorithm='direct' runs the forward and the weight gradient only")
    if mode != 2:
        return None
    if (why := supported(p)) is not None:
        raise ValueError(f"algorithm='direct': {why}")
    _igemm.check_splits(splits)
    if tile is None and splits is None:
        return None
    tile = tile or default_tile(p, backend.device_facts())
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not a direct_wgrad.Tile (the weight gradient's "
                         "direct kernel)")
    tile = dataclasses.replace(tile, splits=int(splits)) if splits is not None else tile
    check_tile(tile, p)
    return tile


def _unit(p: Problem) -> bool:
    """Stride and dilation 1 along rows: the kernel's sliding window applies."""
    return p.stride[1] == p.dilation[1] == 1


def _name(r: int, s: int, unit: bool) -> str:
    return f"conv2d_wgrad_direct<{r}, {s}, {str(unit).lower()}>"


def kernels(p: Problem, tile: Tile | None = None) -> tuple[cuda.KernelRef, ...]:
    """The kernel, and the split reduction where the runs are more than one."""
    tile = tile or default_tile(p, backend.device_facts())
    ref = cuda.kernel_ref(FILE, _name(p.r, p.s, _unit(p)))
    return (ref, _igemm.reduce_ref()) if tile.split(p)[1] > 1 else (ref,)


def instantiations() -> list[str]:
    """Every filter size the kernel is built for, with and without the sliding window."""
    return sorted(_name(r, s, unit) for r, s in FILTERS for unit in (False, True))


@functools.lru_cache(maxsize=1024)
def _config(p: Problem, tile: Tile, device: int):
    """Kernel, grid, integer arguments, shared memory, workspace floats and the split
    reduction of one launch, cached (a training step runs dozens: per call only the
    pointers are new)."""
    del device   # the memo's key: cuda.load reads it
    i32 = np.int32
    per, runs = tile.split(p)
    in_rows, in_w, xplane, gplane = tile.staged(p)
    kernel = cuda.load(kernels(p, tile)[0])
    smem = tile.smem_bytes(p)
    cuda.set_dynamic_smem(kernel, smem)
    ints = tuple(i32(v) for v in (
        p.n, p.c, p.h, p.w, p.k, p.oh, p.ow, *p.stride, *p.padding, *p.dilation, tile.rows,
        cdiv(p.oh, tile.rows), per, in_rows, in_w, xplane, gplane))
    size = p.k * p.c * p.r * p.s
    reduce = (_igemm.reduce_flat_config(runs, size, backend.device_facts().sm_count)
              if runs > 1 else None)
    return kernel, tile.grid(p), ints, smem, runs * size if runs > 1 else 0, reduce


def run(x, gy, out, p: Problem, tile: Tile | None, xp) -> None:
    """``out`` (K, C, R, S) = the weight gradient of ``p`` from checked ``x``, ``gy``, on
    ``tile`` (default :func:`default_tile`)."""
    facts = backend.device_facts()
    if not has_tf32_mma(facts):   # its copies are cp.async
        raise ValueError(f"algorithm='direct' for the weight gradient needs sm_80 or later; "
                         f"{facts.name} is {facts.arch}")
    tile = tile or default_tile(p, facts)
    kernel, grid, ints, smem, floats, reduce = _config(p, tile, xp.cuda.runtime.getDevice())
    partial = workspace(xp, floats) if floats else out
    kernel(grid, (THREADS, 1, 1), (x, gy, partial) + ints, shared_mem=smem)
    if reduce is not None:
        rkernel, rgrid, rints = reduce
        rkernel(rgrid, (256, 1, 1), (partial, NULL, NULL, out) + rints)
