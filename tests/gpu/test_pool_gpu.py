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
    ceil = mode == "max" and trial % 2 == 1        # PyTorch's ceil mode on odd trials
    ref = reference.pool2d(x.astype(np.float64), k, s, p, mode, ceil_mode=ceil)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    ops.pool2d(cp.asarray(x), k, s, p, mode=mode, ceil_mode=ceil, out=out)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-6, (shape, k, s, p, ceil)


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


@pytest.mark.parametrize("trial", sweep(20, 8))
def test_training_max_pool_matches_the_window_argmax_path(rng, trial):
    """The training kernels against the autograd function's CPU path (window views and
    argmax): forward, taps and the gathered backward, overlapping windows and ties
    (small integers) included."""
    import cupy as cp

    from tensorconv.autograd.functions.pooling import MaxPool2d
    from tensorconv.ops import pool

    k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    shape = (int(rng.integers(1, 5)), int(rng.integers(1, 20)), int(rng.integers(k[0], 40)),
             int(rng.integers(k[1], 40)))
    x = rng.integers(-3, 4, shape).astype(np.float32) if trial % 2 else \
        rng.standard_normal(shape).astype(np.float32)
    ceil = trial % 3 == 2                          # PyTorch's ceil mode, clipped last windows
    cpu = MaxPool2d(k, s, p, ceil_mode=ceil)
    y_ref = cpu.forward(x)
    gy = rng.standard_normal(y_ref.shape).astype(np.float32)
    gx_ref = cpu.backward(gy)
    y, taps = pool.max_pool2d_train(cp.asarray(x), k, s, p, ceil_mode=ceil)
    assert bool((y == cp.asarray(y_ref)).all()) and bool((taps == cp.asarray(cpu.argmax)).all())
    gx = cp.full(shape, cp.nan, cp.float32)
    pool.max_pool2d_backward(cp.asarray(gy), taps, shape, k, s, p, ceil_mode=ceil, out=gx)
    assert rel_err(gx.get(), gx_ref) <= 1e-6, (shape, k, s, p, ceil)
    gpu = MaxPool2d(k, s, p, ceil_mode=ceil)       # the autograd function takes them
    assert bool((gpu.forward(cp.asarray(x)) == y).all()) and gpu.on_gpu
    assert rel_err(gpu.backward(cp.asarray(gy)).get(), gx_ref) <= 1e-6


def test_training_max_pool_bad_input():
    import cupy as cp

    from tensorconv.ops import pool

    x = cp.ones((1, 2, 8, 8), cp.float32)
    with pytest.raises(ValueError, match="taps"):
        pool.max_pool2d_train(cp.ones((1, 1, 20, 20), cp.float32), 17)
    with pytest.raises(TypeError, match="GPU"):
        pool.max_pool2d_train(np.ones((1, 2, 8, 8), np.float32), 2)
    y, taps = pool.max_pool2d_train(x, 2)
    with pytest.raises(ValueError, match="gy has shape"):
        pool.max_pool2d_backward(cp.ones((1, 2, 3, 4), cp.float32), taps, x.shape, 2)
    with pytest.raises(TypeError, match="taps"):
        pool.max_pool2d_backward(y, taps.astype(cp.int32), x.shape, 2)
