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


class Slice(Function):
    """``x[start:stop]`` along one axis; its gradient is zero outside the slice."""

    def __init__(self, axis, start, stop):
        self.axis, self.start, self.stop = axis, start, stop

    def forward(self, x):
        self.shape = x.shape
        index = [slice(None)] * x.ndim
        index[self.axis] = slice(self.start, self.stop)
        self.index = tuple(index)
        return x[self.index]

    def backward(self, gy):
        g = backend.array_module(gy).zeros(self.shape, dtype=gy.dtype)
        g[self.index] = gy
        return g


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


def take(x, start: int, stop: int, axis: int = 1):
    """``x[..., start:stop, ...]`` along ``axis`` (0 <= start < stop <= size), differentiable."""
    size = x.shape[axis]
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= size):
        raise ValueError(f"take needs 0 <= start < stop <= {size}, got {start}, {stop}")
    return Slice.apply(x, axis=axis, start=start, stop=stop)


def concat(xs, axis: int = 1):
    """Concatenate tensors along ``axis`` (DenseNet's feature stacking)."""
    return Concat.apply(*xs, axis=axis)
