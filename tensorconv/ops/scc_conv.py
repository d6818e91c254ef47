"""Sliding-channel convolution (``kernels_cu/scc_conv.cu``): forward, both gradients, fp32,
NCHW (Wang et al., DSXplore, IPDPS'21).

The filters of an SCC layer fall into ``cycle`` window groups (filter k reads window
``k mod cycle``); every kernel works a group at a time, staging its window once for all its
filters (the paper's channel-cyclic reuse).  The input gradient is input-centric (each
input channel gathers the filters whose window holds it, through the channel map: no
atomics), with the output-centric atomic form (the paper's "Var") beside it for the
comparison; the weight gradient reduces per-block partial sums in a fixed order, so it is
deterministic too.  The launch shapes are fixed (a block of 256 threads: 32 filters x 64
pixels forward, 32 filters x 32 offsets for the weight gradient); nothing to tune yet.
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
BK, BP, UC = 32, 64, 32          # scc:: constants of the .cu
DATA_VARIANTS = ("input", "output")
NAMES = ("scc_fwd", "scc_bwd_data", "scc_bwd_data_atomic", "scc_bwd_filter",
         "scc_reduce_splits")


def kernels(*_) -> tuple[cuda.KernelRef, ...]:
    """Every kernel of the file (forward, both input-gradient forms, the weight gradient)."""
    return tuple(cuda.kernel_ref(FILE, n) for n in NAMES)


def instantiations() -> list[str]:
    """No templates: CI's nvcc build compiles the file as it is."""
    return []


@functools.lru_cache(maxsize=256)
def channel_map(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The input-centric gradient's table: for each input channel c, the (filter k, weight
    index k·U + u) pairs with ``(b_k + u) mod Cin == c``, as CSR ``(ptr (Cin + 1,), k, widx)``
    (int32).  The pairs of a channel are in filter order."""
    chans = geom.channels().reshape(-1)                  # (Cout·U,): channel of each weight
    widx = np.arange(chans.size)
    order = np.lexsort((widx, chans))                    # by channel, then filter
    counts = np.bincount(chans, minlength=geom.cin)
    ptr_ = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return ptr_, (widx[order] // geom.u).astype(np.int32), widx[order].astype(np.int32)


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
    p = h * wd
    i32 = np.int32
    p_tiles, k_tiles = cdiv(p, BP), cdiv(cdiv(geom.cout, geom.cycle), BK)
    groups = min(geom.cycle, geom.cout)      # window groups that hold a filter
    launch(cuda.kernel_ref(FILE, "scc_fwd"), (n * p_tiles, groups * k_tiles, 1), (THREADS,),
           (x, w, ptr(bias), out, i32(geom.cin), i32(geom.cout), i32(geom.u), i32(geom.stride),
            i32(geom.cycle), i32(p), i32(p_tiles), i32(k_tiles), i32(bool(relu))))
    return out


def scc_conv2d_backward_data(gy, w, geom: SCCGeometry, *, variant: str = "input", out=None):
    """Gradient of :func:`scc_conv2d` (without ReLU) with respect to ``x``.

    Parameters
    ----------
    gy : array, (N, Cout, H, W), float32
    w : array, (Cout, U), float32
    geom : SCCGeometry
    variant : {"input", "output"}
        Input-centric (each channel gathers its filters: deterministic, no atomics) or
        output-centric (each filter adds into its window's channels with atomics).
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
    p = h * wd
    i32 = np.int32
    p_tiles = cdiv(p, THREADS)
    if variant == "output":
        out.fill(0)
        launch(cuda.kernel_ref(FILE, "scc_bwd_data_atomic"), (n * p_tiles, geom.cout, 1),
               (THREADS,), (gy, w, out, i32(geom.cin), i32(geom.cout), i32(geom.u),
                            i32(geom.stride), i32(p), i32(p_tiles)))
        return out
    tables = _device_map(geom, xp.cuda.runtime.getDevice())
    launch(cuda.kernel_ref(FILE, "scc_bwd_data"), (n * p_tiles, geom.cin, 1), (THREADS,),
           (gy, w, *tables, out, i32(geom.cin), i32(geom.cout), i32(p), i32(p_tiles)))
    return out


@functools.lru_cache(maxsize=256)
def _device_map(geom: SCCGeometry, device: int):
    import cupy

    with cupy.cuda.Device(device):
        return tuple(cupy.asarray(a) for a in channel_map(geom))


def default_splits(geom: SCCGeometry, pixels: int, sm_count: int) -> int:
    """Pixel shares of the weight gradient: enough blocks for two per SM, each share at
    least 16 staging rounds of 64 pixels."""
    blocks = min(geom.cycle, geom.cout) * cdiv(cdiv(geom.cout, geom.cycle), BK) * cdiv(geom.u, UC)
    return max(1, min(cdiv(2 * sm_count, blocks), cdiv(pixels, 16 * BP)))


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
    total = n * h * wd
    splits = min(splits or default_splits(geom, total, backend.device_facts().sm_count),
                 cdiv(total, BP))
    per_split = cdiv(cdiv(total, splits), BP) * BP
    splits = cdiv(total, per_split)
    partial = workspace(xp, splits * geom.cout * geom.u)   # graph-safe: no allocation
    i32 = np.int32
    k_tiles, u_tiles = cdiv(cdiv(geom.cout, geom.cycle), BK), cdiv(geom.u, UC)
    groups = min(geom.cycle, geom.cout)
    launch(cuda.kernel_ref(FILE, "scc_bwd_filter"), (groups * k_tiles, u_tiles, splits),
           (THREADS,), (x, gy, partial, i32(n), i32(geom.cin), i32(geom.cout), i32(geom.u),
                        i32(geom.stride), i32(geom.cycle), i32(h * wd), i32(k_tiles),
                        i32(u_tiles), i32(per_split)))
    size = geom.cout * geom.u
    launch(cuda.kernel_ref(FILE, "scc_reduce_splits"), (cdiv(size, THREADS), 1, 1),
           (THREADS,), (partial, out, i32(splits), i32(size)))
    return out
