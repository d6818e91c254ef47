"""The batch-1 1x1 convolution kernel (kernels_cu/pointwise_conv.cu) against reference.conv2d."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.ops import pointwise_conv as pointwise
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tile", pointwise.TILES, ids=lambda t: f"p{t.p}kb{t.kb}")
@pytest.mark.parametrize("trial", range(4))
def test_random_shapes(rng, tile, trial):
    """Every tile on random shapes: planes with H*W a multiple of 4 or not (16- or 4-byte
    copies), K a multiple of 4 or not, ragged pixel and channel tiles, batch > 1, with or
    without bias / residual / ReLU, NaN-poisoned output."""
    import cupy as cp

    n, c, k = int(rng.integers(1, 4)), int(rng.integers(1, 300)), int(rng.integers(1, 300))
    h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    if trial == 0:
        w = 4 * int(rng.integers(1, 10))
        k = 4 * int(rng.integers(1, 70))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((k, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32) if trial % 2 else None
    res = rng.standard_normal((n, k, h, w)).astype(np.float32) if trial >= 2 else None
    relu = trial in (1, 2)
    ref = reference.conv2d(x.astype(np.float64), wt.astype(np.float64),
                           None if b is None else b.astype(np.float64))
    if res is not None:
        ref = ref + res
    if relu:
        ref = np.maximum(ref, 0)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    g = lambda a: None if a is None else cp.asarray(a)  # noqa: E731
    ops.conv1x1(cp.asarray(x), cp.asarray(wt), g(b), residual=g(res), relu=relu, tile=tile,
                out=out, packed=pointwise.pack_weights(cp.asarray(wt)) if trial % 2 else None)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (n, c, k, h, w, tile)


def test_default_tile_fills_the_gpu_and_bad_input():
    import cupy as cp

    from tensorconv import backend
    from tensorconv.checks import conv_geometry

    geom = conv_geometry((1, 128, 28, 28), (55, 128, 1, 1))
    facts = backend.device_facts()
    tile = pointwise.default_tile(geom, facts)
    assert np.prod(tile.grid(geom)) >= facts.sm_count
    x, w = cp.ones((1, 8, 5, 5), cp.float32), cp.ones((4, 8, 1, 1), cp.float32)
    out = cp.full((1, 4, 5, 5), 7.0, cp.float32)
    with pytest.raises(ValueError, match="1x1 filter"):
        ops.conv1x1(x, cp.ones((4, 8, 3, 3), cp.float32), out=out)
    with pytest.raises(ValueError, match="tile must be one of"):
        ops.conv1x1(x, w, tile=pointwise.Tile(8, 8), out=out)
    with pytest.raises(ValueError, match="packed has shape"):
        ops.conv1x1(x, w, packed=cp.ones((4, 8), cp.float32), out=out)
    with pytest.raises(ValueError, match="residual has shape"):
        ops.conv1x1(x, w, residual=cp.ones((1, 4, 4, 5), cp.float32), out=out)
    with pytest.raises(ValueError, match="out has shape"):
        ops.conv1x1(x, w, out=cp.empty((1, 5, 5, 5), cp.float32))
    with pytest.raises(ValueError, match="do not fit"):
        ops.conv1x1(cp.ones((1, 40000, 1, 1), cp.float32), cp.ones((2, 40000, 1, 1), cp.float32))
    assert bool((out == 7.0).all())
