"""Tables and tiles of the sliding-channel kernels (``kernels_cu/scc_conv.cu``): filters
sorted by window start, the bands tiles of them read, the per-tile filter lists of the
input gradient, the paper's channel map, the wide weight gradient's warp tiles (made once
per layer geometry on the host, kept on each GPU); the block shapes and pixel shares each
layer takes, chosen by the work they do (no search).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend
from tensorconv.ops._launch import cdiv
from tensorconv.reference.scc import SCCGeometry

THREADS = 256                    # every kernel's block but the tiled GEMMs'
RC = 16                          # scc::RC of the .cu: the reduction chunk
# The wide kernels: pixels per lane (a block owns 32 x that), vector loads where P allows.
WIDE_PX = (4, 2, 1)
WIDE_SMEM = 100 * 1024           # their staging at most: two blocks still fit an SM
AUTO_SMEM = 72 * 1024            # at most where the automatic choice takes them,
AUTO_CIN = 64                    # on inputs of at most this many channels
AUTO_U = 16                      # and windows of at most this many (wider ones fill the
                                 # tiled kernels' chunks: those measured faster there)
F = 8                            # scc::F of the .cu: rows a warp of a wide kernel takes
WARPS = 8                        # scc::WARPS: warps of a wide kernel's block


@functools.lru_cache(maxsize=256)
def sorted_filters(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray]:
    """``(order, starts)``: the filters sorted by window start (then index) and the start
    of each, both (Cout,) int32.  Consecutive sorted filters read overlapping windows."""
    b = geom.starts()
    order = np.lexsort((np.arange(geom.cout), b))
    return order.astype(np.int32), b[order].astype(np.int32)


def band_spans(geom: SCCGeometry, rows: int = 64) -> np.ndarray:
    """The channels each tile of ``rows`` sorted filters reads: last start - first start
    + U (int64, (tiles,)); a tile inside one window group reads exactly U."""
    _, starts = sorted_filters(geom)
    first = starts[::rows].astype(np.int64)
    last = starts[np.minimum(np.arange(rows, geom.cout + rows, rows), geom.cout) - 1]
    return last - first + geom.u


@functools.lru_cache(maxsize=256)
def data_tiles(geom: SCCGeometry, rows: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """The input gradient's table: for each tile of ``rows`` input channels, the filters
    whose window holds one of them, as CSR ``(ptr (tiles + 1,), filters)`` (int32, in
    window order)."""
    order, _ = sorted_filters(geom)
    tiles = cdiv(geom.cin, rows)
    meets = np.zeros((geom.cout, tiles), dtype=bool)
    filters = np.repeat(np.arange(geom.cout), geom.u)
    meets[filters, (geom.channels() // rows).reshape(-1)] = True
    meets = meets[order]                                  # rows in window order
    t, i = np.nonzero(meets.T)                            # by tile, then window order
    ptr_ = np.concatenate([[0], np.cumsum(np.bincount(t, minlength=tiles))]).astype(np.int32)
    return ptr_, order[i].astype(np.int32)


@functools.lru_cache(maxsize=256)
def channel_map(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-thread input-centric gradient's table: for each input channel c, the
    (filter k, weight index k·U + u) pairs with ``(b_k + u) mod Cin == c``, as CSR
    ``(ptr (Cin + 1,), k, widx)`` (int32).  The pairs of a channel are in filter order."""
    chans = geom.channels().reshape(-1)                  # (Cout·U,): channel of each weight
    widx = np.arange(chans.size)
    order = np.lexsort((widx, chans))                    # by channel, then filter
    counts = np.bincount(chans, minlength=geom.cin)
    ptr_ = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return ptr_, (widx[order] // geom.u).astype(np.int32), widx[order].astype(np.int32)


def padded_lists(geom: SCCGeometry, rows: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`data_tiles`' filter lists padded to ``stride`` entries a tile: ``(lengths
    (tiles,), pairs (tiles, stride, 2))``, int32, each entry (filter, its window start),
    (-1, 0) past a list's length.  A block finds its list at ``tile · stride`` with no
    read of a pointer first, and an entry's start beside its filter."""
    ptr_, filters = data_tiles(geom, rows)
    lengths = np.diff(ptr_).astype(np.int32)
    if stride < int(lengths.max(initial=0)):
        raise ValueError(f"stride {stride} is shorter than the longest filter list "
                         f"({int(lengths.max())})")
    pairs = np.zeros((lengths.size, stride, 2), dtype=np.int32)
    pairs[..., 0] = -1
    tile = np.repeat(np.arange(lengths.size), lengths)
    at = np.arange(filters.size) - ptr_[tile]
    pairs[tile, at, 0] = filters
    pairs[tile, at, 1] = geom.starts()[filters]
    return lengths, pairs


@functools.cache   # never evicted: captured CUDA graphs hold these addresses
def device_tables(geom: SCCGeometry, device: int, which: str, rows: int = 0, stride: int = 0):
    """A table of ``geom`` on GPU ``device``, made once: ``"sorted"``, ``"starts"`` (the
    window start of each filter), ``"tiles"`` (of ``rows`` channels), ``"lists"`` (their
    lists padded to ``stride``, :func:`padded_lists`), ``"map"`` or ``"wgrad"`` (the wide
    weight gradient's tiles and blocks)."""
    import cupy

    host = {"sorted": lambda: sorted_filters(geom),
            "starts": lambda: (geom.starts().astype(np.int32),),
            "tiles": lambda: data_tiles(geom, rows),
            "lists": lambda: padded_lists(geom, rows, stride),
            "map": lambda: channel_map(geom),
            "wgrad": lambda: filter_tiles(geom)[:2]}[which]()
    with cupy.cuda.Device(device):
        return tuple(cupy.asarray(a) for a in host)


@functools.lru_cache(maxsize=256)
def filter_tiles(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The wide weight gradient's work: warp tiles ``(fo, vt)`` (8 sorted filters from
    ``8·fo`` x band offsets ``8·vt ..`` past the first one's start, every offset of each
    octet's band once), int32 (tiles, 2); per block of 8 consecutive tiles ``(first sorted
    filter, gy rows, first channel, x rows)`` int32 (blocks, 4), the x rows being channels
    ``(first channel + r) mod Cin``; and the most gy rows and x rows of any block."""
    _, starts = sorted_filters(geom)
    octets = cdiv(geom.cout, F)
    first = starts[::F].astype(np.int64)
    last = starts[np.minimum(np.arange(1, octets + 1) * F, geom.cout) - 1]
    spans = last - first + geom.u                       # each octet's band
    per = -(-spans // F)                                # band-offset tiles per octet
    fo = np.repeat(np.arange(octets), per)
    vt = np.concatenate([np.arange(n) for n in per])
    tiles = np.stack([fo, vt], axis=1).astype(np.int32)
    blocks = []
    for b in range(0, len(tiles), WARPS):
        fos = np.unique(tiles[b:b + WARPS, 0])
        s_lo = int(fos[0]) * F
        chan = int(starts[s_lo])
        rows = int(np.max(first[fos] - chan + spans[fos]))
        blocks.append((s_lo, min((int(fos[-1]) + 1) * F, geom.cout) - s_lo, chan,
                       min(rows, geom.cin)))
    blocks = np.asarray(blocks, dtype=np.int32)
    return tiles, blocks, int(blocks[:, 1].max()), int(blocks[:, 3].max())



@dataclass(frozen=True)
class BlockShape:
    """A GEMM kernel's block, chosen by the work it does (no tile search here): ``ty`` x
    ``tx`` threads, each ``tm`` (4 or 8) rows x ``tn`` columns, so ``tm·ty`` rows (filters
    or channels) x ``tn·tx`` columns (pixels or band channels)."""

    ty: int
    tx: int
    tn: int
    tm: int = 4

    @property
    def rows(self) -> int:
        return self.tm * self.ty

    @property
    def cols(self) -> int:
        return self.tn * self.tx

    @property
    def threads(self) -> int:
        return self.ty * self.tx

    def args(self) -> str:
        return f"{self.ty}, {self.tx}, {self.tn}, {self.tm}"


# Forward and input gradient: 64, 32 or 16 rows (small row tiles stay inside one window
# group where groups are small); 64 rows come with 64 or 128 pixels.  Tiles of 32 sums a
# thread (8 rows x 4 pixels, or 4 x 8 in two runs: a quarter fewer shared-memory loads a
# multiply-add than 4 x 4) measured faster on the forward's tiles of every height and the
# input gradient's 64-row ones where their blocks fill the GPU, and slower on the input
# gradient's 16- and 32-row tiles and on small grids (docs/notes/scc_conv.md).
FOUR_BY_FOUR_TILES = (BlockShape(16, 16, 4), BlockShape(16, 16, 8), BlockShape(8, 32, 4),
                      BlockShape(4, 64, 4))
LARGE_THREAD_TILES = {"forward": {16: BlockShape(4, 32, 8), 32: BlockShape(4, 32, 4, 8),
                                  64: BlockShape(8, 32, 4, 8)},
                      "data": {64: BlockShape(8, 32, 4, 8)}}
LARGE_THREAD_FILL = {"forward": 0.5, "data": 1.0}   # their blocks per SM, at least
PIXEL_TILES = FOUR_BY_FOUR_TILES + tuple(sorted({t for by_rows in LARGE_THREAD_TILES.values()
                                                 for t in by_rows.values()}, key=BlockShape.args))
# Weight gradient: 32 filters x 64 band channels, 32 x 32, 16 x 32.  Tiles of 64 filters
# (more work a block, half the blocks) measured slower or within 4 % on every layer
# benched (docs/notes/scc_conv.md).
BAND_TILES = (BlockShape(8, 16, 4), BlockShape(8, 16, 2), BlockShape(4, 16, 2))


def least_work(costs: dict):
    """The tile (key) of least work, preferring larger tiles (listed first) within 10 %."""
    best = min(costs.values())
    return next(t for t, c in costs.items() if c <= 1.1 * best)


@functools.lru_cache(maxsize=256)
def row_tiles(geom: SCCGeometry) -> tuple[int, int, BlockShape]:
    """Rows of the forward and the input-gradient tiles, and the weight gradient's tile,
    each of least multiply-adds (dense-masked zeros included) for ``geom``."""
    rows = sorted({t.rows for t in PIXEL_TILES}, reverse=True)
    fwd = least_work({r: float(np.sum(band_spans(geom, r) * r)) for r in rows})
    data = {}
    for r in rows:
        ptr_, _ = data_tiles(geom, r)
        data[r] = float(np.sum(np.diff(ptr_)) * r)
    band = least_work({t: float(np.sum(-(-band_spans(geom, t.rows) // t.cols) * t.cols
                                        * t.rows)) for t in BAND_TILES})
    return fwd, least_work(data), band


def pixel_tile(rows: int, row_tiles: int, pixels: int, sm_count: int, *,
               side: str) -> BlockShape:
    """The ``side`` ("forward" or "data": the input gradient) tile of ``rows`` rows: 32 sums
    a thread where :data:`LARGE_THREAD_TILES` has such a tile and its blocks fill the GPU
    (:data:`LARGE_THREAD_FILL`); else 4 x 4, for 64 rows in 128-pixel tiles where they still
    give two blocks per SM, else 64."""
    large = LARGE_THREAD_TILES[side].get(rows)
    blocks = row_tiles * cdiv(pixels, large.cols) if large is not None else 0
    if large is not None and blocks >= LARGE_THREAD_FILL[side] * sm_count:
        return large
    fits = [t for t in FOUR_BY_FOUR_TILES if t.rows == rows]
    if len(fits) > 1 and row_tiles * cdiv(pixels, fits[-1].cols) < 2 * sm_count:
        return fits[0]
    return fits[-1]


WALK_FILL = 0.9                  # walks only where its one round fills this much of the GPU


def resident_blocks(tile: BlockShape, sm_count: int) -> int:
    """Blocks of a pixel-tile kernel the GPU holds at once, at least: its launch bound
    (``scc::min_blocks`` of the .cu: 1,024 threads an SM where a thread keeps 16 sums,
    else 512)."""
    return sm_count * max(1, (1024 if tile.tm * tile.tn <= 16 else 512) // tile.threads)


def pixel_grid(pixel_tiles: int, other_blocks: int, tile: BlockShape, sm_count: int) -> int:
    """Blocks along the pixels of the forward or input-gradient kernel, each walking
    pixel tiles ``blockIdx.x``, + that many, ...: one a tile where the grid fits the GPU
    at once, else as few as walk every tile in the same number of rounds (a block then
    loads its next tile while it multiplies and stores this one, where blocks in step
    loaded, multiplied and stored together), provided those blocks fill at least
    :data:`WALK_FILL` of what the GPU holds (fewer left SMs idle: one a tile again).
    ``other_blocks``: the grid's other dimensions."""
    resident = resident_blocks(tile, sm_count)
    rounds = cdiv(pixel_tiles * other_blocks, resident)
    if pixel_tiles * other_blocks < WALK_FILL * rounds * resident:
        return pixel_tiles
    return cdiv(pixel_tiles, rounds)


def forward_tile(geom: SCCGeometry, pixels: int) -> BlockShape:
    """The tile :func:`scc_conv2d` launches for ``pixels`` = N x H x W."""
    rows = row_tiles(geom)[0]
    return pixel_tile(rows, cdiv(geom.cout, rows), pixels, backend.device_facts().sm_count,
                      side="forward")


def wide_smem(geom: SCCGeometry, side: str, px: int) -> int:
    """Shared-memory bytes of the wide ``side`` kernel ("forward" or "filter") at ``px``
    pixels a lane: two buffers of the block's pixels of every row it stages, plus the
    forward's weights."""
    bn = 32 * px
    if side == "forward":
        return 4 * (geom.u * cdiv(geom.cout, F) * F + 2 * geom.cin * bn)
    _, _, gy_rows, x_rows = filter_tiles(geom)
    return 4 * 2 * (gy_rows + x_rows) * bn


def wide_grid(geom: SCCGeometry, side: str, px: int, pixels: int) -> int:
    """Persistent blocks of the wide forward: as many as fit the SMs at
    once (by shared memory, at most three), no more than there are pixel tiles."""
    facts = backend.device_facts()
    per_sm = max(1, min(3, facts.smem_per_sm // (wide_smem(geom, side, px) + 1024)))
    return min(cdiv(pixels, 32 * px), per_sm * facts.sm_count)


def wide_px(geom: SCCGeometry, side: str, pixels: int, *, auto: bool = True) -> int | None:
    """Pixels a lane of the wide ``side`` kernel, or None where the tiled kernels take the
    layer.  Forced (``auto=False``): the most whose staging fits :data:`WIDE_SMEM`.  The
    automatic choice takes the wide weight gradient only, where it measured faster on the
    H100 (``docs/notes/scc_conv.md``): 4 pixels a lane within :data:`AUTO_SMEM`, inputs
    of at most :data:`AUTO_CIN` channels and windows of at most :data:`AUTO_U`, whole
    window groups per warp (8 filters sharing a start).  The wide forward is never
    automatic: the tiled one, its blocks walking pixel tiles through a cp.async ring,
    measured 10-18 % faster on those layers and within 2.5 % on the one it lost."""
    if auto:
        if (side == "forward" or geom.cin > AUTO_CIN or geom.u > AUTO_U
                or geom.cout % (F * geom.cycle) or wide_smem(geom, side, 4) > AUTO_SMEM):
            return None
        return 4
    return next((px for px in WIDE_PX if wide_smem(geom, side, px) <= WIDE_SMEM), None)


@functools.lru_cache(maxsize=256)
def band_tiles(geom: SCCGeometry) -> tuple[BlockShape, int, int]:
    """The weight gradient's tile, its band tiles for the widest filter tile, and its
    blocks over all filter tiles (one pixel share)."""
    tile = row_tiles(geom)[2]
    per = [cdiv(int(span), tile.cols) for span in band_spans(geom, tile.rows)]
    return tile, max(per), sum(per)


def default_splits(geom: SCCGeometry, pixels: int, sm_count: int) -> int:
    """Pixel shares of the weight gradient: about six blocks and 768 threads per SM (a
    block's reduction is a chain of dependent chunks: many in flight hide its latency;
    more small blocks measured slower, their partial sums outweighing it), each share at
    least 8 chunks of 16 pixels."""
    tile, _, blocks = band_tiles(geom)
    per_sm = max(6, 3 * THREADS // tile.threads)
    return max(1, min(cdiv(per_sm * sm_count, blocks), cdiv(pixels, 8 * RC)))


def data_splits(geom: SCCGeometry, rows: int, tile: BlockShape, pixels: int,
                sm_count: int, splits: int | None = None) -> tuple[int, int]:
    """``(splits, per_split)``: shares of each channel tile's filter list in the input
    gradient, ``per_split`` entries each (a multiple of the chunk), at most ``splits``
    (none empty for the longest list).  By default one where the tiles alone give a
    block per SM (more shares measured slower there: the partial maps cost a write and a
    read of the whole gradient each); else two blocks per SM, each share at least 4
    chunks."""
    ptr_, _ = data_tiles(geom, rows)
    longest = int(np.max(np.diff(ptr_)))
    if splits is None:
        blocks = cdiv(pixels, tile.cols) * (len(ptr_) - 1)
        splits = 1 if blocks >= sm_count else max(1, min(cdiv(2 * sm_count, blocks),
                                                          cdiv(longest, 4 * RC)))
    per_split = cdiv(cdiv(max(longest, 1), splits), RC) * RC
    return cdiv(longest, per_split), per_split


def wide_splits(geom: SCCGeometry, pixels: int, px: int, sm_count: int) -> int:
    """Pixel shares of the wide weight gradient: about four blocks per SM in all (two fit
    at a time), each share at least 256 pixels."""
    blocks = len(filter_tiles(geom)[1])
    return max(1, min(cdiv(4 * sm_count, blocks), cdiv(pixels, 256)))
