"""The walking tensor-core SCC kernels of ``kernels_cu/scc_tc.cu`` (3xTF32, fp32 accuracy):
their tiles, plans and launches, which :mod:`~tensorconv.ops.scc_tc` runs where they apply.

``scc_tc_walk`` (the forward, the input gradient, or both gradients): a block of 128
threads splits its rows' dense-masked weights once, into shared memory in fragment order,
then walks pixel tiles blockIdx.x, + gridDim.x, ... with every chunk of every tile one
``cp.async`` ring (:class:`WalkTile`, :func:`walk_plan`); in mode 2 it also stages each
tile's x rows and sums the weight gradient's pairs of its channel tile, one share a walk
(:func:`run_both`: gy read once for both gradients).  ``scc_tc_wgrad`` (the weight
gradient): a block of four warps over a tile of sorted filters x band channels and one
pixel share, every warp the whole tile over its own k8 steps, their sums added in warp
order, the shares in share order: deterministic (:class:`WGradTile`, :func:`wgrad_plan`).
Both take layers of :data:`MIN_WALK_MACS` multiply-adds or more; ``scc_tc``'s kernels the
smaller ones, where a few blocks' latency is the time (``docs/notes/scc_conv.md``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.ops import _igemm
from tensorconv.ops._launch import cdiv, launch, ptr
from tensorconv.ops.scc_tiles import band_spans, data_tiles, device_tables, least_work
from tensorconv.reference.scc import SCCGeometry
from tensorconv.scratch import workspace

__all__ = ["BOTH_CHUNKS", "MAX_LIST", "MIN_WALK_MACS", "WALK_CHUNKS", "WALK_SHAPES", "WGRAD_SHAPES",
           "WGradTile", "WalkTile", "carries", "instantiations", "run_both", "run_walk",
           "run_wgrad", "walk_grid", "walk_plan", "wgrad_plan"]

FILE = "scc_tc.cu"
WALK_THREADS, WALK_BLOCKS_PER_SM = 128, 4  # scctc::WALK_THREADS, scc_tc_walk's launch bounds
WALK_SHAPES = {16: (1, 4), 32: (2, 4)}
"""scc_tc_walk's (m16 tiles, n8 tiles a warp) by block rows: four warps side by side along
32 x n8 tiles pixels.  Rows of 64 and 128 stay on scc_tc: four m16 tiles by two n8 tiles
lost to it on every layer timed (docs/notes/scc_conv.md), four by four spilled."""
WALK_CHUNKS = ((32, 2), (16, 4))
"""scc_tc_walk's (chunk rows, ring stages), preferred first: a tile's reduction in 32-row
chunks two deep where whole ones cover it with no more rows than 16-row chunks would
(half the barriers and copy rounds, the same ring), else in 16-row chunks four deep.
Each won where it is chosen on every layer timed (docs/notes/scc_conv.md)."""
WGRAD_SHAPES = ((2, 8, 64, 3), (1, 16, 64, 3), (4, 4, 64, 3), (1, 8, 64, 3), (2, 4, 32, 2))
"""scc_tc_wgrad's (m16 tiles, n8 tiles, pixels a chunk, ring stages), largest tile first:
every warp the block's whole tile of (sorted filter, band channel) sums (32 x 64, 16 x 128,
64 x 32, 16 x 64, 32 x 32) over its own k8 steps of each chunk.  Chunks of 64 pixels three
deep, but 32 two deep for the smallest tile, whose blocks' copies and sums are the
shortest (docs/notes/scc_conv.md)."""
BOTH_CHUNKS = 2
"""Mode 2's most chunks a tile (scctc::WCH): a warp holds its weight-gradient sums of each
chunk in registers over the whole walk."""
WGRAD_BLOCKS_PER_SM = 4              # at most; fewer where shared memory holds fewer
MIN_WALK_MACS = 1 << 22    # below: scc_tc (a few blocks' latency; the walk's fill alone)
MAX_LIST = 8 * WALK_THREADS  # a filter list's entries at most (scc_tc_walk's KL a thread)
WALK_SMEM = 113 * 1024     # two blocks an SM at least
BLOCK_SMEM = 1024          # shared memory the GPU keeps for each block (sm_80 and later)


@dataclass(frozen=True)
class WalkTile:
    """scc_tc_walk's block for ``mode`` (0 forward, 1 input gradient, 2 both gradients)
    over ``rows`` rows (:data:`WALK_SHAPES` ``[rows]``) in chunks of ``kc`` rows
    (:data:`WALK_CHUNKS`); mode 2 keeps ``xbufs`` tiles' x rows (the kernel's XB for the
    layer's shortest filter list)."""

    mode: int
    rows: int
    kc: int = WALK_CHUNKS[0][0]
    xbufs: int = 0

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(m16 tiles, n8 tiles a warp, chunk rows, ring stages): the template's."""
        return (*WALK_SHAPES[self.rows], self.kc, dict(WALK_CHUNKS)[self.kc])

    @property
    def cols(self) -> int:
        """Pixels a tile: four warps of 8 x n8 tiles."""
        return 32 * self.shape[1]

    @property
    def blocks_per_sm(self) -> int:
        """The launch bounds' blocks an SM (scc_tc_walk's: three in mode 2, whose weight-
        gradient sums take registers, else four)."""
        return 3 if self.mode == 2 else WALK_BLOCKS_PER_SM

    @property
    def name(self) -> str:
        return f"scc_tc_walk<{self.mode}, {', '.join(map(str, self.shape))}>"

    def smem(self, depth: int) -> int:
        """Dynamic shared-memory bytes over a reduction of ``depth`` rows (a multiple of
        the chunk): the split weights (two floats a value), the ring, each stage's pixel
        offsets (8 bytes a column), three words a row (channel, window place, bias) and,
        in modes 1 and 2, the filter list (two words an entry: filter, window start)."""
        _, _, kc, stages = self.shape
        return 4 * (depth * self.rows * 2 + stages * kc * (self.cols + 8)
                    + 2 * stages * self.cols + 3 * self.rows + (2 * depth if self.mode else 0)
                    + self.xbufs * self.rows * (self.cols + 4))


@dataclass(frozen=True)
class WGradTile:
    """scc_tc_wgrad's block: ``mt`` m16 tiles of sorted filters x ``nt`` n8 tiles of band
    channels, ``kp`` pixels a chunk, a ring of ``stages`` chunks (:data:`WGRAD_SHAPES`)."""

    mt: int
    nt: int
    kp: int = 64
    stages: int = 3

    @property
    def rows(self) -> int:
        return 16 * self.mt

    @property
    def cols(self) -> int:
        return 8 * self.nt

    @property
    def name(self) -> str:
        return f"scc_tc_wgrad<{self.mt}, {self.nt}, {self.kp}, {self.stages}>"

    @property
    def smem(self) -> int:
        """The ring (rows of kp + 4 words), or the four warps' sums after it, a word a
        staged row (its channel) and two a filter row (its id, its window's place)."""
        ring = self.stages * (self.rows + self.cols) * (self.kp + 4)
        return 4 * (max(ring, 4 * self.rows * self.cols) + 3 * self.rows + self.cols)

def instantiations() -> list[str]:
    """The template instances of both kernels (part of :mod:`~tensorconv.ops.scc_tc`'s)."""
    return ([WalkTile(m, r, kc).name for m in (0, 1, 2) for r in WALK_SHAPES
             for kc, _ in WALK_CHUNKS]
            + [WGradTile(*shape).name for shape in WGRAD_SHAPES])


def walk_plan(geom: SCCGeometry, pixels: int, mode: int, rows: int, *,
              force: bool = False) -> tuple[WalkTile, int] | None:
    """``(tile, depth)`` of scc_tc_walk for the forward (``mode`` 0), the input gradient
    (1) or both gradients (2) over ``pixels`` = N x H x W with blocks of ``rows`` (the
    rows of least work, :mod:`~tensorconv.ops.scc_tc` finds them), ``depth`` the longest
    reduction (band or filter list) rounded up to whole chunks (of the first of
    :data:`WALK_CHUNKS` that rounds it up least; in mode 2 of those that cover it in
    :data:`BOTH_CHUNKS` chunks or fewer); None where ``rows`` has no walking shape, mode 2
    no chunks, the split weights would leave under two blocks an SM, or (unless
    ``force``) the layer has under :data:`MIN_WALK_MACS` multiply-adds."""
    if mode not in (0, 1, 2):
        raise ValueError(f"mode must be 0 (forward), 1 (input gradient) or 2 (both "
                         f"gradients), got {mode!r}")
    if rows not in WALK_SHAPES:
        return None
    if not force and pixels * geom.cout * geom.u < MIN_WALK_MACS:
        return None
    if mode == 0:
        longest = int(np.max(band_spans(geom, rows)))
    else:
        lists = np.diff(data_tiles(geom, rows)[0])
        longest = max(int(np.max(lists)), 1)
    chunks = [(cdiv(longest, kc) * kc, i, kc) for i, (kc, _) in enumerate(WALK_CHUNKS)
              if (mode != 2 or cdiv(longest, kc) <= BOTH_CHUNKS)
              and (mode == 0 or cdiv(longest, kc) * kc <= MAX_LIST)]
    if not chunks:
        return None
    depth, _, kc = min(chunks)
    xbufs = 0
    if mode == 2:   # the kernel's XB for the shortest list (fewest chunks)
        stages = dict(WALK_CHUNKS)[kc]
        fewest = max(1, cdiv(int(np.min(lists)), kc))
        xbufs = 1 + cdiv(stages - 1, fewest)
    tile = WalkTile(mode, rows, kc, xbufs)
    return (tile, depth) if tile.smem(depth) <= WALK_SMEM else None


def _per_sm(most: int, smem: int) -> int:
    """Blocks an SM planned for a kernel of ``smem`` bytes of dynamic shared memory: at
    most ``most``, as many as the SM's shared memory holds."""
    return max(1, min(most, backend.device_facts().smem_per_sm // (smem + BLOCK_SMEM)))


def _pinned_smem(smem: int, per_sm: int) -> int:
    """The dynamic shared memory to ask for so that an SM holds at most ``per_sm`` blocks
    (``smem`` or more).  The walks and the weight gradient plan one wave of ``per_sm``
    blocks an SM, and an SM whose registers would take more may be handed more of the
    wave while others get fewer.  Measured (``docs/notes/scc_conv.md``): no difference
    in plain graphs; with blocks launched into the tail of the kernel before (programmatic
    dependents, tried and not kept) the 64→128 16x16 layer took 1.3 µs more without it."""
    facts = backend.device_facts()
    need = cdiv(facts.smem_per_sm // (per_sm + 1) - BLOCK_SMEM + 1, 128) * 128
    return max(smem, min(need, facts.smem_per_block_optin))


def _walk_blocks(pixels: int, tile: WalkTile, rows: int, smem: int) -> int:
    """Walking blocks a row tile: the GPU filled once (:func:`_per_sm` blocks an SM),
    each walking every so-many-th of the pixel tiles."""
    per_sm = _per_sm(tile.blocks_per_sm, smem)
    sms = backend.device_facts().sm_count
    return max(1, min(cdiv(pixels, tile.cols), cdiv(sms * per_sm, rows)))


def walk_grid(plan: tuple[WalkTile, int], geom: SCCGeometry, pixels: int) -> tuple[int, int]:
    """scc_tc_walk's grid on ``plan`` over ``pixels``: (walking blocks a row tile, row
    tiles)."""
    tile, depth = plan
    rows = cdiv(geom.cout if tile.mode == 0 else geom.cin, tile.rows)
    return _walk_blocks(pixels, tile, rows, tile.smem(depth)), rows


def carries(plan: tuple[WalkTile, int], geom: SCCGeometry, pixels: int, size: int) -> bool:
    """Whether scc_tc_walk on ``plan`` can carry a split reduction of ``size`` values (a
    weight gradient's shares, :func:`run_wgrad`): one pass of its blocks, a value or more
    a thread."""
    gx, gy = walk_grid(plan, geom, pixels)
    return cdiv(size, gx * gy) <= WALK_THREADS


def run_walk(plan: tuple[WalkTile, int], src, w, geom: SCCGeometry, bias, relu: bool,
             out, carry: tuple | None = None, *, x=None, gw=None) -> None:
    """``out`` = the forward (``src`` x) or the input gradient (``src`` gy) of checked CuPy
    arrays by scc_tc_walk on ``plan`` (:func:`walk_plan`); ``carry``: another launch's
    split reduction ``(partial, out, splits, size)`` (:func:`run_wgrad`'s) that its blocks
    sum first (where :func:`carries`).  Mode 2 also takes ``x`` and writes each walk's
    weight-gradient share to ``gw`` ((walks, Cout, U), :func:`run_both`)."""
    tile, depth = plan
    if (tile.mode == 2) != (x is not None and gw is not None):
        raise ValueError("scc_tc_walk takes x and gw in mode 2, and only there")
    n, _, h, wd = src.shape
    q, i32 = n * h * wd, np.int32
    device = src.device.id
    order, sorted_starts = device_tables(geom, device, "sorted")
    if tile.mode == 0:
        starts, lengths, lists = sorted_starts, order, order
    else:
        starts = sorted_starts
        lengths, lists = device_tables(geom, device, "lists", tile.rows, depth)
    if carry is not None and not carries(plan, geom, q, carry[3]):
        raise ValueError(f"scc_tc_walk cannot carry a reduction of {carry[3]} values")
    c_src, c_out, c_splits, c_size = carry or (None, None, 0, 0)
    launch(cuda.kernel_ref(FILE, tile.name), (*walk_grid(plan, geom, q), 1), (WALK_THREADS,),
           (w, src, order, starts, lengths, lists, ptr(bias), out, ptr(c_src), ptr(c_out),
            ptr(x), ptr(gw), i32(geom.cin), i32(geom.cout), i32(geom.u), i32(h * wd), i32(q),
            i32(depth), i32(bool(relu)), i32(c_splits), i32(c_size)),
           smem=_pinned_smem(tile.smem(depth), _per_sm(tile.blocks_per_sm, tile.smem(depth))))


def run_both(plan: tuple[WalkTile, int], x, gy, w, geom: SCCGeometry, out_x, out_w) -> None:
    """``out_x``, ``out_w`` = both gradients of checked CuPy arrays by scc_tc_walk's mode 2
    on ``plan`` (:func:`walk_plan`): gy read once; each walk's weight-gradient sums a
    share, the shares summed in order by a second launch where there are several."""
    tile, depth = plan
    if tile.mode != 2:
        raise ValueError(f"run_both takes a mode-2 plan, got mode {tile.mode}")
    n, _, h, wd = gy.shape
    walks, _ = walk_grid(plan, geom, n * h * wd)
    size = geom.cout * geom.u
    gw = out_w if walks == 1 else workspace(backend.array_module(gy), walks * size)
    run_walk(plan, gy, w, geom, None, False, out_x, x=x, gw=gw)
    if walks > 1:
        _igemm.reduce_flat(gw, out_w, walks, size, backend.device_facts().sm_count)


@functools.lru_cache(maxsize=256)
def _wgrad_tile(geom: SCCGeometry) -> WGradTile:
    costs = {}
    for shape in WGRAD_SHAPES:
        t = WGradTile(*shape)
        spans = band_spans(geom, t.rows)
        costs[t] = float(np.sum(-(-spans // t.cols) * t.cols) * t.rows)
    return least_work(costs)


def wgrad_plan(geom: SCCGeometry, pixels: int, sm_count: int, splits: int | None = None,
               *, force: bool = False) -> tuple[WGradTile, int, int, int] | None:
    """``(tile, band tiles, splits, per_split)`` of scc_tc_wgrad: the tile of least
    multiply-adds (dense-masked zeros counted); pixel shares (``splits``, by default
    the GPU filled once: up to :data:`WGRAD_BLOCKS_PER_SM` blocks an SM, as many as
    shared memory holds, each share at least four chunks),
    ``per_split`` pixels a share, whole chunks.  None (unless ``force``) under
    :data:`MIN_WALK_MACS` multiply-adds."""
    if not force and pixels * geom.cout * geom.u < MIN_WALK_MACS:
        return None
    tile = _wgrad_tile(geom)
    spans = band_spans(geom, tile.rows)
    bands = int(np.max(-(-spans // tile.cols)))
    if splits is None:
        blocks = int(np.sum(-(-spans // tile.cols)))
        per_sm = _per_sm(WGRAD_BLOCKS_PER_SM, tile.smem)
        splits = max(1, min(cdiv(per_sm * sm_count, blocks), cdiv(pixels, 4 * tile.kp)))
    per_split, splits = _igemm.split_depth(pixels, tile.kp, splits)
    return tile, bands, splits, per_split


def run_wgrad(plan: tuple[WGradTile, int, int, int], x, gy, geom: SCCGeometry, out, *,
              reduce: bool = True) -> tuple | None:
    """``out`` = the weight gradient of checked CuPy arrays by scc_tc_wgrad on ``plan``
    (:func:`wgrad_plan`), the shares summed in order where there are several: by a second
    launch, or (``reduce`` False) by whichever launch takes the returned ``(partial, out,
    splits, size)`` (:func:`run_walk`'s ``carry``); None where there is one share."""
    tile, bands, splits, per_split = plan
    n, _, h, wd = x.shape
    i32 = np.int32
    order, starts = device_tables(geom, x.device.id, "sorted")
    size = geom.cout * geom.u
    partial = out if splits == 1 else workspace(backend.array_module(x), splits * size)
    launch(cuda.kernel_ref(FILE, tile.name), (bands, cdiv(geom.cout, tile.rows), splits),
           (WALK_THREADS,), (x, gy, order, starts, partial, i32(geom.cin), i32(geom.cout),
                             i32(geom.u), i32(h * wd), i32(n * h * wd), i32(per_split)),
           smem=_pinned_smem(tile.smem, _per_sm(WGRAD_BLOCKS_PER_SM, tile.smem)))
    if splits == 1:
        return None
    if not reduce:
        return partial, out, splits, size
    _igemm.reduce_flat(partial, out, splits, size, backend.device_facts().sm_count)
    return None
