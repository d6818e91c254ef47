"""Tucker format of a convolution kernel on its two channel modes (TDC, eq. 1).

A kernel ``w`` of shape (N, C, R, S) (output channels first, our layout) is
approximated as ``core x_0 U_out x_1 U_in`` with ``core`` (D2, D1, R, S),
``U_out`` (N, D2) and ``U_in`` (C, D1).  The layer then runs as a 1x1
convolution C -> D1 (weights ``U_in.T``), the core R x S convolution D1 -> D2
and a 1x1 convolution D2 -> N (weights ``U_out``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorconv import backend
from tensorconv.checks import check_array, check_finite, is_int


@dataclass
class TuckerFactors:
    """``w ~= core x_0 u_out x_1 u_in``; arrays of the kernel's array module."""

    core: object    # (D2, D1, R, S)
    u_out: object   # (N, D2)
    u_in: object    # (C, D1)

    @property
    def ranks(self) -> tuple[int, int]:
        """(D1, D2): the core convolution's input and output channels."""
        return self.core.shape[1], self.core.shape[0]


def _check(w, ranks) -> tuple[int, int]:
    """``(D1, D2)`` after checking ``w`` (a finite float (N, C, R, S) array) and ``ranks``."""
    check_array(w, "w", ndim=4)
    check_finite(w, "w")
    if not isinstance(ranks, (tuple, list)) or len(ranks) != 2 or not all(map(is_int, ranks)):
        raise TypeError(f"ranks must be a pair of ints (D1, D2), got {ranks!r}")
    d1, d2 = (int(r) for r in ranks)
    n, c = w.shape[:2]
    if not (1 <= d1 <= c):
        raise ValueError(f"rank D1={d1} must be in 1..{c} (the kernel's input channels)")
    if not (1 <= d2 <= n):
        raise ValueError(f"rank D2={d2} must be in 1..{n} (the kernel's output channels)")
    return d1, d2


def _leading_left_vectors(mat, k):
    xp = backend.array_module(mat)
    u, _, _ = xp.linalg.svd(mat, full_matrices=False)
    return u[:, :k]


def _mode01_product(t, a, b):
    """``out[i, j, r, s] = sum_kl a[i, k] b[j, l] t[k, l, r, s]`` as two matrix products.

    One mode at a time keeps the intermediates at kernel size: a single
    three-operand einsum let CuPy contract the two factor matrices first
    (a 60 GB intermediate for a 512 x 512 x 3 x 3 kernel).
    """
    xp = backend.array_module(t)
    t = xp.tensordot(a, t, axes=([1], [0]))                  # (I, L, R, S)
    t = xp.tensordot(b, t, axes=([1], [1]))                  # (J, I, R, S)
    return xp.ascontiguousarray(t.transpose(1, 0, 2, 3))


def hosvd(w, ranks) -> TuckerFactors:
    """Truncated HOSVD on modes 0 and 1 (the projection of TDC's eq. 12).

    Parameters
    ----------
    w : ndarray (NumPy or CuPy), (N, C, R, S)
    ranks : (D1, D2)
    """
    d1, d2 = _check(w, ranks)
    n, c, r, s = w.shape
    u_out = _leading_left_vectors(w.reshape(n, -1), d2)
    u_in = _leading_left_vectors(w.transpose(1, 0, 2, 3).reshape(c, -1), d1)
    return TuckerFactors(_mode01_product(w, u_out.T, u_in.T), u_out, u_in)


def reconstruct(f: TuckerFactors):
    """The full kernel (N, C, R, S) of a Tucker factorisation."""
    return _mode01_product(f.core, f.u_out, f.u_in)


def hosvd_project(w, ranks):
    """``reconstruct(hosvd(w, ranks))``: the nearest-by-HOSVD kernel of Tucker ranks ``ranks``."""
    return reconstruct(hosvd(w, ranks))


def partial_tucker(w, ranks, *, n_iter_max: int = 100, tol: float = 1e-6) -> TuckerFactors:
    """Tucker decomposition of modes 0 and 1 by HOOI (tensorly), initialised by HOSVD.

    Runs on the kernel's own backend (tensorly's NumPy or CuPy backend).
    """
    import tensorly as tl
    from tensorly.decomposition import partial_tucker as tl_partial_tucker

    d1, d2 = _check(w, ranks)
    xp = backend.array_module(w)
    with tl.backend_context("cupy" if xp.__name__ == "cupy" else "numpy"):
        (core, (u_out, u_in)), _ = tl_partial_tucker(w, rank=[d2, d1], modes=[0, 1],
                                                     n_iter_max=n_iter_max, init="svd", tol=tol)
    return TuckerFactors(core, u_out, u_in)


def param_reduction(c: int, n: int, r: int, s: int, d1: int, d2: int) -> float:
    """gamma_P of TDC eq. 5: original parameters over Tucker-format parameters."""
    return (c * n * r * s) / (c * d1 + r * s * d1 * d2 + n * d2)


def flops_reduction(c: int, n: int, r: int, s: int, d1: int, d2: int, h: int, w: int,
                    oh: int, ow: int) -> float:
    """gamma_F of TDC eq. 6: original MACs over Tucker-format MACs (input H x W, output OH x OW)."""
    return (oh * ow * r * s * c * n) / (h * w * c * d1 + oh * ow * d2 * (r * s * d1 + n))
