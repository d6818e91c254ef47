"""Reference batch normalisation over (N, H, W) per channel (NumPy or CuPy arrays)."""

from __future__ import annotations

import numpy as np

from tensorconv import backend


def synced_sums(sums, group):
    """``sums`` (C, k) summed over the ranks of ``group`` (a communicator: ``size``,
    ``all_reduce``, ``wait``), in place, in float64; returned."""
    group.all_reduce(sums)
    group.wait()
    return sums


def batch_norm_forward(x, gamma, beta, running_mean, running_var, *, training: bool,
                       momentum: float = 0.1, eps: float = 1e-5, group=None):
    """Normalise ``x`` (N, C, H, W); update the running statistics in place when training.

    ``group`` (a communicator of more than one rank, training only): synchronised batch
    norm, the statistics of every rank's batch together (the ranks' ``x`` of one shape),
    from per-channel sums in float64 all-reduced over the ranks.

    Returns
    -------
    y : like ``x``
    mean, invstd : (C,) the statistics used (batch ones in training, running ones otherwise)
    """
    xp = backend.array_module(x)
    if training and group is not None:
        xd = x.astype(np.float64)
        sums = synced_sums(xp.stack([xd.sum(axis=(0, 2, 3)), (xd * xd).sum(axis=(0, 2, 3))],
                                    axis=1), group)
        m = x.shape[0] * x.shape[2] * x.shape[3] * group.size
        mean = sums[:, 0] / m
        var = xp.maximum(sums[:, 1] / m - mean * mean, 0.0)
        running_mean *= 1 - momentum
        running_mean += (momentum * mean).astype(x.dtype)
        running_var *= 1 - momentum
        running_var += ((momentum * m / (m - 1)) * var).astype(x.dtype)
    elif training:
        m = x.shape[0] * x.shape[2] * x.shape[3]
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        running_mean *= 1 - momentum
        running_mean += momentum * mean
        running_var *= 1 - momentum
        running_var += (momentum * m / (m - 1)) * var
    else:
        mean, var = running_mean, running_var
    invstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype)
    mean = mean.astype(x.dtype)
    xhat = (x - mean[None, :, None, None]) * invstd[None, :, None, None]
    return xhat * gamma[None, :, None, None] + beta[None, :, None, None], mean, invstd


def batch_norm_backward(x, gy, mean, invstd, gamma, *, training: bool, group=None):
    """Gradients ``(gx, dgamma, dbeta)`` of :func:`batch_norm_forward`.

    With ``group`` (synchronised, training only) ``gx`` is the gradient through the
    statistics of every rank's batch, and ``dgamma``, ``dbeta`` are the sums over all ranks
    divided by their number: the mean over the ranks that averaging gradients makes of the
    ranks' own sums, so a data-parallel step's update is unchanged by it.
    """
    xp = backend.array_module(x)
    xhat = (x - mean[None, :, None, None]) * invstd[None, :, None, None]
    dbeta = gy.sum(axis=(0, 2, 3))
    dgamma = (gy * xhat).sum(axis=(0, 2, 3))
    if training and group is not None:
        sums = synced_sums(xp.stack([dbeta, dgamma], axis=1).astype(np.float64), group)
        sums /= group.size
        dbeta, dgamma = sums[:, 0].astype(x.dtype), sums[:, 1].astype(x.dtype)
    scale = (gamma * invstd)[None, :, None, None]
    if not training:
        return gy * scale, dgamma, dbeta
    m = x.shape[0] * x.shape[2] * x.shape[3]
    gx = scale * (gy - (dbeta / m)[None, :, None, None] - xhat * (dgamma / m)[None, :, None, None])
    return gx, dgamma, dbeta
