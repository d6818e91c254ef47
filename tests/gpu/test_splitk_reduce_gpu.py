"""The split reduction every split-K kernel shares (``conv2d_splitk_reduce``): each of its
three ways of summing (one thread a value; a block's warps a value, one lane or four lanes
a value) against NumPy, outputs poisoned, the same bits on a second run."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.ops import _igemm
from tensorconv.ops._igemm import reduce_flat
from tensorconv.ops._launch import NULL, cdiv

pytestmark = pytest.mark.gpu
SMS = 132


def _way(total: int, splits: int) -> str:
    blocks = _igemm.reduce_blocks(total, splits, SMS)
    if splits < _igemm.SHARE_SPLITS:
        return "thread"
    return "four lanes" if blocks > cdiv(total, 32) else "one lane"


@pytest.mark.parametrize("total, splits", [
    (2048, 391), (8, 70), (5, 64), (999, 100), (16384, 100), (300, 20), (4097, 16),
    (5000, 8), (1, 1), (37, 15)])
def test_reduce_sums_every_split_in_a_fixed_order(total, splits, rng):
    cp = pytest.importorskip("cupy")
    partial = cp.asarray(rng.standard_normal((splits, total), dtype=np.float32))
    out = cp.full(total, np.nan, dtype=cp.float32)
    reduce_flat(partial, out, splits, total, SMS)
    want = cp.asnumpy(partial).astype(np.float64).sum(axis=0)
    got = cp.asnumpy(out)
    assert np.isfinite(got).all(), _way(total, splits)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(splits))
    again = cp.full(total, np.nan, dtype=cp.float32)
    reduce_flat(partial, again, splits, total, SMS)
    assert cp.array_equal(out, again)


def test_each_way_is_covered():
    ways = {_way(t, s) for t, s in [(2048, 391), (16384, 100), (5000, 8)]}
    assert ways == {"thread", "one lane", "four lanes"}


def _epilogue_want(partial, bias, residual, rows, p, plane, relu):
    """NumPy in the kernel's order: the splits added one by one in float32 from zero, then
    the bias, the residual and the ReLU, row ``r`` of column ``c`` written at
    ((c // plane) * rows + r) * plane + c % plane."""
    v = np.zeros((rows, p), np.float32)
    for s in range(partial.shape[0]):
        v += partial[s]
    if bias is not None:
        v += bias[:, None]
    out = v.reshape(rows, p // plane, plane).transpose(1, 0, 2).reshape(-1)
    if residual is not None:
        out = out + residual
    return np.maximum(out, 0) if relu else out


@pytest.mark.parametrize("rows, images, plane, splits, offset", [
    (512, 128, 16, 2, 0),    # four values a thread (ResNet-18's last stage, split two ways)
    (64, 3, 36, 5, 0),
    (7, 5, 9, 3, 0),         # odd plane: one value a thread
    (33, 2, 20, 15, 1),      # an output one float into its allocation: one value a thread
    (16, 1, 4, 2, 4),
])
@pytest.mark.parametrize("extras", [(False, False, False), (True, True, True), (True, False, True)])
def test_reduce_epilogue_matches_numpy_bit_for_bit(rows, images, plane, splits, offset, extras,
                                                   rng):
    """Below SHARE_SPLITS (one thread adds a value's splits, or four consecutive values):
    bias, residual and ReLU, the NCHW scatter of the columns, the vector and scalar ways,
    an output not 16-byte aligned; every value written, the same bits as NumPy's."""
    cp = pytest.importorskip("cupy")
    from tensorconv import cuda

    has_bias, has_res, relu = extras
    p = images * plane
    partial = rng.standard_normal((splits, rows, p), dtype=np.float32)
    bias = rng.standard_normal(rows, dtype=np.float32) if has_bias else None
    residual = rng.standard_normal(rows * p, dtype=np.float32) if has_res else None
    want = _epilogue_want(partial, bias, residual, rows, p, plane, relu)
    store = cp.full(rows * p + offset, np.nan, dtype=cp.float32)
    out = store[offset:]
    dev = {k: (cp.asarray(v) if v is not None else NULL) for k, v in
           (("bias", bias), ("residual", residual))}
    kernel = cuda.load(_igemm.reduce_ref())
    grid = (_igemm.reduce_blocks(rows * p, splits, SMS),)
    args = (cp.asarray(partial), dev["bias"], dev["residual"], out, np.int32(splits),
            np.int32(rows), np.int32(p), np.int32(plane), np.int32(relu))
    kernel(grid, (256,), args)
    np.testing.assert_array_equal(cp.asnumpy(out), want)
    assert np.isnan(cp.asnumpy(store[:offset])).all()
