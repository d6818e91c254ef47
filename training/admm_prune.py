"""ADMM non-structured pruning (Zhang et al., ECCV'18; the initial pruning of Rumi et al.,
PACT'20, §3): minimise f(W) subject to card(W_i) <= l_i for every pruned convolution i.

Each kernel is projected onto its ``l_i`` largest weights; the loop is
:class:`training.admm.ADMM`.  After ADMM the kernels are hard-pruned to their top ``l_i``
weights (:func:`tensorconv.compress.prune.magnitude_masks`) and fine-tuned under those masks
(a second :func:`training.train.train` run with ``prune_ratio``).
"""

from __future__ import annotations

from tensorconv.checks import check_real
from tensorconv.compress.prune import keep_count, project_top, prune_candidates
from training.admm import ADMM


class ADMMPrune(ADMM):
    """The ADMM variables of every prunable convolution of ``model``
    (:func:`~tensorconv.compress.prune.prune_candidates`).

    Parameters
    ----------
    model : Module
    ratio : float
        Each pruned convolution keeps ``ceil(size / ratio)`` weights (8: 8x fewer).
    rho, rho_growth : float
        Penalty and its per-epoch multiplier.
    """

    def __init__(self, model, ratio: float, rho: float, rho_growth: float):
        check_real(ratio, "ratio", low=1.0)
        convs = prune_candidates(model)
        self.keep = {n: keep_count(c.weight.size, ratio) for n, c in convs.items()}
        super().__init__(convs, rho, rho_growth)

    def project(self, name: str, w):
        return project_top(w, self.keep[name])
