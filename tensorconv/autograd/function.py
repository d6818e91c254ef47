"""``Function``: a forward/backward pair, and the topological backward pass.

A subclass implements ``forward(*arrays) -> array or tuple`` and
``backward(*grad_outputs) -> tuple of grads`` (one per input, ``None`` where no
gradient flows), keeping what backward needs on ``self`` — Chainer's
``FunctionNode`` pattern.  ``self.needs_input_grad`` (one bool per input) lets a backward
skip a gradient nobody reads, such as a network's input image.  ``Function.apply`` wraps
inputs and outputs as tensors and links the graph unless gradients are disabled with
:func:`no_grad`.

A tensor read by several functions gets the sum of their gradients.  A function that can
fold that sum into its own kernel lists the inputs in ``adds_to_input_grad``; where such an
input already holds a gradient from another reader when the backward pass reaches the
function, ``self.grad_addends[i]`` is that gradient and the backward returns input ``i``'s
gradient with it added (``addend + g``: the same bits as the separate sum).  A residual
block's input is the case: its first convolution's data gradient adds the shortcut's as it
stores (``ops.conv2d_backward_data(addend=...)``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from tensorconv.autograd import side_stream
from tensorconv.autograd.tensor import Tensor, as_tensor

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "grad_enabled", True)


@contextlib.contextmanager
def no_grad():
    """Within the block, functions record no graph (inference, parameter updates)."""
    old = is_grad_enabled()
    _state.grad_enabled = False
    try:
        yield
    finally:
        _state.grad_enabled = old


class Function:
    """Base class of every differentiable operation."""

    needs_input_grad: tuple = ()    # set by apply; empty (every gradient wanted) otherwise
    adds_to_input_grad: tuple = ()  # inputs whose backward takes an addend (module docstring)
    grad_addends: tuple = ()        # set by the backward pass: an addend per input, or None

    def addend(self, i: int):
        """The gradient input ``i`` already has, which backward adds to its own, or None."""
        return self.grad_addends[i] if i < len(self.grad_addends) else None

    def wants(self, i: int) -> bool:
        """Whether input ``i``'s gradient is read (always, for a node made outside apply)."""
        return i >= len(self.needs_input_grad) or self.needs_input_grad[i]

    def forward(self, *inputs):
        raise NotImplementedError

    def backward(self, *grad_outputs):
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **params):
        """Run ``cls(**params).forward`` on the inputs' arrays; return output tensor(s)."""
        fn = cls(**params)
        xp = next((t.xp for t in inputs if isinstance(t, Tensor)), None)
        tensors = [as_tensor(t, xp) if xp is not None else as_tensor(t) for t in inputs]
        outputs = fn.forward(*(t.data for t in tensors))
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        needs_grad = is_grad_enabled() and any(t.requires_grad for t in tensors)
        results = tuple(Tensor(o, requires_grad=needs_grad) for o in outputs)
        if needs_grad:
            fn.inputs = tensors
            fn.needs_input_grad = tuple(t.requires_grad for t in tensors)
            fn.input_versions = tuple(t.version for t in tensors)
            # Weak references: a tensor owns its creator, not the reverse, so an
            # unused output and its graph are freed at once (no reference cycle).
            fn.outputs = tuple(weakref.ref(r) for r in results)
            fn.output_meta = tuple((o.shape, o.dtype) for o in outputs)
            for r in results:
                r.creator = fn
        return results[0] if single else results


def _topological_order(root: Tensor) -> list:
    """Functions reachable from ``root``, each after every function that consumes its outputs."""
    order, seen = [], set()
    stack = [(root.creator, False)] if root.creator is not None else []
    while stack:
        fn, expanded = stack.pop()
        if expanded:
            order.append(fn)
            continue
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        stack.append((fn, True))
        for t in fn.inputs:
            if t.creator is not None and id(t.creator) not in seen:
                stack.append((t.creator, False))
    return order[::-1]


def _check_versions(fn: Function) -> None:
    """Raise when a tensor ``fn`` read (and may have saved) changed in place since."""
    for i, (t, v) in enumerate(zip(fn.inputs, fn.input_versions)):
        if t.version != v:
            raise RuntimeError(
                f"input {i} ({t.name or tuple(t.shape)}) of {type(fn).__name__} was changed in "
                f"place after the forward pass (version {v} -> {t.version}); its gradient "
                f"would be wrong. Change a copy, or run the forward pass again")
    for i, ref in enumerate(fn.outputs):
        out = ref()
        if out is not None and out.version != 0:
            raise RuntimeError(
                f"output {i} of {type(fn).__name__} was changed in place after the forward "
                f"pass; its gradient would be wrong. Change a copy instead")


def backward(root: Tensor, grad, on_leaf_done=None) -> None:
    """Propagate ``grad`` (d loss / d root) to every leaf with ``requires_grad``.

    Gradients of intermediate tensors live in their ``_pending`` slot only
    until their creator has consumed them.  ``on_leaf_done(leaf)``, when given, is called
    as soon as a leaf's gradient is final (after the last function that reads the leaf),
    so that a data-parallel reducer can send it while the rest of the backward pass runs.
    """
    if root.creator is None:
        if root.requires_grad:
            root.grad = grad if root.grad is None else root.grad + grad
            if on_leaf_done is not None:
                on_leaf_done(root)
        return
    if on_leaf_done is not None and side_stream.active() is not None:
        raise ValueError("on_leaf_done cannot be used inside side_stream.weight_gradients_on: "
                         "a leaf's gradient may still be running on the side stream")
    root._pending = grad
    xp = root.xp
    order = _topological_order(root)
    done_after = _last_readers(order) if on_leaf_done is not None else {}
    for i, fn in enumerate(order):
        _run_backward(fn, xp)
        for leaf in done_after.get(i, ()):
            on_leaf_done(leaf)


def _last_readers(order) -> dict:
    """``{i: leaves}``: the leaves needing a gradient whose last reader is ``order[i]``."""
    last = {}
    for i, fn in enumerate(order):
        for t in fn.inputs:
            if t.creator is None and t.requires_grad:
                last[id(t)] = (i, t)
    out = {}
    for i, t in last.values():
        out.setdefault(i, []).append(t)
    return out


def _run_backward(fn, xp) -> None:
    """One function's backward: its outputs' pending gradients in, its inputs' out."""
    gouts = []
    for ref, (shape, dtype) in zip(fn.outputs, fn.output_meta):
        out = ref()
        g = None if out is None else out._pending
        if out is not None:
            out._pending = None
        gouts.append(g)
    if all(g is None for g in gouts):
        return
    gouts = [xp.zeros(shape, dtype) if g is None else g
             for g, (shape, dtype) in zip(gouts, fn.output_meta)]
    _check_versions(fn)
    if fn.adds_to_input_grad:   # non-leaf inputs only: a leaf's may be on the side stream
        first = {}   # a tensor passed twice takes its addend once
        for i, t in enumerate(fn.inputs):
            first.setdefault(id(t), i)
        fn.grad_addends = tuple(
            t._pending if (i in fn.adds_to_input_grad and t.creator is not None
                           and first[id(t)] == i) else None
            for i, t in enumerate(fn.inputs))
    gins = fn.backward(*gouts)
    if not isinstance(gins, tuple):
        gins = (gins,)
    added = fn.grad_addends
    fn.grad_addends = ()
    for i, (t, g) in enumerate(zip(fn.inputs, gins)):
        if g is None or not t.requires_grad:
            continue
        if g.shape != t.shape:
            raise RuntimeError(f"{type(fn).__name__}.backward returned a gradient of shape "
                               f"{g.shape} for an input of shape {t.shape}")
        if t.creator is None:  # a leaf: keep the gradient
            if t.grad is not None:
                side_stream.settle()    # its first gradient may still be on the side stream
            t.grad = g if t.grad is None else t.grad + g
        elif i < len(added) and added[i] is not None:   # g includes the addend
            t._pending = g
        else:
            t._pending = g if t._pending is None else t._pending + g


