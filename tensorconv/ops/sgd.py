"""Multi-tensor SGD update on the GPU (``kernels_cu/sgd.cu``): one launch per step."""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda


def sgd_multi_tensor(params, grads, velocities, *, lr: float, momentum: float,
                     weight_decay: float, nesterov: bool, decoupled: bool) -> None:
    """Update every ``params[i]`` in place from ``grads[i]`` (and ``velocities[i]``).

    Parameters
    ----------
    params, grads, velocities : lists of CuPy float32 C-contiguous arrays, pairwise same shape
    """
    if not (len(params) == len(grads) == len(velocities)) or not params:
        raise ValueError("params, grads and velocities must be non-empty lists of one length")
    xp = backend.require_cuda("sgd_multi_tensor")
    for i, trio in enumerate(zip(params, grads, velocities)):
        for name, a in zip(("params", "grads", "velocities"), trio):
            if not backend.is_cupy_array(a) or a.dtype != np.float32 or not a.flags.c_contiguous:
                raise TypeError(f"{name}[{i}] must be a C-contiguous CuPy float32 array")
            if a.shape != trio[0].shape:
                raise ValueError(f"{name}[{i}] has shape {a.shape}; params[{i}] has {trio[0].shape}")
    table = np.array([[p.data.ptr, g.data.ptr, v.data.ptr]
                      for p, g, v in zip(params, grads, velocities)], dtype=np.uint64)
    sizes = np.array([p.size for p in params], dtype=np.int64)
    threads = 256
    blocks_x = min(-(-int(sizes.max()) // threads), 64)
    cuda.get_kernel("sgd.cu", "sgd_multi_tensor")(
        (blocks_x, len(params)), (threads,),
        (xp.asarray(table), xp.asarray(sizes), np.float32(lr), np.float32(momentum),
         np.float32(weight_decay), np.int32(nesterov), np.int32(decoupled)))
