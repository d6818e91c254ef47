"""A CNN's classifier head, global average pool then linear, as one launch
(``kernels_cu/classifier_head.cu``); forward only, for the inference engine."""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import check_array
from tensorconv.ops.conv import output_buffer

_FILE = "classifier_head.cu"
_THREADS = 256
_OUTPUTS_PER_BLOCK = 32  # fixed by the kernel: 8 warps x 4 outputs


def gap_linear(x, w, bias=None, *, out=None):
    """``y = mean(x, axis=(2, 3)) @ w.T + bias``.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (K, C), float32, C-contiguous — the linear layer's weight
    bias : array, (K,), float32, optional
    out : array, (N, K), float32, optional (GPU only)

    Returns
    -------
    array, (N, K), float32
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    check_array(w, "w", ndim=2, dtype=np.float32, contiguous=True, xp=xp)
    n, c, h, wd = x.shape
    k = w.shape[0]
    if w.shape[1] != c:
        raise ValueError(f"w has {w.shape[1]} input features; x has {c} channels")
    if bias is not None:
        bias = backend.as_array(bias, "bias")
        check_array(bias, "bias", ndim=1, dtype=np.float32, contiguous=True, xp=xp)
        if bias.shape[0] != k:
            raise ValueError(f"bias has {bias.shape[0]} entries; w has {k} outputs")
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        return reference.gap_linear(x, w, bias).astype(np.float32)
    smem = 4 * c
    if smem > backend.device_facts().smem_per_block_optin:
        raise ValueError(f"x has {c} channels; their means need {smem} bytes of shared memory, "
                         f"more than a block may have")
    out = output_buffer(xp, out, (n, k))
    kernel = cuda.get_kernel(_FILE, "gap_linear")
    cuda.set_dynamic_smem(kernel, smem)
    i32 = np.int32
    kernel((-(-k // _OUTPUTS_PER_BLOCK), n), (_THREADS,),
           (x, w, np.uintp(0) if bias is None else bias, out, i32(c), i32(h * wd), i32(k)),
           shared_mem=smem)
    return out
