"""Max and average pooling over NCHW (``kernels_cu/pool.cu``), forward only.

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
THREADS = 256


def _name(mode: str) -> str:
    return f"pool2d_fwd<{int(mode == 'avg')}>"


def kernels(mode: str) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch in ``mode`` runs."""
    return (cuda.kernel_ref(FILE, _name(mode)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both modes."""
    return sorted(_name(m) for m in MODES)


def pool2d(x, kernel_size, stride=None, padding=0, *, mode: str = "max", out=None):
    """Max or average pooling of ``x``.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    kernel_size, stride, padding : int or (int, int)
        As PyTorch's ``max_pool2d``/``avg_pool2d``; stride defaults to the kernel,
        padding is at most half the kernel.
    mode : {"max", "avg"}
        ``"max"`` ignores padded cells and propagates NaN; ``"avg"`` divides by
        the whole window, padded cells counted as zeros (``count_include_pad``).
    out : array, (N, C, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, C, OH, OW), float32
    """
    check_choice(mode, "mode", MODES)
    (kh, kw), (sh, sw), (ph, pw) = pool_args(kernel_size, stride, padding)
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    n, c, h, w = x.shape
    check_window_fits(h + 2 * ph, w + 2 * pw, (kh, kw))
    oh, ow = pooled_size(h, w, (kh, kw), (sh, sw), (ph, pw))
    if xp is np:
        no_out_on_cpu(out=out)
        return reference.pool2d(x, (kh, kw), (sh, sw), (ph, pw), mode).astype(np.float32)
    out = output_buffer(xp, out, (n, c, oh, ow))
    blocks = min(cdiv(out.size, THREADS), 32 * backend.device_facts().sm_count)
    i32 = np.int32
    launch(kernels(mode)[0], (blocks,), (THREADS,), (
        x, out, i32(n * c), i32(h), i32(w), i32(oh), i32(ow), i32(kh), i32(kw), i32(sh), i32(sw),
        i32(ph), i32(pw)))
    return out
