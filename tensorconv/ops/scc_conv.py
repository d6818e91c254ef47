"""Sliding-channel convolution (``kernels_cu/scc_conv.cu``): forward, both gradients, fp32,
NCHW (Wang et al., DSXplore, IPDPS'21).

The filters, sorted by window start (the channel-cyclic groups side by side), are tiled 64
at a time; a tile reads one band of consecutive channels, so the forward pass and the
weight gradient are GEMMs over that band with the weights dense-masked in shared memory,
and the input gradient is a GEMM per tile of 64 input channels over the filters whose
window meets them (input-centric: each gx value written once, no atomics).  Pixels are
flat over the batch.  Beside it, the paper's two per-thread forms of the input gradient:
``"gather"`` (input-centric through the channel map) and ``"output"`` (output-centric with
atomics, its "Var").  The weight gradient reduces per-split partial sums in a fixed order,
so every gradient here is deterministic but the atomic one.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_array, check_choice, check_int, check_vector, output_buffer
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu, ptr, workspace
from tensorconv.reference import scc as reference
from tensorconv.reference.scc import SCCGeometry

FILE = "scc_conv.cu"
THREADS = 256
BM, RC = 64, 16                  # scc:: constants of the .cu: filter/channel tile, chunk
PIXEL_TILES = (4, 8)             # TN: 16·TN pixels per block (forward, input gradient)
FILTER_BAND = 64                 # band channels per weight-gradient block
DATA_VARIANTS = ("input", "gather", "output")
_SIMPLE = ("scc_bwd_data_gather", "scc_bwd_data_atomic", "scc_bwd_filter",
           "scc_reduce_splits")


def _fwd_name(tn: int) -> str:
    return f"scc_fwd<{tn}>"


def _data_name(tn: int) -> str:
    return f"scc_bwd_data<{tn}>"


def kernels(*_) -> tuple[cuda.KernelRef, ...]:
    """Every kernel of the file (forward, the three input-gradient forms, the weight
    gradient and its reduction)."""
    names = [f(tn) for f in (_fwd_name, _data_name) for tn in PIXEL_TILES] + list(_SIMPLE)
    return tuple(cuda.kernel_ref(FILE, n) for n in names)


def instantiations() -> list[str]:
    """The template instances CI's nvcc build compiles."""
    return sorted(f(tn) for f in (_fwd_name, _data_name) for tn in PIXEL_TILES)


@functools.lru_cache(maxsize=256)
def sorted_filters(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray]:
    """``(order, starts)``: the filters sorted by window start (then index) and the start
    of each, both (Cout,) int32.  Consecutive sorted filters read overlapping windows."""
    b = geom.starts()
    order = np.lexsort((np.arange(geom.cout), b))
    return order.astype(np.int32), b[order].astype(np.int32)


def band_spans(geom: SCCGeometry) -> np.ndarray:
    """The channels each tile of ``BM`` sorted filters reads: last start - first start + U
    (int64, (tiles,)); a tile inside one window group reads exactly U."""
    _, starts = sorted_filters(geom)
    first = starts[::BM].astype(np.int64)
    last = starts[np.minimum(np.arange(BM, geom.cout + BM, BM), geom.cout) - 1]
    return last - first + geom.u


@functools.lru_cache(maxsize=256)
def data_tiles(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray]:
    """The input gradient's table: for each tile of ``BM`` input channels, the filters
    whose window holds one of them, as CSR ``(ptr (tiles + 1,), filters)`` (int32, in
    window order)."""
    order, _ = sorted_filters(geom)
    tiles = cdiv(geom.cin, BM)
    meets = np.zeros((geom.cout, tiles), dtype=bool)
    rows = np.repeat(np.arange(geom.cout), geom.u)
    meets[rows, (geom.channels() // BM).reshape(-1)] = True
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


@functools.lru_cache(maxsize=256)
def _device_tables(geom: SCCGeometry, device: int, which: str):
    """A table of ``geom`` on GPU ``device``, made once: ``"sorted"``, ``"starts"`` (the
    window start of each filter), ``"tiles"`` or ``"map"``."""
    import cupy

    host = {"sorted": lambda: sorted_filters(geom),
            "starts": lambda: (geom.starts().astype(np.int32),),
            "tiles": lambda: data_tiles(geom),
            "map": lambda: channel_map(geom)}[which]()
    with cupy.cuda.Device(device):
        return tuple(cupy.asarray(a) for a in host)


def pixel_tile(row_tiles: int, pixels: int, sm_count: int) -> int:
    """TN of a forward or input-gradient launch: 128-pixel tiles where they still give
    two blocks per SM, else 64."""
    big = PIXEL_TILES[-1]
    return big if row_tiles * cdiv(pixels, 16 * big) >= 2 * sm_count else PIXEL_TILES[0]


def forward_kernel(geom: SCCGeometry, pixels: int) -> cuda.KernelRef:
    """The kernel :func:`scc_conv2d` launches for ``pixels`` = N x H x W."""
    tn = pixel_tile(cdiv(geom.cout, BM), pixels, backend.device_facts().sm_count)
    return cuda.kernel_ref(FILE, _fwd_name(tn))


def _check_geom(geom) -> SCCGeometry:
    if not isinstance(geom, SCCGeometry):
        raise TypeError(f"geom must be an SCCGeometry (reference.scc.scc_geometry), got "
                        f"{type(geom).__name__}")
    return geom


def _check_maps(a, name: str, channels: int, geom: SCCGeometry, xp=None):
    a = backend.as_array(a, name)
    check_array(a, name, ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if a.shape[1] != channels:
        raise ValueError(f"{name} has {a.shape[1]} channels; the layer's "
                         f"{'input' if channels == geom.cin else 'output'} has {channels}")
    return a


def _check_weights(w, geom: SCCGeometry, xp):
    w = backend.as_array(w, "w")
    check_array(w, "w", ndim=2, dtype=np.float32, contiguous=True, xp=xp)
    if tuple(w.shape) != (geom.cout, geom.u):
        raise ValueError(f"w has shape {tuple(w.shape)}; the layer's is ({geom.cout}, {geom.u})")
    return w


def scc_conv2d(x, w, geom: SCCGeometry, bias=None, *, relu: bool = False, out=None):
    """``relu?(scc(x, w) + bias)``.

    Parameters
    ----------
    x : array, (N, Cin, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (Cout, U), float32, C-contiguous
    geom : SCCGeometry
    bias : array, (Cout,), float32, optional (BN folds into ``w`` and ``bias``)
    relu : bool
    out : array, (N, Cout, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, Cout, H, W), float32
    """
    geom = _check_geom(geom)
    if not isinstance(relu, (bool, np.bool_)):
        raise TypeError(f"relu must be a bool, got {type(relu).__name__}")
    x = _check_maps(x, "x", geom.cin, geom)
    xp = backend.array_module(x)
    w = _check_weights(w, geom, xp)
    bias = check_vector(bias, "bias", geom.cout, xp, "output channel")
    n, _, h, wd = x.shape
    if xp is np:
        no_out_on_cpu(out=out)
        y = reference.scc_forward(x, w, geom, bias).astype(np.float32)
        return np.maximum(y, 0, out=y) if relu else y
    out = output_buffer(xp, out, (n, geom.cout, h, wd))
    q = n * h * wd
    tiles = cdiv(geom.cout, BM)
    tn = pixel_tile(tiles, q, backend.device_facts().sm_count)
    order, starts = _device_tables(geom, xp.cuda.runtime.getDevice(), "sorted")
    i32 = np.int32
    launch(forward_kernel(geom, q), (cdiv(q, 16 * tn), tiles, 1), (THREADS,),
           (x, w, order, starts, ptr(bias), out, i32(geom.cin), i32(geom.cout), i32(geom.u),
            i32(h * wd), i32(q), i32(bool(relu))))
    return out


def scc_conv2d_backward_data(gy, w, geom: SCCGeometry, *, variant: str = "input", out=None):
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
    out : array, (N, Cin, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, Cin, H, W), float32
    """
    geom = _check_geom(geom)
    check_choice(variant, "variant", DATA_VARIANTS)
    gy = _check_maps(gy, "gy", geom.cout, geom)
    xp = backend.array_module(gy)
    w = _check_weights(w, geom, xp)
    n, _, h, wd = gy.shape
    if xp is np:
        no_out_on_cpu(out=out)
        x0 = np.zeros((n, geom.cin, h, wd))
        return reference.scc_backward(x0, w, gy, geom)[0].astype(np.float32)
    out = output_buffer(xp, out, (n, geom.cin, h, wd))
    p, q = h * wd, n * h * wd
    device = xp.cuda.runtime.getDevice()
    i32 = np.int32
    if variant == "input":
        tiles = cdiv(geom.cin, BM)
        tn = pixel_tile(tiles, q, backend.device_facts().sm_count)
        (begin_k,) = _device_tables(geom, device, "starts")
        tile_ptr, tile_k = _device_tables(geom, device, "tiles")
        launch(cuda.kernel_ref(FILE, _data_name(tn)), (cdiv(q, 16 * tn), tiles, 1),
               (THREADS,), (gy, w, begin_k, tile_ptr, tile_k, out, i32(geom.cin),
                            i32(geom.cout), i32(geom.u), i32(p), i32(q)))
    elif variant == "gather":
        launch(cuda.kernel_ref(FILE, "scc_bwd_data_gather"), (cdiv(q, THREADS), geom.cin, 1),
               (THREADS,), (gy, w, *_device_tables(geom, device, "map"), out, i32(geom.cin),
                            i32(geom.cout), i32(p), i32(q)))
    else:
        out.fill(0)
        (begin_k,) = _device_tables(geom, device, "starts")
        launch(cuda.kernel_ref(FILE, "scc_bwd_data_atomic"), (cdiv(q, THREADS), geom.cout, 1),
               (THREADS,), (gy, w, begin_k, out, i32(geom.cin), i32(geom.cout), i32(geom.u),
                            i32(p), i32(q)))
    return out


@functools.lru_cache(maxsize=256)
def _bands(geom: SCCGeometry) -> tuple[int, int]:
    """(band tiles of the widest filter tile, band-tile blocks of all filter tiles) of the
    weight gradient."""
    tiles = [cdiv(int(span), FILTER_BAND) for span in band_spans(geom)]
    return max(tiles), sum(tiles)


def default_splits(geom: SCCGeometry, pixels: int, sm_count: int) -> int:
    """Pixel shares of the weight gradient: about six blocks per SM (a block's reduction
    is a chain of dependent chunks: many in flight hide its latency), each share at least
    8 chunks of 16 pixels."""
    return max(1, min(cdiv(6 * sm_count, _bands(geom)[1]), cdiv(pixels, 8 * RC)))


def scc_conv2d_backward_weight(x, gy, geom: SCCGeometry, *, splits: int | None = None,
                               out=None):
    """Gradient of :func:`scc_conv2d` with respect to ``w``, deterministic.

    Parameters
    ----------
    x : array, (N, Cin, H, W), float32
    gy : array, (N, Cout, H, W), float32
    geom : SCCGeometry
    splits : int, optional
        Pixel shares reduced separately, then summed in order; default
        :func:`default_splits`.
    out : array, (Cout, U), float32, optional (GPU only)

    Returns
    -------
    array, (Cout, U), float32
    """
    geom = _check_geom(geom)
    x = _check_maps(x, "x", geom.cin, geom)
    xp = backend.array_module(x)
    gy = _check_maps(gy, "gy", geom.cout, geom, xp)
    if (gy.shape[0],) + tuple(gy.shape[2:]) != (x.shape[0],) + tuple(x.shape[2:]):
        raise ValueError(f"gy has shape {tuple(gy.shape)}; x is {tuple(x.shape)}: the batch "
                         f"and spatial sizes must agree")
    if splits is not None:
        check_int(splits, "splits", minimum=1)
    n, _, h, wd = x.shape
    if xp is np:
        no_out_on_cpu(out=out)
        w0 = np.zeros((geom.cout, geom.u))
        return reference.scc_backward(x, w0, gy, geom)[1].astype(np.float32)
    out = output_buffer(xp, out, (geom.cout, geom.u))
    q = n * h * wd
    splits = min(splits or default_splits(geom, q, backend.device_facts().sm_count),
                 cdiv(q, RC))
    per_split = cdiv(cdiv(q, splits), RC) * RC
    splits = cdiv(q, per_split)                            # no empty share
    partial = workspace(xp, splits * geom.cout * geom.u)   # graph-safe: no allocation
    order, starts = _device_tables(geom, xp.cuda.runtime.getDevice(), "sorted")
    i32 = np.int32
    bands = _bands(geom)[0]
    launch(cuda.kernel_ref(FILE, "scc_bwd_filter"), (bands, cdiv(geom.cout, BM), splits),
           (THREADS,), (x, gy, order, starts, partial, i32(geom.cin), i32(geom.cout),
                        i32(geom.u), i32(h * wd), i32(q), i32(per_split)))
    size = geom.cout * geom.u
    launch(cuda.kernel_ref(FILE, "scc_reduce_splits"), (cdiv(size, THREADS), 1, 1),
           (THREADS,), (partial, out, i32(splits), i32(size)))
    return out
