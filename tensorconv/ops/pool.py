"""Max and average pooling (``kernels_cu/pool.cu``): fp32 NCHW, and fp16 NHWC for the fp16
inference engine; training's max pooling, forward and backward, fp32 NCHW.

The inference engine's pooling: one launch, padding handled in the kernel (no
padded copy), a grid-stride loop over the outputs (no launch shape to choose).
Training's max pooling (:func:`max_pool2d_train`, :func:`max_pool2d_backward`) keeps the
window tap of each maximum, one byte per output, and its backward gathers: each input
value written once, overlapping windows too (no atomics).  The autograd function
(:mod:`tensorconv.autograd.functions.pooling`) runs these on the GPU.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import (
    check_array,
    check_bool,
    check_choice,
    check_window_fits,
    output_buffer,
    pool_args,
    pooled_size,
)
from tensorconv.ops._launch import NULL, cdiv, gpu_only, launch, no_out_on_cpu

FILE = "pool.cu"
MODES = ("max", "avg")
LAYOUTS = {"nchw": np.float32, "nhwc": np.float16}   # layout -> the dtype it takes
THREADS = 256


def _name(mode: str, layout: str = "nchw") -> str:
    kernel = "pool2d_fwd" if layout == "nchw" else "pool2d_nhwc_half"
    return f"{kernel}<{int(mode == 'avg')}>"


def kernels(mode: str, layout: str = "nchw") -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch in ``mode`` on ``layout`` runs."""
    return (cuda.kernel_ref(FILE, _name(mode, layout)),)


MAX_TAPS = 256   # a window's taps must fit the byte each output keeps


def train_kernels() -> tuple[cuda.KernelRef, ...]:
    """Training max pooling's forward (the max forward, keeping taps) and backward."""
    return kernels("max") + (cuda.kernel_ref(FILE, "max_pool2d_train_bwd"),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both modes, both layouts."""
    return sorted(_name(m, lay) for m in MODES for lay in LAYOUTS)


def pool2d(x, kernel_size, stride=None, padding=0, *, mode: str = "max",
           layout: str = "nchw", ceil_mode: bool = False, out=None):
    """Max or average pooling of ``x``.

    Parameters
    ----------
    x : array, C-contiguous: (N, C, H, W) float32 for ``layout="nchw"``, (N, H, W, C)
        float16 for ``"nhwc"`` (NumPy: the reference computes it)
    kernel_size, stride, padding : int or (int, int)
        As PyTorch's ``max_pool2d``/``avg_pool2d``; stride defaults to the kernel,
        padding is at most half the kernel.
    mode : {"max", "avg"}
        ``"max"`` ignores padded cells and propagates NaN; ``"avg"`` divides by
        the whole window, padded cells counted as zeros (``count_include_pad``).
    layout : {"nchw", "nhwc"}
    ceil_mode : bool
        PyTorch's: the window count rounded up, the last window clipped at the border
        (:func:`tensorconv.checks.pooled_size`); max pooling only.
    out : array like the output, of ``x``'s dtype, optional (GPU only)

    Returns
    -------
    array, (N, C, OH, OW) float32 or (N, OH, OW, C) float16
    """
    check_choice(mode, "mode", MODES)
    check_choice(layout, "layout", tuple(LAYOUTS))
    ceil_mode = _check_ceil(ceil_mode, mode)
    (kh, kw), (sh, sw), (ph, pw) = pool_args(kernel_size, stride, padding)
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    dtype = LAYOUTS[layout]
    check_array(x, "x", ndim=4, dtype=dtype, contiguous=True)
    n, c, h, w = x.shape if layout == "nchw" else (x.shape[0], x.shape[3], *x.shape[1:3])
    check_window_fits(h + 2 * ph, w + 2 * pw, (kh, kw))
    oh, ow = pooled_size(h, w, (kh, kw), (sh, sw), (ph, pw), ceil_mode)
    shape = (n, c, oh, ow) if layout == "nchw" else (n, oh, ow, c)
    if xp is np:
        no_out_on_cpu(out=out)
        nchw = x if layout == "nchw" else x.transpose(0, 3, 1, 2).astype(np.float32)
        y = reference.pool2d(nchw, (kh, kw), (sh, sw), (ph, pw), mode, ceil_mode)
        y = y if layout == "nchw" else y.transpose(0, 2, 3, 1)
        return np.ascontiguousarray(y.astype(dtype))
    out = output_buffer(xp, out, shape, dtype=dtype)
    blocks = min(cdiv(out.size, THREADS), 32 * backend.device_facts().sm_count)
    i32 = np.int32
    sizes = (i32(h), i32(w), i32(oh), i32(ow), i32(kh), i32(kw), i32(sh), i32(sw), i32(ph),
             i32(pw))
    planes = (NULL, i32(n * c)) if layout == "nchw" else (i32(n), i32(c))   # NULL: no taps
    launch(kernels(mode, layout)[0], (blocks,), (THREADS,), (x, out, *planes, *sizes))
    return out


def _check_ceil(ceil_mode, mode: str = "max") -> bool:
    if check_bool(ceil_mode, "ceil_mode") and mode != "max":
        raise ValueError("ceil_mode is supported for max pooling only")
    return bool(ceil_mode)


def _train_sizes(shape, kernel_size, stride, padding, ceil_mode=False):
    ceil_mode = _check_ceil(ceil_mode)
    (kh, kw), (sh, sw), (ph, pw) = pool_args(kernel_size, stride, padding)
    n, c, h, w = shape
    check_window_fits(h + 2 * ph, w + 2 * pw, (kh, kw))
    if kh * kw > MAX_TAPS:
        raise ValueError(f"max pooling's window has {kh * kw} taps; the training kernels "
                         f"keep one byte per output (at most {MAX_TAPS})")
    oh, ow = pooled_size(h, w, (kh, kw), (sh, sw), (ph, pw), ceil_mode)
    i32 = np.int32
    return (n, c, oh, ow), tuple(i32(v) for v in (n * c, h, w, oh, ow, kh, kw, sh, sw, ph, pw))


def max_pool2d_train(x, kernel_size, stride=None, padding=0, *, ceil_mode: bool = False):
    """Max pooling of ``x`` that keeps, for the backward, where each maximum came from.

    Parameters
    ----------
    x : CuPy array, (N, C, H, W), float32, C-contiguous
    kernel_size, stride, padding : int or (int, int), as :func:`pool2d`; at most
        :data:`MAX_TAPS` taps per window
    ceil_mode : bool, as :func:`pool2d`

    Returns
    -------
    y : (N, C, OH, OW) float32
    taps : (N, C, OH, OW) uint8, the window tap ``r * KW + s`` of each maximum (the first
        of equal values, the first NaN)
    """
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    gpu_only(xp, "max_pool2d_train", "tensorconv.autograd.functions.max_pool2d")
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    shape, sizes = _train_sizes(x.shape, kernel_size, stride, padding, ceil_mode)
    y, taps = xp.empty(shape, np.float32), xp.empty(shape, np.uint8)
    blocks = min(cdiv(y.size, THREADS), 32 * backend.device_facts().sm_count)
    launch(train_kernels()[0], (blocks,), (THREADS,), (x, y, taps) + sizes)
    return y, taps


def max_pool2d_backward(gy, taps, x_shape, kernel_size, stride=None, padding=0, *,
                        ceil_mode: bool = False, out=None):
    """Gradient of :func:`max_pool2d_train` with respect to ``x``.

    Parameters
    ----------
    gy : CuPy array, (N, C, OH, OW), float32, C-contiguous
    taps : CuPy array, (N, C, OH, OW), uint8, from :func:`max_pool2d_train`
    x_shape : (N, C, H, W)
    ceil_mode : bool, as the forward's
    out : (N, C, H, W) float32, optional

    Returns
    -------
    (N, C, H, W) float32
    """
    gy, taps = backend.as_array(gy, "gy"), backend.as_array(taps, "taps")
    xp = backend.array_module(gy)
    gpu_only(xp, "max_pool2d_backward", "tensorconv.autograd.functions.max_pool2d")
    if len(x_shape) != 4:
        raise ValueError(f"x_shape must be (N, C, H, W), got {x_shape!r}")
    shape, sizes = _train_sizes(tuple(x_shape), kernel_size, stride, padding, ceil_mode)
    check_array(gy, "gy", ndim=4, dtype=np.float32, contiguous=True)
    check_array(taps, "taps", ndim=4, dtype=np.uint8, contiguous=True, xp=xp)
    for name, a in (("gy", gy), ("taps", taps)):
        if tuple(a.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(a.shape)}; the pooling's output is {shape}")
    out = output_buffer(xp, out, tuple(x_shape))
    blocks = min(cdiv(out.size, THREADS), 32 * backend.device_facts().sm_count)
    launch(train_kernels()[1], (blocks,), (THREADS,), (gy, taps, out) + sizes)
    return out
