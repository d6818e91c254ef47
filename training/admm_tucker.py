"""ADMM training towards Tucker-rank constraints (TDC, eqs. 8-12 and Algorithm 1).

Each constrained kernel K is projected by truncated HOSVD to its ranks (D1, D2) (eq. 12);
the loop is :class:`training.admm.ADMM` (K-update eq. 10, K_hat- and M-updates eqs. 11-12).
After ADMM the kernels are decomposed and the Tucker-format model fine-tuned (a second
:func:`training.train.train` run with ``init_from`` and ``tucker_ranks``).
"""

from __future__ import annotations

from tensorconv.compress.tucker import tucker_candidates
from tensorconv.decomp.tucker import hosvd_project
from training.admm import ADMM


class ADMMTucker(ADMM):
    """The ADMM variables of every constrained convolution of ``model``.

    Parameters
    ----------
    model : Module
    ranks : dict name -> (D1, D2)
    rho, rho_growth : float
        Penalty and its per-epoch multiplier.
    """

    KEYS = ("k_hat", "dual")   # TDC's names for Z and U (kept in checkpoints)

    def __init__(self, model, ranks: dict, rho: float, rho_growth: float):
        convs = tucker_candidates(model, min_channels=1)
        unknown = sorted(set(ranks) - set(convs))
        if unknown:
            raise ValueError(f"ADMM ranks name no dense R x S convolution: {unknown[:3]}")
        self.ranks = {name: tuple(r) for name, r in ranks.items()}
        super().__init__({name: convs[name] for name in ranks}, rho, rho_growth)

    def project(self, name: str, w):
        return hosvd_project(w, self.ranks[name])
