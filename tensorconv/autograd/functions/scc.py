"""Sliding-channel convolution (DSXplore's SCC) as a forward/backward pair.

Two implementations (``impl``): ``"kernels"`` — the SCC kernels
(:mod:`tensorconv.ops.scc_conv`: forward per window group, the input-centric input gradient
and the deterministic weight gradient, in one pass where it pays), float32 CuPy arrays only;
``"dense"`` — the dense-masked form, the (Cout, Cin) 1x1 weights holding each filter's U
weights at its window's channels (:func:`tensorconv.reference.scc.dense_weights`), as
batched GEMMs on either backend: exact, and on the GPU cuBLAS's speed, the honest library
baseline the kernels are measured against. ``"auto"`` (the default) takes the kernels where
they run."""

from __future__ import annotations

import numpy as np

from tensorconv import backend, ops
from tensorconv.autograd.function import Function
from tensorconv.checks import check_choice
from tensorconv.reference.scc import SCCGeometry, dense_weights

IMPLS = ("auto", "kernels", "dense")


def _kernels_run(xp, *arrays) -> bool:
    return xp is not np and all(a is None or a.dtype == np.float32 for a in arrays)


class SCC(Function):
    """``y = scc(x, w) + b``: x (N, Cin, H, W), w (Cout, U), b (Cout,)."""

    def __init__(self, geom: SCCGeometry, impl: str = "auto"):
        self.geom = geom
        self.impl = check_choice(impl, "impl", IMPLS)

    def forward(self, x, w, b=None):
        g = self.geom
        if x.ndim != 4 or x.shape[1] != g.cin:
            raise ValueError(f"scc: x must be (N, {g.cin}, H, W), got {tuple(x.shape)}")
        if tuple(w.shape) != (g.cout, g.u):
            raise ValueError(f"scc: w must be ({g.cout}, {g.u}), got {tuple(w.shape)}")
        xp = backend.array_module(x)
        self.x, self.has_bias = x, b is not None
        self.kernels = self.impl == "kernels" or (self.impl == "auto" and
                                                  _kernels_run(xp, x, w, b))
        if self.kernels:
            if xp is np:
                raise TypeError("scc: impl='kernels' runs on CuPy arrays only")
            self.x, self.w = xp.ascontiguousarray(x), xp.ascontiguousarray(w)
            return ops.scc_conv2d(self.x, self.w, g, b)
        self.dense = dense_weights(w, g)
        n, _, h, wd = x.shape
        y = xp.matmul(self.dense, x.reshape(n, g.cin, h * wd)).reshape(n, g.cout, h, wd)
        return y + b[None, :, None, None] if b is not None else y

    def backward(self, gy):
        g, x = self.geom, self.x
        xp = backend.array_module(gy)
        if self.kernels:
            gy = xp.ascontiguousarray(gy)
            gx, gw = ops.scc_conv2d_backward(x, gy, self.w, g)
            return (gx, gw, gy.sum(axis=(0, 2, 3))) if self.has_bias else (gx, gw)
        n, _, h, wd = x.shape
        gy2 = gy.reshape(n, g.cout, h * wd)
        gx = xp.matmul(self.dense.T, gy2).reshape(x.shape)
        gdense = xp.matmul(gy2, x.reshape(n, g.cin, h * wd).swapaxes(1, 2)).sum(axis=0)
        rows = np.arange(g.cout)[:, None]
        gw = gdense[xp.asarray(rows), xp.asarray(g.channels())]
        gb = gy.sum(axis=(0, 2, 3)) if self.has_bias else None
        return (gx, gw, gb) if self.has_bias else (gx, gw)


def scc_conv(x, w, geom: SCCGeometry, b=None, impl: str = "auto"):
    """Sliding-channel convolution of ``x`` with ``w`` on the channel map ``geom``
    (``impl``: :data:`IMPLS`)."""
    if b is None:
        return SCC.apply(x, w, geom=geom, impl=impl)
    return SCC.apply(x, w, b, geom=geom, impl=impl)
