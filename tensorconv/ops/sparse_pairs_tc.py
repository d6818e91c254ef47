"""A sparse convolution on the sparse tensor cores (``kernels_cu/sparse_pairs_tc.cu``,
``sparse_pairs_tc``): one tf32 pass of ``mma.sp`` m16n8k16, fp32 NCHW in and out.

``mma.sp`` multiplies an A operand of which each row keeps one value of every pair of
adjacent columns (1:2 sparsity) at twice the dense rate.  A pruned layer is not 1:2 sparse,
but at 8x a row has a nonzero in one column in eight: for a block of output rows the host
pairs the kernel's columns (``c R S + r S + s``) so that the rows rarely have a nonzero in
both columns of a pair (:func:`pair_channels`), and moves a row's second nonzero in a pair
to a later pair.  The tensor cores then do about half a dense TF32 GEMM's products and read
half its weights, where the CUDA-core kernels (:mod:`tensorconv.ops.sparse_unrolled_direct`)
do an eighth of the products at an eighth of the rate and wait on a load for every few.

Any R x S filter with R S <= 64 (each thread keeps its window's taps inside the input as
a 64-bit set), any stride and padding (the input read through an implicit im2col, the
padding zero-filled; 16-byte copies on 1x1 filters at stride 1 without padding, else
4-byte ones), groups 1, undilated, and only at one tf32 pass
(``tensorconv.precision.using("tf32")``): the format has no room for 3xTF32's remainders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, precision, reference
from tensorconv.backend import DeviceFacts
from tensorconv.checks import (
    ConvGeometry,
    check_array,
    check_bools,
    check_residual,
    check_vector,
    conv_geometry,
    output_buffer,
)
from tensorconv.ops._launch import (
    cdiv,
    check_smem,
    check_splits,
    gpu_only,
    has_clusters,
    has_tf32_mma,
    launch,
    ptr,
    push_slot_floats,
)
from tensorconv.ops.sparse_pairs import (  # noqa: F401  (the records, re-exported)
    KS,
    STEP_MULTIPLE,
    PairRecords,
    dense_csr,
    pair_channels,
    pair_records,
)

FILE = "sparse_pairs_tc.cu"
# The ring's depths a tile may have (stages of STEP_MULTIPLE k steps, the kernel's ST): 3
# leaves room for another block an SM, or more L1 for the 4-byte im2col reads.  On the 68
# layers of GoogLeNet-8x and ResNet-50-8x (H200, docs/notes/sparse_conv.md; each depth's
# best tile) it was 1.12-1.27x faster on 11 (3x3 and 5x5 layers on 32x32, 8x8, 28x28 and
# 14x14 maps, 1x1 layers on 56x56 and 7x7) and up to 4 % slower on 35 (most 1x1 layers on
# 16x16), so a tuned plan times both.
STAGES = (4, 3)
MAX_TAPS = 64       # a thread's window taps inside the input: one 64-bit set
# The most shared memory a block may opt into on any device the kernels build for (sm_90:
# 227 KB): without a device (a plan's list of choices), the tiles that fit it.  A layer of
# many columns (a 7x7 filter over 256 channels) decodes two words a column a block.
MAX_SMEM_OPTIN = 232448


@dataclass(frozen=True)
class Problem:
    """One sparse layer: ``geom`` its convolution."""

    geom: ConvGeometry

    @property
    def columns(self) -> int:
        """The kernel matrix's columns, C R S: the GEMM's reduction."""
        return self.geom.c * self.geom.r * self.geom.s


@dataclass(frozen=True)
class Tile:
    """``wm`` x ``wn`` warps, each ``mt`` m16 tiles of output rows by ``nt`` n8 tiles of
    pixels: a block owns ``rows`` output rows and ``pixels`` consecutive pixels;
    ``splits`` blocks (a thread-block cluster) share a row block's k steps; ``stages``
    is the ring's depth (:data:`STAGES`)."""

    mt: int
    nt: int
    wm: int
    wn: int
    splits: int = 1
    stages: int = 4

    @property
    def rows(self) -> int:
        return 16 * self.mt * self.wm

    @property
    def pixels(self) -> int:
        return 8 * self.nt * self.wn

    @property
    def threads(self) -> int:
        return 32 * self.wm * self.wn

    @property
    def share(self) -> int:
        """Sums of the tile each block of a cluster adds up and stores (a multiple of 4)."""
        return cdiv(self.rows * self.pixels, 4 * self.splits) * 4

    def stage_floats(self) -> int:
        return STEP_MULTIPLE * (KS * (self.pixels + 8) + 10 * self.rows)

    def ring_floats(self) -> int:
        return self.stages * self.stage_floats()

    def smem_floats(self, max_steps: int) -> tuple[int, int, int]:
        """(the columns' offset, the push slots' offset, the total) in floats, for a
        block of at most ``max_steps`` k steps (a column decoded: two words)."""
        chan_off = self.ring_floats()
        red_off = chan_off + 2 * KS * max_steps
        return chan_off, red_off, red_off + (push_slot_floats(self.splits, self.share)
                                             if self.splits > 1 else 0)

    def smem_bytes(self, p: Problem) -> int:
        """At most: a row block has at most n + log2(n) + 1 pairs of its n = C R S columns
        (each round pairs at most half the columns the one before did)."""
        steps = cdiv(cdiv(p.columns + p.columns.bit_length() + 1, 8), STEP_MULTIPLE)
        most = cdiv(steps, self.splits) * STEP_MULTIPLE
        return 4 * self.smem_floats(most)[2]

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(tiles of output pixels x row blocks, the row blocks fastest; 1; splits): the
        cluster spans z."""
        g = p.geom
        return cdiv(g.n * g.oh * g.ow, self.pixels) * cdiv(g.k, self.rows), 1, self.splits


# (mt, nt, wm, wn).  On the 41 1x1 layers of GoogLeNet-8x and ResNet-50-8x (H200,
# docs/notes/sparse_conv.md) the 128 x 128 tile (4, 4, 2, 4), which reads the records least
# often a pixel, was the fastest on 12 and each other shape on 2-8, but (4, 4, 1, 4) and
# (4, 4, 2, 2), which were the fastest on some layers before it was added
SHAPES = ((2, 4, 2, 2), (1, 4, 2, 2), (2, 2, 2, 2), (4, 4, 1, 4), (4, 4, 2, 2), (4, 2, 2, 2),
          (2, 4, 4, 2), (4, 4, 2, 4), (2, 4, 2, 4))
SPLITS = (1, 2, 4, 8)          # portable cluster sizes
TILES = tuple(Tile(*shape, splits, stages) for stages in STAGES for shape in SHAPES
              for splits in SPLITS)


def name(t: Tile, vec: bool) -> str:
    return (f"sparse_pairs_tc<{t.mt}, {t.nt}, {t.wm}, {t.wn}, {t.splits}, "
            f"{'true' if vec else 'false'}, {t.stages}>")


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``, or None."""
    g = p.geom
    if g.r * g.s > MAX_TAPS:
        return f"sparse_pairs_tc runs filters of at most {MAX_TAPS} taps, got {g.r}x{g.s}"
    if g.groups != 1 or g.dilation != (1, 1):
        return f"sparse_pairs_tc runs groups 1, undilated, got groups {g.groups}, " \
               f"dilation {g.dilation}"
    if max(g.n * g.c * g.h * g.w, g.n * g.k * g.oh * g.ow) > 2 ** 31 - 1:
        return "the input or the output has more than 2**31 - 1 elements"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile that fits the shared memory of ``facts``' device, on a device with
    sparse tf32 tensor cores (sm_80+), for a supported problem at one tf32 pass; clusters
    on sm_90 only, of at most one block a 16-column step; else none."""
    if supported(p) is not None or precision.current() != "tf32":
        return []
    if facts is not None and not has_tf32_mma(facts):
        return []
    # facts None (a plan's list of choices): every tile that fits the largest device; the
    # launch checks this one
    limit = facts.smem_per_block_optin if facts is not None else MAX_SMEM_OPTIN
    clusters = facts is None or has_clusters(facts)
    return [t for t in TILES if t.smem_bytes(p) <= limit
            and (t.splits == 1 or clusters and t.splits <= cdiv(p.columns, KS))]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """64 rows by 32 pixels on four warps (16 rows where the layer has at most 32; 128 rows
    by 64 pixels on eight warps where it has more than 64 and its input is copied 4 bytes
    at a time, which the tile's rows then share more), and the fewest splits that make eight
    warps an SM (at most 8 splits, and at least two k steps a block) and fit the block's
    shared memory (a layer of many columns; where the shape fits at no split, the same for
    the four-warp shapes, then each at 3 stages), 4 stages deep.  On the 21 wider stride-1 layers of
    GoogLeNet-8x and ResNet-50-8x (H200, docs/notes/sparse_conv.md; the rule was drawn
    from these timings) the rule's tile was the fastest of all 36 on 14 and at most 1.34x
    the fastest, where the 64-row tile's rule had been the fastest on 4 and up to 2.03x."""
    if p.geom.k <= 32:
        shape = SHAPES[1]
    else:
        shape = SHAPES[6] if p.geom.k > 64 and not vectorized(p.geom) else SHAPES[2]
    sms = facts.sm_count if facts is not None else 132
    limit = facts.smem_per_block_optin if facts is not None else MAX_SMEM_OPTIN
    clusters = facts is None or has_clusters(facts)
    steps = cdiv(p.columns, KS)

    def split(shape: tuple, stages: int = 4) -> Tile:
        one = Tile(*shape, 1, stages)
        blocks = one.grid(p)[0]
        for splits in SPLITS:
            if splits > 1 and (not clusters or steps < 2 * splits):
                break
            one = Tile(*shape, splits, stages)
            if blocks * splits * one.threads >= 8 * 32 * sms and one.smem_bytes(p) <= limit:
                break
        return one

    # a layer of so many columns that the rule's tile does not fit at any split (a 7x7
    # filter over 1,400 channels): the smaller rings of the four-warp tiles, then of 3
    # stages, else the rule's tile, which the launch's check refuses by name
    for stages in (4, 3):
        for one in (split(s, stages) for s in dict.fromkeys((shape, SHAPES[2], SHAPES[1]))):
            if one.smem_bytes(p) <= limit:
                return one
    return split(shape)


def vectorized(geom: ConvGeometry, x=None) -> bool:
    """Whether the input rows copy in 16-byte words: a 1x1 filter at stride 1 without
    padding (an output pixel's input is the same pixel), planes of a multiple of 4 pixels
    (four pixels then never straddle two images) and ``x`` 16-byte aligned."""
    ok = ((geom.r, geom.s, geom.stride, geom.padding) == (1, 1, (1, 1), (0, 0))
          and geom.h * geom.w % 4 == 0)
    if x is not None:
        ok = ok and int(x.data.ptr) % 16 == 0
    return ok


def kernels(p: Problem, tile: Tile, vec: bool | None = None) -> tuple[cuda.KernelRef, ...]:
    vec = vectorized(p.geom) if vec is None else vec
    return (cuda.kernel_ref(FILE, name(tile, vec)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile, both copy widths."""
    return sorted({name(t, v) for t in TILES for v in (True, False)})


def remainder_records(weights, rows: int) -> PairRecords:
    """The k-step records of a sparse layer's remainder (``weights``: a
    :class:`~tensorconv.ops.sparse_conv.SparseWeights`, columns ``c R S + r S + s``) for
    blocks of ``rows`` rows, made once and kept with the weights."""
    key = ("pairs", rows)
    if key not in weights.staged:
        k, c = weights.shape[0], int(np.prod(weights.shape[1:]))
        nnz = weights.remainder_nnz
        indptr = backend.to_host(weights.indptr)
        weights.staged[key] = pair_records(
            indptr, backend.to_host(weights.indices)[:nnz], backend.to_host(weights.data)[:nnz],
            k, c, rows, backend.array_module(weights.indptr))
    return weights.staged[key]


def check_tile(tile, p: Problem, facts: DeviceFacts | None = None) -> None:
    """Raise ``ValueError`` for a tile the kernel does not have, or that this device
    cannot launch."""
    if tile not in TILES:
        raise ValueError(f"tile must be one of the shapes {SHAPES} with splits in "
                         f"{SPLITS} and stages in {STAGES}, got {tile!r}")
    check_splits(tile, SPLITS, facts)
    check_smem(tile, tile.smem_bytes(p), facts)


def run(x, records: PairRecords, out, p: Problem, tile: Tile, epilogue=(None, None, False),
        accumulate: bool = False) -> None:
    """``sparse_pairs_tc`` on checked arguments (``records`` :func:`pair_records` of the
    layer for ``tile``'s rows)."""
    bias, residual, relu = epilogue
    g = p.geom
    vec = vectorized(g, x)
    per_split = cdiv(cdiv(max(records.max_steps, 1), STEP_MULTIPLE), tile.splits) * STEP_MULTIPLE
    chan_off, red_off, floats = tile.smem_floats(per_split)
    check_smem(tile, 4 * floats)
    i32 = np.int32
    launch(kernels(p, tile, vec)[0], tile.grid(p), (tile.threads,),
           (x, records.recs, records.cols, records.segs, ptr(bias), ptr(residual), out,
            *(i32(v) for v in (g.n, g.c, g.h, g.w, g.k, g.oh, g.ow, g.r, g.s, *g.stride,
                               *g.padding)), i32(cdiv(g.k, tile.rows)),
            i32(per_split), i32(chan_off),
            i32(red_off), cuda.fast_div(tile.share if tile.splits > 1 else 1),
            i32(bool(accumulate)), i32(bool(relu))), 4 * floats)


def sparse_pairs_conv2d(x, w, bias=None, stride=1, padding=0, *, relu: bool = False,
                        residual=None, tile: Tile | None = None,
                        records: PairRecords | None = None, out=None):
    """``relu?(conv2d(x, w, stride, padding) + bias + residual)`` for a pruned ``w`` on the
    sparse tensor cores, at one tf32 pass.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (CuPy; NumPy computes the fp32 reference)
    w : array, (K, C, R, S), float32, R S <= 64: zeros are pruned weights (host or device)
    bias : array, (K,), float32, optional
    stride, padding : int or (int, int)
    relu : bool
    residual : array, (N, K, OH, OW), float32, optional
    tile : Tile, optional (default :func:`default_tile`)
    records : PairRecords, optional: :func:`pair_records` of ``w`` for ``tile``, made once
    out : array, (N, K, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, OH, OW), float32
    """
    check_bools(relu=relu)
    x = backend.as_array(x, "x")
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    wh = backend.to_host(backend.as_array(w, "w"))
    check_array(wh, "w", ndim=4, dtype=np.float32)
    geom = conv_geometry(x.shape, wh.shape, stride, padding, names=("x", "w"))
    p = Problem(geom)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    xp = backend.array_module(x)
    bias = check_vector(None if bias is None else backend.as_array(bias, "bias"), "bias",
                        geom.k, xp, "output channel")
    residual = check_residual(residual, geom.output_shape, xp)
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        y = reference.conv2d(x, wh, bias, geom.stride, geom.padding)
        if residual is not None:
            y = y + residual
        return (np.maximum(y, 0) if relu else y).astype(np.float32)
    gpu_only(xp, "sparse_pairs_conv2d")
    if precision.current() != "tf32":
        raise ValueError("sparse_pairs_conv2d runs at one tf32 pass only: call it under "
                         "tensorconv.precision.using('tf32')")
    facts = backend.device_facts()
    if not has_tf32_mma(facts):
        raise ValueError("sparse_pairs_conv2d needs sparse tf32 tensor cores (sm_80 or newer)")
    tile = tile or default_tile(p, facts)
    check_tile(tile, p, facts)
    if records is None:
        records = pair_records(*dense_csr(wh), geom.k, p.columns, tile.rows, xp)
    elif not isinstance(records, PairRecords):
        raise TypeError(f"records must be pair_records(...), got {type(records).__name__}")
    elif records.rows != tile.rows or records.segs.shape[0] != cdiv(geom.k, tile.rows):
        raise ValueError(f"records were made for blocks of {records.rows} rows and "
                         f"{records.segs.shape[0]} blocks; tile {tile} has {tile.rows} rows "
                         f"and this layer {cdiv(geom.k, tile.rows)} blocks")
    elif records.columns != p.columns:
        raise ValueError(f"records were made for a kernel of {records.columns} columns; w "
                         f"has {p.columns} (C R S)")
    out = output_buffer(xp, out, geom.output_shape)
    run(x, records, out, p, tile, (bias, residual, bool(relu)))
    return out
