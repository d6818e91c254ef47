"""The unrolled remainders against the float64 reference (<= 1e-5), outputs poisoned.
The staged kernel (``sparse_unrolled``): its tiles on maps of 2 to 40 columns, 1x1 / 3x3 /
5x5 filters, strides 1 to 3, batches and channel counts that leave partial image groups,
row groups and channel stages.  The unstaged 1x1 kernel (``sparse_unrolled_direct``): its
tiles at strides 1 to 3, unequal strides, padding, maps of one pixel to 40 columns, pixel
and row counts that leave partial blocks and groups, its rings of cp.async copies, its
split tiles.  Both:
dense blocks' rows to add to, the epilogue, a dense and an empty kernel, an input not
16-byte aligned."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct as sud
from tests.helpers import check_sparse_conv2d, random_sparse_layer, rel_err

pytestmark = pytest.mark.gpu

SHAPES = [((3, 19, 4, 4), 21, 3, 1), ((2, 11, 7, 7), 70, 3, 1), ((1, 9, 11, 40), 33, 3, 1),
          ((33, 20, 2, 2), 24, 3, 1), ((2, 17, 32, 32), 40, 3, 1), ((3, 6, 9, 5), 16, 5, 1),
          ((4, 12, 8, 8), 50, 1, 1), ((2, 35, 16, 16), 64, 3, 1),
          ((2, 17, 32, 32), 40, 3, 2), ((3, 11, 9, 7), 24, 3, 2), ((2, 6, 11, 10), 16, 5, 2),
          ((33, 20, 8, 8), 24, 3, 2), ((1, 9, 13, 40), 33, 3, 2), ((2, 5, 10, 13), 12, 3, 3)]


@pytest.mark.parametrize("x_shape,k,r,stride", SHAPES, ids=str)
def test_every_unrolled_tile_computes_the_convolution(rng, x_shape, k, r, stride):
    w, packed, _ = random_sparse_layer(rng, k, x_shape[1], r, 0.2, empty_row=True)
    g = conv_geometry(x_shape, w.shape, stride, (r - 1) // 2)
    tiles = su.candidates(su.Problem(g), None)
    assert tiles
    for tile in tiles:
        check_sparse_conv2d(rng, w, packed, x_shape, stride, (r - 1) // 2, epilogue=False,
                            remainder="unrolled", remainder_tile=tile)


SHAPES_1X1 = [((3, 19, 4, 4), 21, 1, 0), ((2, 11, 7, 7), 70, 2, 0), ((1, 9, 11, 40), 33, 1, 0),
              ((33, 20, 2, 2), 24, 2, 1), ((2, 17, 32, 32), 40, 2, 0), ((3, 6, 9, 5), 16, 3, 1),
              ((5, 12, 1, 1), 50, 1, 0), ((2, 35, 16, 16), 130, (2, 1), (0, 1)),
              # enough pixels for the wide blocks (sud.WIDE_PIXELS), a partial last block
              ((3, 19, 27, 29), 40, 1, 0), ((4, 13, 45, 47), 36, 2, 1),
              # the rings (sud.RING): more channels than slots, and at stride 2
              ((2, 150, 33, 32), 40, 1, 0), ((4, 13, 45, 47), 36, 2, 0),
              # deep groups (sud.DEEP_ROWS): 96 rows, then 24; and all 120 in one group
              ((2, 23, 40, 41), 120, 1, 0)]


@pytest.mark.parametrize("x_shape,k,stride,padding", SHAPES_1X1, ids=str)
def test_every_unstaged_1x1_tile_computes_the_convolution(rng, x_shape, k, stride, padding):
    w, packed, _ = random_sparse_layer(rng, k, x_shape[1], 1, 0.2, empty_row=True)
    g = conv_geometry(x_shape, w.shape, stride, padding)
    tiles = sud.candidates(sud.Problem(g), None)
    assert len(tiles) >= 2
    if g.n * g.oh * g.ow >= sud.WIDE_PIXELS:
        assert any(t.threads == sud.WIDE_BLOCK for t in tiles)
    for tile in tiles:
        check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, epilogue=False,
                            remainder="unrolled", remainder_tile=tile)


@pytest.mark.parametrize("nblocks", [0, 3])
def test_a_ring_tile_adds_to_blocks_and_applies_the_epilogue(rng, nblocks):
    w, packed, _ = random_sparse_layer(rng, 70, 130, 1, 0.15, nblocks, empty_row=True)
    g = conv_geometry((3, 130, 30, 29), w.shape, 1, 0)
    rings = [t for t in sud.candidates(sud.Problem(g), None) if t.ring]
    assert rings
    for tile in rings:
        check_sparse_conv2d(rng, w, packed, (3, 130, 30, 29), 1, 0, epilogue=True,
                            remainder="unrolled", remainder_tile=tile)


@pytest.mark.parametrize("nblocks", [0, 3])
def test_a_split_tile_adds_to_blocks_and_applies_the_epilogue(rng, nblocks):
    """Each split tile the layer is offered (a group's columns shared among KS sets of
    the block's threads, summed through shared memory), a partial last pixel block: 2,610
    pixels end mid-warp, so that warp's lanes past the last pixel meet the shares' barrier
    at the kernel's top and the others in the group's function (the aligned barrier hung)."""
    w, packed, _ = random_sparse_layer(rng, 70, 130, 1, 0.15, nblocks, empty_row=True)
    g = conv_geometry((3, 130, 30, 29), w.shape, 1, 0)
    splits = [t for t in sud.candidates(sud.Problem(g), None) if t.ks > 1]
    assert {t.ks for t in splits} == set(sud.SPLITS)
    for tile in splits:
        check_sparse_conv2d(rng, w, packed, (3, 130, 30, 29), 1, 0, epilogue=True,
                            remainder="unrolled", remainder_tile=tile)


@pytest.mark.parametrize("x_shape,k,r,stride,padding", [
    ((3, 19, 15, 15), 40, 3, 2, 1), ((2, 11, 9, 12), 70, 5, 2, 2), ((2, 6, 13, 11), 33, 7, 2, 3),
    ((4, 9, 10, 9), 24, 3, (3, 2), (0, 1)), ((5, 7, 2, 3), 36, 3, 2, 1),
    ((3, 19, 15, 15), 40, 3, 1, 1), ((2, 11, 9, 12), 70, 5, 1, 2), ((2, 6, 13, 11), 33, 7, 1, 3),
    ((2, 13, 10, 9), 45, 3, 1, 0), ((3, 5, 4, 3), 20, 5, 1, (2, 1))], ids=str)
def test_every_unstaged_tile_of_a_wider_filter(rng, x_shape, k, r, stride, padding):
    """The unstaged kernel on 3x3 / 5x5 / 7x7 filters at stride 1, 2 and more (a tuned
    plan times its tiles there), "same" padding or not, maps smaller than the filter too,
    outputs poisoned."""
    w, packed, _ = random_sparse_layer(rng, k, x_shape[1], r, 0.2, empty_row=True)
    g = conv_geometry(x_shape, w.shape, stride, padding)
    tiles = sud.candidates(sud.Problem(g), None)
    assert tiles
    for tile in tiles:
        check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, epilogue=tile.gb == 1,
                            remainder="unrolled", remainder_tile=tile)


# (filter, the layer's cases (input, stride, padding)): 3x3 on the staged kernel, 1x1 on
# the unstaged one (remainder="unrolled" picks it for a 1x1 filter)
CASES = [(3, [((3, 27, 12, 12), 1, 1), ((2, 27, 5, 8), 1, 1), ((3, 27, 12, 12), 2, 1)]),
         (1, [((3, 27, 12, 12), 1, 0), ((2, 27, 5, 8), 2, 1), ((3, 27, 12, 12), 2, 0)])]


@pytest.mark.parametrize("r,cases", CASES, ids=["3x3", "1x1"])
@pytest.mark.parametrize("nblocks", [0, 3])
def test_the_unrolled_remainder_adds_to_blocks_and_applies_the_epilogue(rng, nblocks, r,
                                                                         cases):
    w, packed, _ = random_sparse_layer(rng, 40, 27, r, 0.15, nblocks, empty_row=True)
    for x_shape, stride, padding in cases:
        check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, epilogue=True,
                            remainder="unrolled")


@pytest.mark.parametrize("r,stride,padding", [(3, 1, 1), (1, 2, 1)], ids=["3x3", "1x1"])
def test_a_dense_kernel_a_zero_one_and_an_unaligned_input(rng, r, stride, padding):
    import cupy as cp

    for density in (1.0, 0.0):
        w, packed, _ = random_sparse_layer(rng, 24, 10, r, density)
        check_sparse_conv2d(rng, w, packed, (2, 10, 8, 8), stride, padding, epilogue=True,
                            remainder="unrolled")
    w, packed, _ = random_sparse_layer(rng, 24, 10, r, 0.2)
    xs = cp.asarray(rng.standard_normal(2 * 10 * 8 * 8 + 1).astype(np.float32))
    x = xs[1:].reshape(2, 10, 8, 8)                   # 4 bytes past an aligned start
    assert x.data.ptr % 16 != 0
    g = conv_geometry(x.shape, w.shape, stride, padding)
    out = cp.full(g.output_shape, cp.nan, cp.float32)
    ops.sparse_conv2d(x, packed, None, stride, padding, remainder="unrolled", out=out)
    want = ops.sparse_conv2d(x.get(), packed, None, stride, padding)
    assert rel_err(out.get(), want) <= 1e-5
