"""Sliding-channel convolution (``kernels_cu/scc_conv.cu``): forward, both gradients, fp32,
NCHW (Wang et al., DSXplore, IPDPS'21).

The filters, sorted by window start (the channel-cyclic groups side by side), are tiled 16,
32 or 64 at a time; a tile reads one band of consecutive channels, so the forward pass and
the weight gradient are GEMMs over that band with the weights dense-masked in shared
memory, and the input gradient is a GEMM per tile of input channels over the filters whose
window meets them (input-centric: each gx value written once, no atomics).  Each layer
takes the row tiles of least multiply-adds, dense-masked zeros counted (small tiles stay
inside one window group where groups are small).  Pixels are flat over the batch.
Beside it, the paper's two per-thread forms of the input gradient: ``"gather"``
(input-centric through the channel map) and ``"output"`` (output-centric with
atomics, its "Var").  The weight gradient reduces per-split partial sums in a fixed order,
so every gradient here is deterministic but the atomic one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_array, check_choice, check_int, check_vector, output_buffer
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu, ptr, workspace
from tensorconv.reference import scc as reference
from tensorconv.reference.scc import SCCGeometry

FILE = "scc_conv.cu"
THREADS = 256                    # the per-thread kernels' block (gather, atomic, reduce)
RC = 16                          # scc::RC of the .cu: the reduction chunk


@dataclass(frozen=True)
class BlockShape:
    """A GEMM kernel's block, chosen by the work it does (no tile search here): ``ty`` x
    ``tx`` threads, each 4 rows x ``tn`` columns, so ``4·ty`` rows (filters or channels)
    x ``tn·tx`` columns (pixels or band channels)."""

    ty: int
    tx: int
    tn: int

    @property
    def rows(self) -> int:
        return 4 * self.ty

    @property
    def cols(self) -> int:
        return self.tn * self.tx

    @property
    def threads(self) -> int:
        return self.ty * self.tx

    def args(self) -> str:
        return f"{self.ty}, {self.tx}, {self.tn}"


# Forward and input gradient: 64, 32 or 16 rows (small row tiles stay inside one window
# group where groups are small); 64 rows come with 64 or 128 pixels.
PIXEL_TILES = (BlockShape(16, 16, 4), BlockShape(16, 16, 8), BlockShape(8, 32, 4),
               BlockShape(4, 64, 4))
# Weight gradient: 64 filters x 64 band channels, 32 x 64, 16 x 32.
BAND_TILES = (BlockShape(16, 16, 4), BlockShape(8, 16, 4), BlockShape(4, 16, 2))
DATA_VARIANTS = ("input", "gather", "output")
_SIMPLE = ("scc_bwd_data_gather", "scc_bwd_data_atomic", "scc_reduce_splits")


def _fwd_name(t: BlockShape) -> str:
    return f"scc_fwd<{t.args()}>"


def _data_name(t: BlockShape) -> str:
    return f"scc_bwd_data<{t.args()}>"


def _filter_name(t: BlockShape) -> str:
    return f"scc_bwd_filter<{t.args()}>"


def _templated() -> list[str]:
    return ([f(t) for f in (_fwd_name, _data_name) for t in PIXEL_TILES]
            + [_filter_name(t) for t in BAND_TILES])


def kernels(*_) -> tuple[cuda.KernelRef, ...]:
    """Every kernel of the file (forward, the three input-gradient forms, the weight
    gradient and its reduction), every tile."""
    return tuple(cuda.kernel_ref(FILE, n) for n in _templated() + list(_SIMPLE))


def instantiations() -> list[str]:
    """The template instances CI's nvcc build compiles."""
    return sorted(_templated())


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


def _least_work(costs: dict):
    """The tile of least work, preferring larger tiles (listed first) within 10 %."""
    best = min(costs.values())
    return next(t for t, c in costs.items() if c <= 1.1 * best)


@functools.lru_cache(maxsize=256)
def _row_tiles(geom: SCCGeometry) -> tuple[int, int, BlockShape]:
    """Rows of the forward and the input-gradient tiles, and the weight gradient's tile,
    each of least multiply-adds (dense-masked zeros included) for ``geom``."""
    rows = sorted({t.rows for t in PIXEL_TILES}, reverse=True)
    fwd = _least_work({r: float(np.sum(band_spans(geom, r) * r)) for r in rows})
    data = {}
    for r in rows:
        ptr_, _ = data_tiles(geom, r)
        data[r] = float(np.sum(np.diff(ptr_)) * r)
    band = _least_work({t: float(np.sum(-(-band_spans(geom, t.rows) // t.cols) * t.cols
                                        * t.rows)) for t in BAND_TILES})
    return fwd, _least_work(data), band


def pixel_tile(rows: int, row_tiles: int, pixels: int, sm_count: int) -> BlockShape:
    """The forward or input-gradient tile of ``rows`` rows: for 64 rows, 128-pixel tiles
    where they still give two blocks per SM, else 64."""
    fits = [t for t in PIXEL_TILES if t.rows == rows]
    if len(fits) > 1 and row_tiles * cdiv(pixels, fits[-1].cols) < 2 * sm_count:
        return fits[0]
    return fits[-1]


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


@functools.cache   # never evicted: captured CUDA graphs hold these addresses
def _device_tables(geom: SCCGeometry, device: int, which: str, rows: int = 0):
    """A table of ``geom`` on GPU ``device``, made once: ``"sorted"``, ``"starts"`` (the
    window start of each filter), ``"tiles"`` (of ``rows`` channels) or ``"map"``."""
    import cupy

    host = {"sorted": lambda: sorted_filters(geom),
            "starts": lambda: (geom.starts().astype(np.int32),),
            "tiles": lambda: data_tiles(geom, rows),
            "map": lambda: channel_map(geom)}[which]()
    with cupy.cuda.Device(device):
        return tuple(cupy.asarray(a) for a in host)


def forward_tile(geom: SCCGeometry, pixels: int) -> BlockShape:
    """The tile :func:`scc_conv2d` launches for ``pixels`` = N x H x W."""
    rows = _row_tiles(geom)[0]
    return pixel_tile(rows, cdiv(geom.cout, rows), pixels, backend.device_facts().sm_count)


def forward_kernel(geom: SCCGeometry, pixels: int) -> cuda.KernelRef:
    """The kernel :func:`scc_conv2d` launches for ``pixels`` = N x H x W."""
    return cuda.kernel_ref(FILE, _fwd_name(forward_tile(geom, pixels)))


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
    tile = forward_tile(geom, q)
    order, starts = _device_tables(geom, xp.cuda.runtime.getDevice(), "sorted")
    i32 = np.int32
    launch(cuda.kernel_ref(FILE, _fwd_name(tile)),
           (cdiv(q, tile.cols), cdiv(geom.cout, tile.rows), 1), (tile.threads,),
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
        rows = _row_tiles(geom)[1]
        tiles = cdiv(geom.cin, rows)
        tile = pixel_tile(rows, tiles, q, backend.device_facts().sm_count)
        (begin_k,) = _device_tables(geom, device, "starts")
        tile_ptr, tile_k = _device_tables(geom, device, "tiles", rows)
        launch(cuda.kernel_ref(FILE, _data_name(tile)), (cdiv(q, tile.cols), tiles, 1),
               (tile.threads,), (gy, w, begin_k, tile_ptr, tile_k, out, i32(geom.cin),
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
def _bands(geom: SCCGeometry) -> tuple[BlockShape, int, int]:
    """The weight gradient's tile, its band tiles for the widest filter tile, and its
    blocks over all filter tiles (one pixel share)."""
    tile = _row_tiles(geom)[2]
    per = [cdiv(int(span), tile.cols) for span in band_spans(geom, tile.rows)]
    return tile, max(per), sum(per)


def default_splits(geom: SCCGeometry, pixels: int, sm_count: int) -> int:
    """Pixel shares of the weight gradient: about six 256-thread blocks' worth per SM (a
    block's reduction is a chain of dependent chunks: many in flight hide its latency),
    each share at least 8 chunks of 16 pixels."""
    tile, _, blocks = _bands(geom)
    per_sm = 6 * THREADS // tile.threads
    return max(1, min(cdiv(per_sm * sm_count, blocks), cdiv(pixels, 8 * RC)))


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
    tile, bands, _ = _bands(geom)
    launch(cuda.kernel_ref(FILE, _filter_name(tile)), (bands, cdiv(geom.cout, tile.rows), splits),
           (tile.threads,), (x, gy, order, starts, partial, i32(geom.cin), i32(geom.cout),
                        i32(geom.u), i32(h * wd), i32(q), i32(per_split)))
    size = geom.cout * geom.u
    launch(cuda.kernel_ref(FILE, "scc_reduce_splits"), (cdiv(size, THREADS), 1, 1),
           (THREADS,), (partial, out, i32(splits), i32(size)))
    return out
