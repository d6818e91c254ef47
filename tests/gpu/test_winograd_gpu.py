"""The Winograd F(2x2, 3x3) convolution at fp32 accuracy, its tuner and its place in the core choice."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import tucker, winograd
from tensorconv.tuning import oracle
from tests.gpu.test_tucker_gpu import _check
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


def _random_tile(rng):
    while True:
        tile = winograd.WinogradTile(int(rng.choice(winograd.WARP_TILES_M)),
                                     int(rng.choice(winograd.WARP_TILES_N)),
                                     int(rng.choice(winograd.TILE_WIDTHS)))
        if tile.tiles % tile.tbw == 0:
            return tile


@pytest.mark.parametrize("trial", range(40))
def test_random_shapes_and_tiles(rng, trial):
    """Channels not multiples of 8 (or of a stage), odd planes (ragged 2x2 tiles), padding
    0-2, batch > 1, block rows wider than the output; outputs start as NaN."""
    b = int(rng.integers(1, 4))
    c, n = (int(v) for v in rng.integers(1, 100, size=2))
    h, w = (int(v) for v in rng.integers(3, 70, size=2))
    padding = int(rng.choice([0, 1, 1, 2]))
    _check(rng, (b, c, h, w), (n, c, 3, 3), 1, padding, variant="winograd",
           tile=_random_tile(rng))


@pytest.mark.parametrize("trial", range(12))
def test_epilogue_bias_residual_relu(rng, trial):
    import cupy as cp

    b = int(rng.integers(1, 3))
    c, n = (int(v) for v in rng.integers(1, 70, size=2))
    h, w = (int(v) for v in rng.integers(3, 30, size=2))
    geom = conv_geometry((b, c, h, w), (n, c, 3, 3), 1, 1)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((n, c, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if trial % 3 else None
    res = rng.standard_normal(geom.output_shape).astype(np.float32) if trial % 2 else None
    relu = trial % 4 < 2
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    tucker.core_conv2d(cp.asarray(x), cp.asarray(wt), 1, 1, variant="winograd",
                       tile=_random_tile(rng), bias=None if bias is None else cp.asarray(bias),
                       relu=relu, residual=None if res is None else cp.asarray(res), out=out)
    ref = reference.conv2d(x.astype(np.float64), wt.astype(np.float64), padding=1)
    ref += 0 if bias is None else bias.reshape(1, -1, 1, 1)
    ref += 0 if res is None else res
    ref = np.maximum(ref, 0) if relu else ref
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (geom, bias is None, res is None, relu)


def test_resnet_layer_shapes(rng):
    """The shapes it is for: a ResNet stage's 3x3 layers at batch 1 (default tile)."""
    for c, hw in ((64, 56), (128, 28), (256, 14), (512, 7)):
        _check(rng, (1, c, hw, hw), (c, c, 3, 3), 1, 1, variant="winograd")


def test_bad_input_before_launch():
    import cupy as cp

    x = cp.ones((1, 16, 14, 14), cp.float32)
    w = cp.ones((8, 16, 3, 3), cp.float32)
    out = cp.full((1, 8, 14, 14), cp.nan, cp.float32)
    T = winograd.WinogradTile
    with pytest.raises(ValueError, match="tile.wm must be"):
        tucker.core_conv2d(x, w, 1, 1, variant="winograd", tile=T(4, 1, 4), out=out)
    with pytest.raises(ValueError, match="tile.tbw"):
        tucker.core_conv2d(x, w, 1, 1, variant="winograd", tile=T(1, 1, 3), out=out)
    with pytest.raises(ValueError, match="tile.tbw"):
        tucker.core_conv2d(x, w, 1, 1, variant="winograd", tile=T(1, 1, 32), out=out)
    with pytest.raises(ValueError, match="w_packed has shape"):
        tucker.core_conv2d(x, w, 1, 1, variant="winograd",
                           w_packed=cp.ones((1, 2, 9, 32, 4), cp.float32), out=out)
    with pytest.raises(ValueError, match="does not fit variant='winograd'"):
        tucker.core_conv2d(x, w, 1, 1, variant="winograd", tile=tucker.CoreTile(2, 2, 4),
                           out=out)
    with pytest.raises(ValueError, match="stride 1 only"):
        tucker.core_conv2d(x, w, 2, 1, variant="winograd")
    with pytest.raises(ValueError, match="3x3 filters only"):
        tucker.core_conv2d(x, cp.ones((8, 16, 5, 5), cp.float32), 1, 2, variant="winograd")
    assert bool(cp.isnan(out).all())


def test_tuner_core_choice_and_cache(rng, tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x = cp.asarray(rng.standard_normal((1, 64, 56, 56)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((64, 64, 3, 3)).astype(np.float32))
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    assert oracle.known_winograd_tile(geom) is None and oracle.known_core_choice(geom) is None
    best, times = oracle.tune_winograd_tile(x, w, geom, repeat=3)
    smem = backend.device_facts().smem_per_block_optin
    assert set(times) == set(winograd.candidates(geom, smem))
    assert times[best] == min(times.values())
    assert oracle.tune_winograd_tile(x, w, geom) == (best, {})
    variant, tile = oracle.tune_core(x, w, geom, repeat=3)
    assert variant in ("cluster", "tf32x3", "winograd")
    assert oracle.known_core_choice(geom) == (variant, tile) == oracle.default_core(geom)
    if variant == "winograd":
        assert tile == best
    _check(rng, (1, 64, 56, 56), (64, 64, 3, 3), 1, 1)   # the default path runs the choice
