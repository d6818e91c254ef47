"""The classifier-head kernel (kernels_cu/classifier_head.cu) against reference.gap_linear."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tile", ops.classifier_head.TILES, ids=lambda t: f"cl{t.cl}opw{t.opw}")
@pytest.mark.parametrize("trial", sweep(12, {0, 1, 10}))
def test_random_shapes(rng, tile, trial):
    """Every tile: channels and outputs not multiples of the warp, the block's outputs or
    the cluster, planes from 1x1 up to large, with and without bias, NaN-poisoned
    output; bitwise repeatable."""
    import cupy as cp

    from tensorconv import backend

    if tile.cl > 1 and backend.device_facts().compute_capability < (9, 0):
        pytest.skip("no thread-block clusters on this device")

    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 2100))
    h, w, k = int(rng.integers(1, 10)), int(rng.integers(1, 10)), int(rng.integers(1, 1100))
    if trial >= 10:  # planes larger than a staged chunk: one channel at a time
        c, h, w = int(rng.integers(1, 6)), int(rng.integers(60, 110)), int(rng.integers(90, 130))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((k, c)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32) if trial % 2 else None
    ref = reference.gap_linear(x.astype(np.float64), wt.astype(np.float64),
                               None if b is None else b.astype(np.float64))
    out = cp.full((n, k), cp.nan, cp.float32)
    args = (cp.asarray(x), cp.asarray(wt), None if b is None else cp.asarray(b))
    ops.gap_linear(*args, out=out, tile=tile)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (n, c, h, w, k, tile)
    assert cp.array_equal(ops.gap_linear(*args, tile=tile), out)


def test_bad_input_before_launch():
    import cupy as cp

    x, w = cp.ones((2, 8, 3, 3), cp.float32), cp.ones((4, 8), cp.float32)
    out = cp.full((2, 4), 7.0, cp.float32)
    with pytest.raises(ValueError, match="out has shape"):
        ops.gap_linear(x, w, out=cp.empty((2, 5), cp.float32))
    with pytest.raises(TypeError, match="different device"):
        ops.gap_linear(x, w.get())
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.gap_linear(x[:, ::2], cp.ones((4, 4), cp.float32), out=out)
    with pytest.raises(ValueError, match="tile must be one of"):
        ops.gap_linear(x, w, out=out, tile=ops.classifier_head.Tile(3, 4))
    with pytest.raises(ValueError, match="shared memory"):
        ops.gap_linear(cp.ones((1, 70000, 1, 1), cp.float32), cp.ones((2, 70000), cp.float32))
    assert bool((out == 7.0).all())
