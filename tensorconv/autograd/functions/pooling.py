"""Max, average and global average pooling over NCHW."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.autograd.function import Function
from tensorconv.autograd.functions.windows import scatter_windows, windows
from tensorconv.checks import check_bool, pool_args, pooled_size
from tensorconv.ops import pool


def _check_input(x, kernel, padding):
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    if x.shape[2] + 2 * padding[0] < kernel[0] or x.shape[3] + 2 * padding[1] < kernel[1]:
        raise ValueError(f"pooling window {kernel} larger than the padded input {x.shape[2:]}")


class MaxPool2d(Function):
    """Max over each window; on the GPU (float32, C-contiguous) two kernels
    (:func:`tensorconv.ops.pool.max_pool2d_train`), else window views and argmax.
    ``ceil_mode`` as PyTorch's (:func:`tensorconv.checks.pooled_size`)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        self.kernel, self.stride, self.padding = pool_args(kernel_size, stride, padding)
        self.ceil_mode = check_bool(ceil_mode, "ceil_mode")

    def _extra(self, h: int, w: int) -> tuple[int, int]:
        """Cells past the bottom and right padding that ceil mode's last windows cover."""
        oh, ow = pooled_size(h, w, self.kernel, self.stride, self.padding, self.ceil_mode)
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        return max(0, (oh - 1) * sh + kh - h - 2 * ph), max(0, (ow - 1) * sw + kw - w - 2 * pw)

    def forward(self, x):
        _check_input(x, self.kernel, self.padding)
        xp = backend.array_module(x)
        self.x_shape = x.shape
        self.on_gpu = (xp is not np and x.dtype == np.float32 and x.flags.c_contiguous
                       and self.kernel[0] * self.kernel[1] <= pool.MAX_TAPS)
        if self.on_gpu:
            y, self.argmax = pool.max_pool2d_train(x, self.kernel, self.stride, self.padding,
                                                   ceil_mode=self.ceil_mode)
            return y
        eh, ew = self._extra(*x.shape[2:])
        if eh or ew:
            x = xp.pad(x, ((0, 0), (0, 0), (0, eh), (0, ew)), constant_values=-xp.inf)
        win = windows(x, self.kernel, self.stride, self.padding, pad_value=-xp.inf)
        n, c, r, s, oh, ow = win.shape
        flat = win.reshape(n, c, r * s, oh, ow)
        self.argmax = flat.argmax(axis=2)
        return xp.take_along_axis(flat, self.argmax[:, :, None], axis=2)[:, :, 0]

    def backward(self, gy):
        xp = backend.array_module(gy)
        if self.on_gpu:
            return pool.max_pool2d_backward(xp.ascontiguousarray(gy, dtype=np.float32),
                                            self.argmax, self.x_shape, self.kernel, self.stride,
                                            self.padding, ceil_mode=self.ceil_mode)
        n, c, oh, ow = gy.shape
        r, s = self.kernel
        taps = xp.arange(r * s).reshape(1, 1, r * s, 1, 1)
        gwin = (taps == self.argmax[:, :, None]) * gy[:, :, None]
        h, w = self.x_shape[2:]
        eh, ew = self._extra(h, w)
        gx = scatter_windows(gwin.reshape(n, c, r, s, oh, ow), (n, c, h + eh, w + ew),
                             self.stride, self.padding)
        return gx[:, :, :h, :w]


class AvgPool2d(Function):
    """Average over each window, zero padding counted (PyTorch's default)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        self.kernel, self.stride, self.padding = pool_args(kernel_size, stride, padding)

    def forward(self, x):
        _check_input(x, self.kernel, self.padding)
        self.x_shape = x.shape
        return windows(x, self.kernel, self.stride, self.padding).mean(axis=(2, 3))

    def backward(self, gy):
        xp = backend.array_module(gy)
        r, s = self.kernel
        n, c, oh, ow = gy.shape
        gwin = xp.broadcast_to((gy / (r * s))[:, :, None, None], (n, c, r, s, oh, ow))
        return scatter_windows(gwin, self.x_shape, self.stride, self.padding)


class GlobalAvgPool2d(Function):
    """(N, C, H, W) -> (N, C): the mean over each feature map."""

    def forward(self, x):
        if x.ndim != 4:
            raise ValueError(f"x must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
        self.x_shape = x.shape
        return x.mean(axis=(2, 3))

    def backward(self, gy):
        xp = backend.array_module(gy)
        h, w = self.x_shape[2:]
        return xp.broadcast_to((gy / (h * w))[:, :, None, None], self.x_shape).copy()


def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False):
    return MaxPool2d.apply(x, kernel_size=kernel_size, stride=stride, padding=padding,
                           ceil_mode=ceil_mode)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    return AvgPool2d.apply(x, kernel_size=kernel_size, stride=stride, padding=padding)


def global_avg_pool2d(x):
    return GlobalAvgPool2d.apply(x)
