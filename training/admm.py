"""ADMM training towards a constraint set on some convolutions' kernels: the loop both
TDC's Tucker-rank constraints (:mod:`training.admm_tucker`) and non-structured pruning's
cardinality constraints (:mod:`training.admm_prune`) run.

For each constrained kernel W, with Z its projection onto the set and U the scaled dual:
while the network trains, W gets the extra gradient ``rho * (W - Z + U)`` (the W-update:
SGD on f + rho/2 ||W - Z + U||^2); after every epoch ``Z = project(W + U)``,
``U = U + W - Z``, and ``rho`` grows by a constant factor.  (Z, U, rho) are checkpointed
with the run, so a resumed run continues exactly.

Z, U and rho live in arrays that keep their memory for the whole run (the epoch's updates
and a resume write into them; rho is a one-element array on the weights' device), so a
captured training step (:class:`tensorconv.nn.captured.CapturedStep`), which replays the
penalty gradient on the buffers it was captured with, sees every epoch's values.
"""

from __future__ import annotations

from tensorconv import backend
from tensorconv.checks import check_real


class ADMM:
    """The ADMM variables of the convolutions ``convs`` ({name: Conv2d}); a subclass says
    what :meth:`project` does.  ``KEYS`` name Z and U in checkpoints."""

    KEYS = ("z", "u")

    def __init__(self, convs: dict, rho: float, rho_growth: float):
        check_real(rho, "rho", low=0.0, low_open=True)
        check_real(rho_growth, "rho_growth", low=1.0)
        if not convs:
            raise ValueError("no convolution to constrain")
        self.convs = dict(convs)
        self.rho_growth = float(rho_growth)
        w0 = next(iter(self.convs.values())).weight
        self._rho_array = w0.xp.empty((), w0.dtype)
        self.rho = rho
        self.z = {n: self.project(n, c.weight.data).astype(c.weight.dtype)
                  for n, c in self.convs.items()}
        self.u = {n: c.weight.xp.zeros_like(c.weight.data) for n, c in self.convs.items()}

    @property
    def rho(self) -> float:
        """The penalty (a host float); setting it writes the device array the penalty
        gradient reads."""
        return self._rho

    @rho.setter
    def rho(self, value: float) -> None:
        self._rho = float(value)
        # the weights' dtype, as a Python float multiplying them was rounded before
        self._rho_array[...] = self._rho

    def project(self, name: str, w):
        """The nearest kernel to ``w`` that meets ``name``'s constraint."""
        raise NotImplementedError

    def after_backward(self) -> None:
        """The W-update's penalty gradient, added before the optimiser step."""
        for n, conv in self.convs.items():
            w = conv.weight
            if w.grad is not None:
                w.grad = w.grad + self._rho_array * (w.data - self.z[n] + self.u[n])

    def end_epoch(self) -> None:
        """Z- and U-updates (into the same arrays), then rho grows."""
        for n, conv in self.convs.items():
            w = conv.weight.data
            self.z[n][...] = self.project(n, w + self.u[n]).astype(w.dtype)
            self.u[n][...] = self.u[n] + w - self.z[n]
        self.rho = self._rho * self.rho_growth

    def gap(self) -> float:
        """Relative distance ||W - Z|| / ||W|| over all constrained kernels (host float)."""
        num = sum(float(((c.weight.data - self.z[n]) ** 2).sum()) for n, c in self.convs.items())
        den = sum(float((c.weight.data ** 2).sum()) for c in self.convs.values())
        return (num / den) ** 0.5 if den else 0.0

    def state_arrays(self) -> dict:
        kz, ku = self.KEYS
        out = {f"{kz}/{n}": backend.to_host(a) for n, a in self.z.items()}
        out.update({f"{ku}/{n}": backend.to_host(a) for n, a in self.u.items()})
        return out

    def load_state(self, arrays: dict, rho: float) -> None:
        """Z, U (copied into this object's arrays) and rho of a checkpoint."""
        kz, ku = self.KEYS
        xp = next(iter(self.convs.values())).weight.xp
        for key, held in ((kz, self.z), (ku, self.u)):
            for n, a in held.items():
                saved = arrays[f"{key}/{n}"]
                if saved.shape != a.shape:
                    raise ValueError(f"checkpoint's {key}/{n} has shape {saved.shape}; the "
                                     f"model's kernel {a.shape}")
                a[...] = xp.asarray(saved)
        self.rho = rho
