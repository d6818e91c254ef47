"""Element-wise arithmetic, reshaping and concatenation."""

from __future__ import annotations

import itertools

from tensorconv import backend
from tensorconv.autograd.function import Function


def _unbroadcast(g, shape):
    """Sum ``g`` over the axes along which an input of ``shape`` was broadcast."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


class Add(Function):
    def forward(self, a, b):
        self.shapes = (a.shape, b.shape)
        return a + b

    def backward(self, gy):
        return _unbroadcast(gy, self.shapes[0]), _unbroadcast(gy, self.shapes[1])


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, gy):
        return _unbroadcast(gy * self.b, self.a.shape), _unbroadcast(gy * self.a, self.b.shape)


class Reshape(Function):
    def __init__(self, shape):
        self.shape = tuple(shape)

    def forward(self, x):
        self.in_shape = x.shape
        return x.reshape(self.shape)

    def backward(self, gy):
        return gy.reshape(self.in_shape)


class Concat(Function):
    def __init__(self, axis=1):
        self.axis = axis

    def forward(self, *xs):
        self.sizes = [x.shape[self.axis] for x in xs]
        return backend.array_module(*xs).concatenate(xs, axis=self.axis)

    def backward(self, gy):
        cuts = list(itertools.accumulate(self.sizes))[:-1]
        return tuple(backend.array_module(gy).split(gy, cuts, axis=self.axis))


def add(a, b):
    """``a + b`` with broadcasting."""
    return Add.apply(a, b)


def mul(a, b):
    """``a * b`` with broadcasting."""
    return Mul.apply(a, b)


def reshape(x, shape):
    return Reshape.apply(x, shape=shape)


def flatten(x):
    """(N, ...) -> (N, prod(...))."""
    return Reshape.apply(x, shape=(x.shape[0], -1))


def concat(xs, axis: int = 1):
    """Concatenate tensors along ``axis`` (DenseNet's feature stacking)."""
    return Concat.apply(*xs, axis=axis)
