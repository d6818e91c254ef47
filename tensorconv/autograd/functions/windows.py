"""Sliding windows over NCHW arrays, shared by convolution and pooling.

``windows`` gives every receptive field as a strided view (no copy);
``scatter_windows`` is its adjoint: it adds per-window values back onto the
input positions they came from (col2im).  Both run on NumPy and CuPy.
"""

from __future__ import annotations

from tensorconv import backend


def _as_strided(xp, a, shape, strides):
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def windows(x, kernel, stride, padding, dilation=(1, 1), pad_value=0.0):
    """All ``kernel``-sized windows of ``x``.

    Parameters
    ----------
    x : ndarray, (N, C, H, W)
    kernel, stride, padding, dilation : (int, int)

    Returns
    -------
    view : ndarray, (N, C, R, S, OH, OW), a strided view of a padded copy of ``x``
    """
    xp = backend.array_module(x)
    (r, s), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    if ph or pw:
        x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=pad_value)
    x = xp.ascontiguousarray(x)
    n, c, h, w = x.shape
    oh = (h - dh * (r - 1) - 1) // sh + 1
    ow = (w - dw * (s - 1) - 1) // sw + 1
    bn, bc, bh, bw = x.strides
    return _as_strided(xp, x, (n, c, r, s, oh, ow), (bn, bc, bh * dh, bw * dw, bh * sh, bw * sw))


def scatter_windows(gwin, in_shape, stride, padding, dilation=(1, 1)):
    """Adjoint of :func:`windows`: sum window values back onto the input grid.

    Parameters
    ----------
    gwin : ndarray, (N, C, R, S, OH, OW)
    in_shape : (N, C, H, W) of the unpadded input

    Returns
    -------
    ndarray, (N, C, H, W)
    """
    xp = backend.array_module(gwin)
    n, c, r, s, oh, ow = gwin.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    h, w = in_shape[2], in_shape[3]
    g = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=gwin.dtype)
    for i in range(r):
        for j in range(s):
            g[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
              j * dw:j * dw + sw * (ow - 1) + 1:sw] += gwin[:, :, i, j]
    return g[:, :, ph:ph + h, pw:pw + w]
