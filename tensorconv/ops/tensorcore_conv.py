"""Tensor-core convolution for small batches (``kernels_cu/tensorcore_conv.cu``): fp16 in,
fp32 accumulate, fp16 out (or all of it in bf16), NCHW or NHWC (Sun et al., "Efficient
Tensor Cores support in TVM for Low-Latency Deep Learning").

An implicit-im2col GEMM (M = N·OH·OW pixels, N = Cout, K = C·R·S): the lowered matrix is
never built, ragged sizes are predicated.  Operands stream through a ring of shared-memory
chunks, by 16-byte ``cp.async`` where rows allow (weights with K % 8 == 0; NHWC inputs
with C % 8 == 0) and otherwise one half per load through registers, the k -> input offset
map read from a per-layer table (:func:`tap_table`).  At batch 1 most layers give too few
output tiles for the GPU, so K splits across ``Tile.splits`` blocks whose partial tiles the
last block of each tile adds up inside the same launch (a counter per tile, reset by that
block: the launch replays from a CUDA graph).  Four instruction paths: ``mma.sync``
m16n8k16 with ``ldmatrix``, WMMA with the paper's fragment shapes, (1x1 filters without
padding) ``mma.sync`` on operands loaded from global memory straight into its fragments,
K shared by the warps of a block (:data:`FRAG`), and (NCHW, C % 4 == 0) ``mma.sync`` on
a block's input rows copied once into shared memory with each pixel's channels
contiguous (:data:`HALO`); see :data:`PATHS`.
:func:`default_tile` is an analytic rank; :mod:`tensorconv.tuning.tc_search` times the
best-ranked tiles.
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import replace

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import check_array, check_choice, conv_geometry
from tensorconv.ops._launch import cdiv, launch, ptr, stored_tile
from tensorconv.ops._tc_tiles import (  # noqa: F401  (the op's schedule space, re-exported)
    BF16_CLUSTER_STAGES,
    BF16_STAGES,
    BK,
    CLUSTER_SHAPES,
    CLUSTER_SPLITS,
    CLUSTER_STAGES,
    DTYPES,
    FRAG,
    FRAG_SHAPES,
    HALO,
    HALO_PAD,
    HALO_SHAPES,
    LAYOUTS,
    MAX_SPLITS,
    PAD,
    PATHS,
    RING_HALVES,
    SHAPES,
    STAGES,
    Problem,
    Tile,
    candidates,
    check_tile,
    frag_fits,
    frag_shares,
    frag_unroll,
    halo_cols,
    halo_fits,
    halo_pitch,
    halo_rows,
    halo_shares,
    halo_smem,
    path_fits,
    ring_fits,
    space,
    split_k,
    supported,
)
from tensorconv.reference import conv as reference
from tensorconv.scratch import counters as scratch_counters
from tensorconv.scratch import workspace

FILE = "tensorcore_conv.cu"
log = logging.getLogger(__name__)


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The best-ranked candidate (what runs untuned)."""
    return candidates(p, facts)[0]


def tile_key(p: Problem) -> str:
    """The tune-cache key of ``p``'s tile: device, source, shape, layout, element type."""
    short = {"float16": "fp16", "bfloat16": "bf16"}[p.dtype]
    return tunecache.make_key("tc_conv", FILE, f"{p.geom}|{p.layout}|{short}")


def element_dtype(name: str) -> np.dtype:
    """The NumPy (and CuPy) dtype of one of :data:`DTYPES`: bfloat16 is ml_dtypes'."""
    check_choice(name, "dtype", DTYPES)
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def tuned_tile(p: Problem) -> Tile | None:
    """The tile :func:`tensorconv.tuning.tc_search.tune_tc_tile` stored for ``p``, if any."""
    return stored_tile(sys.modules[__name__], p)


def _name(t: Tile, mode: int) -> str:
    if t.path in (FRAG, HALO):     # tc_frag / tc_halo<MT, NT, WC, WP, KS, U, MODE>
        kernel = "tc_frag" if t.path == FRAG else "tc_halo"
        return (f"{kernel}<{t.wn // 16}, {t.wm // 8}, {t.bn // t.wn}, {t.bm // t.wm}, "
                f"{t.splits}, {t.stages}, {mode}>")
    cl = t.splits if t.cluster else 1
    return f"tc_conv<{t.bm}, {t.bn}, {t.wm}, {t.wn}, {t.path}, {mode}, {t.stages}, {cl}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernel ``tile`` launches for ``p``."""
    return (cuda.kernel_ref(FILE, _name(tile, tile.mode(p))),)


def instantiations() -> list[str]:
    """Every shape on every path it fits, at each of its depths, in the four modes (both
    layouts, vector loads or not; split counts are runtime), for fp16 and, in its smaller
    space, bf16 (mode bit 2); the fragments path's tiles in both layouts and types, the halo
    path's in NCHW in both types."""
    out = [_name(Tile(*s, k, FRAG, frag_unroll(s)), mode) for s in FRAG_SHAPES
           for k in frag_shares(s) for mode in (0, 1, 4, 5)]
    out += [_name(Tile(*s, k, HALO, frag_unroll(s)), mode) for s in HALO_SHAPES
            for k in halo_shares(s) for mode in (0, 4)]
    for bf, (stages, cluster_stages) in ((0, (STAGES, CLUSTER_STAGES)),
                                         (4, (BF16_STAGES, BF16_CLUSTER_STAGES))):
        out += [_name(Tile(*s, path=q, stages=st), bf | mode) for s in SHAPES for q in stages
                if path_fits(s, q) for st in stages[q] for mode in range(4)
                if ring_fits(s, st, mode)]
        out += [_name(Tile(*s, cl, 0, st, True, True), bf | mode) for s in CLUSTER_SHAPES
                for st in cluster_stages for mode in (2, 3) for cl in CLUSTER_SPLITS
                if ring_fits(s, st, mode)]
    return sorted(out)


def tap_table(p: Problem) -> np.ndarray:
    """(K, 2) int32: for each k = (r, s, c), the offset of its input element from the
    pixel's corner (NCHW: c·H·W + r·W + s; NHWC: (r·W + s)·C + c) and r << 16 | s; each
    block copies its slice into shared memory once, and its loads read taps there instead
    of dividing k."""
    g = p.geom
    r, s, c = np.meshgrid(np.arange(g.r), np.arange(g.s), np.arange(g.c), indexing="ij")
    if p.layout == "nchw":
        off = c * g.h * g.w + r * g.w + s
    else:
        off = (r * g.w + s) * g.c + c
    return np.stack([off.ravel(), (r.ravel() << 16) | s.ravel()], axis=1).astype(np.int32)


@functools.cache
def _device_tap_table(device: int, p: Problem):
    """:func:`tap_table` on ``device``, built once per layer and kept for the process: a
    captured CUDA graph holds its address, so it must never be freed (K·8 bytes a layer)."""
    import cupy

    with cupy.cuda.Device(device):
        return cupy.asarray(tap_table(p))


def fragment_order(tile: Tile | None) -> bool:
    """Whether ``tile`` reads its weights in mma fragment order (the fragments and halo
    paths) rather than as (Cout, K) rows."""
    return tile is not None and tile.path in (FRAG, HALO)


def packed_shape(p: Problem, tile: Tile | None = None) -> tuple[int, ...]:
    """Shape of :func:`pack_weights` for ``p`` and ``tile``: (Cout, K) rows, or in fragment
    order (Cout / 16, R·S·(C / 16), 32 lanes, 8), each rounded up."""
    g = p.geom
    if fragment_order(tile):
        return (cdiv(g.k, 16), g.r * g.s * cdiv(g.c, 16), 32, 8)
    return (g.k, p.k)


def pack_weights(w, layout: str, xp=None, dtype: str = "float16", tile: Tile | None = None):
    """(Cout, C, R, S) weights as ``tile``'s kernel reads them, of ``dtype`` (float16 or
    bfloat16, rounded to nearest): (Cout, K) rows with K = (r, s, c) in both layouts (a
    tap's channels contiguous: NHWC's vector loads read eight at a time); or, for a tile of
    the fragments or halo path (:func:`fragment_order`), each warp's A fragments of a
    16 x 16 (channels x k) step as 32 lanes' 16 contiguous bytes, zero past Cout and C,
    k-steps ordered (r, s, 16-channel step).  Lane (g, t) holds rows g and g + 8 at channels
    4t .. 4t + 3 of the step (the kernels' k order).  ``layout`` is checked and kept for
    callers; it does not change the order."""
    check_choice(layout, "layout", LAYOUTS)
    elem = element_dtype(dtype)
    xp = xp or backend.array_module(w)
    if dtype == "bfloat16":
        # rounded on the host by ml_dtypes (once a layer): the same bits on any CuPy
        w = np.asarray(backend.to_host(w), np.float32).astype(elem)
        try:
            w = xp.asarray(w)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{xp.__name__} {getattr(xp, '__version__', '')} cannot hold "
                            f"bfloat16 arrays (CuPy 14 with ml_dtypes installed can)") from exc
    w = xp.ascontiguousarray(xp.asarray(w).transpose(0, 2, 3, 1).astype(elem))
    if not fragment_order(tile):
        return w.reshape(w.shape[0], -1)
    # the reordering moves 16-bit words (a uint16 view: every CuPy copies those)
    k, r, s, c = w.shape
    mt, cs = cdiv(k, 16), cdiv(c, 16)
    bits = xp.zeros((mt * 16, r * s, cs * 16), np.uint16)
    bits[:k, :, :c] = w.view(np.uint16).reshape(k, r * s, c)
    # (tile, h, g, tap, step, t, pair, e) -> (tile, tap, step, g, t, pair, h, e): row 8h + g,
    # channel 4t + 2·pair + e; a lane's 8 halves are a0 .. a3 (rows g, g + 8 at pair 0, then 1)
    bits = bits.reshape(mt, 2, 8, r * s, cs, 4, 2, 2).transpose(0, 3, 4, 2, 5, 6, 1, 7)
    return xp.ascontiguousarray(bits).reshape(mt, r * s * cs, 32, 8).view(elem)


def problem(x_shape, w_shape, stride, padding, layout: str, dtype: str = "float16") -> Problem:
    """The :class:`Problem` of an input of ``x_shape`` in ``layout`` and (Cout, C, R, S)
    weights, elements of ``dtype``."""
    check_choice(layout, "layout", LAYOUTS)
    check_choice(dtype, "dtype", DTYPES)
    nchw = x_shape if layout == "nchw" else (x_shape[0], x_shape[3], x_shape[1], x_shape[2])
    return Problem(conv_geometry(nchw, w_shape, stride, padding), layout, dtype)


def output_shape(p: Problem) -> tuple[int, int, int, int]:
    g = p.geom
    return (g.n, g.k, g.oh, g.ow) if p.layout == "nchw" else (g.n, g.oh, g.ow, g.k)


def tc_conv2d(x, w, bias=None, stride=1, padding=0, *, layout: str = "nchw",
              relu: bool = False, residual=None, tile: Tile | None = None, packed=None,
              out=None):
    """``relu?(conv(x, w) + bias + residual)`` on the tensor cores, fp16 (or bf16) in and
    out, fp32 accumulation.

    Parameters
    ----------
    x : array, float16 or bfloat16 (ml_dtypes'), C-contiguous: (N, C, H, W) for
        ``layout="nchw"``, (N, H, W, C) for ``"nhwc"`` (NumPy: the fp32 reference on the
        same values); x's type is the output's, the residual's and the products'
    w : array, (Cout, C, R, S), floating (rounded to x's type)
    bias : array, (Cout,), float32, optional
    residual : array like the output, x's dtype, optional
    tile : Tile, optional
        Default: the tuned tile (:func:`tuned_tile`), else :func:`default_tile`.
    packed : array, x's dtype, optional
        ``pack_weights(w, layout, tile=tile)``, prepared once: (Cout, C·R·S) rows, or the
        fragments and halo paths' order (:func:`packed_shape`).
    out : array like the output, x's dtype, optional (GPU only)
        C-contiguous, or a channel slice of a C-contiguous map (``y[..., a:b]`` in NHWC,
        ``y[:, a:b]`` in NCHW): a concatenation over channels written in place.

    Returns
    -------
    array, x's dtype: (N, Cout, OH, OW) or (N, OH, OW, Cout)
    """
    check_choice(layout, "layout", LAYOUTS)
    if not isinstance(relu, (bool, np.bool_)):
        raise TypeError(f"relu must be a bool, got {type(relu).__name__}")
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    xp = backend.array_module(x)
    if x.dtype.name not in DTYPES:
        raise TypeError(f"x must be one of {DTYPES}, got {x.dtype.name}")
    check_array(x, "x", ndim=4, contiguous=True, xp=xp)
    check_array(w, "w", ndim=4, xp=xp)
    p = problem(x.shape, w.shape, stride, padding, layout, x.dtype.name)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    shape = output_shape(p)
    if bias is not None:
        bias = backend.as_array(bias, "bias")
        check_array(bias, "bias", ndim=1, dtype=np.float32, contiguous=True, xp=xp)
        if bias.shape[0] != p.geom.k:
            raise ValueError(f"bias has {bias.shape[0]} entries; w has {p.geom.k} filters")
    for name, a in (("residual", residual), ("out", out)):
        if a is None:
            continue
        a = backend.as_array(a, name)
        check_array(a, name, ndim=4, dtype=x.dtype, contiguous=name == "residual", xp=xp)
        if tuple(a.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(a.shape)}; expected {shape}")
    ldy = p.geom.k if out is None else channel_pitch(out, layout)
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU only")
        return _reference(x, w, bias, residual, p, relu)
    tile = tile or tuned_tile(p) or default_tile(p, backend.device_facts())
    check_tile(tile, p)
    if packed is not None and (tuple(packed.shape) != packed_shape(p, tile)
                               or packed.dtype != x.dtype or not packed.flags.c_contiguous):
        raise ValueError(f"packed must be C-contiguous {p.dtype} of shape "
                         f"{packed_shape(p, tile)} (pack_weights(w, layout, tile=tile)), got "
                         f"{packed.dtype} {tuple(packed.shape)}")
    if fragment_order(tile) and ((layout == "nhwc" and x.data.ptr % 8)
                                 or (packed is not None and packed.data.ptr % 16)):
        # four channels of a pixel (NHWC) move as one 8-byte word, a lane's weights as 16
        fallback = candidates(p, backend.device_facts(), paths=tuple(STAGES))[0]
        log.info("tc_conv2d: x is not 8-byte or packed not 16-byte aligned; %s runs as %s "
                 "(its weights packed again)", tile, fallback)
        tile, packed = fallback, None
    if packed is None:
        packed = pack_weights(w, layout, xp, p.dtype, tile)
    # NCHW reads x a half at a time (any address); a fallen-back tile reduces its split
    # shares through the workspace (clusters are built on vector loads)
    if tile.vec and ((layout == "nhwc" and x.data.ptr % 16) or packed.data.ptr % 16):
        log.info("tc_conv2d: x or packed is not 16-byte aligned; %s runs on scalar loads",
                 tile)
        tile = replace(tile, vec=False, cluster=False)
    out = xp.empty(shape, dtype=x.dtype) if out is None else out
    g, i32 = p.geom, np.int32
    if tile.path == FRAG:
        launch(kernels(p, tile)[0], tile.grid(p), (tile.threads,),
               (x, packed, ptr(bias), ptr(residual), out, i32(g.n), i32(g.c), i32(g.h),
                i32(g.w), i32(g.k), i32(g.oh), i32(g.ow), i32(g.stride[0]), i32(g.stride[1]),
                i32(bool(relu)), i32(ldy)), smem=tile.smem_bytes(p))
        return out
    if tile.path == HALO:
        launch(kernels(p, tile)[0], tile.grid(p), (tile.threads,),
               (x, packed, ptr(bias), ptr(residual), out, i32(g.c), i32(g.h), i32(g.w),
                i32(g.k), i32(g.r), i32(g.s), i32(g.oh), i32(g.ow), i32(g.stride[0]),
                i32(g.stride[1]), i32(g.padding[0]), i32(g.padding[1]), i32(bool(relu)),
                i32(ldy), i32(halo_cols(p)), i32(halo_pitch(p))), smem=tile.smem_bytes(p))
        return out
    # 16-byte epilogue stores (NHWC, 8 channels at a time) need aligned outputs
    vec_out = (layout == "nhwc" and p.geom.k % 8 == 0 and ldy % 8 == 0
               and out.data.ptr % 16 == 0 and (residual is None or residual.data.ptr % 16 == 0))
    grid = tile.grid(p)
    tiles = grid[0] * grid[1]
    spill = tile.splits > 1 and not tile.cluster     # shares meet in a global workspace
    partial = workspace(xp, tile.splits * tiles * tile.bm * tile.bn) if spill else None
    counters = scratch_counters(xp, tiles) if spill else None
    launch(kernels(p, tile)[0], grid, (tile.threads,),
           (x, packed, _device_tap_table(xp.cuda.runtime.getDevice(), p), ptr(bias), ptr(residual),
            out, ptr(partial), ptr(counters), i32(g.n), i32(g.c), i32(g.h), i32(g.w),
            i32(g.k), i32(g.r), i32(g.s), i32(g.oh), i32(g.ow), i32(g.stride[0]),
            i32(g.stride[1]), i32(g.padding[0]), i32(g.padding[1]), i32(split_k(p, tile)),
            i32(bool(relu)), i32(vec_out), i32(tile.table_at(p)), i32(tile.slots_at(p)),
            cuda.fast_div(tile.share), i32(ldy)),
           smem=tile.smem_bytes(p))
    return out


def channel_pitch(out, layout: str) -> int:
    """The channel count of the C-contiguous map that ``out`` (4-D, float16) is a channel
    slice of (its own channel count when it is C-contiguous); ``ValueError`` for any other
    view."""
    shape, st, item = tuple(out.shape), tuple(out.strides), out.itemsize
    if out.flags.c_contiguous:
        return shape[3] if layout == "nhwc" else shape[1]
    if layout == "nhwc":
        n, oh, ow, k = shape
        ld = st[2] // item
        ok = (st[3] == item and st[2] % item == 0 and ld >= k and st[1] == ow * st[2]
              and st[0] == oh * st[1])
    else:
        n, k, oh, ow = shape
        plane = oh * ow * item
        ld = st[0] // plane
        ok = (st[3] == item and st[2] == ow * item and st[1] == plane and st[0] % plane == 0
              and ld >= k)
    if not ok:
        raise ValueError(f"out must be C-contiguous or a channel slice of a C-contiguous "
                         f"{layout.upper()} map; got shape {shape}, strides {st}")
    return ld


def _reference(x, w, bias, residual, p: Problem, relu: bool):
    """The fp32 reference on the fp16 (bf16) values, rounded to fp16 (bf16)."""
    elem = element_dtype(p.dtype)
    nchw = x if p.layout == "nchw" else x.transpose(0, 3, 1, 2)
    wr = np.asarray(w, np.float32).astype(elem).astype(np.float32)
    y = reference.conv2d(nchw.astype(np.float32), wr, bias, p.geom.stride, p.geom.padding)
    if p.layout == "nhwc":
        y = y.transpose(0, 2, 3, 1)
    if residual is not None:
        y = y + residual.astype(np.float32)
    if relu:
        y = np.maximum(y, 0)
    return np.ascontiguousarray(y.astype(elem))
