"""Batch norm folded into the convolution before it (evaluation mode, on the host in float64)."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.nn import layers as L


def bn_scale_shift(bn: L.BatchNorm2d):
    """(scale, shift) with ``bn(y) == scale * y + shift`` in evaluation mode (float64, host)."""
    gamma, beta = (backend.to_host(p.data).astype(np.float64) for p in (bn.weight, bn.bias))
    mean = backend.to_host(bn.running_mean).astype(np.float64)
    var = backend.to_host(bn.running_var).astype(np.float64)
    scale = gamma / np.sqrt(var + bn.eps)
    return scale, beta - mean * scale


def fold_bn(weight, bias, bn):
    """Weights (K, ...) and bias (K,) of ``bn(conv(x))`` as one convolution (host float32)."""
    w = backend.to_host(weight).astype(np.float64)
    b = np.zeros(w.shape[0]) if bias is None else backend.to_host(bias).astype(np.float64)
    if bn is None:
        return w.astype(np.float32), (None if bias is None else b.astype(np.float32))
    scale, shift = bn_scale_shift(bn)
    w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    return w.astype(np.float32), (b * scale + shift).astype(np.float32)


def folded(conv: L.Conv2d, bn, plan):
    """``conv``'s weights and bias with ``bn`` folded in, on the plan's device and kept."""
    w, b = fold_bn(conv.weight.data, None if conv.bias is None else conv.bias.data, bn)
    return plan.keep(plan.xp.asarray(w)), (None if b is None else plan.keep(plan.xp.asarray(b)))
