"""Compare a function's analytic gradients with central finite differences."""

from __future__ import annotations

import numpy as np

from tensorconv.autograd.tensor import Tensor


def gradcheck(fn, inputs, *, eps: float = 1e-6, rtol: float = 1e-4, atol: float = 1e-6,
              seed: int = 0) -> bool:
    """Check ``fn``'s backward against finite differences of ``<fn(inputs), v>``.

    Parameters
    ----------
    fn : callable
        Takes the tensors in ``inputs`` and returns one tensor.
    inputs : list of Tensor
        float64 tensors; those with ``requires_grad`` are checked.
    eps : float
        Finite-difference step.

    Returns
    -------
    True; raises ``AssertionError`` naming the input and the worst element otherwise.

    Raises
    ------
    ValueError
        No input requires a gradient (there would be nothing to check).

    Every element is perturbed in place through its own index, so inputs of any layout
    (non-contiguous views included) are checked element by element.
    """
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs[{i}] must be a Tensor, got {type(t).__name__}")
        if t.requires_grad and t.dtype != np.float64:
            raise TypeError(f"gradcheck needs float64 inputs; inputs[{i}] is {t.dtype}")
    if not any(t.requires_grad for t in inputs):
        raise ValueError("no input requires a gradient: gradcheck would check nothing")
    for t in inputs:
        t.grad = None
    out = fn(*inputs)
    if not isinstance(out, Tensor):
        raise TypeError(f"fn must return a Tensor, got {type(out).__name__}")
    xp = out.xp
    v = xp.asarray(np.random.default_rng(seed).standard_normal(out.shape))
    out.backward(v)

    def objective() -> float:
        return float((fn(*inputs).data * v).sum())

    for i, t in enumerate(inputs):
        if not t.requires_grad:
            continue
        analytic = t.grad if t.grad is not None else xp.zeros_like(t.data)
        numeric = xp.zeros(t.shape, dtype=np.float64)
        for idx in np.ndindex(*t.shape):  # indexes the array itself: any strides
            old = float(t.data[idx])
            t.data[idx] = old + eps
            fp = objective()
            t.data[idx] = old - eps
            fm = objective()
            t.data[idx] = old
            numeric[idx] = (fp - fm) / (2 * eps)
        err = xp.abs(analytic - numeric)
        bad = err > atol + rtol * xp.abs(numeric)
        if bool(bad.any()):
            k = int(xp.argmax(err - rtol * xp.abs(numeric)))
            raise AssertionError(
                f"gradient of input {i} ({t.name or tuple(t.shape)}) differs at flat index {k}: "
                f"analytic {float(analytic.reshape(-1)[k]):.6g}, numeric "
                f"{float(numeric.reshape(-1)[k]):.6g}")
    return True
