"""The dense blocks' GEMM of the sparse convolution (``kernels_cu/sparse_conv.cu``): its
tiles, and the two ways a layer's blocks launch.

* **Pieces** (the paper, §4.2): each dense block, or a range of its rows, one launch of
  ``sparse_block_gemm`` adding into the output through the block's row list; launches are
  ordered, so blocks sharing rows accumulate without atomics.
* **The block table** (one launch): every block's rows cut into ranges of at most ``bm``
  rows and its columns into ranges of ``span`` columns; each (rows, columns) item is a row
  of thread blocks of ``sparse_block_table`` storing its sums in rows of its own (slots) of
  a scratch buffer, and ``sparse_block_reduce`` adds each output channel's slots in a fixed
  order, writing every output row.  Cutting the columns gives a deep layer at batch 32
  (a few hundred pixels, blocks of thousands of columns) enough thread blocks for the GPU,
  where a piece launches a dozen thread blocks each walking every column; the slots keep
  the sum deterministic.  Where no output channel has two slots (no shared rows, no cut
  columns: layers with many pixels), the items store straight into the output and the
  reduction is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.backend import DeviceFacts
from tensorconv.blocksparse import BlockSparse, Layout
from tensorconv.checks import ConvGeometry, check_choice
from tensorconv.ops import sparse_blocks_tc
from tensorconv.ops._launch import NULL, cdiv, has_tf32_mma, launch, round_up
from tensorconv.ops.sparse_tiles import merged_rows, split_rows
from tensorconv.scratch import workspace

FILE = "sparse_conv.cu"
INT32_MAX = 2 ** 31 - 1


@dataclass(frozen=True)
class Problem:
    """One piece of a dense block: ``rows`` x ``cols`` weights against the ``q`` output
    pixels of all images."""

    rows: int
    cols: int
    q: int


@dataclass(frozen=True)
class Tile:
    """A GEMM launch shape: ``bm`` rows x ``bn`` pixels per thread block, ``bk`` columns per
    stage, each thread ``tm`` x ``tn`` outputs."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def smem_bytes(self, p: Problem) -> int:
        return 4 * self.bk * (self.bm + self.bn)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        return cdiv(p.q, self.bn), cdiv(p.rows, self.bm), 1


TILES = (Tile(8, 128, 16, 1, 4), Tile(16, 128, 16, 2, 4), Tile(32, 128, 16, 4, 4),
         Tile(32, 64, 16, 2, 4), Tile(64, 128, 16, 8, 4), Tile(64, 64, 16, 4, 4),
         Tile(128, 64, 16, 8, 4))
# The block table's SIMT tiles (sparse_block_table instantiations): at most 64 registers
# a thread, so that several thread blocks share an SM and hide the gather's latency.
SIMT_TABLE_TILES = (Tile(32, 128, 16, 4, 4), Tile(32, 64, 16, 2, 4), Tile(16, 128, 16, 2, 4),
                    Tile(64, 128, 16, 8, 4))
# ... and every table tile: those and the tensor-core ones (sparse_blocks_tc.Tile).
TABLE_TILES = SIMT_TABLE_TILES + sparse_blocks_tc.TILES


@dataclass(frozen=True)
class Piece:
    """Rows ``start:stop`` of dense block ``block``, launched on ``tile``."""

    block: int
    start: int
    stop: int
    tile: Tile


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile (each fits any device's shared memory) with no more rows than the piece
    needs, rounded up to a tile height."""
    return [t for t in TILES if t.bm <= max(8, 1 << (p.rows - 1).bit_length())]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The shortest 128-pixel tile holding the piece's rows, 32 rows for a longer piece
    (the 64- and 128-row tiles measured slower per row on an H100)."""
    fitting = [t for t in TILES if t.bn == 128 and t.bm >= min(32, p.rows)]
    return min(fitting, key=lambda t: t.bm)


def paper_tile(rows: int) -> Tile:
    """The paper's tile for a piece of :func:`split_rows`: 32 rows for the head, the
    tallest 8- or 16-row tile no taller than the rest."""
    fitting = [t for t in TILES if t.bn == 128 and t.bm <= min(32, max(8, rows))]
    return max(fitting, key=lambda t: t.bm)


@dataclass(frozen=True, eq=False)
class BlockTable:
    """Every dense block of a layer as one launch on ``tile``: ``items`` ((n, 8) int32 per
    item: offset of its first row's values, the block's column count (the row stride),
    offset of the block's column table, rows (at most ``tile.bm``), first and end column,
    first slot, 0), ``slots`` partial rows in all, each slot's output channel
    (``slot_rows``), and per output channel its slots in order (CSR: ``red_ptr`` (K + 1,),
    ``red_idx`` (slots,)); ``digest``: the layout's.  ``direct`` where no channel has two
    slots: the items then store straight into the output, and no reduction runs."""

    digest: str
    tile: Tile
    span: int
    items: np.ndarray
    slots: int
    slot_rows: np.ndarray
    red_ptr: np.ndarray
    red_idx: np.ndarray

    @property
    def direct(self) -> bool:
        return bool(np.diff(self.red_ptr).max(initial=0) <= 1)

    @property
    def covers_every_row(self) -> bool:
        return bool(np.diff(self.red_ptr).min() >= 1)

    def __len__(self) -> int:
        return len(self.items)

    def scratch_floats(self, q: int) -> int:
        """The scratch buffer the slots take for ``q`` output pixels."""
        return self.slots * q


def default_table_tile(geom: ConvGeometry, facts: DeviceFacts | None = None,
                       layout: Layout | None = None):
    """The tensor-core table (3xTF32, or one tf32 pass under ``precision.using("tf32")``)
    where the device has tf32 ``mma.sync``, on the shortest tile holding the blocks' rows
    (their mean, weighted by columns: where the work is); else the SIMT table's 32 x 128.

    On the trained ResNet-18 layers (batch 32, H100) the tensor-core table ran 1.0-1.5x
    faster than the SIMT one at every t2, and on fig. 6's dense block (64 x 64 x 255 x 255)
    1.5-1.8x from K = 32 up; 16-row tiles won below 24 rows, 64-row ones from 48
    (``docs/notes/sparse_conv.md``).  ``facts`` default: the current device's, where
    there is one."""
    if facts is None and backend.gpu_available():
        facts = backend.device_facts()
    if facts is None or not has_tf32_mma(facts):
        return SIMT_TABLE_TILES[0]
    rows = 32.0
    if layout is not None and layout.blocks:
        sizes = np.array([(r.size, c.size) for r, c in layout.blocks], float)
        rows = float((sizes[:, 0] * sizes[:, 1]).sum() / sizes[:, 1].sum())
    return next((t for t in sparse_blocks_tc.TILES if t.bm >= rows), sparse_blocks_tc.TILES[-1])


def table_span(layout: Layout, geom: ConvGeometry, tile: Tile, sm_count: int,
               waves: int = 8, least: int = 64) -> int:
    """Columns per item: the blocks' (row range x column) work shared by about ``waves``
    thread blocks per SM, at least ``least`` columns (a multiple of ``tile.bk``), so that a
    layer with few pixels still fills the GPU and a wide one stays one item per row range."""
    ranges = sum(cdiv(rows.size, tile.bm) * cols.size for rows, cols in layout.blocks)
    qt = cdiv(geom.n * geom.oh * geom.ow, tile.bn)
    items = max(1, cdiv(waves * sm_count, qt))
    return round_up(max(least, cdiv(ranges, items)), tile.bk)


def block_table(layout: Layout, geom: ConvGeometry, sm_count: int, tile: Tile | None = None,
                span: int | None = None) -> BlockTable:
    """The block table of ``layout``'s blocks on ``geom`` (``tile`` default
    :func:`default_table_tile`, ``span`` default :func:`table_span`)."""
    tile = default_table_tile(geom, layout=layout) if tile is None else tile
    if tile not in TABLE_TILES:
        raise ValueError(f"tile must be one of {TABLE_TILES}, got {tile!r}")
    span = table_span(layout, geom, tile, sm_count) if span is None else int(span)
    if span < 1:
        raise ValueError(f"span must be a positive column count, got {span}")
    items, owners = [], []
    val_off = tab_off = slot = 0
    for rows, cols in layout.blocks:
        for m0 in range(0, rows.size, tile.bm):
            m = min(tile.bm, rows.size - m0)
            for k0 in range(0, cols.size, span):
                items.append((val_off + m0 * cols.size, cols.size, tab_off, m, k0,
                              min(cols.size, k0 + span), slot, 0))
                owners.append(rows[m0:m0 + m])
                slot += m
        val_off += rows.size * cols.size
        tab_off += cols.size
    if val_off > INT32_MAX:
        raise ValueError("the dense blocks hold more than 2**31 - 1 values")
    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    order = np.argsort(owner, kind="stable")          # each channel's slots in item order
    red_ptr = np.zeros(layout.shape[0] + 1, np.int32)
    np.cumsum(np.bincount(owner, minlength=layout.shape[0]), out=red_ptr[1:])
    return BlockTable(layout.digest(), tile, span, np.asarray(items, np.int32).reshape(-1, 8),
                      slot, owner.astype(np.int32), red_ptr, order.astype(np.int32))


SPLITS = ("table", "merged", "paper")


def default_pieces(packed: BlockSparse, geom: ConvGeometry, facts: DeviceFacts,
                   split: str = "table"):
    """How ``packed``'s blocks launch: every block in one :func:`block_table`
    (``split="table"``, the default: on the trained ResNet-18 layers at batch 32 it ran
    from as fast as the pieces to 40x faster, on deep layers whose pieces each launch a
    dozen thread blocks); or a tuple of :class:`Piece`, each block split as
    :func:`merged_rows`, each piece on its :func:`default_tile` (``"merged"``), or as the
    paper's :func:`split_rows` on :func:`paper_tile` (``"paper"``)."""
    check_choice(split, "split", SPLITS)
    if split == "table":
        return block_table(packed.layout, geom, facts.sm_count,
                           default_table_tile(geom, facts, packed.layout))
    q = geom.n * geom.oh * geom.ow
    pieces = []
    for b, (rows, cols) in enumerate(packed.layout.blocks):
        for start, stop in (merged_rows if split == "merged" else split_rows)(rows.size):
            tile = default_tile(Problem(stop - start, cols.size, q), facts) \
                if split == "merged" else paper_tile(stop - start)
            pieces.append(Piece(b, start, stop, tile))
    return tuple(pieces)


def check_pieces(pieces, packed: BlockSparse) -> None:
    """``ValueError`` unless ``pieces`` cover every row of every block exactly once, each
    on a known tile, or are a :class:`BlockTable` of ``packed``'s layout."""
    blocks = packed.layout.blocks
    if isinstance(pieces, BlockTable):
        if pieces.digest != packed.layout.digest():
            raise ValueError("pieces is a BlockTable of another layout")
        return
    covered = [np.zeros(rows.size, int) for rows, _ in blocks]
    for piece in pieces:
        if not isinstance(piece, Piece) or piece.tile not in TILES:
            raise ValueError(f"pieces must be Piece(block, start, stop, tile) on one of "
                             f"{TILES}, got {piece!r}")
        if not 0 <= piece.block < len(blocks) or \
                not 0 <= piece.start < piece.stop <= blocks[piece.block][0].size:
            raise ValueError(f"piece {piece} is outside the blocks")
        covered[piece.block][piece.start:piece.stop] += 1
    if any((c != 1).any() for c in covered):
        raise ValueError("pieces must cover every row of every block exactly once")


def gemm_name(t: Tile) -> str:
    return f"sparse_block_gemm<{t.bm}, {t.bn}, {t.bk}, {t.tm}, {t.tn}>"


def table_name(t: Tile) -> str:
    return f"sparse_block_table<{t.bm}, {t.bn}, {t.bk}, {t.tm}, {t.tn}>"


def table_ref(t) -> cuda.KernelRef:
    """The table kernel of tile ``t``: SIMT (a :class:`Tile`) or tensor-core (a
    :class:`sparse_blocks_tc.Tile`)."""
    if isinstance(t, sparse_blocks_tc.Tile):
        return cuda.kernel_ref(sparse_blocks_tc.FILE, sparse_blocks_tc.name(t))
    return cuda.kernel_ref(FILE, table_name(t))


def table_smem(t) -> int:
    """Dynamic shared memory of a table launch on ``t`` (the SIMT kernel's is static)."""
    return t.smem_bytes() if isinstance(t, sparse_blocks_tc.Tile) else 0


REDUCE = "sparse_block_reduce"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernel a piece on ``tile`` runs."""
    return (cuda.kernel_ref(FILE, gemm_name(tile)),)


def block_kernels(pieces) -> set:
    """The kernels ``pieces`` (a tuple of :class:`Piece` or a :class:`BlockTable`) launch."""
    if isinstance(pieces, BlockTable):
        if not len(pieces):
            return set()
        table = {table_ref(pieces.tile)}
        return table if pieces.direct else table | {cuda.kernel_ref(FILE, REDUCE)}
    return {cuda.kernel_ref(FILE, gemm_name(piece.tile)) for piece in pieces}


def instantiations() -> list[str]:
    """The block GEMM's template instances CI's nvcc build type-checks."""
    return sorted([gemm_name(t) for t in TILES] + [table_name(t) for t in SIMT_TABLE_TILES])


def table_arrays(weights, table: BlockTable, xp) -> tuple:
    """The table's device arrays (every block's values and column table one after another,
    the items, the reduction lists), built once per weights and table."""
    key = ("table", table)     # by identity: the entry keeps the table alive
    if key not in weights.staged:
        flat = [v.ravel() for v in weights.values]
        values = xp.concatenate(flat) if flat else xp.zeros(1, np.float32)
        tabs = xp.concatenate(weights.gathers) if weights.gathers else xp.zeros((1, 4), np.int32)
        dev = lambda a: xp.asarray(a if a.size else np.zeros(1, np.int32))  # noqa: E731
        weights.staged[key] = (table, values, tabs, dev(table.items), dev(table.slot_rows),
                               dev(table.red_ptr), dev(table.red_idx))
    return weights.staged[key][1:]


def launch_blocks(x, weights, out, geom: ConvGeometry, pieces, dims: tuple) -> None:
    """The blocks' launches on checked arguments (``dims``: the kernels' int32 sizes, CHW
    .. Q): each piece added into ``out`` after zeroing it, or the table's launches writing
    every row of ``out`` (through the slots and the reduction, or straight where
    ``direct``, zeroing first the rows no block covers)."""
    i32 = np.int32
    q = geom.n * geom.oh * geom.ow
    if isinstance(pieces, BlockTable):
        if not len(pieces):
            return
        t = pieces.tile
        xp = backend.array_module(out)
        values, tabs, items, slot_rows, red_ptr, red_idx = table_arrays(weights, pieces, xp)
        grid = (cdiv(q, t.bn), len(pieces), 1)
        ref, smem = table_ref(t), table_smem(t)
        if pieces.direct:
            if not pieces.covers_every_row:
                out.fill(0)
            launch(ref, grid, (t.threads,), (x, values, tabs, items, slot_rows, out, *dims),
                   smem)
            return
        partial = workspace(xp, pieces.scratch_floats(q))
        launch(ref, grid, (t.threads,), (x, values, tabs, items, NULL, partial, *dims), smem)
        launch(cuda.kernel_ref(FILE, REDUCE), (cdiv(q, 256), min(geom.k, 65535), 1), (256,),
               (partial, red_ptr, red_idx, out, i32(geom.k), i32(geom.oh * geom.ow), dims[-1]))
        return
    if pieces:
        out.fill(0)
    for piece in pieces:
        t, ncols = piece.tile, weights.cols[piece.block].size
        p = Problem(piece.stop - piece.start, ncols, q)
        values = weights.values[piece.block][piece.start:piece.stop]
        rows = weights.rows[piece.block][piece.start:piece.stop]
        launch(cuda.kernel_ref(FILE, gemm_name(t)), t.grid(p), (t.threads,),
               (x, values, rows, weights.gathers[piece.block], out, i32(p.rows),
                i32(ncols), *dims))

