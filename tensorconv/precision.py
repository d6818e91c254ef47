"""The precision of the tensor-core kernels' products.

``"fp32"`` (the default): every product is split into three tf32 products
(3xTF32, ``kernels_cu/tc_mma.cuh``), so results match fp32 (<= 1e-5 relative).
``"tf32"``: one tf32 product, the accuracy of cuDNN's TF32 mode (PyTorch's default for
convolutions, ~1e-3 relative): a third of the tensor-core work and no remainders to
make or move.  Operands read from registers are rounded to the nearest tf32; those the
wgmma kernels read from shared memory (the implicit GEMM's weights and gathered
operands on sm_90) are truncated by the tensor cores, which leaves about 1.7x the
rounding's error (8e-4 against 5e-4 on a weight gradient).

The setting is a context (like ``decimal.localcontext``), read whenever a kernel is
fetched: ::

    from tensorconv import precision
    from tensorconv import ops

    with precision.using("tf32"):
        y = ops.core_conv2d(x, w, 1, 1, variant="tf32x3")

Only kernels built on ``tc_mma.cuh`` change (:func:`tensorconv.cuda.uses_tensor_cores`):
the tf32x3 core, Winograd, fused stem and tensor-core pointwise-pair kernels, and the
implicit GEMM that ``ops.conv2d`` and its gradients run on large layers (training's
``TrainConfig(precision=...)`` sets it for a whole run).  The
others, and every NumPy path, compute in fp32 whatever the setting.  The tune cache
keys every decision by precision (:func:`tensorconv.tunecache.make_key`), so tiles
and verdicts are tuned for each.  :class:`tensorconv.engine.InferenceEngine`
takes ``precision=`` and plans, tunes and captures under it.
"""

from __future__ import annotations

import contextlib
import contextvars

PRECISIONS = ("fp32", "tf32")
DEFAULT = "fp32"

_CURRENT = contextvars.ContextVar("tensorconv_precision", default=DEFAULT)


def check(precision: str, name: str = "precision") -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else ``ValueError`` naming ``name``."""
    if precision not in PRECISIONS:
        raise ValueError(f"{name} must be one of {PRECISIONS}, got {precision!r}")
    return precision


def current() -> str:
    """The precision kernels fetched now are compiled for."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(precision: str):
    """Fetch tensor-core kernels for ``precision`` inside the ``with`` block."""
    token = _CURRENT.set(check(precision))
    try:
        yield precision
    finally:
        _CURRENT.reset(token)


def mma_defines(precision: str | None = None) -> dict:
    """Compile-time constants a ``tc_mma.cuh`` kernel takes for ``precision`` (default:
    :func:`current`); none for fp32, whose build is the plain source."""
    return {"TC_MMA_PASSES": 1} if (precision or current()) == "tf32" else {}
