"""Reference 2-D convolutions (cross-correlation, as in every CNN framework).

Shapes follow NCHW: ``x`` (N, C, H, W), ``w`` (K, C/groups, R, S), output
(N, K, OH, OW) with ``OH = (H + 2*pad - dil*(R-1) - 1) // stride + 1``.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tensorconv import backend
from tensorconv.checks import check_array, check_conv_args, conv_geometry


def _host(*arrays):
    return [None if a is None else backend.to_host(a) for a in arrays]


def _windows(x, geom):
    """All receptive fields of ``x``: (N, C, OH, OW, R, S), a strided view."""
    (ph, pw), (sh, sw), (dh, dw) = geom.padding, geom.stride, geom.dilation
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    span = (dh * (geom.r - 1) + 1, dw * (geom.s - 1) + 1)
    win = sliding_window_view(xp_, span, axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :geom.oh, :geom.ow]


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Forward convolution.

    Parameters
    ----------
    x : ndarray, (N, C, H, W), float
    w : ndarray, (K, C // groups, R, S), same dtype as ``x``
    bias : ndarray, (K,), optional
    stride, padding, dilation : int or (int, int)
    groups : int

    Returns
    -------
    ndarray, (N, K, OH, OW), dtype of ``x``
    """
    geom = check_conv_args(x, w, bias, stride, padding, dilation, groups)
    x, w, bias = _host(x, w, bias)
    g, cg, kg = geom.groups, geom.c // geom.groups, geom.k // geom.groups
    win = _windows(x, geom).reshape(geom.n, g, cg, geom.oh, geom.ow, geom.r, geom.s)
    wg = w.reshape(g, kg, cg, geom.r, geom.s)
    y = np.einsum("ngchwrs,gkcrs->ngkhw", win, wg, optimize=True)
    y = y.reshape(geom.output_shape)
    if bias is not None:
        y = y + bias[None, :, None, None]
    return np.ascontiguousarray(y, dtype=x.dtype)


def conv2d_backward_data(gy, w, x_shape, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of :func:`conv2d` with respect to ``x``.

    Each filter tap (r, s) scatters ``gy`` weighted by ``w[:, :, r, s]`` back to
    the input positions it read.

    Parameters
    ----------
    gy : ndarray, (N, K, OH, OW)
    w : ndarray, (K, C // groups, R, S)
    x_shape : tuple (N, C, H, W)

    Returns
    -------
    ndarray, (N, C, H, W), dtype of ``gy``
    """
    check_array(gy, "gy", ndim=4)
    check_array(w, "w", ndim=4)
    geom = conv_geometry(x_shape, w.shape, stride, padding, dilation, groups)
    if tuple(gy.shape) != geom.output_shape:
        raise ValueError(f"gy has shape {tuple(gy.shape)}; the convolution's output is "
                         f"{geom.output_shape}")
    gy, w = _host(gy, w)
    (ph, pw), (sh, sw), (dh, dw) = geom.padding, geom.stride, geom.dilation
    g, cg, kg = geom.groups, geom.c // geom.groups, geom.k // geom.groups
    gyg = gy.reshape(geom.n, g, kg, geom.oh, geom.ow)
    wg = w.reshape(g, kg, cg, geom.r, geom.s)
    gx = np.zeros((geom.n, g, cg, geom.h + 2 * ph, geom.w + 2 * pw), dtype=gy.dtype)
    for r in range(geom.r):
        for s in range(geom.s):
            contrib = np.einsum("ngkhw,gkc->ngchw", gyg, wg[..., r, s])
            h0, w0 = r * dh, s * dw
            gx[:, :, :, h0:h0 + sh * (geom.oh - 1) + 1:sh,
               w0:w0 + sw * (geom.ow - 1) + 1:sw] += contrib
    gx = gx[:, :, :, ph:ph + geom.h, pw:pw + geom.w]
    return np.ascontiguousarray(gx.reshape(geom.n, geom.c, geom.h, geom.w))


def conv2d_backward_weight(x, gy, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of :func:`conv2d` with respect to ``w``.

    Parameters
    ----------
    x : ndarray, (N, C, H, W)
    gy : ndarray, (N, K, OH, OW)
    w_shape : tuple (K, C // groups, R, S)

    Returns
    -------
    ndarray, (K, C // groups, R, S), dtype of ``x``
    """
    check_array(x, "x", ndim=4)
    check_array(gy, "gy", ndim=4)
    geom = conv_geometry(x.shape, w_shape, stride, padding, dilation, groups)
    if tuple(gy.shape) != geom.output_shape:
        raise ValueError(f"gy has shape {tuple(gy.shape)}; the convolution's output is "
                         f"{geom.output_shape}")
    x, gy = _host(x, gy)
    g, cg, kg = geom.groups, geom.c // geom.groups, geom.k // geom.groups
    win = _windows(x, geom).reshape(geom.n, g, cg, geom.oh, geom.ow, geom.r, geom.s)
    gyg = gy.reshape(geom.n, g, kg, geom.oh, geom.ow)
    gw = np.einsum("ngkhw,ngchwrs->gkcrs", gyg, win, optimize=True)
    return np.ascontiguousarray(gw.reshape(w_shape), dtype=x.dtype)


def conv1x1(x, w, bias=None):
    """Pointwise convolution as a matrix product over channels.

    Parameters
    ----------
    x : ndarray, (N, C, H, W)
    w : ndarray, (K, C) or (K, C, 1, 1)
    bias : ndarray, (K,), optional

    Returns
    -------
    ndarray, (N, K, H, W)
    """
    check_array(x, "x", ndim=4)
    if w.ndim == 4:
        if w.shape[2:] != (1, 1):
            raise ValueError(f"w must be (K, C) or (K, C, 1, 1), got shape {tuple(w.shape)}")
        w = w.reshape(w.shape[:2])
    check_array(w, "w", ndim=2)
    if w.shape[1] != x.shape[1]:
        raise ValueError(f"w has {w.shape[1]} input channels; x has {x.shape[1]}")
    x, w, bias = _host(x, w, bias)
    y = np.einsum("kc,nchw->nkhw", w, x)
    if bias is not None:
        y = y + bias[None, :, None, None]
    return np.ascontiguousarray(y, dtype=x.dtype)


def depthwise_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1):
    """Depthwise convolution: each input channel filtered by its own ``m`` filters.

    Written as a sum of shifted, scaled copies of the input, independently of
    :func:`conv2d`, so the two references check each other.

    Parameters
    ----------
    x : ndarray, (N, C, H, W)
    w : ndarray, (C * m, 1, R, S); output channel ``c * m + j`` reads input channel ``c``
    bias : ndarray, (C * m,), optional

    Returns
    -------
    ndarray, (N, C * m, OH, OW)
    """
    geom = check_conv_args(x, w, bias, stride, padding, dilation, groups=x.shape[1]
                           if getattr(x, "ndim", 0) == 4 else 1)
    x, w, bias = _host(x, w, bias)
    (ph, pw), (sh, sw), (dh, dw) = geom.padding, geom.stride, geom.dilation
    m = geom.k // geom.c
    xpad = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    xrep = np.repeat(xpad, m, axis=1)  # (N, C*m, Hp, Wp), channel c*m+j = input c
    y = np.zeros(geom.output_shape, dtype=x.dtype)
    for r in range(geom.r):
        for s in range(geom.s):
            patch = xrep[:, :, r * dh:r * dh + sh * (geom.oh - 1) + 1:sh,
                         s * dw:s * dw + sw * (geom.ow - 1) + 1:sw]
            y += patch * w[None, :, 0, r, s, None, None]
    if bias is not None:
        y += bias[None, :, None, None]
    return y


def cp_conv2d(x, s, h, w, t, bias=None, stride=1, padding=0):
    """Convolution with the CP-format kernel ``K[n, c, i, j] = sum_r t[n, r] s[c, r] h[i, r]
    w[j, r]`` (Reustle et al., eq. 2), formed in float64, in ``x``'s dtype, and applied by
    :func:`conv2d`."""
    x = backend.to_host(x)
    s, h, w, t = (np.asarray(backend.to_host(a), dtype=np.float64) for a in (s, h, w, t))
    kernel = np.einsum("nr,cr,ir,jr->ncij", t, s, h, w).astype(x.dtype)
    return conv2d(x, kernel, bias, stride, padding)


def zero_insert(comp, x_shape, stride, addend=None):
    """``comp`` (N, C, OH, OW) spread over an (N, C, H, W) grid at ``stride`` (rows and
    columns divisible by it), zeros between, plus ``addend`` if given: the data gradient
    of a 1x1, padding-0 convolution from that of its stride-1 GEMM."""
    comp, addend = _host(comp, addend)
    sh, sw = stride
    out = np.zeros(tuple(x_shape), comp.dtype)
    out[:, :, ::sh, ::sw] = comp
    return out if addend is None else addend + out
