"""The sparse-tensor-core kernel (``sparse_pairs_tc``) against the float64 reference on
the tf32-rounded input and weights (its products are then exact, so <= 1e-5): every tile,
1x1 planes of a multiple of 4 pixels (16-byte copies) and not (4-byte), wider and
rectangular filters, strides and padding (the implicit im2col, the padding zero-filled),
images straddling a block's pixels, row counts that leave a partial block, densities from
empty to full (every pair a clash), the epilogue and accumulation into the output;
outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_pairs_tc as sp
from tensorconv.ops._launch import round_tf32
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


def _layer(rng, k, c, density, r=1, s=None):
    w = rng.standard_normal((k, c, r, r if s is None else s)).astype(np.float32)
    return (w * (rng.random(w.shape) < density)).astype(np.float32)


def _want(x, w, bias=None, residual=None, relu=False, prior=None, stride=1, padding=0):
    xr = round_tf32(x, np).astype(np.float64)
    wr = round_tf32(w, np).astype(np.float64)
    y = reference.conv2d(xr, wr, None, stride, padding)
    if prior is not None:
        y += prior
    if bias is not None:
        y += bias[None, :, None, None]
    if residual is not None:
        y += residual
    return np.maximum(y, 0) if relu else y


def _check(rng, x_shape, k, density, tile, *, epilogue=False, filt=(1, 1), stride=1,
           padding=0):
    import cupy as cp

    c = x_shape[1]
    w = _layer(rng, k, c, density, *filt)
    geom = conv_geometry(x_shape, w.shape, stride, padding)
    x = rng.standard_normal(x_shape).astype(np.float32)
    bias = rng.standard_normal(k).astype(np.float32) if epilogue else None
    residual = (rng.standard_normal(geom.output_shape).astype(np.float32) if epilogue
                else None)
    out = cp.full(geom.output_shape, np.nan, cp.float32)
    with precision.using("tf32"):
        sp.sparse_pairs_conv2d(cp.asarray(x), w, None if bias is None else cp.asarray(bias),
                               stride, padding, relu=epilogue, tile=tile,
                               residual=None if residual is None else cp.asarray(residual),
                               out=out)
    got = out.get()
    want = _want(x, w, bias, residual, epilogue, stride=stride, padding=padding)
    assert np.isfinite(got).all()
    assert rel_err(got, want) <= 1e-5, (x_shape, k, density, tile, filt, stride, padding)


@pytest.mark.parametrize("tile", sp.TILES, ids=str)
def test_every_tile_on_planes_with_and_without_16_byte_copies(rng, tile):
    for x_shape, k, density in [((2, 64, 8, 8), 64, 0.125), ((3, 37, 7, 7), 50, 0.2),
                                ((1, 200, 14, 14), 130, 0.125), ((5, 16, 3, 5), 16, 0.5),
                                ((32, 96, 4, 4), 70, 0.1), ((2, 9, 16, 16), 200, 0.3)]:
        _check(rng, x_shape, k, density, tile)


@pytest.mark.parametrize("tile", sp.TILES[::5], ids=str)
def test_wider_filters_strides_and_padding(rng, tile):
    """The implicit im2col: each thread's window taps inside the input read, the others
    zero (padding on every side, windows past the input's edge at stride 2), rectangular
    filters, a 7x7 filter (49 taps of the 64-bit set), images straddling a block."""
    for x_shape, k, density, filt, stride, padding in [
            ((2, 16, 8, 8), 40, 0.15, (3, 3), 1, 1), ((3, 8, 9, 7), 24, 0.2, (3, 3), 2, 1),
            ((2, 12, 10, 10), 33, 0.1, (5, 5), 1, 2), ((1, 6, 11, 13), 20, 0.3, (7, 7), 2, 3),
            ((4, 24, 14, 14), 64, 0.125, (1, 1), 2, 0), ((2, 10, 6, 9), 17, 0.25, (1, 3), 1,
                                                         (0, 1)),
            ((5, 4, 5, 5), 16, 0.5, (3, 3), 1, 0), ((2, 8, 7, 7), 48, 0.2, (3, 3), 3, 2)]:
        _check(rng, x_shape, k, density, tile, filt=filt, stride=stride, padding=padding)


@pytest.mark.parametrize("density", [0.0, 0.01, 1.0])
def test_empty_sparse_and_full_kernels(rng, density):
    for tile in (sp.TILES[0], sp.TILES[1]):
        _check(rng, (2, 48, 6, 6), 40, density, tile)
        _check(rng, (2, 12, 6, 6), 40, density, tile, filt=(3, 3), padding=1)


def test_the_epilogue_and_accumulation(rng):
    import cupy as cp

    _check(rng, (3, 40, 9, 9), 33, 0.15, sp.TILES[0], epilogue=True)
    _check(rng, (3, 8, 9, 9), 33, 0.15, sp.TILES[4], epilogue=True, filt=(3, 3), stride=2,
           padding=1)
    k, x_shape = 36, (2, 24, 8, 4)
    w, x = _layer(rng, k, 24, 0.2), rng.standard_normal(x_shape).astype(np.float32)
    prior = rng.standard_normal((2, k, 8, 4)).astype(np.float32)
    out = cp.asarray(prior)
    tile = sp.TILES[2]
    p = sp.Problem(conv_geometry(x_shape, w.shape))
    with precision.using("tf32"):
        rec = sp.pair_records(*sp.dense_csr(w), k, 24, tile.rows, cp)
        sp.run(cp.asarray(x), rec, out, p, tile, accumulate=True)
    assert rel_err(out.get(), _want(x, w, prior=prior)) <= 1e-5


def test_records_made_once_serve_many_calls_and_bad_records_are_refused(rng):
    import cupy as cp

    w = _layer(rng, 64, 32, 0.125)
    tile = sp.TILES[0]
    rec = sp.pair_records(*sp.dense_csr(w), 64, 32, tile.rows, cp)
    with precision.using("tf32"):
        for n in (1, 4):
            x = rng.standard_normal((n, 32, 4, 4)).astype(np.float32)
            y = sp.sparse_pairs_conv2d(cp.asarray(x), w, tile=tile, records=rec)
            assert rel_err(y.get(), _want(x, w)) <= 1e-5
        with pytest.raises(ValueError, match="records were made for blocks of 64"):
            sp.sparse_pairs_conv2d(cp.asarray(x), w, tile=sp.Tile(1, 4, 2, 2), records=rec)
        w3 = _layer(rng, 64, 32, 0.125, 3)
        with pytest.raises(ValueError, match="a kernel of 32 columns; w has 288"):
            sp.sparse_pairs_conv2d(cp.asarray(x), w3, None, 1, 1, tile=tile, records=rec)
    with pytest.raises(ValueError, match="tf32 pass only"):
        sp.sparse_pairs_conv2d(cp.asarray(x), w)


@pytest.mark.parametrize("nblocks", [0, 3])
def test_the_pairs_remainder_in_a_sparse_layer(rng, nblocks):
    """``sparse_conv2d(remainder="pairs")``: the remainder (after dense blocks, added to
    their rows) and the epilogue, against the float64 reference at tf32 accuracy."""
    from tests.helpers import check_sparse_conv2d, random_sparse_layer

    w, packed, _ = random_sparse_layer(rng, 70, 48, 1, 0.15, nblocks, empty_row=True)
    w3, packed3, _ = random_sparse_layer(rng, 50, 16, 3, 0.15, nblocks, empty_row=True)
    with precision.using("tf32"):
        for tile in (None, sp.Tile(2, 2, 2, 2, 2), sp.Tile(4, 4, 2, 4)):
            for x_shape in ((3, 48, 8, 8), (2, 48, 7, 7)):
                check_sparse_conv2d(rng, w, packed, x_shape, 1, 0, epilogue=True, tol=3e-3,
                                    remainder="pairs", remainder_tile=tile)
            check_sparse_conv2d(rng, w, packed, (2, 48, 9, 9), 2, 0, epilogue=True,
                                tol=3e-3, remainder="pairs", remainder_tile=tile)
            for stride in (1, 2):
                check_sparse_conv2d(rng, w3, packed3, (2, 16, 9, 10), stride, 1,
                                    epilogue=True, tol=3e-3, remainder="pairs",
                                    remainder_tile=tile)
