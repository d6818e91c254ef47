"""Counter-based dropout on the GPU (``kernels_cu/dropout.cu``): the mask of a call is a
pure function of (seed, step, element index), and the step lives in a one-element device
array that the op advances there.

So a run is reproducible from its seed on either device (the NumPy path,
:mod:`tensorconv.reference.dropout`, draws the same masks), a checkpoint holding the step
resumes the same stream, and a training step captured into a CUDA graph draws a new mask
on every replay without a host value.  No launch shape to choose: no ``Problem`` or
``Tile``.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_array, check_int, check_real, output_buffer
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu
from tensorconv.reference import dropout as ref

FILE = "dropout.cu"
THREADS = 256
_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def kernels(dtype=np.float32) -> tuple[cuda.KernelRef, ...]:
    """The kernels a forward and backward pass of ``dtype`` launch."""
    t = _TYPES[np.dtype(dtype)]
    return (cuda.kernel_ref(FILE, f"dropout_fwd<{t}>"), cuda.kernel_ref(FILE, "dropout_step"),
            cuda.kernel_ref(FILE, f"dropout_bwd<{t}>"))


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both kernels in float and double."""
    return sorted(f"{k}<{t}>" for k in ("dropout_fwd", "dropout_bwd") for t in _TYPES.values())


def new_step(xp=np):
    """A step counter at 0: a (1,) int64 array on ``xp``'s device."""
    return xp.zeros((1,), np.int64)


def _checked(x, p, seed, step, offset=0):
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    if np.dtype(x.dtype) not in _TYPES:
        raise TypeError(f"x must be float32 or float64, got {x.dtype}")
    check_array(x, "x", ndim=x.ndim, contiguous=True, xp=xp)
    check_real(p, "p", low=0.0, high=1.0, high_open=True)
    check_int(seed, "seed", minimum=0)
    if seed >= 1 << 64:
        raise ValueError(f"seed must be below 2^64, got {seed}")
    check_int(offset, "offset", minimum=0)
    step = backend.as_array(step, "step")
    check_array(step, "step", ndim=1, dtype=np.int64, contiguous=True, xp=xp)
    if step.shape != (1,):
        raise ValueError(f"step must have shape (1,), got {tuple(step.shape)}")
    return x, xp, step


def dropout_forward(x, p: float, seed: int, step, *, offset: int = 0, out=None):
    """Zero each element of ``x`` with probability ``p`` and scale the rest by 1/(1-p),
    drawing call ``step[0]`` of the stream ``seed``; ``step`` is then advanced by one (on
    the device, after the draw).

    Parameters
    ----------
    x : array, any shape, float32 or float64, C-contiguous
    p : float in [0, 1)
    seed : int, 0 <= seed < 2^64
    step : array, (1,), int64, on x's device
        The call counter; advanced in place.
    offset : int >= 0
        Where ``x`` starts in a larger array whose masks it draws (a data-parallel rank's
        rows of the global batch: ``rank · x.size``).
    out : array like ``x``, optional (GPU only)

    Returns
    -------
    y : array like ``x``
    mask : array, x's shape, uint8 (1 where kept): what :func:`dropout_backward` reads
    """
    x, xp, step = _checked(x, p, seed, step, offset)
    if xp is np:
        no_out_on_cpu(out=out)
        y, keep = ref.dropout(x, seed, int(step[0]), p, offset)
        step += 1
        return y, keep.astype(np.uint8)
    out = output_buffer(xp, out, x.shape, dtype=x.dtype)
    mask = xp.empty(x.shape, np.uint8)
    fwd, advance, _ = kernels(x.dtype)
    launch(fwd, (_blocks(x.size),), (THREADS,), (
        x, out, mask, step, np.uint64(seed), np.uint32(ref.keep_from(p)),
        x.dtype.type(1.0 / (1.0 - p)), np.int64(offset), np.int64(x.size)))
    launch(advance, (1,), (1,), (step,))
    return out, mask


def dropout_backward(gy, mask, p: float):
    """``gy`` through the mask of :func:`dropout_forward`: gy · mask / (1 - p).

    Parameters
    ----------
    gy : array, float32 or float64, C-contiguous
    mask : array, gy's shape, uint8
    p : float in [0, 1), the forward pass's

    Returns
    -------
    array like ``gy``
    """
    gy, mask = backend.as_array(gy, "gy"), backend.as_array(mask, "mask")
    xp = backend.array_module(gy)
    if np.dtype(gy.dtype) not in _TYPES:
        raise TypeError(f"gy must be float32 or float64, got {gy.dtype}")
    check_array(gy, "gy", ndim=gy.ndim, contiguous=True, xp=xp)
    check_array(mask, "mask", ndim=gy.ndim, dtype=np.uint8, contiguous=True, xp=xp)
    if mask.shape != gy.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}; gy has {tuple(gy.shape)}")
    check_real(p, "p", low=0.0, high=1.0, high_open=True)
    scale = gy.dtype.type(1.0 / (1.0 - p))
    if xp is np:
        return np.where(mask.astype(bool), gy * scale, gy.dtype.type(0))
    gx = xp.empty_like(gy)
    launch(kernels(gy.dtype)[2], (_blocks(gy.size),), (THREADS,),
           (gy, mask, gx, scale, np.int64(gy.size)))
    return gx


def _blocks(n: int) -> int:
    """A grid-stride loop's blocks: enough to fill the GPU, one at least."""
    return max(1, min(cdiv(n, THREADS), 32 * backend.device_facts().sm_count))
