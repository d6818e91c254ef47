"""``Module``: parameters, buffers, sub-modules, state dicts, train/eval, device moves."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from tensorconv import backend
from tensorconv.autograd.tensor import Tensor


class Parameter(Tensor):
    """A trainable tensor (``requires_grad`` is always on)."""

    def __init__(self, data, name: str | None = None):
        super().__init__(data, requires_grad=True, name=name)


class Module:
    """Base class of layers and models.

    Assigning a :class:`Parameter` or a :class:`Module` to an attribute registers
    it; arrays that are state but not trained (BN running statistics) are
    registered with :meth:`register_buffer`.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_optional", set())   # buffers older states may lack
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif name in self._buffers:
            self._buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        buffers = self.__dict__.get("_buffers", {})
        if name in buffers:
            return buffers[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_buffer(self, name: str, array, *, optional: bool = False) -> None:
        """Register ``array`` as state that is saved and moved but not trained.

        ``optional``: a buffer added after states were saved without it (a dropout's step);
        :meth:`load_state_dict` keeps this module's value where a state lacks it."""
        self._buffers[name] = array
        if optional:
            self._optional.add(name)

    # ---- traversal
    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}{name}.")

    def modules(self):
        return [m for _, m in self.named_modules()]

    def named_parameters(self):
        for prefix, m in self.named_modules():
            for name, p in m._parameters.items():
                yield f"{prefix}{name}", p

    def parameters(self) -> list:
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        for prefix, m in self.named_modules():
            for name, b in m._buffers.items():
                yield f"{prefix}{name}", b

    def num_parameters(self) -> int:
        """Parameters of this module and its children (a child may count its own way, as a
        pruned layer counts its nonzero weights)."""
        return (sum(p.size for p in self._parameters.values())
                + sum(m.num_parameters() for m in self._modules.values()))

    # ---- modes and devices
    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    @property
    def xp(self):
        """The array module holding this module's parameters (NumPy when it has none)."""
        params = self.parameters()
        return params[0].xp if params else np

    def to(self, device: str) -> "Module":
        """Move parameters and buffers to ``"cpu"`` (NumPy) or ``"gpu"`` (CuPy), in place."""
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
        move = backend.to_host if device == "cpu" else backend.to_device
        for m in self.modules():
            for p in m._parameters.values():
                p.data, p.grad = move(p.data), None
            for name in list(m._buffers):
                m._buffers[name] = move(m._buffers[name])
        return self

    # ---- state
    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Host copies of every parameter and buffer, keyed by dotted name."""
        sd = OrderedDict((k, backend.to_host(p.data).copy()) for k, p in self.named_parameters())
        sd.update((k, backend.to_host(b).copy()) for k, b in self.named_buffers())
        return sd

    def load_state_dict(self, state: dict) -> None:
        """Copy ``state`` into this module; every key and shape must match exactly (a buffer
        registered ``optional`` may be missing: it keeps its value).

        Nothing is changed when any key is missing, unexpected or mis-shaped.
        """
        own = dict(self.named_parameters())
        own_buffers = dict(self.named_buffers())
        expected = set(own) | set(own_buffers)
        optional = {f"{prefix}{name}" for prefix, m in self.named_modules()
                    for name in m._optional}
        missing = sorted(expected - set(state) - optional)
        unexpected = sorted(set(state) - expected)
        shapes = {**{k: p.shape for k, p in own.items()},
                  **{k: b.shape for k, b in own_buffers.items()}}
        wrong = [f"{k}: {tuple(np.shape(state[k]))} vs {tuple(shapes[k])}"
                 for k in sorted(expected & set(state))
                 if tuple(np.shape(state[k])) != tuple(shapes[k])]
        if missing or unexpected or wrong:
            raise ValueError(f"state does not fit {type(self).__name__}: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}, shape mismatches {wrong[:5]}")
        xp = self.xp
        for k, p in own.items():
            p.data = xp.asarray(state[k], dtype=p.dtype).copy()
        for prefix, m in self.named_modules():
            for name in list(m._buffers):
                if f"{prefix}{name}" in state:
                    m._buffers[name] = xp.asarray(state[f"{prefix}{name}"]).copy()

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            lines.append("  " + f"({name}): {m!r}".replace("\n", "\n  "))
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")
