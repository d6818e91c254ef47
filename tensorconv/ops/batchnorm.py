"""Batch normalisation for training (``kernels_cu/batchnorm.cu``).

On CuPy float32 arrays the training-mode forward is two launches and the backward two,
a residual block's shortcut sum (and its gradient) made inside them; everything else
(NumPy, other dtypes, evaluation mode) runs the reference formulas with the array module
of the input.  The kernels loop over their share of the data (no launch shape to choose):
a channel's values as one flat run split into equal chunks, in float4 units where the
planes allow.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import check_array, check_bools, check_real
from tensorconv.ops._launch import cdiv, launch, ptr, round_up
from tensorconv.reference.norm import synced_sums

FILE = "batchnorm.cu"
THREADS = 256
KERNELS = ("bn_partial_sums", "bn_normalize", "bn_apply", "bn_backward_sums", "bn_backward_data")


def kernels() -> tuple[cuda.KernelRef, ...]:
    """The kernels training-mode batch norm runs (forward and backward)."""
    return tuple(cuda.kernel_ref(FILE, name) for name in KERNELS)


def instantiations() -> list[str]:
    """No templates: the file's plain kernels are all CI's nvcc build needs."""
    return []


def _check(x, gamma, beta=None, running_mean=None, running_var=None):
    """The array module of ``x`` (N, C, H, W), after checking that every per-channel array
    given has C entries and ``x``'s dtype (nothing is broadcast or mixed)."""
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4)
    for name, a in (("gamma", gamma), ("beta", beta), ("running_mean", running_mean),
                    ("running_var", running_var)):
        if a is None:
            continue
        check_array(a, name, ndim=1, xp=xp)
        if a.dtype != x.dtype:
            raise TypeError(f"{name} is {a.dtype.name} but x is {x.dtype.name}: give them "
                            f"one dtype")
        if a.shape[0] != x.shape[1]:
            raise ValueError(f"{name} has {a.shape[0]} entries; x has {x.shape[1]} channels")
    return xp


def _kernel_path(xp, *arrays) -> bool:
    """The kernels take C-contiguous CuPy float32 arrays whose channels hold fewer than
    2**31 values (flat int indices)."""
    x = arrays[0]
    return (xp is not np and x.shape[0] * x.shape[2] * x.shape[3] < 1 << 31
            and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays))


def _vec(hw: int, *arrays) -> int:
    """Values per unit: 4 (float4 loads) where every plane starts 16-byte aligned, else 1."""
    return 4 if hw % 4 == 0 and all(a.data.ptr % 16 == 0 for a in arrays) else 1


def _group(group, training: bool):
    """The communicator batch norm synchronises over: ``group`` in training when it has
    more than one rank, else None (nothing to exchange)."""
    if group is None or not training:
        return None
    for attr in ("size", "all_reduce", "wait"):
        if not hasattr(group, attr):
            raise TypeError(f"group must be a communicator (size, all_reduce, wait); "
                            f"{type(group).__name__} has no {attr}")
    return group if group.size > 1 else None


def _chunks(values: int, c: int) -> tuple[int, int]:
    """(chunks, values per chunk, a multiple of 4) of a channel's ``values``: the C x chunks
    grid in one wave of the blocks the GPU holds at once (:func:`_resident`), each thread
    still taking 16 values or more.  A wave's tail costs as much as a full one: 17 chunks of
    ResNet-18's 64 channels at batch 128 (1,088 blocks, three waves of 528) ran the kernels
    1.1-1.2x slower than 8 (``docs/notes/training_speed.md``).  Independent of the unit
    size, so that synchronised ranks' partials line up."""
    want = max(1, min(_resident() // c, cdiv(values, 16 * THREADS)))
    per = round_up(cdiv(values, want), 4)
    return cdiv(values, per), per


def _resident() -> int:
    """256-thread blocks of the batch-norm kernels the current device holds at once, by the
    registers of the largest (58-64 a thread: four blocks an SM on the H100 and H200)."""
    facts = backend.device_facts()
    return _resident_on(facts.index, facts.sm_count, facts.regs_per_sm, facts.max_threads_per_sm)


@functools.cache   # (index: one entry a device)
def _resident_on(index: int, sms: int, regs_per_sm: int, threads_per_sm: int) -> int:
    regs = round_up(max(cuda.load(ref).num_regs for ref in kernels()), 8)   # (allocation unit)
    return sms * max(1, min(threads_per_sm // THREADS, regs_per_sm // (regs * THREADS)))


def _units_args(n: int, hw: int, vec: int, c: int):
    """(chunks, kernel arguments vec, units per chunk, fd_u) of a C x chunks launch."""
    chunks, per = _chunks(n * hw, c)
    units = hw // vec
    fd_u = cuda.fast_div(units) if units < 1 << 16 else np.uint64(0)
    return chunks, (np.int32(vec), np.int32(per // vec), fd_u)


def _check_residual(residual, x, xp) -> tuple:
    """``(residual,)`` after checking it has ``x``'s shape, dtype and array module; ``()``
    for None (no shortcut sum)."""
    if residual is None:
        return ()
    check_array(residual, "residual", ndim=4, xp=xp)
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(f"residual {tuple(residual.shape)} {residual.dtype.name} must have "
                         f"x's shape and dtype, {tuple(x.shape)} {x.dtype.name}")
    return (residual,)


def batch_norm_forward(x, gamma, beta, running_mean, running_var, *, training: bool,
                       momentum: float = 0.1, eps: float = 1e-5, relu: bool = False,
                       group=None, residual=None):
    """Batch norm of ``x`` (N, C, H, W); see :func:`tensorconv.reference.batch_norm_forward`.

    Returns ``(y, mean, invstd)``; in training the running statistics are
    updated in place.  ``relu`` applies ``max(y, 0)`` in the same pass.  ``residual``
    (``x``'s shape and dtype): ``relu?(batch_norm(x) + residual)``, a residual block's
    output, the sum made in the same pass.  ``group`` (a communicator,
    :mod:`tensorconv.distributed`): in training, the statistics of every rank's batch
    together (synchronised batch norm; every rank's ``x`` of one shape), the kernels'
    per-chunk sums all-reduced between the two launches that use them.
    """
    check_bools(training=training, relu=relu)
    check_real(momentum, "momentum", low=0.0, high=1.0)
    check_real(eps, "eps", low=0.0, low_open=True)
    xp = _check(x, gamma, beta, running_mean, running_var)
    res = _check_residual(residual, x, xp)
    group = _group(group, training)
    n, c, h, w = x.shape
    if training and n * h * w < 2:
        raise ValueError("batch norm needs more than one value per channel in training")
    if not (training and _kernel_path(xp, x, gamma, beta, running_mean, running_var, *res)):
        y, mean, invstd = reference.batch_norm_forward(x, gamma, beta, running_mean, running_var,
                                                       training=training, momentum=momentum,
                                                       eps=eps, group=group)
        if residual is not None:
            y = y + residual
        return (xp.maximum(y, 0) if relu else y), mean, invstd
    y = xp.empty_like(x)
    # one chunking for both launches; each reads in the widest units its arrays allow
    chunks, sum_args = _units_args(n, h * w, _vec(h * w, x), c)
    _, norm_args = _units_args(n, h * w, _vec(h * w, x, y, *res), c)
    partial = xp.empty((chunks, c, 2), dtype=np.float64)
    i32 = np.int32
    launch(cuda.kernel_ref(FILE, "bn_partial_sums"), (c, chunks), (THREADS,),
           (x, partial, i32(n), i32(c), i32(h * w)) + sum_args)
    count = n * h * w
    if group is not None:   # every rank's chunks line up (one shape): sum them elementwise
        synced_sums(partial, group)
        count *= group.size
    mean, invstd = xp.empty(c, np.float32), xp.empty(c, np.float32)
    # the statistics made where they are used: no launch of their own between the two
    launch(cuda.kernel_ref(FILE, "bn_normalize"), (c, chunks), (THREADS,), (
        x, partial, i32(chunks), i32(count), gamma, beta, ptr(residual), mean, invstd,
        running_mean, running_var, np.float32(momentum), np.float32(eps), y, i32(relu),
        i32(n), i32(c), i32(h * w)) + norm_args)
    return y, mean, invstd


def batch_norm_apply(x, mean, invstd, gamma, beta, *, relu: bool = False, out=None,
                     residual=None):
    """``relu?((x - mean) * invstd * gamma + beta + residual)`` per channel, one launch
    (GPU float32).

    Parameters
    ----------
    x, out : CuPy float32 (N, C, H, W), C-contiguous
    mean, invstd, gamma, beta : CuPy float32 (C,)
    residual : CuPy float32 (N, C, H, W), C-contiguous, optional
    """
    check_bools(relu=relu)
    xp = _check(x, gamma, beta)
    res = _check_residual(residual, x, xp)
    if not _kernel_path(xp, x, mean, invstd, gamma, beta, *res):
        raise TypeError("batch_norm_apply needs C-contiguous CuPy float32 arrays")
    out = xp.empty_like(x) if out is None else out
    if out.shape != x.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    vec = _vec(h * w, x, out, *res)
    units = x.size // vec
    blocks = min(cdiv(units, THREADS), 16 * backend.device_facts().sm_count)
    launch(cuda.kernel_ref(FILE, "bn_apply"), (blocks,), (THREADS,), (
        x, mean, invstd, gamma, beta, ptr(residual), out, np.int32(c), np.int32(h * w),
        np.int32(vec), np.uint64(units), np.int32(relu)))
    return out


def batch_norm_backward(x, gy, mean, invstd, gamma, *, training: bool, y=None, beta=None,
                        group=None, residual_grad: bool = False):
    """Gradients ``(gx, dgamma, dbeta)`` of :func:`batch_norm_forward`, and with
    ``residual_grad`` the residual's gradient fourth (``gy`` where the ReLU passed it).

    ``y``: the forward output when it had a fused ReLU (``gy`` is dropped where ``y <= 0``).
    ``beta``: the forward's, given with ``y`` when that ReLU had no residual before it: the
    kernels then recompute the ReLU's input from ``x`` (the forward's rounding, so the same
    mask bit for bit) instead of reading ``y``, one pass over the activations fewer.
    ``group``: the forward's (synchronised batch norm); see
    :func:`tensorconv.reference.batch_norm_backward` for what ``dgamma``, ``dbeta`` are then.
    """
    check_bools(training=training, residual_grad=residual_grad)
    xp = _check(x, gamma, beta)
    group = _group(group, training)
    if gy.shape != x.shape or (y is not None and y.shape != x.shape):
        raise ValueError(f"gy {tuple(gy.shape)} and y must have x's shape {tuple(x.shape)}")
    if beta is not None and (y is None or residual_grad):
        raise ValueError("beta recomputes the mask of a fused ReLU without a residual: give "
                         "it with that ReLU's output y, and not with residual_grad")
    masks = () if y is None else (y,) if beta is None else (beta,)   # what the kernels read
    if not (training and _kernel_path(xp, x, gy, mean, invstd, gamma, *masks)):
        if y is not None:
            gy = gy * (y > 0)
        grads = reference.batch_norm_backward(x, gy, mean, invstd, gamma, training=training,
                                              group=group)
        return grads + (gy,) if residual_grad else grads
    n, c, h, w = x.shape
    gx = xp.empty_like(x)
    # the shortcut's gradient: gy itself without a ReLU, else the kernel's masked copy
    g_res = (xp.empty_like(gy) if y is not None else gy) if residual_grad else None
    planes = masks if beta is None else ()   # (beta is read a value a channel)
    vec = _vec(h * w, x, gy, gx, *planes, *(() if g_res is None else (g_res,)))
    chunks, unit_args = _units_args(n, h * w, vec, c)
    partial = xp.empty((chunks, c, 2), dtype=np.float64)
    i32 = np.int32
    mask = (ptr(y if beta is None else None), ptr(beta))   # (y or NULL, beta or NULL)
    launch(cuda.kernel_ref(FILE, "bn_backward_sums"), (c, chunks), (THREADS,), (
        x, gy) + mask + (mean, invstd, gamma, partial, i32(n), i32(c), i32(h * w)) + unit_args)
    if group is not None:
        # the sums over every rank, over the ranks' number: divided by this rank's count
        # they are the means over all images; as dgamma and dbeta, the ranks' mean
        synced_sums(partial, group)
        partial *= 1.0 / group.size
    dgamma, dbeta = xp.empty(c, np.float32), xp.empty(c, np.float32)
    launch(cuda.kernel_ref(FILE, "bn_backward_data"), (c, chunks), (THREADS,), (
        x, gy) + mask + (mean, invstd, gamma, partial, i32(chunks), gx, dgamma, dbeta,
        ptr(g_res if y is not None else None), i32(n), i32(c), i32(h * w)) + unit_args)
    return (gx, dgamma, dbeta, g_res) if residual_grad else (gx, dgamma, dbeta)
