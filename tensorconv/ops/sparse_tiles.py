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
    pixels per thread block, the staged input ``iht`` x ``iwt`` per channel, its rows
    ``pitch`` floats apart in shared memory."""

    nb: int
    th: int
    tw: int
    iht: int
    iwt: int
    pitch: int

    def threads(self, tile: RemainderTile) -> int:
        return self.nb * self.th * (self.tw // tile.px)

    def stage_floats(self, tile: RemainderTile) -> int:
        return self.nb * tile.ck * self.iht * self.pitch

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
                       min_threads: int = 32) -> RemainderGeometry:
    """Up to 8 threads across an output row (``px`` pixels each), rows and then images
    stacked up to 128 threads, within :data:`_STAGE_BYTES` of staged input a stage; images,
    then rows, taken off a block while that leaves fewer than two blocks per SM and the
    block keeps more than ``min_threads`` threads.  The row
    pitch is the least, from ``iwt`` up, that spreads a warp's reads over the most banks
    and still fits."""
    lanes = min(8, cdiv(geom.ow, tile.px))
    tw = lanes * tile.px
    th = min(geom.oh, max(1, 128 // lanes))
    iwt = (tw - 1) * geom.stride[1] + geom.s
    per_image = lambda t: 4 * tile.ck * ((t - 1) * geom.stride[0] + geom.r) * iwt  # noqa: E731
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
    fits = [p for p in range(iwt, iwt + 32) if 4 * nb * tile.ck * iht * p <= _STAGE_BYTES]
    pitch = min(fits or [iwt], key=lambda p: (bank_conflicts(p, lanes, th, geom.stride,
                                                             tile.ck * iht, threads), p))
    return RemainderGeometry(nb, th, tw, iht, iwt, pitch)


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
    """By the output's width: 16 rows x 2 pixels a thread from 16 columns up, 8 x 2 from
    8, 8 x 1 below (H100, ResNet-18's layers at batch 32 with every tile forced:
    ``docs/notes/sparse_conv.md``); 8 rows where the kernel has fewer than 16."""
    rb = 16 if geom.ow >= 16 and geom.k >= 16 else 8
    return RemainderTile(rb, 2 if geom.ow >= 8 else 1, 8)


def remainder_tables(weights, tile: RemainderTile, iht: int, pitch: int, xp):
    """``(row_ptr, taps, max_segment)`` of the tiled remainder kernel for ``weights`` (a
    :class:`~tensorconv.ops.sparse_conv.SparseWeights`), made once per tile and staging
    shape.  The nonzeros ordered by (group of ``tile.rb`` rows, ``tile.ck``-channel chunk,
    row), so a block's nonzeros of a chunk are one segment it stages whole: ``taps``
    (nnz, 2) float32, each weight and (its int32 bits) its offset in a staged channel of
    ``iht`` rows ``pitch`` floats apart; ``row_ptr`` (groups, chunks, rb + 1) int32, where
    each row of a group starts in ``taps`` in each chunk, the last entry the segment's end
    (rows past K: empty); ``max_segment`` the longest segment (at least 1)."""
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
        starts = np.concatenate([[0], np.cumsum(counts)])
        row_ptr = np.empty((groups, chunks, rb + 1), np.int64)
        row_ptr[..., :rb] = starts[:-1].reshape(groups, chunks, rb)
        row_ptr[..., rb] = starts[rb::rb].reshape(groups, chunks)
        taps = np.zeros((max(nnz, 1), 2), np.float32)
        taps[:nnz, 0] = backend.to_host(weights.data)[:nnz][order]
        offset = (ch % ck) * iht * pitch + tap_r * pitch + tap_s
        taps[:nnz, 1] = offset[order].astype(np.int32).view(np.float32)
        longest = int(np.max(row_ptr[..., rb] - row_ptr[..., 0]))
        weights.staged[key] = (xp.asarray(row_ptr, np.int32), xp.asarray(taps),
                               max(1, longest))
    return weights.staged[key]


def remainder_smem(g: RemainderGeometry, tile: RemainderTile, chunks: int,
                   max_segment: int) -> int:
    """Shared-memory bytes of a tiled remainder block: two input stages, two tap stages
    of ``max_segment`` (weight, offset) pairs, the block's row pointers of every chunk,
    its staging table (an int a staged word)."""
    return 4 * (3 * g.stage_floats(tile) + 4 * max_segment + chunks * (tile.rb + 1))
