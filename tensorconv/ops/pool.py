"""Max and average pooling (``kernels_cu/pool.cu``), forward only: fp32 NCHW, and fp16
NHWC for the fp16 inference engine.

The inference engine's pooling: one launch, padding handled in the kernel (no
padded copy), a grid-stride loop over the outputs (no launch shape to choose).
Training keeps the autograd functions of :mod:`tensorconv.autograd.functions.pooling`,
which also record what the backward pass needs.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import (
    check_array,
    check_choice,
    check_window_fits,
    output_buffer,
    pool_args,
    pooled_size,
)
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu

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


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both modes, both layouts."""
    return sorted(_name(m, lay) for m in MODES for lay in LAYOUTS)


def pool2d(x, kernel_size, stride=None, padding=0, *, mode: str = "max",
           layout: str = "nchw", out=None):
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
    out : array like the output, of ``x``'s dtype, optional (GPU only)

    Returns
    -------
    array, (N, C, OH, OW) float32 or (N, OH, OW, C) float16
    """
    check_choice(mode, "mode", MODES)
    check_choice(layout, "layout", tuple(LAYOUTS))
    (kh, kw), (sh, sw), (ph, pw) = pool_args(kernel_size, stride, padding)
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    dtype = LAYOUTS[layout]
    check_array(x, "x", ndim=4, dtype=dtype, contiguous=True)
    n, c, h, w = x.shape if layout == "nchw" else (x.shape[0], x.shape[3], *x.shape[1:3])
    check_window_fits(h + 2 * ph, w + 2 * pw, (kh, kw))
    oh, ow = pooled_size(h, w, (kh, kw), (sh, sw), (ph, pw))
    shape = (n, c, oh, ow) if layout == "nchw" else (n, oh, ow, c)
    if xp is np:
        no_out_on_cpu(out=out)
        nchw = x if layout == "nchw" else x.transpose(0, 3, 1, 2).astype(np.float32)
        y = reference.pool2d(nchw, (kh, kw), (sh, sw), (ph, pw), mode)
        y = y if layout == "nchw" else y.transpose(0, 2, 3, 1)
        return np.ascontiguousarray(y.astype(dtype))
    out = output_buffer(xp, out, shape, dtype=dtype)
    blocks = min(cdiv(out.size, THREADS), 32 * backend.device_facts().sm_count)
    i32 = np.int32
    sizes = (i32(h), i32(w), i32(oh), i32(ow), i32(kh), i32(kw), i32(sh), i32(sw), i32(ph),
             i32(pw))
    planes = (i32(n * c),) if layout == "nchw" else (i32(n), i32(c))
    launch(kernels(mode, layout)[0], (blocks,), (THREADS,), (x, out, *planes, *sizes))
    return out
