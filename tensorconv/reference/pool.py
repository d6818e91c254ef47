"""Reference pooling over NCHW and the pooled classifier head (NumPy; CuPy inputs are copied
to the host)."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import pooled_size


def pool2d(x, kernel, stride, padding, mode: str, ceil_mode: bool = False):
    """Pool ``x`` (N, C, H, W) with ``kernel``, ``stride``, ``padding`` (pairs).

    ``mode="max"``: the largest value of each window's cells inside the image (NaN
    if any is NaN); ``mode="avg"``: the window's sum over kh * kw, padded cells
    counted as zeros.  ``ceil_mode`` (max only): windows counted as
    :func:`tensorconv.checks.pooled_size` does, the last one clipped at the border.
    """
    x = np.asarray(backend.to_host(x))
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    n, c, h, w = x.shape
    if ceil_mode and mode != "max":
        raise ValueError("ceil_mode is supported for max pooling only")
    fill = -np.inf if mode == "max" else 0.0
    oh, ow = pooled_size(h, w, kernel, stride, padding, ceil_mode)
    # a clipped last window reads past the padding: pad those cells with the fill too
    eh = max(0, (oh - 1) * sh + kh - h - 2 * ph)
    ew = max(0, (ow - 1) * sw + kw - w - 2 * pw)
    padded = np.full((n, c, h + 2 * ph + eh, w + 2 * pw + ew), fill, dtype=x.dtype)
    padded[:, :, ph:ph + h, pw:pw + w] = x
    cells = np.stack([padded[:, :, r:r + sh * (oh - 1) + 1:sh, s:s + sw * (ow - 1) + 1:sw]
                      for r in range(kh) for s in range(kw)])
    return cells.max(axis=0) if mode == "max" else cells.sum(axis=0) / (kh * kw)


def gap_linear(x, w, bias=None):
    """``mean(x, axis=(2, 3)) @ w.T (+ bias)``: x (N, C, H, W), w (K, C), bias (K,)."""
    x, w = np.asarray(backend.to_host(x)), np.asarray(backend.to_host(w))
    y = x.mean(axis=(2, 3)) @ w.T
    return y if bias is None else y + np.asarray(backend.to_host(bias))
