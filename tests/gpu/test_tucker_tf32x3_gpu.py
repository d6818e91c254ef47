"""The tensor-core core convolution at fp32 accuracy (3xTF32), its tuner and the core choice."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.checks import conv_geometry
from tensorconv.ops import tucker
from tensorconv.ops import tucker_tf32x3 as tf32x3
from tensorconv.tuning import oracle
from tests.gpu.test_tucker_gpu import _check

pytestmark = pytest.mark.gpu


def _splits():
    from tensorconv import backend

    return tf32x3.SPLITS if backend.device_facts().compute_capability >= (9, 0) else (1,)


def _random_tile(rng, geom):
    """Any valid tile: every warp tile, widths wider than the output, stages deeper than C,
    every cluster size (also more splits than stages: blocks with no channels)."""
    while True:
        wm, wn = (int(rng.choice(tf32x3.WARP_TILES)) for _ in range(2))
        warps_m, warps_n = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4]))
        tw = int(rng.choice(tf32x3.TILE_WIDTHS))
        tile = tf32x3.Tf32x3Tile(wm, wn, warps_m, warps_n, tw,
                                 int(rng.choice(tf32x3.STAGE_CHANNELS)), int(rng.choice(_splits())))
        if (warps_m * warps_n <= tf32x3.MAX_WARPS and tile.pixels % tw == 0
                and tile.smem_bytes(geom) <= 96 * 1024):
            return tile


@pytest.mark.parametrize("trial", range(40))
def test_random_shapes_and_tiles(rng, trial):
    b = int(rng.integers(1, 4))
    c, n = (int(v) for v in rng.integers(1, 100, size=2))       # not multiples of 8 either
    h, w = (int(v) for v in rng.integers(3, 70, size=2))         # odd sizes too
    stride = int(rng.choice([1, 1, 2]))
    padding = int(rng.choice([0, 1, 1]))
    geom = conv_geometry((b, c, h, w), (n, c, 3, 3), stride, padding)
    _check(rng, (b, c, h, w), (n, c, 3, 3), stride, padding, variant="tf32x3",
           tile=_random_tile(rng, geom))


@pytest.mark.parametrize("width", [17, 20])   # word-by-word and 16-byte row copies
@pytest.mark.parametrize("ks,stride,padding", [(1, 1, 0), (5, 1, 2), (7, 2, 3), (2, 2, 0)])
def test_other_filters(rng, ks, stride, padding, width):
    _check(rng, (2, 24, 31, width), (40, 24, ks, ks), stride, padding, variant="tf32x3")


def test_split_channels_are_deterministic(rng):
    import cupy as cp

    x = cp.asarray(rng.standard_normal((1, 96, 28, 28)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((64, 96, 3, 3)).astype(np.float32))
    tile = tf32x3.Tf32x3Tile(1, 2, 4, 1, 16, 8, _splits()[-1])
    first = tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=tile)
    for _ in range(3):
        assert bool((tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=tile) == first).all())


@pytest.mark.parametrize("variant", ["tf32x3", "winograd"])   # both split into tf32 parts
def test_fp32_accuracy_on_wide_ranges(rng, variant):
    """Operands spread over six decades still give fp32-level error (a tf32 product would not)."""
    import cupy as cp

    from tensorconv import reference
    from tests.helpers import rel_err

    x = (rng.standard_normal((1, 64, 30, 30)) * 10.0 ** rng.uniform(-3, 3, (1, 64, 1, 1)))
    w = rng.standard_normal((32, 64, 3, 3)) * 10.0 ** rng.uniform(-3, 3, (32, 1, 1, 1))
    x, w = x.astype(np.float32), w.astype(np.float32)
    out = cp.full((1, 32, 30, 30), cp.nan, cp.float32)
    tucker.core_conv2d(cp.asarray(x), cp.asarray(w), 1, 1, variant=variant, out=out)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1)
    assert rel_err(out.get(), ref) <= 1e-5


def test_bad_input_before_launch():
    import cupy as cp

    x = cp.ones((1, 16, 14, 14), cp.float32)
    w = cp.ones((8, 16, 3, 3), cp.float32)
    out = cp.full((1, 8, 14, 14), cp.nan, cp.float32)
    T = tf32x3.Tf32x3Tile
    with pytest.raises(ValueError, match="tile.wm and tile.wn"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=T(3, 1, 1, 1, 8, 8), out=out)
    with pytest.raises(ValueError, match="warps"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=T(1, 1, 8, 4, 8, 8), out=out)
    with pytest.raises(ValueError, match="tile.tw"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=T(1, 1, 1, 1, 32, 8), out=out)
    with pytest.raises(ValueError, match="tile.ck"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=T(1, 1, 1, 1, 8, 12), out=out)
    with pytest.raises(ValueError, match="tile.splits"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=T(1, 1, 1, 1, 8, 8, 3), out=out)
    with pytest.raises(ValueError, match="shared memory"):
        tucker.core_conv2d(cp.ones((1, 64, 300, 300), cp.float32),
                           cp.ones((32, 64, 7, 7), cp.float32), 1, 3, variant="tf32x3",
                           tile=T(4, 4, 8, 1, 64, 32))
    with pytest.raises(ValueError, match="w_packed has shape"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", w_packed=cp.ones((2, 9, 1, 32, 3),
                                                                           cp.float32), out=out)
    with pytest.raises(ValueError, match="does not fit variant='tf32x3'"):
        tucker.core_conv2d(x, w, 1, 1, variant="tf32x3", tile=tucker.CoreTile(2, 2, 4), out=out)
    with pytest.raises(ValueError, match="stride 1 or 2"):
        tucker.core_conv2d(x, w, 3, 1, variant="tf32x3", out=out)
    with pytest.raises(ValueError, match="filters up to 7x7"):
        tucker.core_conv2d(cp.ones((1, 16, 12, 12), cp.float32),
                           cp.ones((8, 16, 9, 9), cp.float32), variant="tf32x3")
    assert bool(cp.isnan(out).all())


def test_tuner_core_choice_and_cache(rng, tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x = cp.asarray(rng.standard_normal((1, 32, 56, 56)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((40, 32, 3, 3)).astype(np.float32))
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    assert oracle.known_tf32x3_tile(geom) is None and oracle.known_core_choice(geom) is None
    best, times = oracle.tune_tf32x3_tile(x, w, geom, candidates=5, repeat=3)
    assert len(times) == 5 and times[best] == min(times.values())
    assert oracle.tune_tf32x3_tile(x, w, geom) == (best, {})
    variant, tile = oracle.tune_core(x, w, geom, repeat=3)
    assert variant in ("cluster", "tf32x3", "winograd")
    assert oracle.known_core_choice(geom) == (variant, tile) == oracle.default_core(geom)
    if variant == "tf32x3":
        assert tile == best
    _check(rng, (1, 32, 56, 56), (40, 32, 3, 3), 1, 1)   # the default path runs the choice
