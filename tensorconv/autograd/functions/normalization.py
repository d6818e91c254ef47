"""Batch normalisation over (N, H, W) for each channel of an NCHW tensor."""

from __future__ import annotations

from tensorconv import backend
from tensorconv.autograd.function import Function


class BatchNorm2d(Function):
    """``y = gamma * (x - mean) / sqrt(var + eps) + beta``.

    In training the batch statistics are used and the running estimates
    (``running_mean``, ``running_var``, updated in place) move towards them by
    ``momentum``; the running variance is the unbiased one (PyTorch's
    convention).  In evaluation the running estimates are used.
    """

    def __init__(self, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        self.running_mean, self.running_var = running_mean, running_var
        self.training, self.momentum, self.eps = training, momentum, eps

    def forward(self, x, gamma, beta):
        if x.ndim != 4 or x.shape[1] != gamma.shape[0]:
            raise ValueError(f"batch_norm2d: x {tuple(x.shape)} must be (N, C, H, W) with "
                             f"C = {gamma.shape[0]}")
        xp = backend.array_module(x)
        if self.training:
            m = x.shape[0] * x.shape[2] * x.shape[3]
            if m < 2:
                raise ValueError("batch_norm2d needs more than one value per channel in training")
            mean = x.mean(axis=(0, 2, 3))
            var = x.var(axis=(0, 2, 3))
            mom = self.momentum
            self.running_mean *= 1 - mom
            self.running_mean += mom * mean
            self.running_var *= 1 - mom
            self.running_var += (mom * m / (m - 1)) * var
        else:
            mean, var = self.running_mean, self.running_var
        self.invstd = (1.0 / xp.sqrt(var + self.eps)).astype(x.dtype)
        self.xhat = (x - mean[None, :, None, None]) * self.invstd[None, :, None, None]
        self.gamma = gamma
        return self.xhat * gamma[None, :, None, None] + beta[None, :, None, None]

    def backward(self, gy):
        axes = (0, 2, 3)
        gbeta = gy.sum(axis=axes)
        ggamma = (gy * self.xhat).sum(axis=axes)
        scale = (self.gamma * self.invstd)[None, :, None, None]
        if not self.training:
            return gy * scale, ggamma, gbeta
        m = gy.shape[0] * gy.shape[2] * gy.shape[3]
        gx = scale * (gy - (gbeta / m)[None, :, None, None]
                      - self.xhat * (ggamma / m)[None, :, None, None])
        return gx, ggamma, gbeta


def batch_norm2d(x, gamma, beta, running_mean, running_var, *, training: bool,
                 momentum: float = 0.1, eps: float = 1e-5):
    return BatchNorm2d.apply(x, gamma, beta, running_mean=running_mean, running_var=running_var,
                             training=training, momentum=momentum, eps=eps)
