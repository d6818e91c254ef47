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
        self._data = data
        self._version = 0         # bumped by every change made through the Tensor
        self.grad = None
        self.creator = None       # the Function node that produced this tensor
        self._pending = None      # gradient in flight during backward()
        self.requires_grad = bool(requires_grad)
        self.name = name

    # ---- the data, and its version
    @property
    def data(self):
        """The array.  Assigning to it (``t.data = a``, ``t.data -= g``) or to an item
        (``t[i] = v``) is an in-place change: it bumps :attr:`version`, and a backward pass
        through a function that saved the old value raises instead of giving a wrong
        gradient.  Writing into the array itself (``t.data[i] = v``) bypasses the count,
        as PyTorch's ``.data`` does."""
        return self._data

    @data.setter
    def data(self, value) -> None:
        self._data = value
        self._version += 1

    @property
    def version(self) -> int:
        """How many in-place changes the tensor has had (see :attr:`data`)."""
        return self._version

    def __setitem__(self, index, value) -> None:
        self._data[index] = value.data if isinstance(value, Tensor) else value
        self._version += 1

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
        """The value of a one-element tensor as a Python float."""
        if self.size != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {tuple(self.shape)}")
        return float(self.data.reshape(-1)[0])

    # ---- differentiation
    def backward(self, grad=None, *, on_leaf_done=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` (d loss / d self) defaults to ones for a one-element tensor (a loss); given,
        it must have this tensor's shape, dtype and device (nothing is broadcast or cast).
        ``on_leaf_done(leaf)`` is called as each leaf's gradient becomes final.
        """
        from tensorconv.autograd.function import backward

        if grad is None:
            if self.size != 1:
                raise ValueError(f"backward() without a gradient needs a one-element tensor, "
                                 f"got shape {tuple(self.shape)}")
            grad = self.xp.ones_like(self.data)
        else:
            grad = backend.as_array(grad.data if isinstance(grad, Tensor) else grad, "grad")
            if backend.array_module(grad) is not self.xp:
                raise TypeError(f"grad is on another device than the tensor "
                                f"({backend.array_module(grad).__name__} vs {self.xp.__name__})")
            if grad.shape != self.shape:
                raise ValueError(f"grad has shape {tuple(grad.shape)}; the tensor has shape "
                                 f"{tuple(self.shape)}")
            if grad.dtype != self.dtype:
                raise TypeError(f"grad is {grad.dtype}; the tensor is {self.dtype}")
        backward(self, grad, on_leaf_done)

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
