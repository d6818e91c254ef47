"""Softmax cross-entropy, computed through a stable log-softmax."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.autograd.function import Function
from tensorconv.ops import softmax_xent


def check_labels(labels, n: int, classes: int) -> None:
    """Labels must be an integer vector of length ``n`` with values in ``[0, classes)``."""
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"labels must have shape ({n},), got {tuple(labels.shape)}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers, got {labels.dtype.name}")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= classes:
        raise ValueError(f"labels must be in [0, {classes}), got values in [{lo}, {hi}]")


class SoftmaxCrossEntropy(Function):
    """Mean over the batch of ``-log softmax(logits)[label]``: on CuPy float32 logits the
    kernels of :mod:`tensorconv.ops.softmax_xent`, else the reference formulas."""

    def __init__(self, check=True):
        self.check = check

    def forward(self, logits, labels):
        if logits.ndim != 2:
            raise ValueError(f"logits must be (N, classes), got shape {tuple(logits.shape)}")
        if self.check:
            check_labels(labels, logits.shape[0], logits.shape[1])
        loss, self.logp = softmax_xent.softmax_xent_forward(logits, labels)
        self.labels = labels
        return loss

    def backward(self, gy):
        return softmax_xent.softmax_xent_backward(self.logp, self.labels, gy), None


def softmax_cross_entropy(logits, labels, check: bool = True):
    """Scalar loss; ``labels`` is an integer array (N,) (not differentiated).

    ``check=False`` skips the label range check, which on a GPU reads the labels
    back to the host; callers that validated their dataset once pass it.
    """
    return SoftmaxCrossEntropy.apply(logits, labels, check=check)


def accuracy(logits, labels) -> float:
    """Fraction of rows whose arg-max equals the label (host float)."""
    data = getattr(logits, "data", logits)
    lab = getattr(labels, "data", labels)
    if not len(lab):
        return np.nan
    return float(backend.to_host((data.argmax(axis=1) == lab).mean()).item())
