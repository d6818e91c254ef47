"""CP (CANDECOMP/PARAFAC) format of a convolution kernel (Reustle et al., eq. 2).

A kernel ``w`` (N, C, kh, kw) of CP rank R is
``w[n, c, i, j] = sum_r T[n, r] S[c, r] H[i, r] W[j, r]`` with factors
S (C x R), H (kh x R), W (kw x R), T (N x R) — the paper's names.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorconv import backend
from tensorconv.checks import check_array, check_finite, check_int


@dataclass
class CPFactors:
    """The four factor matrices, arrays of the kernel's array module."""

    s: object   # (C, R)
    h: object   # (kh, R)
    w: object   # (kw, R)
    t: object   # (N, R)

    @property
    def rank(self) -> int:
        return self.s.shape[1]


def reconstruct(f: CPFactors):
    """The full kernel (N, C, kh, kw) of CP factors."""
    xp = backend.array_module(f.s)
    return xp.einsum("nr,cr,ir,jr->ncij", f.t, f.s, f.h, f.w)


def relative_error(w, f: CPFactors) -> float:
    """||w - reconstruct(f)|| / ||w|| (host float)."""
    xp = backend.array_module(w)
    return float(xp.linalg.norm(w - reconstruct(f)) / xp.linalg.norm(w))


def parafac(w, rank: int, *, n_iter_max: int = 200, seed: int = 0) -> CPFactors:
    """Rank-``rank`` CP decomposition of a kernel (N, C, kh, kw) by ALS (tensorly).

    Runs on the kernel's own backend; the weights tensorly returns are folded into T.
    """
    import tensorly as tl
    from tensorly.decomposition import parafac as tl_parafac

    check_array(w, "w", ndim=4)
    check_finite(w, "w")
    rank = check_int(rank, "rank", minimum=1)
    n_iter_max = check_int(n_iter_max, "n_iter_max", minimum=1)
    xp = backend.array_module(w)
    with tl.backend_context("cupy" if xp.__name__ == "cupy" else "numpy"):
        weights, (t, s, h, ww) = tl_parafac(w, rank, n_iter_max=n_iter_max, init="random",
                                           random_state=seed, normalize_factors=False)
    if weights is not None:
        t = t * weights[None, :]
    return balance(CPFactors(s, h, ww, t))


def balance(f: CPFactors) -> CPFactors:
    """The same kernel with each rank-one term's four factor columns scaled to equal norms.

    ALS leaves the scale of a term wherever it lands (a column of S in the hundreds, its
    column of T in the thousandths); gradient steps then move the small factors far more
    than their size, and fine-tuning the CP layer falls apart.  Equal norms keep SGD (and
    weight decay) acting alike on all four.
    """
    xp = backend.array_module(f.s)
    cols = [f.s, f.h, f.w, f.t]
    norms = [xp.linalg.norm(a, axis=0) for a in cols]
    target = (norms[0] * norms[1] * norms[2] * norms[3]) ** 0.25
    return CPFactors(*(a * xp.where(n > 0, target / xp.where(n > 0, n, 1), 1)
                       for a, n in zip(cols, norms)))
