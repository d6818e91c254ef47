"""The pooling kernel (kernels_cu/pool.cu) against reference.pool2d."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("trial", sweep(15, 6))
def test_random_shapes(rng, mode, trial):
    import cupy as cp

    k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(k[0], 60)),
             int(rng.integers(k[1], 60)))
    x = rng.standard_normal(shape).astype(np.float32)
    ref = reference.pool2d(x.astype(np.float64), k, s, p, mode)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    ops.pool2d(cp.asarray(x), k, s, p, mode=mode, out=out)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-6, (shape, k, s, p)


def test_max_propagates_nan_and_bad_input():
    import cupy as cp

    x = cp.zeros((1, 2, 6, 6), cp.float32)
    x[0, 1, 2, 3] = cp.nan
    y = ops.pool2d(x, 3, 2, 1)
    assert bool(cp.isnan(y[0, 1, 1, 1])) and not bool(cp.isnan(y[0, 0]).any())
    out = cp.full((1, 2, 3, 3), 7.0, cp.float32)
    with pytest.raises(ValueError, match="mode must be"):
        ops.pool2d(x, 3, 2, 1, mode="min", out=out)
    with pytest.raises(ValueError, match="at most half the kernel"):
        ops.pool2d(x, 2, 2, 2, out=out)
    with pytest.raises(ValueError, match="larger than the padded input"):
        ops.pool2d(x, 9, 1, 0, out=out)
    with pytest.raises(ValueError, match="out has shape"):
        ops.pool2d(x, 3, 2, 1, out=cp.empty((1, 2, 4, 4), cp.float32))
    with pytest.raises(ValueError, match="x must be 4-D|ndim|dimensions"):
        ops.pool2d(x[0], 3, 2, 1)
    assert bool((out == 7.0).all())
