"""Linear and convolution layers' functions (forward and backward side by side)."""

from __future__ import annotations

import numpy as np

from tensorconv import backend, ops
from tensorconv.autograd import side_stream
from tensorconv.autograd.function import Function
from tensorconv.autograd.functions.windows import scatter_windows, windows
from tensorconv.checks import check_conv_args


class Linear(Function):
    """``y = x @ w.T + b`` with x (N, in), w (out, in), b (out,).

    On the GPU, float32 runs as a 1x1 convolution of N 1x1 images on our implicit-GEMM
    kernels (forward and both gradients): CuPy refuses cuBLAS while a stream is captured,
    and eager and captured training steps (:mod:`tensorconv.nn.captured`) must run the
    same kernels to give the same numbers.
    """

    def forward(self, x, w, b=None):
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
            raise ValueError(f"linear: x {tuple(x.shape)} and w {tuple(w.shape)} do not match "
                             "(need x (N, in) and w (out, in))")
        self.x, self.w, self.has_bias = x, w, b is not None
        self.on_gpu = _kernel_path(x, w, b)
        if self.on_gpu:
            y = ops.conv2d(x.reshape(x.shape + (1, 1)), w.reshape(w.shape + (1, 1)), b)
            return y.reshape(y.shape[:2])
        y = x @ w.T
        return y + b if b is not None else y

    def backward(self, gy):
        if self.on_gpu:
            gy = gy if gy.flags.c_contiguous else gy.copy()
            gy4, w4 = gy.reshape(gy.shape + (1, 1)), self.w.reshape(self.w.shape + (1, 1))
            x4 = self.x.reshape(self.x.shape + (1, 1))
            gx = (ops.conv2d_backward_data(gy4, w4, x4.shape).reshape(self.x.shape)
                  if self.wants(0) else None)
            gw = (ops.conv2d_backward_weight(x4, gy4, w4.shape).reshape(self.w.shape)
                  if self.wants(1) else None)
        else:
            gx, gw = gy @ self.w, gy.T @ self.x
        return (gx, gw, gy.sum(axis=0)) if self.has_bias else (gx, gw)


def _kernel_path(*arrays) -> bool:
    """Every array given is a C-contiguous float32 CuPy array (our kernels take them)."""
    present = [a for a in arrays if a is not None]
    return (backend.array_module(*present) is not np
            and all(a.dtype == np.float32 and a.flags.c_contiguous for a in present))


def _im2col(x, geom):
    """(N, C, H, W) -> (N, G, C/G * R * S, OH * OW), a copy laid out for batched GEMM."""
    win = windows(x, (geom.r, geom.s), geom.stride, geom.padding, geom.dilation)
    g = geom.groups
    return win.reshape(geom.n, g, (geom.c // g) * geom.r * geom.s, geom.oh * geom.ow)


class Conv2d(Function):
    """2-D convolution, NCHW; im2col + batched GEMM on both backends.

    On the GPU, float32 runs our implicit-GEMM kernels for the forward and both
    gradients (``ops.conv2d``, ``ops.conv2d_backward_data``,
    ``ops.conv2d_backward_weight``): no column matrix is materialised.
    """

    adds_to_input_grad = (0,)   # x's gradient from another reader, added as gx is stored

    def __init__(self, stride=1, padding=0, dilation=1, groups=1):
        self.params = (stride, padding, dilation, groups)

    def forward(self, x, w, b=None):
        self.geom = geom = check_conv_args(x, w, b, *self.params)
        self.x, self.w, self.has_bias = x, w, b is not None
        xp = backend.array_module(x)
        self.on_gpu = _kernel_path(x, w, b)
        if self.on_gpu:
            return ops.conv2d(x, w, b, geom.stride, geom.padding, geom.dilation, geom.groups)
        g = geom.groups
        wg = w.reshape(g, geom.k // g, -1)
        y = xp.matmul(wg, _im2col(x, geom)).reshape(geom.output_shape)
        return y + b[None, :, None, None] if b is not None else y

    def backward(self, gy):
        geom, x, w = self.geom, self.x, self.w
        gb = gy.sum(axis=(0, 2, 3)) if self.has_bias else None
        if self.on_gpu:
            gy = gy if gy.flags.c_contiguous else gy.copy()
            conv = (geom.stride, geom.padding, geom.dilation, geom.groups)
            # issued first: inside side_stream.weight_gradients_on it runs on the side
            # stream, beside the data gradient and the rest of the backward pass
            leaf = getattr(self, "inputs", None) is not None and self.inputs[1].creator is None
            gw = (side_stream.on_side(
                lambda: ops.conv2d_backward_weight(x, gy, w.shape, *conv), x, gy, when=leaf)
                if self.wants(1) else None)
            # the first layer's input (the images) needs no gradient: skip its kernel.  x's
            # gradient from another reader is added as gx is stored where the kernel can
            # read it, after otherwise (a slice of a concatenation's gradient)
            add = self.addend(0)
            fused = add is None or _kernel_path(add)
            gx = (ops.conv2d_backward_data(gy, w, x.shape, *conv, addend=add if fused else None)
                  if self.wants(0) else None)
            if gx is not None and not fused:
                gx = add + gx
            return (gx, gw, gb) if self.has_bias else (gx, gw)
        xp = backend.array_module(gy)
        g = geom.groups
        gyg = gy.reshape(geom.n, g, geom.k // g, geom.oh * geom.ow)
        cols = _im2col(x, geom)
        gw = xp.matmul(gyg, cols.swapaxes(-1, -2)).sum(axis=0).reshape(w.shape)
        if not self.wants(0):
            return (None, gw, gb) if self.has_bias else (None, gw)
        wg = w.reshape(g, geom.k // g, -1)
        gcols = xp.matmul(wg.swapaxes(-1, -2), gyg)
        gx = scatter_windows(gcols.reshape(geom.n, geom.c, geom.r, geom.s, geom.oh, geom.ow),
                             x.shape, geom.stride, geom.padding, geom.dilation)
        if self.addend(0) is not None:
            gx = self.addend(0) + gx
        return (gx, gw, gb) if self.has_bias else (gx, gw)


def linear(x, w, b=None):
    return Linear.apply(x, w) if b is None else Linear.apply(x, w, b)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Differentiable convolution; see :class:`Conv2d`."""
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return Conv2d.apply(x, w, **kw) if b is None else Conv2d.apply(x, w, b, **kw)
