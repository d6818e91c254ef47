"""Reference batch normalisation over (N, H, W) per channel (NumPy or CuPy arrays)."""

from __future__ import annotations

from tensorconv import backend


def batch_norm_forward(x, gamma, beta, running_mean, running_var, *, training: bool,
                       momentum: float = 0.1, eps: float = 1e-5):
    """Normalise ``x`` (N, C, H, W); update the running statistics in place when training.

    Returns
    -------
    y : like ``x``
    mean, invstd : (C,) the statistics used (batch ones in training, running ones otherwise)
    """
    xp = backend.array_module(x)
    if training:
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


def batch_norm_backward(x, gy, mean, invstd, gamma, *, training: bool):
    """Gradients ``(gx, dgamma, dbeta)`` of :func:`batch_norm_forward`."""
    xhat = (x - mean[None, :, None, None]) * invstd[None, :, None, None]
    dbeta = gy.sum(axis=(0, 2, 3))
    dgamma = (gy * xhat).sum(axis=(0, 2, 3))
    scale = (gamma * invstd)[None, :, None, None]
    if not training:
        return gy * scale, dgamma, dbeta
    m = x.shape[0] * x.shape[2] * x.shape[3]
    gx = scale * (gy - (dbeta / m)[None, :, None, None] - xhat * (dgamma / m)[None, :, None, None])
    return gx, dgamma, dbeta
