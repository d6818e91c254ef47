"""Sparse convolution over a block-sparse kernel (``kernels_cu/sparse_conv.cu``), fp32, NCHW.

A pruned layer's kernel, reorganised by Algorithm 1 into dense blocks and a CSR remainder
(:mod:`tensorconv.blocksparse`), runs as one launch sequence: the dense blocks as
register-tiled GEMMs gathering their im2col columns, then the remainder (tiled over rows
and pixels, or row by row) with the epilogue (bias, residual, ReLU).  By default every
block runs in one launch, its columns cut so that deep layers fill the GPU, and a
fixed-order reduction writes the output (the block table,
:mod:`tensorconv.ops.sparse_blocks`).  The paper's way is kept as ``pieces``: the output
zeroed, then each block (or range of its rows, a *piece*) a launch adding into its output
rows.  The paper (§4.2) splits a block of r rows into ``32 * (r // 32)`` rows on 32-row
tiles and the ``r % 32`` left on an 8- or 16-row tile (two halves when more than 16), so
that a block's cost grows with its rows, not in steps of 32; on an H100 each piece's
gather of the im2col columns costs more than its multiply-adds, so ``split="merged"``
runs the rest as one piece on the shortest tile that holds it (``split="paper"`` keeps
the paper's halves).  Any batch, stride and padding; filters of any size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.blocksparse import BlockSparse, column_taps
from tensorconv.checks import (
    ConvGeometry,
    check_array,
    check_bools,
    check_choice,
    check_residual,
    check_vector,
    conv_geometry,
    output_buffer,
)
from tensorconv.ops import _igemm, sparse_blocks
from tensorconv.ops import sparse_pairs_tc as spt
from tensorconv.ops import sparse_tc_remainder as stc
from tensorconv.ops import sparse_unrolled_direct as sud
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu, ptr
from tensorconv.ops.sparse_blocks import (  # noqa: F401  (the blocks' GEMM, re-exported)
    SPLITS,
    TABLE_TILES,
    TILES,
    BlockTable,
    Piece,
    Problem,
    Tile,
    block_table,
    candidates,
    check_pieces,
    default_pieces,
    default_tile,
    kernels,
    paper_tile,
    table_span,
)
from tensorconv.ops.sparse_pointwise import (  # noqa: F401  (the 1x1 remainder's, re-exported)
    POINTWISE_TILES,
    PointwiseTile,
    default_pointwise_tile,
    gathered_weights,
    launch_pointwise,
    pointwise_shares,
    pointwise_tables,
    pointwise_warps,
    share_bounds,
)
from tensorconv.ops.sparse_remainder import (  # noqa: F401  (the remainder's choice, re-exported)
    _POINTWISE_STRIDED_BYTES,
    CSR_PIXELS,
    REMAINDERS,
    _csr_name,
    _pointwise_name,
    _tiled_name,
    body_fmas,
    check_remainder_choice,
    choice_name,
    choose_remainder,
    default_pointwise_choice,
    default_staging,
    fits,
    remainder_choices,
    remainder_kind,
    unrolled_module,
)
from tensorconv.ops.sparse_staging import GATHERED, gathered_geometry, gathers  # noqa: F401
from tensorconv.ops.sparse_tiles import (  # noqa: F401  (the remainder's tiles, re-exported)
    REMAINDER_TILES,
    RemainderGeometry,
    RemainderTile,
    Staging,
    balanced_rows,
    bank_conflicts,
    column_phases,
    default_remainder_tile,
    lane_words,
    merged_rows,
    remainder_geometry,
    remainder_shares,
    remainder_smem,
    remainder_tables,
    split_rows,
    stagings,
    tile_shape,
    tiled_launch,
)
from tensorconv.scratch import workspace

FILE = "sparse_conv.cu"
INT32_MAX = 2 ** 31 - 1



def supported(geom: ConvGeometry) -> str | None:
    """Why the kernels cannot run the convolution ``geom`` (None when they can)."""
    if geom.groups != 1 or geom.dilation != (1, 1):
        return "sparse convolution supports neither groups nor dilation"
    if geom.n * geom.c * geom.h * geom.w > INT32_MAX or \
            geom.n * geom.k * geom.oh * geom.ow > INT32_MAX:
        return "the input or the output has more than 2**31 - 1 elements"
    return None


@dataclass(frozen=True, eq=False)
class SparseWeights:
    """A block-sparse kernel on the GPU as the kernels read it, for one input plane size:
    per block its values (rows x cols), rows, columns and its columns' gather table
    ((cols, 4) int32: c·H·W + r·W + s, r, s, 0 — one 16-byte load a column); the
    remainder's CSR arrays and its nonzero count (``remainder_nnz``); the im2col column
    tables (``col_off`` = c·H·W + r·W + s, ``col_r``, ``col_s``)."""

    shape: tuple
    hw: tuple
    values: tuple
    rows: tuple
    cols: tuple
    gathers: tuple
    indptr: object
    indices: object
    data: object
    col_off: object
    col_r: object
    col_s: object
    remainder_nnz: int = 0
    staged: dict = field(default_factory=dict)   # (tile, staging) -> remainder_tables


def pack_weights(packed: BlockSparse, hw, xp) -> SparseWeights:
    """``packed``'s arrays on ``xp``'s device, with the column tables of an ``hw`` =
    (H, W) input."""
    if not isinstance(packed, BlockSparse):
        raise TypeError(f"packed must be a BlockSparse, got {type(packed).__name__}")
    h, w = hw
    lay = packed.layout
    c, r, s = column_taps(np.arange(lay.cols), lay.shape)
    i32 = np.int32
    dev = lambda a, dt: xp.ascontiguousarray(xp.asarray(a, dtype=dt))  # noqa: E731
    off = c * h * w + r * w + s
    gather = lambda cols: np.stack([off[cols], r[cols], s[cols], 0 * cols], 1)  # noqa: E731
    return SparseWeights(
        lay.shape, (h, w), tuple(dev(v, np.float32) for v in packed.values),
        tuple(dev(rows, i32) for rows, _ in lay.blocks),
        tuple(dev(cols, i32) for _, cols in lay.blocks),
        tuple(dev(gather(cols), i32) for _, cols in lay.blocks),
        dev(lay.indptr, i32), dev(lay.indices if lay.indices.size else [0], i32),
        dev(packed.data if packed.data.size else [0.0], np.float32),
        dev(off, i32), dev(r, i32), dev(s, i32), int(lay.indptr[-1]))


def remainder_kernels(geom: ConvGeometry, remainder: str = "auto",
                      tile: RemainderTile | PointwiseTile | None = None,
                      weights: SparseWeights | None = None, epi: int = 0) -> tuple:
    """The kernels that run the remainder and the epilogue of ``geom`` (``"auto"``: as
    :func:`choose_remainder`) on ``tile`` (default: the rule's); the unrolled kernel's
    only with its ``weights`` (its code is theirs), the unstaged 1x1 one's for the
    epilogue ``epi`` (``sparse_unrolled_direct.epilogue``)."""
    auto, remainder = remainder == "auto", remainder_kind(geom, remainder, tile)
    if remainder == "rows":
        return (cuda.kernel_ref(FILE, _csr_name(CSR_PIXELS[0])),)
    if remainder == "tc":
        p = stc.Problem(geom)
        return stc.kernels(p, tile or stc.default_tile(p, None))
    if remainder == "pairs":
        p = spt.Problem(geom)
        return spt.kernels(p, tile or spt.default_tile(p, None))
    if remainder == "unrolled":
        mod = unrolled_module(geom, tile)
        p = mod.Problem(geom)
        tile = tile or mod.default_tile(p, None)
        return mod.kernels(p, tile, weights, epi) if mod is sud else mod.kernels(p, tile, weights)
    sm_count = backend.device_facts().sm_count
    if remainder == "pointwise":       # on the input as given or gathered: either may share
        tile = tile or (default_pointwise_choice(geom, sm_count)[0] if auto else
                        default_pointwise_tile(geom, sm_count))
        ref = cuda.kernel_ref(FILE, _pointwise_name(tile))
        planes = (geom, gathered_geometry(geom)) if gathers(geom) else (geom,)
        shared = any(pointwise_shares(g, tile, sm_count) > 1 for g in planes)
        return (ref, _igemm.reduce_ref()) if shared else (ref,)
    tile = tile or default_remainder_tile(geom)
    shares = remainder_shares(geom, tile, remainder_geometry(geom, tile), sm_count)[0]
    ref = cuda.kernel_ref(FILE, _tiled_name(tile))
    return (ref, _igemm.reduce_ref()) if shares > 1 else (ref,)


def layer_kernels(pieces, geom: ConvGeometry, remainder: str = "auto",
                  tile: RemainderTile | PointwiseTile | None = None,
                  weights: SparseWeights | None = None,
                  epilogue=(None, None, False)) -> tuple:
    """Every kernel a layer of ``pieces`` launches on ``geom`` with the remainder on
    ``tile`` and ``epilogue`` = (bias, residual, relu) (an automatic remainder that falls
    back to ``"rows"`` for want of shared memory launches the row kernel instead)."""
    bias, residual, relu = epilogue
    epi = sud.epilogue(bool(pieces), bias is not None, residual is not None, bool(relu))
    refs = sparse_blocks.block_kernels(pieces) | set(remainder_kernels(geom, remainder, tile,
                                                                        weights, epi))
    return tuple(sorted(refs, key=lambda r: r.name))


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every GEMM tile and remainder kernel."""
    return sorted(sparse_blocks.instantiations() + [_csr_name(p) for p in CSR_PIXELS]
                  + [_tiled_name(t) for t in REMAINDER_TILES]
                  + [_pointwise_name(t) for t in POINTWISE_TILES])


def sparse_conv2d(x, packed: BlockSparse, bias=None, stride=1, padding=0, *, relu=False,
                  residual=None, pieces=None, weights=None, remainder: str = "auto",
                  remainder_tile=None, remainder_staging=None, out=None):
    """``relu?(conv(x, w) + bias + residual)`` with ``w`` block-sparse (fp32, NCHW).

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    packed : BlockSparse, of a (K, C, R, S) kernel
    bias : array, (K,), float32, optional
    stride, padding : int or (int, int)
    relu : bool
    residual : array, (N, K, OH, OW), float32, optional
    pieces : tuple of Piece or BlockTable, optional
        How the blocks launch; default :func:`default_pieces`.  Every block row must be in
        exactly one piece; a table must be :func:`block_table` of ``packed``'s layout.
    weights : SparseWeights, optional
        :func:`pack_weights` of ``packed`` for this input size, prepared once.
    remainder : {"auto", "rows", "tiled", "pointwise", "tc", "unrolled", "pairs"}
        The remainder's kernel: one thread per pixel of one row (the row-wise direct
        sparse convolution), shared-memory tiles over rows and pixels (an error where
        the densest rows' taps do not fit shared memory), for a 1x1 filter only, tiles
        over rows and pixels that read the input straight from global memory, or the
        tensor cores (:mod:`tensorconv.ops.sparse_tc_remainder`: 3xTF32, one tf32 pass
        under ``precision.using("tf32")``), or code written for these weights
        (:mod:`tensorconv.ops.sparse_unrolled`: "same" padding, any stride; for a 1x1
        filter, or any filter given one of its tiles, the unstaged
        :mod:`tensorconv.ops.sparse_unrolled_direct`, any stride and padding; compiled per
        layer), or for a 1x1 filter at stride 1 without padding, at one tf32 pass only, the
        sparse tensor cores (:mod:`tensorconv.ops.sparse_pairs_tc`); "auto" picks by
        :func:`choose_remainder` (or
        by ``remainder_tile``'s kernel), "rows" where the tiled kernel does not fit.
    remainder_tile : RemainderTile, PointwiseTile, sparse_tc_remainder.Tile,
            sparse_unrolled.Tile, sparse_unrolled_direct.Tile or sparse_pairs_tc.Tile,
            optional
        The tiled, pointwise, tensor-core, unrolled or sparse-tensor-core kernel's tile (one of
        :data:`REMAINDER_TILES`, :data:`POINTWISE_TILES`, ``sparse_tc_remainder.TILES``,
        ``sparse_unrolled.candidates``, ``sparse_unrolled_direct.candidates`` or
        ``sparse_pairs_tc.TILES``); default the rule's
        (:func:`default_remainder_tile`, :func:`default_pointwise_tile`,
        ``sparse_tc_remainder.default_tile``, ``sparse_pairs_tc.default_tile``).
        :func:`remainder_choices` lists what a tuned plan times.
    remainder_staging : Staging, optional
        How the tiled kernel stages its input (column phases, word copies); default as
        :func:`tiled_launch`.  :data:`GATHERED`: the pointwise kernel of a strided 1x1
        filter without padding reads a compact copy of the pixels it needs.
    out : array, (N, K, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, OH, OW), float32
    """
    check_bools(relu=relu)
    check_choice(remainder, "remainder", REMAINDERS)
    if not isinstance(packed, BlockSparse):
        raise TypeError(f"packed must be a BlockSparse, got {type(packed).__name__}")
    x = backend.as_array(x, "x")
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    geom = conv_geometry(x.shape, packed.shape, stride, padding, names=("x", "packed"))
    xp = backend.array_module(x)
    bias = check_vector(None if bias is None else backend.as_array(bias, "bias"), "bias",
                        geom.k, xp, "output channel")
    residual = check_residual(residual, geom.output_shape, xp)
    if (why := supported(geom)) is not None:
        raise ValueError(why)
    check_remainder_choice(geom, remainder, remainder_tile, remainder_staging)
    if xp is np:
        no_out_on_cpu(out=out)
        y = reference.sparse_conv2d(x, packed, bias, geom.stride, geom.padding, relu=relu,
                                    residual=residual)
        return y.astype(np.float32)
    pieces = default_pieces(packed, geom, backend.device_facts()) if pieces is None else pieces
    check_pieces(pieces, packed)
    if weights is None:
        weights = pack_weights(packed, (geom.h, geom.w), xp)
    elif not isinstance(weights, SparseWeights) or weights.shape != packed.shape or \
            weights.hw != (geom.h, geom.w):
        raise ValueError("weights must be pack_weights(packed, (H, W), xp) of this input size")
    out = output_buffer(xp, out, geom.output_shape)
    if remainder == "auto" and isinstance(remainder_tile, (RemainderTile, stc.Tile, spt.Tile)):
        # a tile asked for runs or is refused, never swapped for rows
        remainder = remainder_kind(geom, remainder, remainder_tile)
    run(x, weights, out, geom, pieces, (bias, residual, bool(relu)), remainder,
        remainder_tile, remainder_staging)
    return out


def run(x, weights: SparseWeights, out, geom: ConvGeometry, pieces,
        epilogue=(None, None, False), remainder: str = "auto",
        remainder_tile: RemainderTile | PointwiseTile | None = None,
        remainder_staging: Staging | None = None) -> None:
    """The launch sequence on checked arguments (``epilogue``: bias, residual, relu;
    ``remainder_tile``: the tiled remainder's tile, default :func:`default_remainder_tile`,
    or the pointwise one's, default :func:`default_pointwise_tile`;
    ``remainder_staging``: how the tiled remainder stages its input, default as
    :func:`tiled_launch`, or :data:`GATHERED` for the pointwise one)."""
    bias, residual, relu = epilogue
    i32 = np.int32
    q = geom.n * geom.oh * geom.ow
    dims = (i32(geom.c * geom.h * geom.w), i32(geom.h), i32(geom.w), i32(geom.k),
            i32(geom.oh), i32(geom.ow), i32(geom.stride[0]), i32(geom.stride[1]),
            i32(geom.padding[0]), i32(geom.padding[1]), i32(q))
    tables = (weights.col_off, weights.col_r, weights.col_s)
    # the blocks may write every row: an empty remainder would only copy y onto itself
    needed = not pieces or weights.remainder_nnz or bias is not None or \
        residual is not None or relu
    kind, st = remainder_kind(geom, remainder, remainder_tile), remainder_staging
    tiled = tiled_launch(x, weights, geom, remainder_tile, None if st is None else st.phases,
                         vec=1 if st is not None and st.words else None) \
        if kind == "tiled" and needed else None
    if kind == "tc" and needed:
        tiled = stc.tc_launch(x, weights, geom, remainder_tile)
    if tiled is not None and tiled.smem > backend.device_facts().smem_per_block_optin:
        if remainder != "auto":    # before any launch
            raise ValueError(f"the {kind} remainder needs {tiled.smem} bytes of shared memory "
                             f"for this kernel (its densest rows); use remainder='rows'")
        tiled = None
    unrolled = unrolled_module(geom, remainder_tile) if kind == "unrolled" else None
    if unrolled is not None and needed:   # its code written (or refused as too large) first
        remainder_tile = remainder_tile or unrolled.default_tile(unrolled.Problem(geom), None)
        unrolled.kernels(unrolled.Problem(geom), remainder_tile, weights)
    sparse_blocks.launch_blocks(x, weights, out, geom, pieces, dims)
    if not needed:
        return
    if kind == "pointwise":
        if remainder == "auto" and remainder_tile is None and st is None:
            remainder_tile, st = default_pointwise_choice(geom, backend.device_facts().sm_count)
        launch_pointwise(x, weights, out, geom, bias, residual, relu, bool(pieces),
                         remainder_tile, st is not None and st.gather)
        return
    if kind == "tc" and tiled is not None:
        stc.run_tc(x, out, geom, tiled, bias, residual, bool(relu), bool(pieces))
        return
    if kind == "pairs":
        p = spt.Problem(geom)
        tile = remainder_tile or spt.default_tile(p, backend.device_facts())
        spt.run(x, spt.remainder_records(weights, tile.rows), out, p, tile,
                (bias, residual, bool(relu)), accumulate=bool(pieces))
        return
    if unrolled is not None:
        unrolled.run(x, weights, out, geom, remainder_tile, bias, residual, bool(relu),
                     bool(pieces))
        return
    if tiled is None:
        pix = CSR_PIXELS[0]
        launch(cuda.kernel_ref(FILE, _csr_name(pix)), (cdiv(q, pix), geom.k, 1), (pix,),
               (x, weights.indptr, weights.indices, weights.data, *tables,
                ptr(bias), ptr(residual), out,
                *dims, i32(bool(pieces)), i32(bool(relu))))
        return
    tile, g, shares, per_share, tables, smem = tiled
    chunks = cdiv(geom.c, tile.ck)
    size = geom.k * q
    partial = workspace(backend.array_module(x), shares * size) if shares > 1 else None
    ints = (geom.n, geom.c, geom.h, geom.w, geom.k, geom.oh, geom.ow, *geom.stride,
            *geom.padding, g.nb, g.th, g.tw, g.iht, g.pitch, g.ipad, g.vec,
            g.rstep, g.cstep, g.phases, g.rphases, chunks, per_share, cdiv(geom.ow, g.tw),
            tables.longest, bool(pieces), bool(relu))
    gx, gy, gz = g.grid(geom, tile)
    launch(cuda.kernel_ref(FILE, _tiled_name(tile)), (gx, gy, gz * shares),
           (g.threads(tile),), (x, tables.row_tab, tables.taps, tables.row_of, ptr(bias),
                                ptr(residual), out, ptr(partial), *(i32(v) for v in ints)),
           smem)
    if partial is not None:
        kernel, grid, rints = _igemm.reduce_config(geom, 0, shares, bool(relu),
                                                   backend.device_facts().sm_count)
        kernel(grid, (256, 1, 1), (partial, ptr(bias), ptr(residual), out) + rints)

