"""A sparse convolution's remainder unrolled for its weights, nothing staged
(``kernels_cu/sparse_unrolled_direct.cu``): written for 1x1 filters, and run on wider ones
too, where the staged kernel's stage costs more than it saves (strided layers, and layers
whose few nonzeros a staged input value serves).

On a 1x1 filter an input word serves only the rows with a nonzero in its channel, so
staging it (:mod:`tensorconv.ops.sparse_unrolled`) buys nothing, and the unstaged
pointwise kernel (``sparse_csr_pointwise``) reads a (weight, offset) pair from its table
and forms an address for every multiply-add.  Here the host writes the kernel's body for
one layer: a block owns ``rb`` output rows and ``threads`` output pixels, one a thread;
for each input channel any of those rows uses, the thread loads its pixel's word once (an
immediate offset from the pixel's address) and applies that channel's nonzeros as
``fma`` instructions with immediate weights.  Any stride and padding, NCHW, fp32, any
batch.  On ResNet-18-8x's strided shortcuts (H200, batch 32, trained masks) it took
3.0-6.5 µs against the pointwise kernel's fastest tile's 6.2-9.9 µs (a probe:
``docs/notes/sparse_conv.md``).
The cost is a compile per layer and tile (CuPy keeps the binary on disk), so layers above
:data:`tensorconv.ops.sparse_unrolled.MAX_FMAS` multiply-adds are not offered;
:mod:`tensorconv.ops.sparse_conv` runs it as the remainder kind ``"unrolled"`` on 1x1
filters, and on a wider filter where given one of its tiles (a tuned plan times them on
every layer: :func:`tensorconv.ops.sparse_remainder.remainder_choices`).  There each
tap the group uses is one load, predicated where the pixel's window meets the padding.
A ring tile (``Tile.ring``, large 1x1 layers) makes each thread's loads ``cp.async``
copies into its own slots of shared memory, many channels ahead of their products, so that
more of them are in flight than the straight-line loads' registers allow.
A split tile (``Tile.ks``) shares a group's channels among ``ks`` warps of a pixel's
threads, each summing its share, and adds the shares through shared memory: each thread's
chain of loads is ``ks`` times shorter and the block's pixels ``ks`` times fewer, so a
layer with few pixels a group (1x1 layers on 16x16 maps at batch 32, waiting on their
loads from L2) runs ``ks`` times the warps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, files
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct_body as generated
from tensorconv.ops._launch import cdiv, launch, ptr

FILE = "sparse_unrolled_direct.cu"
NAME = "sparse_unrolled_direct"
ROWS = (8, 16, 32, 64)    # rows a block the tuner times; more rows would spill the sums
# threads a block the tuner times: 128 was at most 2 % faster than 64 on ResNet-18-8x's six
# shortcuts (H200) and 8 % slower on one, 256 never faster; each tile is a compile
THREADS = (64,)
# threads a block the tuner also times on a 1x1 layer of at least WIDE_PIXELS output pixels,
# at WIDE_BLOCK_ROWS rows or more a group: a block's warps run one group's code, so an SM
# holds fewer groups' code at once.  At 64 threads ncu found a 1024x256 layer on 14x14
# waiting on instruction fetch (36 cycles an issue of 38), at 256 on its loads; on random
# 1/8 masks at batch 32 the 256-thread tile took 27.5 against 40.7 µs there and 20.9 against
# 28.6 on a 256x528 layer on 16x16, no slower on six others (H200, docs/notes/sparse_conv.md)
# On those tiles the tuner also times the grid with the groups first (GROUPS_FIRST: a pixel
# block's groups are consecutive blocks): 1.58x faster on a 256x1024 layer on 14x14 (51.2 ->
# 32.4 µs), 1.16x on a strided 512x256 one on 56x56, within 5 % on fourteen others
WIDE_BLOCK = 256
WIDE_BLOCK_ROWS = 32
# rows a group the wide tiles also take (not the 64-thread ones): 40 rows put a 1x1 layer of
# 144-160 rows on 16x16 at batch 32 in four groups, 128 blocks, about one wave, where 32 rows
# make 160 blocks and leave 28 SMs two.  Measured (H200, GoogLeNet-8x's trained masks, no
# dense blocks, docs/notes/sparse_conv.md): the fastest of the wide tiles without a ring on
# 7 of 14 of its 1x1 layers on 16x16 of 64 rows or more (160x512: 16.0 -> 15.4 µs, 144x512:
# 16.7 -> 15.4, 128x528: 15.1 -> 13.1), 48 rows on none; in tuned plans, with a ring, 160x512
# 16.2 -> 13.5 µs and 160x528 16.5 -> 13.9
WIDE_ONLY_ROWS = (40,)
# rows a group above ROWS for a 1x1 layer of 65-128 rows on at least WIDE_PIXELS pixels, at
# DEEP_THREADS threads a block: the layer in one group (or two) reads each input word once
# from L2, where 64 rows read it twice.  128 rows take 221-253 registers, 96 rows 128, none
# spilled (sm_90, every epilogue).  Measured (H200, batch 32, ResNet-50-8x's magnitude
# masks, no dense blocks, kernel alone, docs/notes/sparse_conv.md): 128 x 256 on 56x56 took
# 42.5 µs at 128 rows, 256 threads, a ring (44.6 at 128 threads, no ring), against 57.1 at
# 64 rows (cuDNN TF32 44.1); 128 x 512 on 28x28 30.6 at 96 rows, 128 threads, against 50.6;
# on two layers of 256 rows (two or three groups of 96-128) every such tile was 1.3-2.2x
# slower than the best at 64 rows, so not offered there
DEEP_ROWS = (96, 128)
DEEP_THREADS = (128, 256)
WIDE_PIXELS = 2048
MAX_GRID_Y = 65535
# row groups a block the tuner also times, one warp each on the block's 32 pixels: the
# groups' loads of the same words then meet in the SM's L1, where groups in blocks of their
# own each read the input from L2 (512 x 256 stride 2 on 8x8 at 8 rows a group: 64 reads)
WARP_GROUPS = (4,)
# On the same 1x1 layers as the wide tiles, the tuner also times each of them with the
# loads made cp.async copies into a ring of RING shared-memory slots a thread, committed in
# RING_GROUPS groups (sparse_unrolled_direct_body): a thread then keeps RING - RING /
# RING_GROUPS input words in flight without a register for any, where ptxas keeps about 9
# loads in flight from the
# straight-line body.  Measured (H200, docs/notes/sparse_conv.md): the fastest tile on 8 of
# the 39 unrollable 1x1 layers of GoogLeNet-8x and ResNet-50-8x, by up to 1.31x; slower on
# the others, so offered, not chosen by rule; on 64-thread blocks slower on every layer tried
RING = 64
# Channel splits a group (Tile.ks) the tuner also times on those layers' wide tiles of one
# group a block: ncu found the 256-thread tile of 32 rows on a 192x480 layer on 16x16
# (batch 32, 192 blocks) at 11 warps an SM of the 40 its registers allow, each waiting
# 14 of its 16.5 cycles an issue on a load from L2 (docs/notes/sparse_conv.md)
# Measured (H200, batch 32, no dense blocks, docs/notes/sparse_conv.md): on GoogLeNet-8x's
# 1x1 layers on 16x16 of at most four groups of 32 rows (at most 128 blocks unsplit), the
# best split took 5.7-15.1 µs against 12.2-15.6 unsplit (1.03-2.1x faster), on its 8x8 ones
# (at most 96 blocks) 1.01-2.3x faster; with five groups or more on 16x16 1.04-1.2x slower,
# and on ResNet-50-8x's ten 1x1 layers (200 blocks or more at 32 rows) 1.05-1.7x slower (the worst
# split 6.4x).  Each share is code of its own, so an SM runs KS code streams of a layer at
# once, where ncu found 64-thread tiles of many groups waiting on instruction fetch (the
# splits themselves not profiled).  So a split is offered only where the unsplit tile's
# grid has at most one block an SM.
SPLITS = (2, 4)
SPLIT_SMEM = 48 * 1024     # the shares' shared memory: at most the default dynamic limit
# rows a group on a wider filter: each group loads every tap its rows use, so fewer rows a
# group mean more loads as well as more code (a pruned 256x128 3x3 layer, 36,864 nonzeros:
# 8 rows a group 1.4 MB of code, 32 rows 0.9 MB; nvcc 52 s and 22 s); 64 rows were 1.09-1.6x
# slower than 32 on all eight of ResNet-18-8x's 3x3 layers timed (H200, docs/notes/sparse_conv.md)
WIDE_ROWS = (32,)


@dataclass(frozen=True)
class Problem:
    """A sparse layer's remainder: ``geom`` its convolution."""

    geom: ConvGeometry


@dataclass(frozen=True)
class Tile:
    """``gb`` groups of ``rb`` output rows a block, on ``threads`` threads: each group's
    ``threads // (gb * ks)`` threads (whole warps) take the block's output pixels, one a
    thread, ``ks`` times over: ``ks`` > 1 (one group a block, no ring) shares the group's
    columns among ``ks`` sets of those threads, whose sums meet in shared memory.
    ``groups_first``: the grid's x counts the groups and its y the pixel blocks, so that a
    pixel block's groups are launched one after another.  ``ring``: 0, or the slots of
    each thread's ring of cp.async copies in shared memory (1x1 filters whose pixels all
    read inside the image, one group a block: :data:`RING`)."""

    rb: int
    threads: int
    gb: int = 1
    groups_first: bool = False
    ring: int = 0
    ks: int = 1

    @property
    def pixels(self) -> int:
        """Output pixels a block."""
        return self.threads // (self.gb * self.ks)

    def smem_bytes(self, p: Problem) -> int:
        """The rings' shared memory (``ring`` words a thread), or the split's: the sums of
        the ``ks - 1`` later shares, ``rb`` words a pixel each."""
        return 4 * (self.ring * self.threads + (self.ks - 1) * self.rb * self.pixels)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        g = p.geom
        pixels, groups = cdiv(g.n * g.oh * g.ow, self.pixels), cdiv(cdiv(g.k, self.rb), self.gb)
        return (groups, pixels, 1) if self.groups_first else (pixels, groups, 1)


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``, or None."""
    g = p.geom
    if g.groups != 1 or g.dilation != (1, 1):
        return "the unstaged unrolled remainder runs undilated, ungrouped convolutions"
    if g.r > 32 or g.s > 32:
        return "the unstaged unrolled remainder runs filters of at most 32 x 32 taps"
    return None


def ring_fits(g: ConvGeometry) -> bool:
    """Whether a ring tile runs ``g``: a 1x1 filter whose one tap lies inside the image for
    every output pixel (the ring's copies are not predicated)."""
    return g.r * g.s == 1 and generated.tap_guard(g, 0, 0) == ""


def check_tile(p: Problem, tile: Tile) -> None:
    """A clear error for a ring or split tile ``p`` cannot run."""
    if tile.ks != 1:
        if tile.ks < 1 or tile.threads % (32 * tile.ks):
            raise ValueError(f"tile.ks must be at least 1 and split tile.threads={tile.threads} "
                             f"into whole warps, got ks={tile.ks}")
        if tile.gb != 1 or tile.ring:
            raise ValueError(f"a split tile (ks={tile.ks}) holds one group a block and no "
                             f"ring, got gb={tile.gb}, ring={tile.ring}")
        if tile.smem_bytes(p) > SPLIT_SMEM:
            raise ValueError(f"a split tile's shares take {tile.smem_bytes(p)} bytes of shared "
                             f"memory (at most {SPLIT_SMEM}): fewer rows or tile.ks")
    if tile.ring == 0:
        return
    if tile.ring % generated.RING_GROUPS or tile.ring < generated.RING_GROUPS:
        raise ValueError(f"tile.ring must be 0 or a multiple of {generated.RING_GROUPS}, "
                         f"got {tile.ring}")
    if tile.gb != 1:
        raise ValueError(f"a ring tile holds one group a block, got gb={tile.gb}")
    if not ring_fits(p.geom):
        raise ValueError("a ring tile runs 1x1 filters whose tap lies inside the image for "
                         f"every output pixel, got a {p.geom.r}x{p.geom.s} filter with "
                         f"padding {p.geom.padding}")


def candidates(p: Problem, facts: DeviceFacts | None) -> list[Tile]:
    """Every rows a group (:data:`ROWS`, :data:`WIDE_ROWS` for a wider filter; up to twice
    the layer's rows) on :data:`THREADS`, one group a block; on a 1x1 layer of at least
    :data:`WIDE_PIXELS` output pixels also :data:`WIDE_BLOCK` threads a block for groups of
    :data:`WIDE_BLOCK_ROWS` rows or more and of :data:`WIDE_ONLY_ROWS`, with the pixel
    blocks first and with the groups first, each also with a ring of :data:`RING` copies a
    thread where :func:`ring_fits`,
    and split :data:`SPLITS` ways where the unsplit tile's grid has at most one block an SM
    (the groups first where the grid allows); there too, on a layer of 65-128 rows,
    :data:`DEEP_ROWS` on :data:`DEEP_THREADS`, with and without a ring (the groups first
    where there are two);
    and :data:`WARP_GROUPS` groups a block of a warp
    each where the layer has that many groups; the rule's first.
    On ResNet-18-8x's shortcuts (H200, batch 32) the fastest of one group a block had 64
    rows on 8,192 output pixels, 32 on 2,048 and 8 on 512: more rows a group load each
    word for more rows, fewer give a small layer more blocks."""
    if supported(p) is not None:
        return []
    g = p.geom
    offered = ROWS if g.r * g.s == 1 else WIDE_ROWS
    rows = [rb for rb in offered if rb <= max(offered[0], 2 * g.k)]
    tiles = [Tile(rb, t) for rb in rows for t in THREADS]
    if g.r * g.s == 1 and g.n * g.oh * g.ow >= WIDE_PIXELS:
        first = cdiv(g.n * g.oh * g.ow, WIDE_BLOCK) <= MAX_GRID_Y    # pixel blocks on y
        rings = (0, RING) if ring_fits(g) else (0,)
        wide = sorted({rb for rb in rows if rb >= WIDE_BLOCK_ROWS}
                      | {rb for rb in WIDE_ONLY_ROWS if rb <= 2 * g.k})
        tiles += [Tile(rb, WIDE_BLOCK, 1, gf, ring) for ring in rings for rb in wide
                  for gf in ((False, True) if first else (False,))]
        sms = facts.sm_count if facts else 132
        split = (Tile(rb, WIDE_BLOCK, 1, _split_first(g, ks), 0, ks) for ks in SPLITS
                 for rb in wide if _blocks(Tile(rb, WIDE_BLOCK), p) <= sms)
        tiles += [t for t in split if t.smem_bytes(p) <= SPLIT_SMEM]
        tiles += [Tile(rb, t, 1, gf, ring) for t in DEEP_THREADS for ring in rings
                  for rb in _deep_rows(g.k) for gf in (_deep_first(g, t, rb),)]
    tiles += [Tile(rb, 32 * gb, gb) for gb in WARP_GROUPS for rb in rows
              if cdiv(p.geom.k, rb) >= gb]
    first = _rule(p, tiles, facts.sm_count if facts else 132)
    return [first] + [t for t in tiles if t != first]


def _deep_rows(k: int) -> list[int]:
    """:data:`DEEP_ROWS` for a layer of ``k`` rows: none unless ``ROWS[-1] < k <=
    DEEP_ROWS[-1]``; those under ``k``, and the first that holds all ``k`` rows (a larger
    one would write the same group)."""
    if not ROWS[-1] < k <= DEEP_ROWS[-1]:
        return []
    return [rb for rb in DEEP_ROWS if rb < k] + [next(rb for rb in DEEP_ROWS if rb >= k)]


def _deep_first(g: ConvGeometry, threads: int, rb: int) -> bool:
    """A deep tile's grid order: the groups first where the layer has two and its pixel
    blocks fit the grid's y (a pixel block's second group then finds its input in L2; the
    order timed), else the pixel blocks (one group: the same launch either way)."""
    return cdiv(g.k, rb) > 1 and cdiv(g.n * g.oh * g.ow, threads) <= MAX_GRID_Y


def _blocks(t: Tile, p: Problem) -> int:
    gx, gy, _ = t.grid(p)
    return gx * gy


def _split_first(g: ConvGeometry, ks: int) -> bool:
    """Whether a split tile's grid puts the groups first: where its pixel blocks fit the
    grid's y."""
    return cdiv(g.n * g.oh * g.ow, WIDE_BLOCK // ks) <= MAX_GRID_Y


def _rule(p: Problem, tiles: list[Tile], sm_count: int) -> Tile:
    """Of the 64-thread tiles of one group a block, the most rows a block whose launch
    gives every SM three warps, else the one with the most warps (the fastest tile on two
    of the three shortcuts above; on the third, 1.26x its time)."""
    small = [t for t in tiles if t.threads == THREADS[0] and t.gb == 1]

    def warps(t: Tile) -> int:
        gx, gy, _ = t.grid(p)
        return gx * gy * cdiv(t.threads, 32)

    fit = [t for t in small if warps(t) >= 3 * sm_count]
    return max(fit, key=lambda t: t.rb) if fit else max(small, key=lambda t: (warps(t), -t.rb))


def default_tile(p: Problem, facts: DeviceFacts | None) -> Tile:
    tiles = candidates(p, facts)
    if not tiles:
        raise ValueError(supported(p) or f"no unstaged unrolled tile fits {p.geom}")
    return tiles[0]


def fmas(weights_nnz: int, tile: Tile) -> int:
    """The body's multiply-add instructions for ``weights_nnz`` nonzeros."""
    return weights_nnz


def body(g: ConvGeometry, tile: Tile, indptr, indices, data) -> str:
    """The kernel body (``SPARSE_UNROLLED_DIRECT_BODY``) of a remainder given as CSR over the
    K x (C·R·S) kernel matrix (host arrays), for a tile ``g`` can run
    (:func:`tensorconv.ops.sparse_unrolled_direct_body.write`)."""
    check_tile(Problem(g), tile)
    return generated.write(g, tile, indptr, indices, data)


def epilogue(accumulate: bool, bias: bool, residual: bool, relu: bool) -> int:
    """The kernel's ``EPI``: which of the epilogue's steps it compiles in (accumulate onto
    the blocks' sums, add the bias, add the residual, ReLU)."""
    return int(accumulate) | int(bias) << 1 | int(residual) << 2 | int(relu) << 3


def kernel(weights, g: ConvGeometry, tile: Tile, epi: int = 0) -> cuda.KernelRef:
    """The kernel of ``weights``' remainder (a :class:`~tensorconv.ops.sparse_conv.
    SparseWeights`) on ``tile`` with the epilogue ``epi`` (:func:`epilogue`): its body
    written once (named by its content's hash)."""
    key = ("unrolled-direct", tile, g.h, g.w, g.stride, g.padding)
    if key not in weights.staged:
        indptr = backend.to_host(weights.indptr)
        nnz = int(indptr[-1])
        if fmas(nnz, tile) > su.MAX_FMAS:
            raise ValueError(f"the unstaged unrolled remainder of {nnz} nonzeros would be "
                             f"{fmas(nnz, tile)} instructions (at most {su.MAX_FMAS})")
        text = body(g, tile, indptr, backend.to_host(weights.indices)[:nnz],
                    backend.to_host(weights.data)[:nnz])
        path = su.body_dir() / f"pu_{hashlib.sha256(text.encode()).hexdigest()[:24]}.inc"
        if not path.is_file():
            files.atomic_write(path, text)
        weights.staged[key] = str(path)
    return cuda.kernel_ref(FILE, f"{NAME}<{epi}>",
                           {"SPARSE_UNROLLED_DIRECT_BODY": f'"{weights.staged[key]}"'})


def kernels(p: Problem, tile: Tile, weights=None, epi: int = 0) -> tuple[cuda.KernelRef, ...]:
    """The kernel a launch of ``tile`` with the epilogue ``epi`` runs (``weights`` needed:
    the body is theirs)."""
    return () if weights is None else (kernel(weights, p.geom, tile, epi),)


def instantiations() -> list[str]:
    """Every epilogue, built by CI with the example body."""
    return [f"{NAME}<{e}>" for e in range(16)]


def run(x, weights, out, g: ConvGeometry, tile: Tile, bias, residual, relu: bool,
        accumulate: bool) -> None:
    """``sparse_unrolled_direct`` on checked arguments (``accumulate``: add to what ``out``
    holds, the dense blocks' sums)."""
    p = Problem(g)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    check_tile(p, tile)
    epi = epilogue(accumulate, bias is not None, residual is not None, relu)
    launch(kernel(weights, g, tile, epi), tile.grid(p), (tile.threads,),
           (x, ptr(bias), ptr(residual), out, np.int32(g.n)), tile.smem_bytes(p))
