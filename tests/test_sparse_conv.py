"""The sparse convolution op on the CPU: the paper's row split, the pieces, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import blocksparse as bs
from tensorconv import ops, reference
from tensorconv.ops import sparse_conv as sc
from tests.helpers import device_facts


@pytest.mark.parametrize("rows,parts", [
    (5, [(0, 5)]), (16, [(0, 16)]), (17, [(0, 9), (9, 17)]), (32, [(0, 32)]),
    (37, [(0, 32), (32, 37)]), (63, [(0, 32), (32, 48), (48, 63)]), (64, [(0, 64)]),
    (100, [(0, 96), (96, 100)]),
])
def test_split_rows_follows_the_paper(rows, parts):
    assert sc.split_rows(rows) == parts


def _packed(rng, shape=(40, 6, 3, 3), density=0.3, blocks=2):
    w = (rng.standard_normal(shape) * (rng.random(shape) < density)).astype(np.float32)
    k, cols = shape[0], int(np.prod(shape[1:]))
    layout_blocks = [(np.unique(rng.integers(0, k, rng.integers(1, k + 1))),
                      np.unique(rng.integers(0, cols, rng.integers(1, cols + 1))))
                     for _ in range(blocks)]
    return w, bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape,
                                                layout_blocks))


def test_default_pieces_cover_every_block_row_once(rng):
    w, packed = _packed(rng, blocks=3)
    from tensorconv.checks import conv_geometry

    pieces = sc.default_pieces(packed, conv_geometry((2, 6, 9, 9), w.shape, 1, 1),
                               device_facts())
    sc.check_pieces(pieces, packed)
    for piece in pieces:
        assert piece.tile.bm <= max(8, piece.stop - piece.start)


def test_bad_pieces_are_refused(rng):
    w, packed = _packed(rng, blocks=1)
    rows = packed.layout.blocks[0][0].size
    tile = sc.TILES[0]
    for pieces, msg in (((), "exactly once"),
                        ((sc.Piece(0, 0, rows, tile), sc.Piece(0, 0, 1, tile)), "exactly once"),
                        ((sc.Piece(1, 0, 1, tile),), "outside the blocks"),
                        ((sc.Piece(0, 0, rows, sc.Tile(7, 7, 7, 1, 1)),), "one of")):
        with pytest.raises(ValueError, match=msg):
            sc.check_pieces(pieces, packed)


def test_the_cpu_path_is_the_reference(rng):
    w, packed = _packed(rng)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    got = ops.sparse_conv2d(x, packed, b, 2, 1, relu=True)
    want = np.maximum(reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                       b.astype(np.float64), 2, 1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.dtype == np.float32


def test_bad_input_is_refused_by_name(rng):
    w, packed = _packed(rng)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    for kwargs, exc, msg in ((dict(x=np.ascontiguousarray(x[:, :5])), ValueError, "packed has"),
                             (dict(packed=w), TypeError, "packed must be a BlockSparse"),
                             (dict(bias=np.ones(3, np.float32)), ValueError, "bias has 3"),
                             (dict(relu="yes"), TypeError, "relu must be"),
                             (dict(x=x.astype(np.float64)), TypeError, "x must be float32")):
        call = dict(x=x, packed=packed)
        call.update(kwargs)
        with pytest.raises(exc, match=msg):
            ops.sparse_conv2d(**call)
