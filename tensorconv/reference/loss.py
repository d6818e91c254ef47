"""Softmax cross-entropy: the formulas the loss kernels (``kernels_cu/softmax_xent.cu``)
are tested against, on the array module of their inputs."""

from __future__ import annotations

from tensorconv import backend


def softmax_cross_entropy(logits, labels):
    """``(loss, logp)``: the mean over the rows of ``-log softmax(logits)[label]`` (a 0-d
    array of logits' dtype) and the log-probabilities (N, C), through a stable log-softmax."""
    xp = backend.array_module(logits)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    n = logits.shape[0]
    return -logp[xp.arange(n), labels].mean(), logp


def softmax_cross_entropy_backward(logp, labels, gy):
    """The gradient (N, C) of :func:`softmax_cross_entropy`'s loss for its gradient ``gy``
    (a scalar): ``(softmax - onehot(label)) * gy / N``."""
    xp = backend.array_module(logp)
    n = logp.shape[0]
    g = xp.exp(logp)
    g[xp.arange(n), labels] -= 1
    return g * (gy / n)
