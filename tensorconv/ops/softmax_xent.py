"""Softmax cross-entropy on the GPU (``kernels_cu/softmax_xent.cu``): the loss of a batch of
logits in two launches (the rows, then their mean in a fixed order) and its gradient in
one, where CuPy's formulas take a dozen element-wise and reduction passes, each a launch
of its own in a training step (and a node of a captured one).

Float32 logits and int32 or int64 labels run the kernels; anything else (NumPy, other
dtypes, views) runs :mod:`tensorconv.reference.loss` on the array module of the input.  No
launch shape to choose: no ``Problem`` or ``Tile``.  The labels' range is not read back
(that is a host synchronisation): a label outside [0, C) makes the kernels' loss NaN.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_array, output_buffer
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu
from tensorconv.reference import loss as ref

FILE = "softmax_xent.cu"
THREADS = 256
ROWS = THREADS // 32          # rows a block of xent_rows takes: one warp each
LABEL_TYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}


def kernels(label_dtype=np.int64) -> tuple[cuda.KernelRef, ...]:
    """The kernels a forward and backward pass with labels of ``label_dtype`` launch."""
    t = LABEL_TYPES[np.dtype(label_dtype)]
    return (cuda.kernel_ref(FILE, f"xent_rows<{t}>"), cuda.kernel_ref(FILE, "xent_mean"),
            cuda.kernel_ref(FILE, f"xent_grad<{t}>"))


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both templates for both label types."""
    return sorted(f"{k}<{t}>" for k in ("xent_rows", "xent_grad") for t in LABEL_TYPES.values())


def _checked(logits, labels, name: str = "logits"):
    """``(logits, labels, xp, kernels?)`` after checking an (N, C) floating array and N
    integer labels on its device."""
    logits, labels = backend.as_array(logits, name), backend.as_array(labels, "labels")
    xp = backend.array_module(logits)
    check_array(logits, name, ndim=2, xp=xp)
    n, c = logits.shape
    if n < 1 or c < 1:
        raise ValueError(f"{name} must have at least one row and one class, got {(n, c)}")
    if not (isinstance(labels, np.ndarray) or backend.is_cupy_array(labels)) \
            or backend.array_module(labels) is not xp:
        raise TypeError(f"labels must be an array on the device of {name} ({xp.__name__}), "
                        f"got {type(labels).__module__}.{type(labels).__name__}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers, got {labels.dtype.name}")
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"labels must have shape ({n},) ({name} has {n} rows), got "
                         f"{tuple(labels.shape)}")
    fast = (xp is not np and logits.dtype == np.float32 and labels.dtype in LABEL_TYPES
            and logits.flags.c_contiguous and labels.flags.c_contiguous)
    return logits, labels, xp, fast


def softmax_xent_forward(logits, labels, *, logp=None):
    """The mean over the rows of ``-log softmax(logits)[label]``, and the log-probabilities.

    Parameters
    ----------
    logits : array, (N, C), floating
    labels : array, (N,), integers in [0, C) on logits' device
    logp : array, (N, C), float32, optional (GPU float32 path only)
        Where the log-probabilities go.

    Returns
    -------
    loss : array, 0-d, logits' dtype
    logp : array, (N, C), logits' dtype: what :func:`softmax_xent_backward` reads
    """
    logits, labels, xp, fast = _checked(logits, labels)
    if not fast:
        no_out_on_cpu(logp=logp)
        return ref.softmax_cross_entropy(logits, labels)
    n, c = logits.shape
    logp = output_buffer(xp, logp, (n, c), "logp")
    rows = xp.empty(n, np.float64)
    loss = xp.empty((), np.float32)
    k_rows, k_mean, _ = kernels(labels.dtype)
    launch(k_rows, (cdiv(n, ROWS),), (THREADS,), (logits, labels, logp, rows, np.int32(n),
                                                   np.int32(c)))
    launch(k_mean, (1,), (THREADS,), (rows, loss, np.int32(n)))
    return loss, logp


def softmax_xent_backward(logp, labels, gy, *, out=None):
    """The gradient of :func:`softmax_xent_forward`'s loss with respect to the logits:
    ``(exp(logp) - onehot(label)) * gy / N``.

    Parameters
    ----------
    logp : array, (N, C), floating: the forward's
    labels : array, (N,), the forward's
    gy : array, one value (the loss's gradient), float32 on logp's device for the kernel
    out : array, (N, C), float32, optional (GPU float32 path only)

    Returns
    -------
    array, (N, C), logp's dtype
    """
    logp, labels, xp, fast = _checked(logp, labels, "logp")
    gy = backend.as_array(gy, "gy")
    check_array(gy, "gy", ndim=gy.ndim, xp=xp)
    if gy.size != 1:
        raise ValueError(f"gy must hold one value (the loss's gradient), got shape "
                         f"{tuple(gy.shape)}")
    if not (fast and gy.dtype == np.float32):
        no_out_on_cpu(out=out)
        return ref.softmax_cross_entropy_backward(logp, labels, gy.reshape(()))
    n, c = logp.shape
    out = output_buffer(xp, out, (n, c))
    blocks = min(cdiv(n * c, THREADS), 8 * backend.device_facts().sm_count)
    launch(kernels(labels.dtype)[2], (blocks,), (THREADS,), (logp, labels, gy, out,
                                                             np.int32(n), np.int32(c)))
    return out
