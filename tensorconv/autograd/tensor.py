"""``Tensor``: an array, its gradient, and the function that created it."""

from __future__ import annotations

import numpy as np

from tensorconv import backend


class Tensor:
    """A NumPy or CuPy array taking part in define-by-run differentiation.

    Parameters
    ----------
    data : ndarray (NumPy or CuPy)
    requires_grad : bool
        Leaf tensors with ``requires_grad`` receive ``.grad`` from :meth:`backward`.
    name : str, optional
        Used in error messages and ``state_dict`` keys.
    """

    __array_priority__ = 100  # so ndarray (op) Tensor defers to Tensor's operators

    def __init__(self, data, requires_grad: bool = False, name: str | None = None):
        if isinstance(data, np.generic):  # NumPy reductions return scalars, not 0-d arrays
            data = np.asarray(data)
        data = backend.as_array(data, name or "data")
        self.data = data
        self.grad = None
        self.creator = None       # the Function node that produced this tensor
        self._pending = None      # gradient in flight during backward()
        self.requires_grad = bool(requires_grad)
        self.name = name

    # ---- array-like facts
    @property
    def shape(self):
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def xp(self):
        """The array module (``numpy`` or ``cupy``) holding the data."""
        return backend.array_module(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        where = "cupy" if self.xp is not np else "numpy"
        return f"Tensor(shape={tuple(self.shape)}, dtype={self.dtype}, {where}" + (
            f", name={self.name!r})" if self.name else ")")

    def numpy(self) -> np.ndarray:
        """The data as a host NumPy array (copied from the GPU when needed)."""
        return backend.to_host(self.data)

    def item(self) -> float:
        return float(self.data.reshape(-1)[0]) if self.size == 1 else float("nan")

    # ---- differentiation
    def backward(self, grad=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` defaults to ones for a one-element tensor (a loss).
        """
        from tensorconv.autograd.function import backward

        if grad is None:
            if self.size != 1:
                raise ValueError(f"backward() without a gradient needs a one-element tensor, "
                                 f"got shape {tuple(self.shape)}")
            grad = self.xp.ones_like(self.data)
        backward(self, grad)

    def zero_grad(self) -> None:
        self.grad = None

    def detach(self) -> "Tensor":
        """The same data, cut from the graph."""
        return Tensor(self.data)

    # ---- operators (the functions live in autograd.functions)
    def __add__(self, other):
        from tensorconv.autograd.functions import add

        return add(self, other)

    __radd__ = __add__

    def __mul__(self, other):
        from tensorconv.autograd.functions import mul

        return mul(self, other)

    __rmul__ = __mul__

    def __neg__(self):
        from tensorconv.autograd.functions import mul

        return mul(self, -1.0)

    def __sub__(self, other):
        return self + (-as_tensor(other, self.xp))

    def reshape(self, *shape):
        from tensorconv.autograd.functions import reshape

        return reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape)


def as_tensor(value, xp=np) -> Tensor:
    """Wrap an array or a Python scalar as a constant :class:`Tensor` (tensors pass through)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (int, float)):
        return Tensor(xp.asarray(value, dtype=np.float32))
    return Tensor(value)
