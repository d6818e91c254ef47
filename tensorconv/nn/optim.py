"""SGD (momentum, Nesterov, coupled or decoupled weight decay), LR schedules, clipping."""

from __future__ import annotations

import math

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_bools, check_real
from tensorconv.ops.sgd import PointerTables, sgd_multi_tensor


class SGD:
    """Stochastic gradient descent.

    Parameters
    ----------
    params : list of Parameter
    lr : float
    momentum : float
        Heavy-ball coefficient ``mu``: ``v = mu * v + g``.
    nesterov : bool
        Step along ``g + mu * v`` instead of ``v``.
    weight_decay : float
    decoupled : bool
        False: add ``weight_decay * p`` to the gradient (L2, PyTorch's SGD);
        True: shrink ``p`` by ``lr * weight_decay`` apart from the gradient step
        (Loshchilov & Hutter's decoupled decay).
    """

    def __init__(self, params, lr: float, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, decoupled: bool = False):
        lr = check_real(lr, "lr", low=0.0, low_open=True)
        momentum = check_real(momentum, "momentum", low=0.0, high=1.0, high_open=True)
        weight_decay = check_real(weight_decay, "weight_decay", low=0.0)
        check_bools(nesterov=nesterov, decoupled=decoupled)
        if nesterov and momentum == 0:
            raise ValueError("nesterov needs momentum > 0")
        self.params = list(params)
        if not self.params:
            raise ValueError("params is empty: nothing to optimise")
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.weight_decay, self.decoupled = weight_decay, decoupled
        self.velocity = [None] * len(self.params)
        self.steps = 0
        self._tables = None  # the fused GPU step's pointer tables (tensorconv.ops.sgd)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _fused(self) -> bool:
        """All parameters and gradients are contiguous CuPy float32: one kernel does the step."""
        return all(p.grad is not None and backend.is_cupy_array(p.data)
                   and p.data.dtype == np.float32 and p.grad.dtype == np.float32
                   and p.grad.flags.c_contiguous for p in self.params)

    def _fused_arrays(self):
        """(params, grads, velocities) of the one-kernel step; velocities made on first use."""
        for i, p in enumerate(self.params):
            if self.velocity[i] is None:
                self.velocity[i] = p.xp.zeros_like(p.data)  # mu * 0 + g == g: same as below
        return ([p.data for p in self.params], [p.grad for p in self.params], self.velocity)

    def prepare_capture(self, tables: PointerTables) -> None:
        """Make what a captured :meth:`step` reads (velocities, and in ``tables`` the kernel's
        pointer tables for the current gradients) now, outside the capture.  The capturer
        keeps ``tables`` for its graph: the optimiser's own are replaced whenever an eager
        step sees other gradients, which would free memory the graph reads.

        Raises
        ------
        ValueError
            The step would not be the one-kernel GPU step (a parameter without a gradient,
            a NumPy or non-float32 parameter): its host-side arithmetic cannot be replayed.
        """
        if not self._fused():
            missing = [i for i, p in enumerate(self.params) if p.grad is None]
            raise ValueError(
                "a captured SGD step needs every parameter on the GPU, float32, with a "
                f"gradient (parameters without one: {missing[:8]}); train eagerly instead")
        tables.upload(self.params[0].xp, *self._fused_arrays())

    def step(self, lr=None, tables: PointerTables | None = None) -> None:
        """One update with ``self.lr``, or with ``lr``: a CuPy float32 (1,) array the GPU
        step reads when it runs (a captured step's schedule, :mod:`tensorconv.nn.captured`).
        ``tables``: the GPU step's pointer tables (default the optimiser's own; a captured
        step passes those of :meth:`prepare_capture`)."""
        lr_given = lr is not None
        lr = self.lr if lr is None else lr
        mu, wd = self.momentum, self.weight_decay
        if self._fused():
            if tables is None:
                self._tables = tables = self._tables or PointerTables()
            sgd_multi_tensor(*self._fused_arrays(), lr=lr, momentum=mu, weight_decay=wd,
                             nesterov=self.nesterov, decoupled=self.decoupled, tables=tables)
            self.steps += 1
            return
        if lr_given:
            raise ValueError("lr as an array needs the one-kernel GPU step (every parameter "
                             "on the GPU, float32, with a gradient)")
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                continue
            if wd and not self.decoupled:
                g = g + wd * p.data
            if mu:
                v = self.velocity[i]
                v = g.copy() if v is None else v * mu + g
                self.velocity[i] = v
                g = g + mu * v if self.nesterov else v
            if wd and self.decoupled:
                p.data *= 1.0 - lr * wd
            p.data -= lr * g
        self.steps += 1

    def state_dict(self) -> dict:
        return {"lr": self.lr, "steps": self.steps,
                "velocity": [None if v is None else backend.to_host(v).copy()
                             for v in self.velocity]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["velocity"]) != len(self.params):
            raise ValueError(f"optimizer state has {len(state['velocity'])} buffers for "
                             f"{len(self.params)} parameters")
        self.lr, self.steps = float(state["lr"]), int(state["steps"])
        self.velocity = [None if v is None else p.xp.asarray(v).copy()
                         for v, p in zip(state["velocity"], self.params)]


def step_lr(base_lr: float, epoch: int, milestones, gamma: float = 0.1) -> float:
    """``base_lr * gamma ** (number of milestones <= epoch)``."""
    return base_lr * gamma ** sum(epoch >= m for m in milestones)


def cosine_lr(base_lr: float, step: int, total_steps: int, warmup_steps: int = 0,
              min_lr: float = 0.0) -> float:
    """Linear warm-up, then half a cosine from ``base_lr`` down to ``min_lr``."""
    if warmup_steps and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    t = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + 0.5 * (base_lr - min_lr) * (1 + math.cos(math.pi * t))


def clip_grad_norm(params, max_norm: float):
    """Scale all gradients so their global L2 norm is at most ``max_norm``.

    Everything stays on the gradients' device, with no host read, so a captured training
    step (:class:`tensorconv.nn.captured.CapturedStep`) can hold it.

    Returns
    -------
    float64 scalar of the gradients' array module (a 0-d CuPy array on the GPU), or 0.0
        The norm before scaling (``float()`` reads it); 0.0 where no parameter has a
        gradient.
    """
    check_real(max_norm, "max_norm", low=0.0, low_open=True)
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    xp = backend.array_module(grads[0].grad)
    total = xp.sqrt(sum((p.grad.astype(np.float64) ** 2).sum() for p in grads))
    # 1 where under the bound (the gradients unchanged, bit for bit), as the eager rule did
    scale = xp.where(total > max_norm, max_norm / (total + 1e-12), 1.0)
    for p in grads:
        p.grad = p.grad * scale.astype(p.grad.dtype)
    return total
