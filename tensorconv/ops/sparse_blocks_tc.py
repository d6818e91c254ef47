"""The sparse convolution's block table on the tensor cores
(``kernels_cu/sparse_blocks_tc.cu``): its tiles and kernel names.

``sparse_block_table_tc`` takes the same items, slots and arguments as
``sparse_conv.cu``'s ``sparse_block_table`` (the SIMT table) and writes the same results,
to fp32 rounding (3xTF32 products, <= 1e-5 relative), or at cuDNN's TF32 accuracy under
``tensorconv.precision.using("tf32")``.  :mod:`tensorconv.ops.sparse_blocks` builds the
table and launches it; a :class:`Tile` of this module in a
:class:`~tensorconv.ops.sparse_blocks.BlockTable` selects this kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorconv import cuda
from tensorconv.backend import DeviceFacts
from tensorconv.ops._launch import cdiv, has_tf32_mma

FILE = "sparse_blocks_tc.cu"
BN, BK, THREADS, STAGES = 128, 16, 256, 4
ROWS = (16, 32, 64, 128)           # block rows instantiated in sparse_blocks_tc.cu


@dataclass(frozen=True)
class Problem:
    """One table launch: ``items`` (row range x column range) items over ``q`` output
    pixels of all images."""

    items: int
    q: int


@dataclass(frozen=True)
class Tile:
    """``bm`` rows x 128 pixels per thread block (256 threads: 8 warps of ``mma.sync``
    m16n8k8), 16 columns per stage, STAGES stages of shared memory."""

    bm: int

    bn = BN
    bk = BK
    threads = THREADS

    def smem_bytes(self, p: Problem | None = None) -> int:
        """Dynamic shared memory: STAGES slices of A (bm x 20 words) and B (16 x 136)."""
        return 4 * STAGES * (self.bm * (BK + 4) + BK * (BN + 8))

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(pixel tiles, items)."""
        return cdiv(p.q, BN), p.items, 1


TILES = tuple(Tile(bm) for bm in ROWS)


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``, or None (the table's checks cover the rest)."""
    return None if p.items < 65536 else "a block table launches at most 65535 items"


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile, on a device with tf32 ``mma.sync`` (sm_80 and later); else none."""
    return list(TILES) if has_tf32_mma(facts) else []


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """32 rows: a warp pair per 16 rows, as the SIMT table's default."""
    return Tile(32)


def name(t: Tile) -> str:
    return f"sparse_block_table_tc<{t.bm}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernel a table on ``tile`` runs (its slots' reduction is sparse_conv.cu's)."""
    return (cuda.kernel_ref(FILE, name(tile)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every block height."""
    return sorted(name(t) for t in TILES)
