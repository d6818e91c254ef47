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

    With a ``residual`` input, ``relu?(batch_norm(x) + residual)`` (a residual block's
    output) in one node: the sum and the ReLU are made in the normalisation's own pass (on
    the GPU in its kernel), so neither the normalised values nor their sum outlives the
    forward pass as a tensor of its own, and the backward pass reads the ReLU's mask off
    the output (a separate Add and ReLU would keep both, and a mask, until then).  Values
    and gradients are those of the separate nodes, bit for bit.
    """

    def __init__(self, running_mean, running_var, training, momentum=0.1, eps=1e-5, relu=False,
                 group=None):
        self.running_mean, self.running_var = running_mean, running_var
        self.training, self.momentum, self.eps, self.relu = training, momentum, eps, relu
        self.group = group

    def forward(self, x, gamma, beta, residual=None):
        if x.ndim != 4 or x.shape[1] != gamma.shape[0]:
            raise ValueError(f"batch_norm2d: x {tuple(x.shape)} must be (N, C, H, W) with "
                             f"C = {gamma.shape[0]}")
        if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
            raise ValueError(f"batch_norm2d: residual {tuple(residual.shape)} {residual.dtype} "
                             f"must match x {tuple(x.shape)} {x.dtype}")
        y, self.mean, self.invstd = batchnorm.batch_norm_forward(
            x, gamma, beta, self.running_mean, self.running_var, training=self.training,
            momentum=self.momentum, eps=self.eps, relu=self.relu, group=self.group,
            residual=residual)
        self.x, self.gamma = x, gamma
        self.y = y if self.relu else None      # the ReLU's mask, read where it is needed
        self.with_residual = residual is not None
        # without a residual the kernels recompute the mask from x: one pass fewer
        self.beta = beta if self.relu and residual is None else None
        return y

    def backward(self, gy):
        return batchnorm.batch_norm_backward(
            self.x, gy, self.mean, self.invstd, self.gamma, training=self.training, y=self.y,
            beta=self.beta, group=self.group, residual_grad=self.with_residual)


def batch_norm2d(x, gamma, beta, running_mean, running_var, *, training: bool,
                 momentum: float = 0.1, eps: float = 1e-5, relu: bool = False, group=None,
                 residual=None):
    """Batch norm, optionally followed by a ReLU in the same kernels (``relu=True``);
    synchronised over the ranks of ``group`` in training when given.  With ``residual``
    (x's shape and dtype), ``relu?(batch_norm(x) + residual)`` in one node."""
    inputs = (x, gamma, beta) if residual is None else (x, gamma, beta, residual)
    return BatchNorm2d.apply(*inputs, running_mean=running_mean, running_var=running_var,
                             training=training, momentum=momentum, eps=eps, relu=relu,
                             group=group)
