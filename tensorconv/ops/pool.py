"""Max and average pooling over NCHW (``kernels_cu/pool.cu``), forward only.

The inference engine's pooling: one launch, padding handled in the kernel (no
padded copy).  Training keeps the autograd functions of
:mod:`tensorconv.autograd.functions.pooling`, which also record what the
backward pass needs.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.autograd.functions.pooling import pool_args, pooled_size
from tensorconv.checks import check_array

_FILE = "pool.cu"
MODES = ("max", "avg")
_THREADS = 256


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
    from tensorconv.ops.conv import output_buffer

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    (kh, kw), (sh, sw), (ph, pw) = pool_args(kernel_size, stride, padding)
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    n, c, h, w = x.shape
    if h + 2 * ph < kh or w + 2 * pw < kw:
        raise ValueError(f"pooling window {(kh, kw)} larger than the padded input {(h, w)}")
    oh, ow = pooled_size(h, w, (kh, kw), (sh, sw), (ph, pw))
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        return reference.pool2d(x, (kh, kw), (sh, sw), (ph, pw), mode).astype(np.float32)
    out = output_buffer(xp, out, (n, c, oh, ow))
    kernel = cuda.get_kernel(_FILE, f"pool2d_fwd<{int(mode == 'avg')}>")
    blocks = min(-(-out.size // _THREADS), 32 * backend.device_facts().sm_count)
    i32 = np.int32
    kernel((blocks,), (_THREADS,), (x, out, i32(n * c), i32(h), i32(w), i32(oh), i32(ow),
                                    i32(kh), i32(kw), i32(sh), i32(sw), i32(ph), i32(pw)))
    return out
