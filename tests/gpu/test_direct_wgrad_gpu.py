"""The direct weight gradient (``conv2d_backward_weight(algorithm="direct")``) against the
float64 reference on random shapes, every candidate tile and forced splits, outputs
poisoned; deterministic (two runs, the same bits); bad options raise before a launch."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import direct_wgrad as dw
from tests.helpers import fp32_tol, rel_err, sweep

pytestmark = pytest.mark.gpu


def _case(rng):
    while True:
        r = int(rng.choice([1, 3, 3]))
        n, c, k = int(rng.integers(1, 6)), int(rng.integers(1, 70)), int(rng.integers(1, 70))
        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        kw = dict(stride=(int(rng.integers(1, 3)), int(rng.integers(1, 3))),
                  padding=(int(rng.integers(0, 3)), int(rng.integers(0, 3))),
                  dilation=int(rng.choice([1, 1, 2])))
        try:
            return conv_geometry((n, c, h, w), (k, c, r, r), **kw), kw
        except ValueError:
            continue


def _check(rng, geom, kw, tile=None, splits=None):
    import cupy as cp

    x = rng.standard_normal((geom.n, geom.c, geom.h, geom.w)).astype(np.float32)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    ws = (geom.k, geom.c, geom.r, geom.s)
    want = reference.conv2d_backward_weight(x.astype(np.float64), gy.astype(np.float64), ws,
                                            geom.stride, geom.padding, geom.dilation)
    gw = cp.full(ws, cp.nan, cp.float32)
    ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), ws, out=gw, algorithm="direct",
                               tile=tile, splits=splits, **kw)
    got = gw.get()
    assert rel_err(got, want) <= fp32_tol(geom.n * geom.oh * geom.ow), (geom, tile, splits)
    return got


@pytest.mark.parametrize("trial", sweep(30, 10))
def test_random_shapes_default_and_forced_splits(rng, trial):
    geom, kw = _case(rng)
    splits = [None, 1, int(rng.integers(2, 50))][trial % 3]
    _check(rng, geom, kw, splits=splits)


@pytest.mark.parametrize("trial", sweep(6, 3))
def test_every_candidate_tile(rng, trial):
    geom, kw = _case(rng)
    for tile in dw.candidates(geom, backend.device_facts()):
        _check(rng, geom, kw, tile=tile)


def test_training_layers_and_determinism(rng):
    """ResNet-20's layer shapes at batch 128 (stride 1 and 2); two runs give the same bits."""
    import cupy as cp

    for xs, ws, stride in [((128, 16, 32, 32), (16, 16, 3, 3), 1),
                           ((128, 16, 32, 32), (32, 16, 3, 3), 2),
                           ((128, 64, 8, 8), (64, 64, 3, 3), 1)]:
        geom = conv_geometry(xs, ws, stride, 1)
        got = _check(rng, geom, dict(stride=stride, padding=1))
        x = cp.asarray(rng.standard_normal(xs).astype(np.float32))
        gy = cp.asarray(rng.standard_normal(geom.output_shape).astype(np.float32))
        a = ops.conv2d_backward_weight(x, gy, ws, stride, 1, algorithm="direct")
        b = ops.conv2d_backward_weight(x, gy, ws, stride, 1, algorithm="direct")
        np.testing.assert_array_equal(a.get(), b.get())
        assert got.shape == ws


def test_bad_options_raise_before_a_launch(rng):
    import cupy as cp

    x = cp.zeros((2, 8, 8, 8), cp.float32)
    gy = cp.zeros((2, 8, 8, 8), cp.float32)
    w = cp.zeros((8, 8, 3, 3), cp.float32)
    with pytest.raises(ValueError, match="weight gradient only"):
        ops.conv2d_backward_data(gy, w, x.shape, padding=1, algorithm="direct")
    with pytest.raises(ValueError, match="grouped"):
        ops.conv2d_backward_weight(x, gy, (8, 4, 3, 3), padding=1, groups=2,
                                   algorithm="direct")
    with pytest.raises(ValueError, match="direct_wgrad.Tile"):
        ops.conv2d_backward_weight(x, gy, (8, 8, 3, 3), padding=1, algorithm="direct",
                                   tile=ops.direct_conv.Tile(8, 8, 1, 1))
    with pytest.raises(ValueError, match="rows"):
        ops.conv2d_backward_weight(x, gy, (8, 8, 3, 3), padding=1, tile=dw.Tile(9, 1))


def test_the_default_at_a_training_batch_matches_the_gemm(rng):
    import cupy as cp

    xs, ws = (128, 16, 32, 32), (16, 16, 3, 3)
    geom = conv_geometry(xs, ws, 1, 1)
    assert ops.direct_conv.choose_algorithm(geom, 2) == "direct"
    x = cp.asarray(rng.standard_normal(xs).astype(np.float32))
    gy = cp.asarray(rng.standard_normal(geom.output_shape).astype(np.float32))
    got = ops.conv2d_backward_weight(x, gy, ws, padding=1)
    ref = ops.conv2d_backward_weight(x, gy, ws, padding=1, algorithm="igemm_tf32x3")
    assert rel_err(got.get(), ref.get()) <= 2 * fp32_tol(128 * 32 * 32)
