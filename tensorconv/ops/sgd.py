"""Multi-tensor SGD update on the GPU (``kernels_cu/sgd.cu``): one launch per step over every
tensor's chunks of :data:`CHUNK` elements (no launch shape to choose)."""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_bools, check_real
from tensorconv.ops._launch import NULL, launch

FILE = "sgd.cu"

CHUNK = 2048
"""Elements one block updates: a tensor takes
``ceil(size / CHUNK)`` blocks, so a model's largest weight does not leave the rest of the
grid idle while a few blocks stride over it."""


def kernels() -> tuple[cuda.KernelRef, ...]:
    """The kernel an update runs."""
    return (cuda.kernel_ref(FILE, "sgd_multi_tensor"),)


def instantiations() -> list[str]:
    """No templates: the file's plain kernel is all CI's nvcc build needs."""
    return []


class PointerTables:
    """Device copies of the kernel's pointer and size tables, uploaded only when they change.

    A host-to-device copy from pageable memory waits for the GPU to drain, so
    uploading every step would serialise the host and the device.  CuPy's
    memory pool hands the gradients the same blocks step after step, so the
    tables rarely change.
    """

    def __init__(self):
        self.host = None
        self.device = None

    def upload(self, xp, params, grads, velocities):
        """The device (table, sizes, chunk starts) of these arrays and the chunks in all,
        uploaded only if they changed.

        A caller that captures the update into a CUDA graph calls this first, outside the
        capture: an upload cannot be captured (its host buffer would not outlive the graph).
        """
        table = np.array([[p.data.ptr, g.data.ptr, v.data.ptr]
                          for p, g, v in zip(params, grads, velocities)], dtype=np.uint64)
        sizes = np.array([p.size for p in params], dtype=np.int64)
        key = np.concatenate([table.ravel(), sizes.astype(np.uint64)])
        if self.host is None or not np.array_equal(self.host, key):
            starts = np.zeros(len(sizes) + 1, dtype=np.int64)
            np.cumsum(-(-sizes // CHUNK), out=starts[1:])
            if starts[-1] >= 2**31:
                raise ValueError(f"the parameters hold {int(sizes.sum())} values: more than "
                                 f"{CHUNK} x (2**31 - 1), one launch's blocks")
            self.host = key
            self.device = (xp.asarray(table), xp.asarray(sizes),
                           xp.asarray(starts.astype(np.int32)), int(starts[-1]))
        return self.device


def sgd_multi_tensor(params, grads, velocities, *, lr, momentum: float,
                     weight_decay: float, nesterov: bool, decoupled: bool,
                     tables: PointerTables | None = None) -> None:
    """Update every ``params[i]`` in place from ``grads[i]`` (and ``velocities[i]``).

    Parameters
    ----------
    params, grads, velocities : lists of CuPy float32 C-contiguous arrays, pairwise same shape
    lr : float, or CuPy float32 array of shape (1,)
        An array is read by the kernel when it runs (not when it is launched): a captured
        CUDA graph then follows a learning-rate schedule written into it between replays.
    tables : PointerTables, optional
        Keep one per optimiser to skip re-uploading unchanged pointer tables.
    """
    check_bools(nesterov=nesterov, decoupled=decoupled)
    xp = backend.require_cuda("sgd_multi_tensor")
    if backend.is_cupy_array(lr):
        if lr.shape != (1,) or lr.dtype != np.float32:
            raise ValueError(f"lr as an array must be CuPy float32 of shape (1,), got "
                             f"{lr.dtype} {tuple(lr.shape)}")
        lr_value, lr_device = 0.0, lr
    else:
        lr_value, lr_device = check_real(lr, "lr", low=0.0), NULL
    check_real(momentum, "momentum", low=0.0, high=1.0, high_open=True)
    check_real(weight_decay, "weight_decay", low=0.0)
    if not (len(params) == len(grads) == len(velocities)) or not params:
        raise ValueError("params, grads and velocities must be non-empty lists of one length")
    for i, trio in enumerate(zip(params, grads, velocities)):
        for name, a in zip(("params", "grads", "velocities"), trio):
            if not backend.is_cupy_array(a) or a.dtype != np.float32 or not a.flags.c_contiguous:
                raise TypeError(f"{name}[{i}] must be a C-contiguous CuPy float32 array")
            if a.shape != trio[0].shape:
                raise ValueError(f"{name}[{i}] has shape {a.shape}; params[{i}] has "
                                 f"{trio[0].shape}")
    d_table, d_sizes, d_starts, chunks = (tables or PointerTables()).upload(
        xp, params, grads, velocities)
    if chunks == 0:   # only empty tensors
        return
    launch(kernels()[0], (chunks,), (256,),
           (d_table, d_sizes, d_starts, np.int32(len(params)), np.int32(CHUNK),
            np.float32(lr_value), lr_device, np.float32(momentum), np.float32(weight_decay),
            np.int32(nesterov), np.int32(decoupled)))
