"""The sparse kernels' shapes (``kernels_cu/sparse_conv.cu``): how a dense block's rows
split into the block GEMM's pieces; for the tiled remainder kernel (``sparse_csr_tiled``),
the measured rule that picks its tile, the channel shares, the rows balanced over its
warps and the per-layer tables it walks (its tiles and staging:
:mod:`tensorconv.ops.sparse_staging`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from tensorconv import backend
from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import cdiv
from tensorconv.ops.sparse_staging import (  # noqa: F401  (re-exported)
    _STAGE_BYTES,
    REMAINDER_TILES,
    ROW_PHASES,
    RemainderGeometry,
    RemainderTile,
    Staging,
    bank_conflicts,
    column_phases,
    lane_words,
    remainder_geometry,
    stagings,
    tile_shape,
)


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
    key = (tile, g.iht, g.pitch, g.phases, g.rphases)
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
        offset = 4 * ((ch % ck) * g.iht * g.pitch + g.row_line(tap_r) * g.pitch
                      + g.column_word(tap_s))
        taps[at, 1] = offset[order].astype(np.int32).view(np.float32)
        longest = int(seg_len.max()) if seg_len.size else 0
        weights.staged[key] = RemainderTables(
            xp.asarray(row_tab, np.int32), xp.asarray(taps), xp.asarray(row_of, np.int32),
            max(2, longest))
    return weights.staged[key]


def remainder_smem(g: RemainderGeometry, tile: RemainderTile, chunks: int,
                   max_segment: int) -> int:
    """Shared-memory bytes of a tiled remainder block: two input stages, two tap stages
    of ``max_segment`` (weight, offset) slots, the block's row table of the ``chunks`` it
    walks (its share's), its staging table (an int a staged vector)."""
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
                 phases: int | None = None, row_phases: bool | None = None,
                 vec: int | None = None) -> TiledLaunch:
    """The tiled remainder's launch on ``geom`` for input ``x`` (a device array) and
    ``weights`` (its tables made once per weights and staging shape): ``tile``, default
    :func:`default_remainder_tile`; ``phases`` the staged lines' column phases (1: in
    order; :func:`column_phases`: by phase; default: by phase where the input is copied a
    word at a time anyway); ``row_phases`` as :func:`remainder_geometry`; 16-byte copies
    of the input where its rows are a multiple of 4 floats and it starts on 16 bytes (and
    lines are staged in column order), unless ``vec`` is 1.

    Staging by phase takes a strided tile's bank conflicts off but needs word copies.  On
    the H200 (ResNet-18-8x's strided 3x3 layers, trained masks, batch 32) where the
    copies could be 16 bytes, by column phase was 0.95-1.0x the time pruned and
    1.09-1.16x re-pruned on 32x32 to 8x8 inputs; where they were words already (a 14x14
    input) it took 23 % off (``docs/notes/sparse_conv.md``)."""
    if tile is None:
        tile = default_remainder_tile(geom)
    elif tile not in REMAINDER_TILES:
        raise ValueError(f"remainder_tile must be one of {REMAINDER_TILES}, got {tile!r}")
    sm_count = backend.device_facts().sm_count
    vec = 4 if geom.w % 4 == 0 and x.data.ptr % 16 == 0 and vec != 1 else 1
    if phases is None:
        phases = column_phases(geom) if vec == 1 else 1
    g = remainder_geometry(geom, tile, vec=vec, phases=phases, row_phases=row_phases)
    shares, per_share = remainder_shares(geom, tile, g, sm_count)
    tables = remainder_tables(weights, tile, g, backend.array_module(x))
    smem = remainder_smem(g, tile, per_share, tables.longest)
    return TiledLaunch(tile, g, shares, per_share, tables, smem)

