"""ADMM training towards Tucker-rank constraints (TDC, eqs. 8-12 and Algorithm 1).

While the network trains, each constrained kernel K gets the extra gradient
``rho * (K - K_hat + M)`` (the K-update, eq. 10); after every epoch
``K_hat = proj(K + M)`` (truncated HOSVD to ranks (D1, D2), eq. 12) and
``M = M + K - K_hat`` (the dual update), and ``rho`` grows by a constant
factor.  The state (K_hat, M, rho) is checkpointed with the run, so a resumed
ADMM run continues exactly.  After ADMM the kernels are decomposed and the
Tucker-format model fine-tuned (a second :func:`training.train.train` run with
``init_from`` and ``tucker_ranks``).
"""

from __future__ import annotations

from tensorconv import backend
from tensorconv.compress.tucker import tucker_candidates
from tensorconv.decomp.tucker import hosvd_project


class ADMMTucker:
    """The ADMM variables of every constrained convolution of ``model``.

    Parameters
    ----------
    model : Module
    ranks : dict name -> (D1, D2)
    rho, rho_growth : float
        Penalty and its per-epoch multiplier.
    """

    def __init__(self, model, ranks: dict, rho: float, rho_growth: float):
        convs = tucker_candidates(model, min_channels=1)
        unknown = sorted(set(ranks) - set(convs))
        if unknown:
            raise ValueError(f"ADMM ranks name no dense R x S convolution: {unknown[:3]}")
        if rho <= 0 or rho_growth < 1:
            raise ValueError(f"need rho > 0 and rho_growth >= 1, got {rho}, {rho_growth}")
        self.convs = {name: convs[name] for name in ranks}
        self.ranks = {name: tuple(r) for name, r in ranks.items()}
        self.rho, self.rho_growth = rho, rho_growth
        self.k_hat = {n: hosvd_project(c.weight.data, self.ranks[n]) for n, c in self.convs.items()}
        self.dual = {n: c.weight.xp.zeros_like(c.weight.data) for n, c in self.convs.items()}

    def after_backward(self) -> None:
        """K-update's penalty gradient, added before the optimiser step (eq. 10)."""
        for n, conv in self.convs.items():
            w = conv.weight
            if w.grad is not None:
                w.grad = w.grad + self.rho * (w.data - self.k_hat[n] + self.dual[n])

    def end_epoch(self) -> None:
        """K_hat- and M-updates (eqs. 11-12), then rho grows."""
        for n, conv in self.convs.items():
            k = conv.weight.data
            self.k_hat[n] = hosvd_project(k + self.dual[n], self.ranks[n]).astype(k.dtype)
            self.dual[n] = self.dual[n] + k - self.k_hat[n]
        self.rho *= self.rho_growth

    def gap(self) -> float:
        """Relative distance ||K - K_hat|| / ||K|| over all constrained kernels (host float)."""
        num = sum(float(((c.weight.data - self.k_hat[n]) ** 2).sum()) for n,
                  c in self.convs.items())
        den = sum(float((c.weight.data ** 2).sum()) for c in self.convs.values())
        return (num / den) ** 0.5 if den else 0.0

    def state_arrays(self) -> dict:
        out = {f"k_hat/{n}": backend.to_host(a) for n, a in self.k_hat.items()}
        out.update({f"dual/{n}": backend.to_host(a) for n, a in self.dual.items()})
        return out

    def load_state(self, arrays: dict, rho: float) -> None:
        xp = next(iter(self.convs.values())).weight.xp
        self.k_hat = {n: xp.asarray(arrays[f"k_hat/{n}"]) for n in self.convs}
        self.dual = {n: xp.asarray(arrays[f"dual/{n}"]) for n in self.convs}
        self.rho = rho
