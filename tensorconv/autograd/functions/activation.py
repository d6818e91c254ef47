"""ReLU and dropout."""

from __future__ import annotations

from tensorconv import backend
from tensorconv.autograd.function import Function
from tensorconv.ops import dropout as dropout_ops


class ReLU(Function):
    def forward(self, x):
        self.mask = x > 0
        return x * self.mask

    def backward(self, gy):
        return gy * self.mask


class Dropout(Function):
    """Counter-based dropout (:mod:`tensorconv.ops.dropout`): the mask is drawn from
    (seed, step) and kept as bytes for the backward pass."""

    def __init__(self, p, seed, step, offset):
        self.p, self.seed, self.step, self.offset = p, seed, step, offset

    def forward(self, x):
        y, self.mask = dropout_ops.dropout_forward(_contiguous(x), self.p, self.seed, self.step,
                                                   offset=self.offset)
        return y

    def backward(self, gy):
        return dropout_ops.dropout_backward(_contiguous(gy), self.mask, self.p)


def relu(x):
    return ReLU.apply(x)


def dropout(x, p: float, seed: int, step, training: bool = True, offset: int = 0):
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p).

    The mask is a pure function of ``seed``, the call counter ``step`` (a (1,) int64 array
    on x's device, advanced in place by each call in training) and the element's index:
    the same on the CPU and the GPU, and resumable from a saved ``step``
    (:mod:`tensorconv.ops.dropout`).  ``offset``: where x's elements start in a larger
    array whose masks they are (a data-parallel rank's rows of the global batch).  Identity
    when not ``training`` or ``p == 0``.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p, seed=seed, step=step, offset=offset)


def _contiguous(a):
    return backend.array_module(a).ascontiguousarray(a)
