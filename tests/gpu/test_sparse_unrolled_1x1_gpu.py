"""The unstaged unrolled 1x1 remainder (``sparse_unrolled_1x1``) against the float64
reference (<= 1e-5): every tile on random shapes (strides 1 to 3, unequal strides,
padding, maps of one pixel to 40 columns, batches and pixel counts that leave partial
blocks, row counts that leave partial groups), dense blocks' rows to add to, the epilogue,
a dense and an empty kernel, an input not 16-byte aligned; outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_unrolled_1x1 as su1
from tests.helpers import check_sparse_conv2d, random_sparse_layer, rel_err

pytestmark = pytest.mark.gpu

SHAPES = [((3, 19, 4, 4), 21, 1, 0), ((2, 11, 7, 7), 70, 2, 0), ((1, 9, 11, 40), 33, 1, 0),
          ((33, 20, 2, 2), 24, 2, 1), ((2, 17, 32, 32), 40, 2, 0), ((3, 6, 9, 5), 16, 3, 1),
          ((5, 12, 1, 1), 50, 1, 0), ((2, 35, 16, 16), 130, (2, 1), (0, 1))]


@pytest.mark.parametrize("x_shape,k,stride,padding", SHAPES, ids=str)
def test_every_tile_computes_the_convolution(rng, x_shape, k, stride, padding):
    w, packed, _ = random_sparse_layer(rng, k, x_shape[1], 1, 0.2, empty_row=True)
    g = conv_geometry(x_shape, w.shape, stride, padding)
    tiles = su1.candidates(su1.Problem(g), None)
    assert len(tiles) >= 2
    for tile in tiles:
        check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, epilogue=False,
                            remainder="unrolled", remainder_tile=tile)


@pytest.mark.parametrize("nblocks", [0, 3])
def test_the_remainder_adds_to_blocks_and_applies_the_epilogue(rng, nblocks):
    w, packed, _ = random_sparse_layer(rng, 40, 27, 1, 0.15, nblocks, empty_row=True)
    for x_shape, stride, padding in [((3, 27, 12, 12), 1, 0), ((2, 27, 5, 8), 2, 1),
                                     ((3, 27, 12, 12), 2, 0)]:
        check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, epilogue=True,
                            remainder="unrolled")


def test_a_dense_kernel_a_zero_one_and_an_unaligned_input(rng):
    import cupy as cp

    for density in (1.0, 0.0):
        w, packed, _ = random_sparse_layer(rng, 24, 10, 1, density)
        check_sparse_conv2d(rng, w, packed, (2, 10, 8, 8), 2, 1, epilogue=True,
                            remainder="unrolled")
    w, packed, _ = random_sparse_layer(rng, 24, 10, 1, 0.2)
    xs = cp.asarray(rng.standard_normal(2 * 10 * 8 * 8 + 1).astype(np.float32))
    x = xs[1:].reshape(2, 10, 8, 8)                   # 4 bytes past an aligned start
    assert x.data.ptr % 16 != 0
    out = cp.full((2, 24, 4, 4), cp.nan, cp.float32)
    ops.sparse_conv2d(x, packed, None, 2, 0, remainder="unrolled", out=out)
    want = ops.sparse_conv2d(x.get(), packed, None, 2, 0)
    assert rel_err(out.get(), want) <= 1e-5
