"""The spread of a compact data gradient over its input's grid: the reference by its
definition and against the convolution's, which layers take the route, and the CPU path's
checks (CPU; the kernel's tests are in tests/gpu/test_zero_insert_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import zero_insert as zi


@pytest.mark.parametrize("stride", [(2, 2), (3, 2), (1, 2)])
def test_reference_is_the_strided_data_gradient(rng, stride):
    n, c, k, h, w = 2, 3, 5, 7, 8
    x_shape = (n, c, h, w)
    geom = conv_geometry(x_shape, (k, c, 1, 1), stride, 0, 1, 1)
    gy = rng.standard_normal(geom.output_shape)
    wt = rng.standard_normal((k, c, 1, 1))
    comp = reference.conv2d_backward_data(gy, wt, (n, c, geom.oh, geom.ow))
    add = rng.standard_normal(x_shape)
    want = reference.conv2d_backward_data(gy, wt, x_shape, stride)
    np.testing.assert_allclose(reference.conv.zero_insert(comp, x_shape, stride), want,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ops.zero_insert2d(comp.astype(np.float32), x_shape, stride,
                                                 addend=add.astype(np.float32)),
                               want + add, rtol=1e-5, atol=1e-5)


def test_which_layers_take_the_compact_gemm():
    def geom(r=1, stride=2, padding=0, dilation=1, groups=1, n=8):
        return conv_geometry((n, 8, 9, 9), (16, 8 // groups, r, r), stride, padding, dilation,
                             groups)
    assert zi.takes(geom()) and zi.takes(geom(groups=2)) and zi.takes(geom(stride=(1, 2)))
    assert not zi.takes(geom(stride=1))          # unstrided: the plain GEMM already
    assert not zi.takes(geom(r=3, padding=1))    # 3x3: by phase
    assert not zi.takes(geom(padding=1))         # padded: a border the spread does not hold
    assert not zi.takes(geom(n=2**31 // 648 + 1))  # N*C*H*W past the 32-bit indexes
    c = zi.compact(geom(stride=(2, 3)))
    assert (c.h, c.w, c.oh, c.ow, c.stride, c.k, c.c) == (5, 3, 5, 3, (1, 1), 16, 8)


def test_bad_input_raises():
    comp = np.zeros((2, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match="comp has shape"):
        ops.zero_insert2d(comp, (2, 3, 9, 9), 2)
    with pytest.raises(ValueError, match="x_shape"):
        ops.zero_insert2d(comp, (2, 3, 8), 2)
    with pytest.raises(ValueError, match="stride"):
        ops.zero_insert2d(comp, (2, 3, 8, 8), 0)
    with pytest.raises(ValueError, match="addend"):
        ops.zero_insert2d(comp, (2, 3, 8, 8), 2, addend=np.zeros((2, 3, 8, 7), np.float32))
    with pytest.raises(ValueError, match="out"):
        ops.zero_insert2d(comp, (2, 3, 8, 8), 2, out=np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(TypeError, match="comp"):
        ops.zero_insert2d(comp.astype(np.float64), (2, 3, 8, 8), 2)
