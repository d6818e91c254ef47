"""The block-sparse kernel format: packing is lossless, overlaps are owned once, and a
malformed layout is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import blocksparse as bs


def _sparse_kernel(rng, shape=(12, 3, 3, 3), density=0.3):
    w = rng.standard_normal(shape).astype(np.float32)
    return w * (rng.random(shape) < density)


def test_kernel_matrix_columns_are_c_r_s():
    w = np.arange(2 * 3 * 2 * 5, dtype=np.float32).reshape(2, 3, 2, 5)
    m = bs.kernel_matrix(w)
    c, r, s = bs.column_taps(np.arange(m.shape[1]), w.shape)
    assert np.array_equal(m[1], w[1, c, r, s])


@pytest.mark.parametrize("trial", range(5))
def test_pack_round_trips_with_overlapping_blocks_and_a_remainder(rng, trial):
    w = _sparse_kernel(rng)
    pattern = bs.kernel_matrix(w) != 0
    blocks = [(np.array([0, 2, 5, 7]), np.array([1, 4, 9, 10, 20])),
              (np.array([2, 3, 5]), np.array([4, 9, 11])),          # overlaps the first
              (np.array([11]), np.arange(27))]                      # a whole row
    lay = bs.layout_from_pattern(pattern, w.shape, blocks)
    packed = bs.pack(w, lay)
    assert np.array_equal(packed.to_kernel(), w)
    assert packed.nonzeros() == np.count_nonzero(w)
    owner = lay.owner()
    assert owner[2, 4] == 0 and owner[3, 4] == 1          # the first block owns the overlap
    assert packed.values[1][0, 0] == 0                    # (2, 4) stored once, in block 0
    assert np.array_equal(lay.mask(), pattern | (owner >= 0))
    assert lay.mask()[np.ix_(blocks[0][0], blocks[0][1])].all()   # every block cell trainable


def test_pack_refuses_nonzeros_outside_the_layout(rng):
    w = _sparse_kernel(rng)
    lay = bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape)
    w2 = w.copy()
    k, j = np.argwhere(bs.kernel_matrix(w) == 0)[0]
    bs.kernel_matrix(w2)[k, j] = 1.0
    with pytest.raises(ValueError, match="1 nonzeros the layout does not store"):
        bs.pack(w2, lay)
    with pytest.raises(ValueError, match="w has shape"):
        bs.pack(w[:, :2], lay)


def _layout(**over):
    kw = dict(shape=(4, 2, 1, 1), blocks=((np.array([0, 1]), np.array([0])),),
              indptr=np.array([0, 0, 0, 1, 2]), indices=np.array([1, 0]))
    kw.update(over)
    return bs.Layout(**kw)


@pytest.mark.parametrize("over,msg", [
    (dict(blocks=((np.array([0, 4]), np.array([0])),)), r"blocks\[0\] rows holds row indices"),
    (dict(blocks=((np.array([1, 0]), np.array([0])),)), "strictly increasing"),
    (dict(blocks=((np.array([1, 1]), np.array([0])),)), "strictly increasing"),
    (dict(blocks=((np.array([], int), np.array([0])),)), "non-empty"),
    (dict(blocks=((np.array([0.0]), np.array([0])),)), "must hold integers"),
    (dict(blocks=(np.array([0]),)), r"blocks\[0\] must be a \(rows, cols\) pair"),
    (dict(indptr=np.array([0, 0, 1, 2])), "indptr must be 5 integers"),
    (dict(indptr=np.array([0, 1, 0, 1, 2])), "not decrease"),
    (dict(indices=np.array([1, 2])), "columns outside"),
    (dict(indptr=np.array([0, 0, 0, 0, 2]), indices=np.array([1, 1])), "row 3 .* strictly"),
    (dict(indptr=np.array([0, 1, 1, 1, 2]), indices=np.array([0, 0])), "inside a dense block"),
    (dict(shape=(4, 2, 1)), r"shape must be \(K, C, R, S\)"),
    (dict(shape=(4, 0, 1, 1)), r"shape\[1\] must be >= 1"),
])
def test_a_malformed_layout_is_refused_by_name(over, msg):
    _layout()                                  # the good one
    with pytest.raises((ValueError, TypeError), match=msg):
        _layout(**over)


def test_layout_from_pattern_checks_the_pattern_shape():
    with pytest.raises(ValueError, match=r"pattern must be \(4, 2\)"):
        bs.layout_from_pattern(np.ones((4, 3), bool), (4, 2, 1, 1))


@pytest.mark.parametrize("trial", range(6))
def test_reference_sparse_conv_by_parts_equals_the_dense_convolution(rng, trial):
    from tensorconv import reference

    k, c = rng.integers(1, 20), rng.integers(1, 6)
    r = s = int(rng.choice([1, 3, 5]))
    stride, padding = int(rng.integers(1, 3)), int(rng.integers(0, r // 2 + 1))
    w = _sparse_kernel(rng, (k, c, r, s), density=float(rng.choice([0.0, 0.1, 0.5, 1.0])))
    cols = c * r * s
    blocks = []
    for _ in range(rng.integers(0, 4)):
        rows = np.unique(rng.integers(0, k, rng.integers(1, k + 1)))
        bc = np.unique(rng.integers(0, cols, rng.integers(1, cols + 1)))
        blocks.append((rows, bc))
    pattern = bs.kernel_matrix(w) != 0
    packed = bs.pack(w, bs.layout_from_pattern(pattern, w.shape, blocks))
    x = rng.standard_normal((2, c, 9, 8))
    bias, res = rng.standard_normal(k), None
    want = reference.conv2d(x, w.astype(np.float64), bias, stride, padding)
    res = rng.standard_normal(want.shape)
    got = reference.sparse_conv2d(x, packed, bias, stride, padding, residual=res, relu=True)
    np.testing.assert_allclose(got, np.maximum(want + res, 0), rtol=1e-6, atol=1e-9)
