"""The tensor-core remainder (``sparse_tc_remainder``) against the float64 reference: every
tile on maps of 2 to 40 columns, strides 1 and 2, 1x1 / 3x3 / 5x5 filters, batches and
channel counts that leave partial image groups, row groups and channel chunks, with dense
blocks' rows to add to, the epilogue, chunks shared among blocks; at fp32 accuracy
(3xTF32, <= 1e-5) and in one tf32 pass (<= 3e-3); outputs poisoned."""

from __future__ import annotations

import pytest

from tensorconv import backend, cuda, precision
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_tc_remainder as stc
from tests.helpers import check_sparse_conv2d, random_sparse_layer

pytestmark = pytest.mark.gpu


def _kernel(rng, k, c, r, density, nblocks=0):
    w, packed, _ = random_sparse_layer(rng, k, c, r, density, nblocks, empty_row=True)
    return w, packed


def _run(rng, w, packed, x_shape, stride, padding, tile, *, epilogue, tf32=False):
    with precision.using("tf32" if tf32 else "fp32"):
        return check_sparse_conv2d(rng, w, packed, x_shape, stride, padding,
                                   epilogue=epilogue, tol=3e-3 if tf32 else 1e-5,
                                   remainder="tc", remainder_tile=tile)


@pytest.mark.parametrize("tile", stc.TILES, ids=str)
def test_every_tc_tile_on_every_kind_of_map(rng, tile):
    for x_shape, k, r, stride, padding in [
            ((3, 19, 4, 4), 21, 3, 1, 1), ((2, 11, 7, 7), 70, 3, 1, 1),
            ((2, 11, 13, 13), 9, 3, 2, 0), ((1, 9, 11, 40), 33, 3, 1, 1),
            ((5, 8, 16, 16), 64, 1, 2, 0), ((33, 20, 2, 2), 24, 3, 1, 1),
            ((2, 17, 32, 32), 130, 3, 2, 1), ((3, 6, 9, 5), 16, 5, 1, 2)]:
        w, packed = _kernel(rng, k, x_shape[1], r, 0.2)
        _run(rng, w, packed, x_shape, stride, padding, tile, epilogue=False)
        _run(rng, w, packed, x_shape, stride, padding, tile, epilogue=False, tf32=True)


@pytest.mark.parametrize("nblocks", [0, 2, 4])
@pytest.mark.parametrize("tile", [None, stc.TILES[2]], ids=str)
def test_the_tc_remainder_adds_to_blocks_and_applies_the_epilogue(rng, nblocks, tile):
    w, packed = _kernel(rng, 40, 27, 3, 0.15, nblocks)
    for x_shape, stride in [((3, 27, 12, 12), 1), ((2, 27, 5, 8), 2)]:
        _run(rng, w, packed, x_shape, stride, 1, tile, epilogue=True)
        _run(rng, w, packed, x_shape, stride, 1, tile, epilogue=False, tf32=True)


@pytest.mark.parametrize("hw,k,nblocks", [((4, 4), 64, 0), ((8, 8), 128, 2), ((2, 2), 40, 0)])
def test_the_tc_remainder_with_its_chunks_shared_among_blocks(rng, hw, k, nblocks):
    c = 75                                       # five channel stages, the last partial
    w, packed = _kernel(rng, k, c, 3, 0.15, nblocks)
    tile = stc.default_tile(stc.Problem(conv_geometry((2, c) + hw, w.shape, 1, 1)), None)
    geom = _run(rng, w, packed, (2, c) + hw, 1, 1, tile, epilogue=True)
    g = stc.tc_geometry(geom, tile)
    regs = cuda.load(stc.kernels(stc.Problem(geom), tile)[0]).num_regs
    assert stc.tc_shares(geom, tile, g, regs, backend.device_facts())[0] > 1
    _run(rng, w, packed, (2, c) + hw, 1, 1, tile, epilogue=False, tf32=True)


def test_a_dense_kernel_and_a_zero_one(rng):
    """Every column of every row (no padding slot), and no nonzero at all (the epilogue
    alone)."""
    for density in (1.0, 0.0):
        w, packed = _kernel(rng, 24, 10, 3, density)
        for tile in stc.TILES:
            _run(rng, w, packed, (2, 10, 9, 9), 1, 1, tile, epilogue=True)
