"""The sparse kernels' shapes (``kernels_cu/sparse_conv.cu``): how a dense block's rows
split into the block GEMM's pieces, and the tiled remainder kernel's (``sparse_csr_tiled``)
template tiles, how a tile's thread block covers an output and stages its input (images,
rows, columns, the shared-memory row pitch), and the per-layer tables it walks.  Chosen by
the work and the block limits, not searched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tensorconv import backend
from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import cdiv


def split_rows(rows: int) -> list[tuple[int, int]]:
    """The paper's split of a block's rows (§4.2): ``32 * (rows // 32)`` rows, then the
    rest — halved when more than 16 — as ``(start, stop)`` ranges."""
    head = 32 * (rows // 32)
    parts = [(0, head)] if head else []
    rest = rows - head
    if rest > 16:
        half = head + (rest + 1) // 2
        parts += [(head, half), (half, rows)]
    elif rest:
        parts.append((head, rows))
    return parts


def merged_rows(rows: int) -> list[tuple[int, int]]:
    """The paper's ``32 * (rows // 32)`` rows, then the rest as one piece, not two: each
    piece gathers the block's im2col columns once, and on an H100 that gather costs a
    piece more than its multiply-adds (``docs/notes/sparse_conv.md``: 20 rows in one
    32-row piece 9.0 ms, as two halves on 8-row tiles 22.7 ms)."""
    head = 32 * (rows // 32)
    return ([(0, head)] if head else []) + ([(head, rows)] if rows > head else [])


@dataclass(frozen=True)
class RemainderTile:
    """The tiled remainder kernel's template: ``rb`` rows per thread block (``warps``
    warps of ``rb // warps`` rows each), ``px`` pixels per thread (a tile of ``32 * px``
    pixels), ``ck`` input channels per shared-memory stage."""

    rb: int
    px: int
    ck: int
    warps: int = 4


# At most 64 accumulators a thread; 8-channel stages, and a few of 16 or 32 channels
# (fewer barriers and copy round trips: deep 1x1 layers, whose chunks compute little);
# blocks of 8 or 16 warps, each staged chunk serving more rows.
REMAINDER_TILES = tuple(RemainderTile(rb, px, 8) for rb in (64, 32, 16, 8) for px in (8, 4, 2, 1)
                        if rb * px <= 256) + tuple(
    RemainderTile(rb, px, ck) for rb, px, ck in ((32, 4, 16), (32, 2, 16), (16, 4, 16),
                                                 (64, 1, 32), (32, 2, 32), (16, 4, 32))) + tuple(
    RemainderTile(rb, px, 8, w) for rb, px, w in ((64, 2, 8), (32, 2, 8), (64, 4, 8),
                                                  (128, 2, 16), (64, 2, 16), (128, 1, 16),
                                                  (64, 8, 8), (128, 4, 16)))
_STAGE_BYTES = 24 * 1024         # the most shared memory one of a remainder block's two
                                 # stages holds


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class RemainderGeometry:
    """How the tiled remainder kernel covers an output: ``nb`` images x ``th`` x ``tw``
    pixels per thread block (powers of two, ``32 * px`` in all), the staged input
    ``iht`` rows per channel of which a tile's taps read ``iwt`` columns, the rows
    ``pitch`` floats apart in shared memory, copied ``vec`` floats at a time (4: 16-byte
    copies, the line starting up to 3 columns early at a multiple of 4); ``rstep`` and
    ``cstep`` the input rows and columns between staged ones (the stride where the filter
    is one tap high or wide, which then stages only the pixels it reads; else 1);
    ``phases`` > 1 (the horizontal stride, word copies): each line staged as that many
    runs of ``pitch // phases`` words, input column ``u`` of the line at
    ``(u % phases) * (pitch // phases) + u // phases``, so that a strided tile reads
    consecutive words (a warp's 32 reads on 32 banks, not every other one)."""

    nb: int
    th: int
    tw: int
    iht: int
    iwt: int
    pitch: int
    vec: int = 1
    rstep: int = 1
    cstep: int = 1
    phases: int = 1

    def read_stride(self, geom: ConvGeometry) -> tuple[int, int]:
        """The stride of a tile's reads in the staged lines: the convolution's, or 1 where
        the lines were staged at the stride (a filter one tap high or wide) or by column
        phase."""
        return (geom.stride[0] // self.rstep,
                1 if self.phases > 1 else geom.stride[1] // self.cstep)

    def column_word(self, s):
        """The staged word, in its line, of tap column ``s`` (an int or an int array) of a
        tile's first output column (past the line's ``lead`` columns)."""
        if self.phases == 1:
            return s
        return (s % self.phases) * (self.pitch // self.phases) + s // self.phases

    def threads(self, tile: RemainderTile) -> int:
        return 32 * tile.warps

    def stage_floats(self, tile: RemainderTile) -> int:
        """One stage's floats, rounded up to 16 bytes (the taps' stage follows)."""
        return 4 * cdiv(self.nb * tile.ck * self.iht * self.pitch, 4)

    def smem_bytes(self, tile: RemainderTile) -> int:
        """The input's two stages (:func:`remainder_smem` adds the taps')."""
        return 2 * 4 * self.stage_floats(tile)

    def grid(self, geom: ConvGeometry, tile: RemainderTile) -> tuple[int, int, int]:
        return (cdiv(geom.oh, self.th) * cdiv(geom.ow, self.tw), cdiv(geom.k, tile.rb),
                cdiv(geom.n, self.nb))


def lane_words(pitch: int, tw: int, th: int, stride, rows_per_image: int) -> list[int]:
    """The staged word each lane of a warp reads for one tap (pixel l of the tile:
    column l % tw, row l // tw % th, image l // (tw·th))."""
    sh, sw = stride
    return [((lane // (tw * th)) * rows_per_image + (lane // tw) % th * sh) * pitch
            + lane % tw * sw for lane in range(32)]


def bank_conflicts(pitch: int, tw: int, th: int, stride, rows_per_image: int) -> int:
    """The most distinct words one shared-memory bank serves at once when a warp reads
    one tap (:func:`lane_words`)."""
    words = {}
    for word in lane_words(pitch, tw, th, stride, rows_per_image):
        words.setdefault(word % 32, set()).add(word)
    return max(len(v) for v in words.values())


def tile_shape(geom: ConvGeometry, px: int) -> tuple[int, int, int]:
    """``(nb, th, tw)``: the output's width rounded up to a power of two (at most 64 and
    the tile), then its height, then images, ``32 * px`` pixels in all."""
    pixels = 32 * px
    tw = min(64, _pow2(geom.ow), pixels)
    th = min(_pow2(geom.oh), pixels // tw)
    return pixels // (tw * th), th, tw


def column_phases(geom: ConvGeometry) -> int:
    """The column phases a by-phase staging of ``geom`` uses (:class:`RemainderGeometry`):
    its horizontal stride where that is even and the filter more than one tap wide (an odd
    stride's reads in order already fall on distinct banks), else 1.  Not the default:
    on the H100 its word copies cost more than the bank conflicts they remove (ResNet-18's
    strided layers 1.0-1.9x slower by phase, ``docs/notes/sparse_conv.md``); a tile's
    lines are staged in order unless ``phases`` says otherwise."""
    return geom.stride[1] if geom.stride[1] % 2 == 0 and geom.s > 1 else 1


def remainder_geometry(geom: ConvGeometry, tile: RemainderTile, vec: int | None = None,
                       phases: int = 1) -> RemainderGeometry:
    """The tile of :func:`tile_shape` and its staging: ``vec`` 4 (16-byte copies) where the
    input's rows are a multiple of 4 floats, else 1; ``phases`` (1, or the horizontal
    stride of a filter wider than a tap: :func:`column_phases`) the runs a line is staged
    in (word copies where above 1); the row pitch the least, from the columns a line
    needs up, that spreads a warp's reads over the most banks and keeps a stage within
    :data:`_STAGE_BYTES` (where one does)."""
    vec = (4 if geom.w % 4 == 0 else 1) if vec is None else vec
    if vec not in (1, 4) or vec == 4 and geom.w % 4:
        raise ValueError(f"vec must be 1, or 4 where the input's width is a multiple of 4, "
                         f"got {vec} for width {geom.w}")
    if phases != 1 and (phases != geom.stride[1] or geom.s == 1):
        raise ValueError(f"phases must be 1, or the horizontal stride {geom.stride[1]} for a "
                         f"filter wider than 1 tap, got {phases}")
    nb, th, tw = tile_shape(geom, tile.px)
    rstep = geom.stride[0] if geom.r == 1 else 1
    cstep = geom.stride[1] if geom.s == 1 else 1
    if cstep > 1 or phases > 1:
        vec = 1                    # every other column: no 16-byte runs
    iwt = (tw - 1) * geom.stride[1] // cstep + geom.s
    iht = (th - 1) * geom.stride[0] // rstep + geom.r
    need = vec * cdiv(iwt + 3 if vec == 4 else iwt, vec)
    step = phases * vec
    need = step * cdiv(need, step)
    read = (geom.stride[0] // rstep, 1 if phases > 1 else geom.stride[1] // cstep)
    fits = [p for p in range(need, need + 32 * step, step)
            if 4 * nb * tile.ck * iht * p <= _STAGE_BYTES]
    pitch = min(fits or [need], key=lambda p: (
        bank_conflicts(p, tw, th, read, tile.ck * iht), p))
    return RemainderGeometry(nb, th, tw, iht, iwt, pitch, vec, rstep, cstep, phases)


def remainder_shares(geom: ConvGeometry, tile: RemainderTile, g: RemainderGeometry,
                     sm_count: int = 132, per_sm: int = 1024) -> tuple[int, int]:
    """``(shares, chunks per share)`` of the channel chunks: where the blocks give under a
    quarter of ``per_sm`` threads an SM (deep layers on small maps: few blocks, each
    walking every chunk), blocks share each block's chunks, at least two chunks a share,
    up to ``per_sm`` threads an SM, into partial outputs summed afterwards in a fixed
    order (deterministic).  (H100, ResNet-18's layers: at a quarter or less, 4 shares
    took 17-36 % off; at 496 threads an SM, 2 shares added 30 %.)"""
    chunks = cdiv(geom.c, tile.ck)
    gx, gy, gz = g.grid(geom, tile)
    threads = gx * gy * gz * g.threads(tile)
    if 4 * threads > per_sm * sm_count:
        return 1, chunks
    want = max(1, min(per_sm * sm_count // threads, chunks // 2))
    per_share = cdiv(chunks, want)
    return cdiv(chunks, per_share), per_share


def default_remainder_tile(geom: ConvGeometry) -> RemainderTile:
    """A measured rule (random 8x masks at batch 32, every tile timed on ResNet-18's CIFAR
    and ImageNet shapes by ``experiments/bench_sparse_tiles``, first on the H100, the 8-
    and 16-warp tiles on the H200 and on ResNet-18-8x's trained masks too:
    ``docs/notes/sparse_conv.md``).  Strided: 16 warps of 4 rows, 2 pixels a thread, from
    64 rows (a staged chunk then serves 64 rows; 1.03-1.43x the four-warp tiles);
    fewer rows, 32 rows a block and 2 pixels (16 rows where 32 would leave too few blocks
    and bring in chunk shares that 16 do not); a strided 1x1 filter (a few taps a row
    per chunk) 64 rows, 1 pixel and 32-channel stages.  Stride 1, from 128 rows on a tile
    16 columns wide or narrower (maps of 16 columns or fewer): 16 warps of 8 rows, 4
    pixels (2 on 4 columns): 1.08-1.46x the four-warp tiles.  Otherwise by the tile's
    width: 32 or 64 columns, 8 pixels, or 4 where that covers fewer padded pixels; 16
    columns, 8 where that leaves 512 blocks or more, else 4; 8 columns, 8 from 512 input
    channels (its chunks then split among blocks), else 4; narrower, 4.  4 pixels on a
    tile 8, 32 or 64 columns wide take 32 rows a block.  A tile whose stage would pass
    :data:`_STAGE_BYTES` takes half the pixels.  16 rows a block otherwise, 8 where the
    kernel has fewer than 16."""
    vec = 4 if geom.w % 4 == 0 else 1

    def fitted(rb, px, ck=8, warps=4):    # half the pixels while a stage is too big
        while px > 1:
            tile = RemainderTile(rb, px, ck, warps)
            if 4 * remainder_geometry(geom, tile, vec).stage_floats(tile) <= _STAGE_BYTES:
                break
            px //= 2
        return RemainderTile(rb, px, ck, warps)

    def shared(tile):                     # blocks too few: chunks shared, partials summed
        return remainder_shares(geom, tile, remainder_geometry(geom, tile, vec))[0] > 1

    small = geom.k < 16
    if geom.stride != (1, 1):
        if small:
            return fitted(8, 2)
        if geom.r * geom.s == 1:
            return fitted(64, 1, 32)
        if geom.k >= 64:
            return fitted(64, 2, 8, 16)
        wide, narrow = fitted(32, 2), fitted(16, 2)
        if shared(wide) and not shared(narrow):
            return narrow
        return wide

    def covered(px):
        nb, th, tw = tile_shape(geom, px)
        return cdiv(geom.n, nb) * nb * cdiv(geom.oh, th) * th * cdiv(geom.ow, tw) * tw

    rb = 8 if small else 16
    tw8 = tile_shape(geom, 8)[2]
    if geom.k >= 128 and tw8 <= 16:
        return fitted(128, 4 if tw8 >= 8 else 2, 8, 16)
    if tw8 >= 32:
        px = 8 if covered(8) <= 1.05 * covered(4) else 4
    elif tw8 == 16:
        px = 8 if math.prod(remainder_geometry(geom, RemainderTile(rb, 8, 8)).grid(
            geom, RemainderTile(rb, 8, 8))) >= 512 else 4
    elif tw8 == 8:
        px = 8 if geom.c >= 512 else 4
    else:
        px = 4
    if px == 4 and tw8 in (8, 32, 64) and not small:
        rb = 32
    return fitted(rb, px)


def balanced_rows(counts, rb: int, warps: int = 4) -> np.ndarray:
    """The kernel's row slots: ``(groups * rb,)`` int64, the kernel row each slot of a
    group of ``rb`` rows computes (``-1``: none), so that its ``warps`` warps (``rb //
    warps`` slots each) get about the same number of nonzeros, ``counts`` ``(K,)`` a
    row's.  The warps of a block meet at every channel chunk, so the block runs at its
    busiest warp's pace: trained masks leave rows 40-50 % apart in nonzeros (coefficient
    of variation on ResNet-18-8x), and rows in order leave a block's warps 65-78 % busy.
    Longest first to the least loaded warp with a free slot (ties: the lowest warp),
    deterministic."""
    counts = np.asarray(counts, np.int64)
    k, rw = counts.size, rb // warps
    warps = warps * cdiv(k, rb)
    order = np.argsort(-counts, kind="stable")
    load = np.zeros(warps, np.int64)
    filled = np.zeros(warps, np.int64)
    slots = np.full(warps * rw, -1, np.int64)
    for row in order:
        free = np.flatnonzero(filled < rw)
        w = free[np.argmin(load[free])]
        slots[w * rw + filled[w]] = row
        filled[w] += 1
        load[w] += counts[row]
    return slots


class RemainderTables(NamedTuple):
    """The tiled remainder's per-layer tables (:func:`remainder_tables`)."""

    row_tab: object
    taps: object
    row_of: object
    longest: int


def remainder_tables(weights, tile: RemainderTile, g: RemainderGeometry, xp
                     ) -> RemainderTables:
    """The tiled remainder kernel's tables for ``weights`` (a
    :class:`~tensorconv.ops.sparse_conv.SparseWeights`), made once per tile and staging
    shape.  The rows go to row slots by :func:`balanced_rows` (``row_of`` ``(groups *
    tile.rb,)`` int32, each slot's kernel row or -1); the nonzeros ordered by (group of
    ``tile.rb`` slots, ``tile.ck``-channel chunk, slot), each slot's run padded to an even
    length by a zero weight at offset 0, so the kernel loads two taps at a time: ``taps``
    (slots, 2) float32, each weight and (its int32 bits) its byte offset in a staged chunk
    of ``g``'s staging (``g.iht`` rows ``g.pitch`` floats apart a channel, columns by
    :meth:`RemainderGeometry.column_word`); ``row_tab`` (groups, chunks, rb + 1,
    2) int32, each slot's (start, length) from its segment's start (empty slots: none),
    the last entry the segment's (first, length), all even; ``longest`` the longest
    segment (at least 2)."""
    key = (tile, g.iht, g.pitch, g.phases)
    if key not in weights.staged:
        k, c, r, s = weights.shape
        rb, ck = tile.rb, tile.ck
        indptr = backend.to_host(weights.indptr)
        nnz = int(indptr[-1])
        cols = backend.to_host(weights.indices)[:nnz].astype(np.int64)
        ch, tap_r, tap_s = cols // (r * s), (cols % (r * s)) // s, cols % s
        chunks, groups = cdiv(c, ck), cdiv(k, rb)
        row_of = balanced_rows(np.diff(indptr), rb, tile.warps)
        slot_of = np.empty(k, np.int64)
        slot_of[row_of[row_of >= 0]] = np.flatnonzero(row_of >= 0)
        rows = slot_of[np.repeat(np.arange(k), np.diff(indptr))]    # each nonzero's slot
        chunk = ch // ck
        order = np.lexsort((np.arange(nnz), rows, chunk, rows // rb))
        cells = ((rows // rb) * chunks + chunk) * rb + rows % rb
        counts = np.bincount(cells, minlength=groups * chunks * rb)
        slots = counts + counts % 2                       # each run padded to even
        ends = np.cumsum(slots)
        starts = ends - slots                             # (groups·chunks·rb,) global
        seg_first = starts.reshape(groups, chunks, rb)[..., 0]
        seg_len = ends.reshape(groups, chunks, rb)[..., -1] - seg_first
        row_tab = np.zeros((groups, chunks, rb + 1, 2), np.int64)
        row_tab[..., :rb, 0] = starts.reshape(groups, chunks, rb) - seg_first[..., None]
        row_tab[..., :rb, 1] = slots.reshape(groups, chunks, rb)
        row_tab[..., rb, 0], row_tab[..., rb, 1] = seg_first, seg_len
        ordered_cells = cells[order]
        rank = np.arange(nnz) - np.concatenate([[0], np.cumsum(counts)])[ordered_cells]
        at = starts[ordered_cells] + rank                 # each nonzero's slot
        taps = np.zeros((max(int(ends[-1]) if ends.size else 0, 2), 2), np.float32)
        taps[at, 0] = backend.to_host(weights.data)[:nnz][order]
        offset = 4 * ((ch % ck) * g.iht * g.pitch + tap_r * g.pitch + g.column_word(tap_s))
        taps[at, 1] = offset[order].astype(np.int32).view(np.float32)
        longest = int(seg_len.max()) if seg_len.size else 0
        weights.staged[key] = RemainderTables(
            xp.asarray(row_tab, np.int32), xp.asarray(taps), xp.asarray(row_of, np.int32),
            max(2, longest))
    return weights.staged[key]


def remainder_smem(g: RemainderGeometry, tile: RemainderTile, chunks: int,
                   max_segment: int) -> int:
    """Shared-memory bytes of a tiled remainder block: two input stages, two tap stages
    of ``max_segment`` (weight, offset) slots, the block's row table of every chunk, its
    staging table (an int a staged vector)."""
    items = g.nb * tile.ck * g.iht * g.pitch // g.vec
    return 4 * (2 * g.stage_floats(tile) + 4 * max_segment + 2 * chunks * (tile.rb + 1)
                + items)


class TiledLaunch(NamedTuple):
    """The tiled remainder's launch on one layer: its tile and geometry, the channel
    chunks' ``shares`` (``per_share`` chunks each), its :class:`RemainderTables` and its
    shared-memory bytes."""

    tile: RemainderTile
    g: RemainderGeometry
    shares: int
    per_share: int
    tables: RemainderTables
    smem: int


def tiled_launch(x, weights, geom: ConvGeometry, tile: RemainderTile | None = None,
                 phases: int = 1) -> TiledLaunch:
    """The tiled remainder's launch on ``geom`` for input ``x`` (a device array) and
    ``weights`` (its tables made once per weights and staging shape): ``tile``, default
    :func:`default_remainder_tile`; ``phases`` the staged lines' column phases (1: in
    order; :func:`column_phases`: by phase); 16-byte copies of the input where its rows
    are a multiple of 4 floats and it starts on 16 bytes (and lines are staged in
    order)."""
    if tile is None:
        tile = default_remainder_tile(geom)
    elif tile not in REMAINDER_TILES:
        raise ValueError(f"remainder_tile must be one of {REMAINDER_TILES}, got {tile!r}")
    sm_count = backend.device_facts().sm_count
    vec = 4 if geom.w % 4 == 0 and x.data.ptr % 16 == 0 else 1
    g = remainder_geometry(geom, tile, vec=vec, phases=phases)
    shares, per_share = remainder_shares(geom, tile, g, sm_count)
    tables = remainder_tables(weights, tile, g, backend.array_module(x))
    smem = remainder_smem(g, tile, cdiv(geom.c, tile.ck), tables.longest)
    return TiledLaunch(tile, g, shares, per_share, tables, smem)

