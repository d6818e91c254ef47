"""Counter-based dropout on the GPU: the kernels against the NumPy reference bit for bit
(random shapes, both dtypes, poisoned outputs), the counter advanced on the device, the
layer on the GPU drawing the CPU's masks, and bad input before any launch."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _poison_pool(cp, nbytes: int) -> None:
    """Leave a freed block of 0xFF bytes in CuPy's pool, which the next allocation of that
    size is given: a kernel that skips an element leaves garbage, not zeros."""
    junk = cp.full(nbytes, 255, cp.uint8)
    del junk


@pytest.mark.parametrize("trial", range(6))
def test_kernels_match_the_reference_bit_for_bit(rng, trial):
    import cupy as cp

    from tensorconv.ops import dropout as op
    from tensorconv.reference import dropout as ref

    dtype = (np.float32, np.float64)[trial % 2]
    shape = tuple(int(v) for v in rng.integers(1, 60, int(rng.integers(1, 5))))
    if trial == 5:
        shape = (3, 640_001)          # more than one grid-stride sweep
    p = float(rng.choice([0.0, 0.1, 0.4, 0.5, 0.9]))
    seed, first = int(rng.integers(0, 2**63)), int(rng.integers(0, 1000))
    offset = int(rng.choice([0, int(rng.integers(1, 2**40))]))
    x = rng.standard_normal(shape).astype(dtype)
    step = cp.asarray([first], cp.int64)
    out = cp.full(shape, cp.nan, dtype)
    for call in range(2):
        _poison_pool(cp, x.size)
        y, mask = op.dropout_forward(cp.asarray(x), p, seed, step, offset=offset, out=out)
        want, keep = ref.dropout(x, seed, first + call, p, offset)
        assert y is out and int(step.get()[0]) == first + call + 1
        np.testing.assert_array_equal(mask.get(), keep.astype(np.uint8))
        np.testing.assert_array_equal(out.get(), want)
        gy = rng.standard_normal(shape).astype(dtype)
        _poison_pool(cp, gy.nbytes)
        gx = op.dropout_backward(cp.asarray(gy), mask, p)
        np.testing.assert_array_equal(gx.get(), op.dropout_backward(gy, keep.astype(np.uint8), p))


def test_the_layer_draws_the_same_masks_on_both_devices(rng):
    import cupy as cp

    from tensorconv.autograd import Tensor
    from tensorconv.nn import layers as L

    x = rng.standard_normal((16, 33)).astype(np.float32)
    cpu, gpu = L.Dropout(0.3, seed=9), L.Dropout(0.3, seed=9).to("gpu")
    for _ in range(3):
        a = cpu(Tensor(x, requires_grad=True))
        b = gpu(Tensor(cp.asarray(x), requires_grad=True))
        np.testing.assert_array_equal(b.data.get(), a.data)
    assert int(gpu.step.get()[0]) == cpu.step[0] == 3


def test_bad_input_is_refused_before_any_launch():
    import cupy as cp

    from tensorconv.ops import dropout as op

    step = cp.zeros(1, cp.int64)
    x = cp.ones((4, 4), cp.float32)
    with pytest.raises(TypeError, match="step is on a different device"):
        op.dropout_forward(x, 0.5, 0, np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="out has shape"):
        op.dropout_forward(x, 0.5, 0, step, out=cp.empty((4, 5), cp.float32))
    with pytest.raises(ValueError, match="p must be < 1"):
        op.dropout_forward(x, 1.0, 0, step)
    assert int(step.get()[0]) == 0

