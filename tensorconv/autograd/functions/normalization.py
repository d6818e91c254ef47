"""Batch normalisation over (N, H, W) for each channel of an NCHW tensor."""

from __future__ import annotations

from tensorconv.autograd.function import Function
from tensorconv.ops import batchnorm


class BatchNorm2d(Function):
    """``y = gamma * (x - mean) / sqrt(var + eps) + beta``.

    In training the batch statistics are used and the running estimates
    (``running_mean``, ``running_var``, updated in place) move towards them by
    ``momentum``; the running variance is the unbiased one (PyTorch's
    convention).  In evaluation the running estimates are used.  CUDA kernels
    on CuPy float32 (``tensorconv.ops.batchnorm``), the reference formulas otherwise.
    With ``group`` (a communicator) the batch statistics, forward and backward, are those of
    every rank's batch together (synchronised batch norm).
    """

    def __init__(self, running_mean, running_var, training, momentum=0.1, eps=1e-5, relu=False,
                 group=None):
        self.running_mean, self.running_var = running_mean, running_var
        self.training, self.momentum, self.eps, self.relu = training, momentum, eps, relu
        self.group = group

    def forward(self, x, gamma, beta):
        if x.ndim != 4 or x.shape[1] != gamma.shape[0]:
            raise ValueError(f"batch_norm2d: x {tuple(x.shape)} must be (N, C, H, W) with "
                             f"C = {gamma.shape[0]}")
        y, self.mean, self.invstd = batchnorm.batch_norm_forward(
            x, gamma, beta, self.running_mean, self.running_var, training=self.training,
            momentum=self.momentum, eps=self.eps, relu=self.relu, group=self.group)
        self.x, self.gamma = x, gamma
        self.y = y if self.relu else None
        return y

    def backward(self, gy):
        return batchnorm.batch_norm_backward(self.x, gy, self.mean, self.invstd, self.gamma,
                                             training=self.training, y=self.y, group=self.group)


def batch_norm2d(x, gamma, beta, running_mean, running_var, *, training: bool,
                 momentum: float = 0.1, eps: float = 1e-5, relu: bool = False, group=None):
    """Batch norm, optionally followed by a ReLU in the same kernels (``relu=True``);
    synchronised over the ranks of ``group`` in training when given."""
    return BatchNorm2d.apply(x, gamma, beta, running_mean=running_mean, running_var=running_var,
                             training=training, momentum=momentum, eps=eps, relu=relu,
                             group=group)
