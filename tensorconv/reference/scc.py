"""Reference sliding-channel convolution (SCC; Wang et al., DSXplore, IPDPS'21, §III).

An SCC layer maps Cin channels to Cout with Cout filters of ``U = Cin / cg`` weights each:
filter k reads the ``U`` channels ``(b_k + u) mod Cin``, u = 0..U-1, its window starting at
``b_k = (k * stride) mod Cin`` with one integer stride ``s = U - round(co * U)`` — adjacent
windows overlap by ``round(co * U)`` channels, and the last channel wraps to the first.
(The paper's code rounds differently in its forward and backward; here one stride serves
both.)  ``cg = 1`` (U = Cin: every filter sees every channel) is a 1x1 convolution.

The dense-masked form of the weights, ``W_dense[k, (b_k + u) mod Cin] = W[k, u]`` (Cout, Cin),
turns SCC into a 1x1 convolution: the forward and both gradients here are computed
window by window, and the tests check them against that form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_array, check_int, check_real


@dataclass(frozen=True)
class SCCGeometry:
    """The channel map of one SCC layer: ``cin``, ``cout``, ``cg``, ``co`` and the derived
    window width ``u``, ``stride`` and ``cycle`` (how many filters before a window
    repeats: ``cin / gcd(cin, stride)``)."""

    cin: int
    cout: int
    cg: int
    co: float
    u: int
    stride: int
    cycle: int

    def starts(self) -> np.ndarray:
        """``b_k`` of every filter (int64, (Cout,))."""
        return (np.arange(self.cout, dtype=np.int64) * self.stride) % self.cin

    def channels(self) -> np.ndarray:
        """The input channel of every weight, ``(b_k + u) mod Cin`` (int64, (Cout, U))."""
        return (self.starts()[:, None] + np.arange(self.u)[None, :]) % self.cin

    @property
    def params(self) -> int:
        """Weights (no bias): Cout x U."""
        return self.cout * self.u

    def macs(self, pixels: int) -> int:
        """Multiply-adds for ``pixels`` output pixels (batch x height x width)."""
        return self.cout * self.u * pixels


def scc_geometry(cin: int, cout: int, cg: int, co: float) -> SCCGeometry:
    """Check an SCC layer's parameters and derive its channel map.

    Raises
    ------
    ValueError
        ``cg`` does not divide ``cin``, ``co`` is outside [0, 1), or the stride
        ``U - round(co * U)`` is below 1.
    """
    cin = check_int(cin, "cin", minimum=1)
    cout = check_int(cout, "cout", minimum=1)
    cg = check_int(cg, "cg", minimum=1)
    co = check_real(co, "co", low=0.0, high=1.0, high_open=True)
    if cin % cg:
        raise ValueError(f"cg={cg} does not divide the {cin} input channels")
    u = cin // cg
    stride = u - int(math.floor(co * u + 0.5))
    if stride < 1:
        raise ValueError(f"co={co} leaves a window stride of {stride} for windows of {u} "
                         f"channels: it must be >= 1 (use a smaller co)")
    return SCCGeometry(cin, cout, cg, co, u, stride, cin // math.gcd(cin, stride))


def cycle_map(geom: SCCGeometry) -> np.ndarray:
    """Algorithm 1 of the paper: walk the filters' windows ``(start, end)`` until one
    repeats; the starts of that one cycle (int64, (cycle,)).  Filter k's window is the
    cycle's entry ``k mod cycle`` (Algorithm 2).  The window advances by our one stride
    ``U - round(co·U)`` (the paper's code floors here, rounds elsewhere)."""
    seen, starts = set(), []
    start = 0
    for _ in range(geom.cout):
        window = (start, (start + geom.u) % geom.cin)
        if window in seen:
            break
        seen.add(window)
        starts.append(start)
        start = (start + geom.stride) % geom.cin
    return np.asarray(starts, dtype=np.int64)


def dense_weights(w, geom: SCCGeometry):
    """The dense-masked (Cout, Cin) 1x1 weights of SCC weights ``w`` (Cout, U)."""
    xp = backend.array_module(w)
    dense = xp.zeros((geom.cout, geom.cin), dtype=w.dtype)
    rows = np.repeat(np.arange(geom.cout), geom.u)
    dense[rows, geom.channels().reshape(-1)] = w.reshape(-1)
    return dense


def _check(x, w, geom: SCCGeometry):
    check_array(x, "x", ndim=4)
    check_array(w, "w", ndim=2)
    if x.shape[1] != geom.cin:
        raise ValueError(f"x has {x.shape[1]} channels; the layer takes {geom.cin}")
    if tuple(w.shape) != (geom.cout, geom.u):
        raise ValueError(f"w must have shape ({geom.cout}, {geom.u}), got {tuple(w.shape)}")


def scc_forward(x, w, geom: SCCGeometry, bias=None):
    """``y[n, k] = sum_u w[k, u] x[n, (b_k + u) mod Cin] + bias[k]``, window by window.

    Parameters
    ----------
    x : ndarray, (N, Cin, H, W)
    w : ndarray, (Cout, U)
    bias : ndarray, (Cout,), optional

    Returns
    -------
    ndarray, (N, Cout, H, W), dtype of ``x``
    """
    _check(x, w, geom)
    idx = geom.channels()
    y = np.einsum("ku,nkuhw->nkhw", w.astype(x.dtype), x[:, idx])
    if bias is not None:
        y = y + np.asarray(bias, x.dtype)[None, :, None, None]
    return y


def scc_backward(x, w, gy, geom: SCCGeometry):
    """``(gx, gw)`` of :func:`scc_forward` for the output gradient ``gy`` (N, Cout, H, W):
    every channel gathers the gradient of every filter whose window holds it."""
    _check(x, w, geom)
    idx = geom.channels()
    gw = np.einsum("nkhw,nkuhw->ku", gy, x[:, idx])
    gx = np.zeros_like(x)
    contrib = np.einsum("ku,nkhw->nkuhw", w.astype(gy.dtype), gy)
    for u in range(geom.u):             # np.add.at: a channel may appear in many windows
        np.add.at(gx, (slice(None), idx[:, u]), contrib[:, :, u])
    return gx, gw
