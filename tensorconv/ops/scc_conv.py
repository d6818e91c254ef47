"""Sliding-channel convolution (``kernels_cu/scc_conv.cu``): forward, both gradients, fp32,
NCHW (Wang et al., DSXplore, IPDPS'21).

The filters, sorted by window start (the channel-cyclic groups side by side), are tiled 16,
32 or 64 at a time; a tile reads one band of consecutive channels, so the forward pass and
the weight gradient are GEMMs over that band with the weights dense-masked in shared
memory, and the input gradient is a GEMM per tile of input channels over the filters whose
window meets them (input-centric: each gx value written once, no atomics).  Each layer
takes the row tiles of least multiply-adds, dense-masked zeros counted (small tiles stay
inside one window group where groups are small).  Pixels are flat over the batch (a block
walks several tiles where they outnumber the GPU's blocks: ``scc_tiles.pixel_grid``).
On large maps with few input channels the weight gradient takes a "wide" kernel
(``path``; forced only, the forward's): a persistent block over every filter reads each
map once (:func:`~tensorconv.ops.scc_tiles.wide_px` says where).  Beside them, the paper's two
per-thread forms of the input gradient: ``"gather"`` (input-centric through the channel
map) and ``"output"`` (output-centric with atomics, its "Var"), and of the forward pass
(``path="map"`` / ``"arith"``: the window starts from Algorithm 1's channel-cyclic map in
constant memory, or computed).  The weight gradient reduces per-split partial sums in a
fixed order, as does the input gradient where its tiles alone leave SMs idle (each tile's
filter list shared by several blocks), so every gradient here is deterministic but the
atomic one.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_choice, check_int, check_vector, output_buffer
from tensorconv.ops import _igemm, scc_tc
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu, ptr
from tensorconv.ops.scc_checks import check_geom, check_maps, check_weights, check_x_gy
from tensorconv.ops.scc_tiles import (
    BAND_TILES,
    PIXEL_TILES,
    RC,
    THREADS,
    WIDE_SMEM,
    BlockShape,
    band_spans,
    band_tiles,
    channel_map,
    data_splits,
    data_tiles,
    default_splits,
    device_tables,
    filter_tiles,
    forward_tile,
    pixel_grid,
    pixel_tile,
    row_tiles,
    sorted_filters,
    wide_grid,
    wide_px,
    wide_smem,
    wide_splits,
)
from tensorconv.reference import scc as reference
from tensorconv.reference.scc import SCCGeometry
from tensorconv.scratch import workspace

__all__ = ["BAND_TILES", "PIXEL_TILES", "band_spans", "channel_map", "data_tiles", "default_splits",
           "sorted_filters", "scc_conv2d", "scc_conv2d_backward_data", "scc_conv2d_backward_weight"]

FILE = "scc_conv.cu"
DATA_VARIANTS = ("input", "gather", "output")
PATHS = ("auto", "fma", "wide", "tiled", "tc")
DATA_PATHS = ("auto", "fma", "tiled", "tc")
FORWARD_PATHS = PATHS + ("map", "arith")
_CYCLIC = ("scc_fwd_cyclic<true>", "scc_fwd_cyclic<false>")
MAX_CYCLE = 4096                 # scc::MAX_CYCLE: windows the constant-memory map holds
_WIDE = [(4, True), (4, False), (2, True), (2, False), (1, False)]
_SIMPLE = ("scc_bwd_data_gather", "scc_bwd_data_atomic")


def _fwd_name(t: BlockShape, ring: bool = False) -> str:
    return f"scc_fwd<{t.args()}, {'true' if ring else 'false'}>"


def _data_name(t: BlockShape, ring: bool = False) -> str:
    return f"scc_bwd_data<{t.args()}, {'true' if ring else 'false'}>"


def _filter_name(t: BlockShape) -> str:
    return f"scc_bwd_filter<{t.args()}>"


def _wide_name(side: str, px: int, vec: bool) -> str:
    kernel = {"forward": "scc_fwd_wide", "filter": "scc_bwd_filter_wide"}[side]
    return f"{kernel}<{px}, {'true' if vec else 'false'}>"


ONEPASS_SHAPES = ([(i, s, bn, False) for i in (1, 2) for s in (1, 2) for bn in (32, 64)]
                  + [(i, 2, 64, True) for i in (1, 2)])
"""scc_bwd_onepass's instances: (weight-gradient items a thread, staged chunks, pixels a
chunk, split: twice the threads, the two gradients on their own warps)."""


def _onepass_name(items: int, stages: int, bn: int, split: bool, vec: bool) -> str:
    b = {True: "true", False: "false"}
    return f"scc_bwd_onepass<{items}, {stages}, {bn}, {b[split]}, {b[vec]}>"


def _templated() -> list[str]:
    return ([f(t, r) for f in (_fwd_name, _data_name) for t in PIXEL_TILES for r in (0, 1)]
            + [_filter_name(t) for t in BAND_TILES]
            + [_wide_name(side, px, vec) for side in ("forward", "filter")
               for px, vec in _WIDE] + list(_CYCLIC)
            + [_onepass_name(*shape, v) for shape in ONEPASS_SHAPES for v in (True, False)])


def kernels(*_) -> tuple[cuda.KernelRef, ...]:
    """Every kernel of the file (forward, the three input-gradient forms, the weight
    gradient and its reduction, both gradients fused: :mod:`~tensorconv.ops.scc_fused`),
    every tile."""
    return (tuple(cuda.kernel_ref(FILE, n) for n in _templated() + list(_SIMPLE))
            + (_igemm.reduce_ref(),))


def instantiations() -> list[str]:
    """The template instances CI's nvcc build compiles."""
    return sorted(_templated())


def forward_kernel(geom: SCCGeometry, pixels: int) -> cuda.KernelRef:
    """The kernel :func:`scc_conv2d` launches on FMAs for ``pixels`` = N x H x W."""
    return _forward_plan(geom, pixels)[2]


def _forward_plan(geom: SCCGeometry, pixels: int):
    """``(tile, grid, kernel)`` of the FMA forward: walking blocks stage by cp.async."""
    tile = forward_tile(geom, pixels)
    tiles = cdiv(pixels, tile.cols)
    grid = pixel_grid(tiles, cdiv(geom.cout, tile.rows), tile, backend.device_facts().sm_count)
    return tile, grid, cuda.kernel_ref(FILE, _fwd_name(tile, grid < tiles))


def _wide(path: str, geom: SCCGeometry, side: str, q: int) -> int | None:
    check_choice(path, "path", PATHS)
    if path in ("tiled", "tc"):
        return None
    px = wide_px(geom, side, q, auto=path in ("auto", "fma"))
    if px is None and path == "wide":
        raise ValueError(f"path='wide': the {side} pass of {geom} stages more than {WIDE_SMEM} "
                         f"bytes of shared memory even at one pixel a lane; use path='tiled'")
    return px


def _on_tensor_cores(path: str, geom: SCCGeometry, pixels: int, plane: int, side: str) -> bool:
    """Whether a call runs ``side`` on :mod:`~tensorconv.ops.scc_tc`: forced (``path="tc"``,
    checked: the GPU has them), or ``"auto"`` where the layer's stored verdict says so."""
    if path == "tc":
        scc_tc.check_runs_here()
        return True
    return path == "auto" and scc_tc.takes(geom, pixels, plane, side)


def _vec(px: int, plane: int, *arrays) -> bool:
    """Vector loads and stores: P % px == 0 and every map 16-byte aligned."""
    return px > 1 and plane % px == 0 and all(a.data.ptr % 16 == 0 for a in arrays)


def scc_conv2d(x, w, geom: SCCGeometry, bias=None, *, relu: bool = False, path: str = "auto",
               out=None):
    """``relu?(scc(x, w) + bias)``.

    Parameters
    ----------
    x : array, (N, Cin, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (Cout, U), float32, C-contiguous
    geom : SCCGeometry
    bias : array, (Cout,), float32, optional (BN folds into ``w`` and ``bias``)
    relu : bool
    path : {"auto", "fma", "wide", "tiled", "tc", "map", "arith"}
        The kernel (GPU): a block over every filter, reading the input once (where its
        staging fits shared memory and its blocks cover the GPU), tiles of sorted
        filters on FMAs, or the same tiles on the tensor cores at fp32 accuracy
        (:mod:`~tensorconv.ops.scc_tc`); "fma" picks between the first two, "auto" also
        takes the tensor cores where a stored verdict says (:func:`scc_tc.takes`).
        "map" and "arith": the paper's per-thread forward (Algorithm 2), each filter's
        window start from the channel-cyclic map in constant memory (at most 4096
        entries) or computed; equal bit for bit, for comparison.
    out : array, (N, Cout, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, Cout, H, W), float32
    """
    geom = check_geom(geom)
    check_choice(path, "path", FORWARD_PATHS)
    if path == "map" and geom.cycle > MAX_CYCLE:
        raise ValueError(f"path='map' holds at most {MAX_CYCLE} windows in constant memory; "
                         f"this layer's cycle has {geom.cycle}")
    if path in ("map", "arith") and geom.cout > 65535:
        raise ValueError(f"path={path!r} runs a grid row per filter, at most 65535; this layer "
                         f"has {geom.cout} filters")
    if not isinstance(relu, (bool, np.bool_)):
        raise TypeError(f"relu must be a bool, got {type(relu).__name__}")
    x = check_maps(x, "x", geom.cin, geom)
    xp = backend.array_module(x)
    w = check_weights(w, geom, xp)
    bias = check_vector(bias, "bias", geom.cout, xp, "output channel")
    n, _, h, wd = x.shape
    if xp is np:
        no_out_on_cpu(out=out)
        y = reference.scc_forward(x, w, geom, bias).astype(np.float32)
        return np.maximum(y, 0, out=y) if relu else y
    out = output_buffer(xp, out, (n, geom.cout, h, wd))
    q = n * h * wd
    if path in ("map", "arith"):
        return _cyclic_forward(x, w, geom, bias, bool(relu), path == "map", out)
    if _on_tensor_cores(path, geom, q, h * wd, "forward"):
        scc_tc.run_forward(x, w, geom, bias, bool(relu), out)
        return out
    order, starts = device_tables(geom, xp.cuda.runtime.getDevice(), "sorted")
    i32 = np.int32
    px = _wide(path, geom, "forward", q)
    if px is not None:
        launch(cuda.kernel_ref(FILE, _wide_name("forward", px, _vec(px, h * wd, x, out))),
               (wide_grid(geom, "forward", px, q), 1, 1), (THREADS,),
               (x, w, order, starts, ptr(bias), out, i32(geom.cin), i32(geom.cout),
                i32(geom.u), i32(h * wd), i32(q), i32(bool(relu))),
               smem=wide_smem(geom, "forward", px))
        return out
    tile, grid, ref = _forward_plan(geom, q)
    launch(ref, (grid, cdiv(geom.cout, tile.rows), 1), (tile.threads,),
           (x, w, order, starts, ptr(bias), out, i32(geom.cin), i32(geom.cout), i32(geom.u),
            i32(h * wd), i32(q), i32(bool(relu))))
    return out


def _cyclic_forward(x, w, geom: SCCGeometry, bias, relu: bool, from_map: bool, out):
    """:func:`scc_conv2d` by ``scc_fwd_cyclic``: with ``from_map``, the cycle's window starts
    copied into the kernel module's constant memory first (device to device, on the
    current stream: capturable, ordered before the launch)."""
    import cupy

    n, _, h, wd = x.shape
    q, i32 = n * h * wd, np.int32
    ref = cuda.kernel_ref(FILE, _CYCLIC[0] if from_map else _CYCLIC[1])
    if from_map:
        (starts,) = device_tables(geom, x.device.id, "starts")   # k < cycle: the map
        symbol = cuda.module_global(ref, "scc_cycle_starts")
        symbol.copy_from_device_async(starts.data, 4 * min(geom.cycle, geom.cout),
                                      cupy.cuda.get_current_stream())
    launch(ref, (cdiv(q, THREADS), geom.cout, 1), (THREADS,),
           (x, w, ptr(bias), out, i32(geom.cin), i32(geom.cout), i32(geom.u), i32(geom.stride),
            i32(geom.cycle), i32(h * wd), i32(q), i32(relu)))
    return out


def scc_conv2d_backward_data(gy, w, geom: SCCGeometry, *, variant: str = "input",
                             splits: int | None = None, path: str = "auto", out=None):
    """Gradient of :func:`scc_conv2d` (without ReLU) with respect to ``x``.

    Parameters
    ----------
    gy : array, (N, Cout, H, W), float32
    w : array, (Cout, U), float32
    geom : SCCGeometry
    variant : {"input", "gather", "output"}
        Input-centric as a tiled GEMM (each tile of channels pulls from the filters that
        read it: deterministic, no atomics); the paper's input-centric form, one thread
        per input value walking the channel map; or its output-centric "Var" (each filter
        adds into its window's channels with atomics).
    splits : int, optional
        "input" only: shares of each channel tile's filter list, reduced separately, then
        summed in order; default :func:`data_splits` (more where the tiles alone leave
        the GPU idle).
    path : {"auto", "fma", "tiled", "tc"}
        "input" only: the GEMM on FMAs ("fma" or "tiled") or on the tensor cores at fp32
        accuracy (:mod:`~tensorconv.ops.scc_tc`); "auto" takes the tensor cores where a
        stored verdict says (:func:`scc_tc.takes`).
    out : array, (N, Cin, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, Cin, H, W), float32
    """
    geom = check_geom(geom)
    check_choice(variant, "variant", DATA_VARIANTS)
    check_choice(path, "path", DATA_PATHS)
    if splits is not None:
        check_int(splits, "splits", minimum=1)
        if variant != "input":
            raise ValueError(f"splits is for variant='input' only, got variant={variant!r}")
    if path != "auto" and variant != "input":
        raise ValueError(f"path is for variant='input' only, got variant={variant!r}")
    gy = check_maps(gy, "gy", geom.cout, geom)
    xp = backend.array_module(gy)
    w = check_weights(w, geom, xp)
    n, _, h, wd = gy.shape
    if xp is np:
        no_out_on_cpu(out=out)
        x0 = np.zeros((n, geom.cin, h, wd))
        return reference.scc_backward(x0, w, gy, geom)[0].astype(np.float32)
    out = output_buffer(xp, out, (n, geom.cin, h, wd))
    p, q = h * wd, n * h * wd
    device = xp.cuda.runtime.getDevice()
    i32 = np.int32
    if variant == "input" and _on_tensor_cores(path, geom, q, p, "data"):
        scc_tc.run_backward_data(gy, w, geom, splits, out)
    elif variant == "input":
        rows = row_tiles(geom)[1]
        tiles = cdiv(geom.cin, rows)
        sms = backend.device_facts().sm_count
        tile = pixel_tile(rows, tiles, q, sms, side="data")
        (begin_k,) = device_tables(geom, device, "starts")
        tile_ptr, tile_k = device_tables(geom, device, "tiles", rows)
        splits, per_split = data_splits(geom, rows, tile, q, sms, splits)
        size = n * geom.cin * p
        partial = out if splits == 1 else workspace(xp, splits * size)   # graph-safe
        grid = pixel_grid(cdiv(q, tile.cols), tiles * splits, tile, sms)
        ring = grid < cdiv(q, tile.cols) or _vec(4, p, gy)   # cp.async lost on odd planes
        launch(cuda.kernel_ref(FILE, _data_name(tile, ring)), (grid, tiles, splits),
               (tile.threads,), (gy, w, begin_k, tile_ptr, tile_k, partial, i32(geom.cin),
                                 i32(geom.cout), i32(geom.u), i32(p), i32(q), i32(per_split)))
        if splits > 1:
            _igemm.reduce_flat(partial, out, splits, size, sms)
    elif variant == "gather":
        launch(cuda.kernel_ref(FILE, "scc_bwd_data_gather"), (cdiv(q, THREADS), geom.cin, 1),
               (THREADS,), (gy, w, *device_tables(geom, device, "map"), out, i32(geom.cin),
                            i32(geom.cout), i32(p), i32(q)))
    else:
        out.fill(0)
        (begin_k,) = device_tables(geom, device, "starts")
        launch(cuda.kernel_ref(FILE, "scc_bwd_data_atomic"), (cdiv(q, THREADS), geom.cout, 1),
               (THREADS,), (gy, w, begin_k, out, i32(geom.cin), i32(geom.cout), i32(geom.u),
                            i32(p), i32(q)))
    return out


def scc_conv2d_backward_weight(x, gy, geom: SCCGeometry, *, splits: int | None = None,
                               path: str = "auto", out=None):
    """Gradient of :func:`scc_conv2d` with respect to ``w``, deterministic.

    Parameters
    ----------
    x : array, (N, Cin, H, W), float32
    gy : array, (N, Cout, H, W), float32
    geom : SCCGeometry
    splits : int, optional
        Pixel shares reduced separately, then summed in order; default
        :func:`default_splits` (:func:`wide_splits` on the wide path).
    path : {"auto", "fma", "wide", "tiled", "tc"}
        The kernel (GPU): blocks of warp tiles over every filter, each share of x and gy
        read once, or tiles of sorted filters x band channels, on FMAs or on the tensor
        cores at fp32 accuracy (:mod:`~tensorconv.ops.scc_tc`); "fma" picks between the
        first two, "auto" also takes the tensor cores where a stored verdict says
        (:func:`scc_tc.takes`).
    out : array, (Cout, U), float32, optional (GPU only)

    Returns
    -------
    array, (Cout, U), float32
    """
    geom = check_geom(geom)
    x, gy, xp = check_x_gy(x, gy, geom)
    if splits is not None:
        check_int(splits, "splits", minimum=1)
    check_choice(path, "path", PATHS)
    n, _, h, wd = x.shape
    if xp is np:
        no_out_on_cpu(out=out)
        w0 = np.zeros((geom.cout, geom.u))
        return reference.scc_backward(x, w0, gy, geom)[1].astype(np.float32)
    out = output_buffer(xp, out, (geom.cout, geom.u))
    q = n * h * wd
    if _on_tensor_cores(path, geom, q, h * wd, "weight"):
        scc_tc.run_backward_weight(x, gy, geom, splits, out)
        return out
    sms = backend.device_facts().sm_count
    px = _wide(path, geom, "filter", q)
    if splits is None:
        splits = default_splits(geom, q, sms) if px is None else wide_splits(geom, q, px, sms)
    per_split = cdiv(cdiv(q, min(splits, cdiv(q, RC))), RC) * RC
    splits = cdiv(q, per_split)                            # no empty share
    partial = workspace(xp, splits * geom.cout * geom.u)   # graph-safe: no allocation
    device = xp.cuda.runtime.getDevice()
    order, starts = device_tables(geom, device, "sorted")
    i32 = np.int32
    if px is not None:
        tiles, blocks = device_tables(geom, device, "wgrad")
        rows = sum(filter_tiles(geom)[2:])
        launch(cuda.kernel_ref(FILE, _wide_name("filter", px, _vec(px, h * wd, x, gy))),
               (len(blocks), splits, 1), (THREADS,),
               (x, gy, order, starts, blocks, tiles, partial, i32(len(tiles)), i32(geom.cin),
                i32(geom.cout), i32(geom.u), i32(h * wd), i32(q), i32(per_split),
                i32(rows)), smem=wide_smem(geom, "filter", px))
    else:
        tile, bands, _ = band_tiles(geom)
        launch(cuda.kernel_ref(FILE, _filter_name(tile)),
               (bands, cdiv(geom.cout, tile.rows), splits), (tile.threads,),
               (x, gy, order, starts, partial, i32(geom.cin), i32(geom.cout), i32(geom.u),
                i32(h * wd), i32(q), i32(per_split)))
    _igemm.reduce_flat(partial, out, splits, geom.cout * geom.u, sms)
    return out

