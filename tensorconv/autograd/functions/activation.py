"""ReLU and dropout."""

from __future__ import annotations

from tensorconv.autograd.function import Function


class ReLU(Function):
    def forward(self, x):
        self.mask = x > 0
        return x * self.mask

    def backward(self, gy):
        return gy * self.mask


class Dropout(Function):
    def __init__(self, p, rng):
        self.p, self.rng = p, rng

    def forward(self, x):
        keep = (self.rng.random(x.shape) >= self.p).astype(x.dtype)
        self.scale = keep / (1.0 - self.p)
        return x * self.scale

    def backward(self, gy):
        return gy * self.scale


def relu(x):
    return ReLU.apply(x)


def dropout(x, p: float, rng, training: bool = True):
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p).

    ``rng`` has ``random(shape)`` (a NumPy or CuPy ``Generator``), so runs are
    reproducible from its seed.  Identity when not ``training`` or ``p == 0``.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p, rng=rng)
