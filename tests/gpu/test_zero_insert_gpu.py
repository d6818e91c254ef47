"""A 1x1 strided convolution's data gradient as a compact GEMM and a spread: the kernel
against the reference exactly (a copy and one addition a value), random shapes, strides and
addends, outputs poisoned; the data gradient through it against the reference, with and
without an addend, grouped, at odd sizes, and under tf32; bad input before any launch."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("trial", range(8))
def test_kernel_matches_the_reference(rng, trial):
    import cupy as cp

    from tensorconv import ops
    from tensorconv.reference import conv as ref

    n, c = (int(v) for v in rng.integers(1, 9, 2))
    h, w = (int(v) for v in rng.integers(1, 40, 2))
    stride = (int(rng.integers(1, 4)), int(rng.integers(2, 5)))
    comp = rng.standard_normal((n, c, -(-h // stride[0]), -(-w // stride[1]))).astype(np.float32)
    add = rng.standard_normal((n, c, h, w)).astype(np.float32) if trial % 2 else None
    out = cp.full((n, c, h, w), cp.nan, cp.float32)
    got = ops.zero_insert2d(cp.asarray(comp), (n, c, h, w), stride, out=out,
                            addend=None if add is None else cp.asarray(add))
    assert got is out
    np.testing.assert_array_equal(cp.asnumpy(got), ref.zero_insert(comp, (n, c, h, w), stride,
                                                                   add))


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
@pytest.mark.parametrize("trial", range(5))
def test_data_gradient_through_the_route_matches_the_reference(rng, trial, prec):
    import cupy as cp

    from tensorconv import ops, precision, reference
    from tensorconv.checks import conv_geometry
    from tensorconv.ops import zero_insert as zi

    n, c, k, h, stride, groups = [(128, 64, 128, 32, 2, 1), (3, 24, 40, 9, 2, 1),
                                  (2, 32, 48, 15, (2, 3), 4), (5, 17, 33, 11, 3, 1),
                                  (1, 256, 512, 14, 2, 1)][trial]
    x_shape = (n, c, h, h)
    geom = conv_geometry(x_shape, (k, c // groups, 1, 1), stride, 0, 1, groups)
    assert zi.takes(geom)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    w = rng.standard_normal((k, c // groups, 1, 1)).astype(np.float32)
    add = rng.standard_normal(x_shape).astype(np.float32)
    want = reference.conv2d_backward_data(gy.astype(np.float64), w.astype(np.float64),
                                          x_shape, stride, 0, 1, groups)
    with precision.using(prec):
        for addend in (None, add):
            out = cp.full(x_shape, cp.nan, cp.float32)
            got = ops.conv2d_backward_data(
                cp.asarray(gy), cp.asarray(w), x_shape, stride, 0, 1, groups,
                algorithm="igemm_tf32x3", out=out,
                addend=None if addend is None else cp.asarray(addend))
            expect = want if addend is None else want + addend
            assert rel_err(cp.asnumpy(got), expect) < (1e-5 if prec == "fp32" else 3e-3)
            zeros = np.ones(x_shape, bool)
            zeros[:, :, ::geom.stride[0], ::geom.stride[1]] = False
            if addend is None:   # the pixels no output reads hold zeros, not the poison
                assert not np.any(cp.asnumpy(got)[zeros])


def test_bad_input_raises_before_any_launch():
    import cupy as cp

    from tensorconv import ops

    comp = cp.zeros((2, 3, 4, 4), cp.float32)
    with pytest.raises(ValueError, match="out has shape"):
        ops.zero_insert2d(comp, (2, 3, 8, 8), 2, out=cp.zeros((2, 3, 8, 9), cp.float32))
    with pytest.raises(TypeError, match="addend"):
        ops.zero_insert2d(comp, (2, 3, 8, 8), 2, addend=np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="comp has shape"):
        ops.zero_insert2d(comp, (2, 3, 10, 8), 2)
