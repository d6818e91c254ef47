"""The sparse kernels' shapes (``kernels_cu/sparse_conv.cu``): how a dense block's rows
split into the block GEMM's pieces, and the tiled remainder kernel's (``sparse_csr_tiled``)
template tiles, how a tile's thread block covers an output and stages its input (images,
rows, columns, the shared-memory row pitch), and the per-layer tables it walks.  Chosen by
the work and the block limits, not searched.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """The tiled remainder kernel's template: ``rb`` rows per thread block, ``px`` pixels
    per thread, ``ck`` input channels per shared-memory stage."""

    rb: int
    px: int
    ck: int


REMAINDER_TILES = (RemainderTile(16, 2, 8), RemainderTile(8, 2, 8), RemainderTile(8, 1, 8),
                   RemainderTile(16, 4, 8), RemainderTile(8, 4, 8))
_STAGE_BYTES = 24 * 1024         # the most shared memory one of a remainder block's two
                                 # stages holds


@dataclass(frozen=True)
class RemainderGeometry:
    """How the tiled remainder kernel covers an output: ``nb`` images x ``th`` x ``tw``
    pixels per thread block, the staged input ``iht`` rows per channel of which a tile's
    taps read ``iwt`` columns, the rows ``pitch`` floats apart in shared memory, copied
    ``vec`` floats at a time (4: 16-byte copies, the line starting up to 3 columns early
    at a multiple of 4)."""

    nb: int
    th: int
    tw: int
    iht: int
    iwt: int
    pitch: int
    vec: int = 1

    def threads(self, tile: RemainderTile) -> int:
        return self.nb * self.th * (self.tw // tile.px)

    def stage_floats(self, tile: RemainderTile) -> int:
        """One stage's floats, rounded up to 16 bytes (the taps' stage follows)."""
        return 4 * cdiv(self.nb * tile.ck * self.iht * self.pitch, 4)

    def smem_bytes(self, tile: RemainderTile) -> int:
        """The input's two stages (:func:`remainder_smem` adds the taps')."""
        return 2 * 4 * self.stage_floats(tile)

    def grid(self, geom: ConvGeometry, tile: RemainderTile) -> tuple[int, int, int]:
        return (cdiv(geom.oh, self.th) * cdiv(geom.ow, self.tw), cdiv(geom.k, tile.rb),
                cdiv(geom.n, self.nb))


def bank_conflicts(pitch: int, lanes: int, th: int, stride, rows_per_image: int,
                   threads: int) -> int:
    """The most distinct words one shared-memory bank serves at once when the first warp
    of a remainder block reads its pixels (thread = (image, output row, lane), its word
    ``(image · rows_per_image + row · sh) · pitch + lane · sw``)."""
    sh, sw = stride
    words = {}
    for tid in range(min(32, threads)):
        tx, ty, img = tid % lanes, (tid // lanes) % th, tid // (lanes * th)
        word = (img * rows_per_image + ty * sh) * pitch + tx * sw
        words.setdefault(word % 32, set()).add(word)
    return max(len(v) for v in words.values())


def remainder_geometry(geom: ConvGeometry, tile: RemainderTile, sm_count: int = 132,
                       min_threads: int = 32, vec: int | None = None) -> RemainderGeometry:
    """Up to 8 threads across an output row (``px`` pixels each), rows and then images
    stacked up to 128 threads, within :data:`_STAGE_BYTES` of staged input a stage; images,
    then rows, taken off a block while that leaves fewer than two blocks per SM and the
    block keeps more than ``min_threads`` threads.  ``vec``: 4 (16-byte copies) where
    the input's rows are a multiple of 4 floats, else 1; the shape of the tile does not
    depend on it.  The row pitch is the least, from the columns a line needs up, that
    spreads a warp's reads over the most banks and still fits."""
    vec = (4 if geom.w % 4 == 0 else 1) if vec is None else vec
    if vec not in (1, 4) or vec == 4 and geom.w % 4:
        raise ValueError(f"vec must be 1, or 4 where the input's width is a multiple of 4, "
                         f"got {vec} for width {geom.w}")
    lanes = min(8, cdiv(geom.ow, tile.px))
    tw = lanes * tile.px
    th = min(geom.oh, max(1, 128 // lanes))
    iwt = (tw - 1) * geom.stride[1] + geom.s
    line = iwt + 6               # room for a 16-byte line's lead and its last vector
    per_image = lambda t: 4 * tile.ck * ((t - 1) * geom.stride[0] + geom.r) * line  # noqa: E731
    while th > 1 and per_image(th) > _STAGE_BYTES:
        th = cdiv(th, 2)
    nb = max(1, min(geom.n, 128 // (lanes * th), _STAGE_BYTES // per_image(th)))

    def blocks(nb, th):
        return cdiv(geom.oh, th) * cdiv(geom.ow, tw) * cdiv(geom.k, tile.rb) * cdiv(geom.n, nb)

    while nb > 1 and nb * lanes * th > min_threads and blocks(nb, th) < 2 * sm_count:
        nb = cdiv(nb, 2)
    while th > 1 and lanes * th > min_threads and blocks(nb, th) < 2 * sm_count:
        th = cdiv(th, 2)
    iht = (th - 1) * geom.stride[0] + geom.r
    threads = nb * th * lanes
    need = iwt + 3 if vec == 4 else iwt
    need = vec * cdiv(need, vec)
    fits = [p for p in range(need, need + 32, vec) if 4 * nb * tile.ck * iht * p <= _STAGE_BYTES]
    pitch = min(fits or [need], key=lambda p: (bank_conflicts(p, lanes, th, geom.stride,
                                                              tile.ck * iht, threads), p))
    return RemainderGeometry(nb, th, tw, iht, iwt, pitch, vec)


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


def default_remainder_tile(geom: ConvGeometry, sm_count: int = 132) -> RemainderTile:
    """By the output's width and the stride (H100, random 8x masks at batch 32, every tile
    timed: ``docs/notes/sparse_conv.md``): stride 2, one pixel a thread; stride 1, 4 pixels
    a thread from 48 columns and between 9 and 15, 2 from 16 to 47, one on 8 columns or
    fewer where that is a power of two (a warp's lanes fill rows), else 2; 16 rows a block,
    8 where the kernel has fewer than 16 or a thread has one pixel."""
    ow = geom.ow
    if geom.stride != (1, 1):
        px = 1
    elif ow >= 48 or 8 < ow < 16:
        px = 4
    elif ow >= 16:
        px = 2
    else:
        px = 1 if ow & (ow - 1) == 0 else 2
    rb = 16 if geom.k >= 16 and px > 1 else 8
    return RemainderTile(rb, px, 8)


def remainder_tables(weights, tile: RemainderTile, iht: int, pitch: int, xp):
    """``(row_tab, taps, max_segment)`` of the tiled remainder kernel for ``weights`` (a
    :class:`~tensorconv.ops.sparse_conv.SparseWeights`), made once per tile and staging
    shape.  The nonzeros ordered by (group of ``tile.rb`` rows, ``tile.ck``-channel chunk,
    row), each row's run padded to an even length by a zero weight at offset 0, so the
    kernel loads two taps at a time: ``taps`` (slots, 2) float32, each weight and (its
    int32 bits) its byte offset in a staged chunk of ``iht`` rows ``pitch`` floats apart a
    channel; ``row_tab`` (groups, chunks, rb + 1, 2) int32, each row's (start, slots) from
    its segment's start (rows past K: empty), the last entry the segment's (first slot,
    slots), all even; ``max_segment`` the longest segment in slots (at least 2)."""
    key = (tile, iht, pitch)
    if key not in weights.staged:
        k, c, r, s = weights.shape
        rb, ck = tile.rb, tile.ck
        indptr = backend.to_host(weights.indptr)
        nnz = int(indptr[-1])
        cols = backend.to_host(weights.indices)[:nnz].astype(np.int64)
        ch, tap_r, tap_s = cols // (r * s), (cols % (r * s)) // s, cols % s
        chunks, groups = cdiv(c, ck), cdiv(k, rb)
        rows = np.repeat(np.arange(k), np.diff(indptr))
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
        offset = 4 * ((ch % ck) * iht * pitch + tap_r * pitch + tap_s)
        taps[at, 1] = offset[order].astype(np.int32).view(np.float32)
        longest = int(seg_len.max()) if seg_len.size else 0
        weights.staged[key] = (xp.asarray(row_tab, np.int32), xp.asarray(taps),
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
