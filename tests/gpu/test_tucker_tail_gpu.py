"""The Tucker-tail kernel (kernels_cu/tucker_tail.cu) against reference.conv2d calls."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import tucker_tail as tail
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


def _fitting(n, d1, d2, m, j, h, w, f, st, pad):
    """The tiles that fit these sizes on this device."""
    core = conv_geometry((n, d1, h, w), (d2, d1, f, f), st, pad)
    return tail.candidates(tail.Problem(core, m, j), backend.device_facts())


@pytest.mark.parametrize("tile", tail.TILES, ids=lambda t: f"p{t.p}")
@pytest.mark.parametrize("trial", sweep(6, 3))
def test_random_shapes(rng, tile, trial):
    """Every tile on random shapes: odd planes, 1x1 / 3x3 / 5x5 cores, stride 1 or 2,
    channel counts not multiples of 4, ragged pixel tiles, batch > 1, with or without the
    next 1x1, biases, residual and either ReLU; NaN-poisoned outputs; bitwise repeatable."""
    import cupy as cp

    n, f = int(rng.integers(1, 3)), (1, 3, 5)[trial % 3]
    st, pad = 1 + trial % 2, f // 2
    d1, d2, m, j = (int(rng.integers(1, 40)) for _ in range(4))
    h, w = int(rng.integers(f, 24)), int(rng.integers(f, 24))
    while tile not in _fitting(n, d1, d2, m, j, h, w, f, st, pad):
        d1, d2, m, j = (max(1, v // 2) for v in (d1, d2, m, j))
    with_next = trial != 4
    u = rng.standard_normal((n, d1, h, w)).astype(np.float32)
    core = (rng.standard_normal((d2, d1, f, f)) / np.sqrt(d1 * f * f)).astype(np.float32)
    w_last = (rng.standard_normal((m, d2, 1, 1)) / np.sqrt(d2)).astype(np.float32)
    w_next = (rng.standard_normal((j, m, 1, 1)) / np.sqrt(m)).astype(np.float32)
    b_last = rng.standard_normal(m).astype(np.float32) if trial % 2 else None
    b_next = rng.standard_normal(j).astype(np.float32) if trial >= 3 else None
    relu1, relu2 = trial != 2, trial == 3
    t = reference.conv2d(u.astype(np.float64), core.astype(np.float64), stride=st, padding=pad)
    y_ref = reference.conv2d(t, w_last.astype(np.float64),
                             None if b_last is None else b_last.astype(np.float64))
    res = rng.standard_normal(y_ref.shape).astype(np.float32) if trial >= 1 else None
    if res is not None:
        y_ref = y_ref + res
    if relu1:
        y_ref = np.maximum(y_ref, 0)
    z_ref = reference.conv2d(y_ref, w_next.astype(np.float64),
                             None if b_next is None else b_next.astype(np.float64))
    if relu2:
        z_ref = np.maximum(z_ref, 0)
    g = lambda a: None if a is None else cp.asarray(a)  # noqa: E731
    y = cp.full(y_ref.shape, cp.nan, cp.float32)
    z = cp.full(z_ref.shape, cp.nan, cp.float32) if with_next else None
    args = (g(u), g(core), st, pad, g(w_last), g(w_next) if with_next else None, g(b_last),
            g(b_next) if with_next else None)
    kw = dict(residual=g(res), relu1=relu1, relu2=relu2, tile=tile)
    packed = tail.pack_weights(args[1], args[4], args[5]) if trial % 2 else None
    out = tail.tucker_tail_conv2d(*args, **kw, packed=packed, y_out=y, z_out=z)
    assert not cp.isnan(y).any()
    assert rel_err(y.get(), y_ref) <= 1e-5, (n, d1, d2, m, j, h, w, f, st, tile)
    if with_next:
        assert not cp.isnan(z).any()
        assert rel_err(z.get(), z_ref) <= 1e-5, (n, d1, d2, m, j, h, w, f, st, tile)
    else:
        assert out[1] is None
    y2, z2 = tail.tucker_tail_conv2d(*args, **kw)
    assert cp.array_equal(y2, y) and (not with_next or cp.array_equal(z2, z))


@pytest.mark.parametrize("shape", [(28, 28, 64, 28, 56, 1), (55, 55, 128, 55, 28, 1),
                                   (28, 55, 128, 55, 56, 2)], ids=["stage1", "stage2", "down2"])
def test_resnet18_tucker_tails_with_default_tile(rng, shape):
    """The Tucker ResNet-18 (65 % fewer MACs) layers it fits, on the default tile."""
    import cupy as cp

    d1, d2, m, j, hw, st = shape
    u = rng.standard_normal((1, d1, hw, hw)).astype(np.float32)
    core = (rng.standard_normal((d2, d1, 3, 3)) / np.sqrt(9 * d1)).astype(np.float32)
    w_last = (rng.standard_normal((m, d2, 1, 1)) / np.sqrt(d2)).astype(np.float32)
    w_next = (rng.standard_normal((j, m, 1, 1)) / np.sqrt(m)).astype(np.float32)
    y_ref = np.maximum(reference.conv2d(reference.conv2d(u, core, stride=st, padding=1), w_last), 0)
    y, z = tail.tucker_tail_conv2d(cp.asarray(u), cp.asarray(core), st, 1, cp.asarray(w_last),
                            cp.asarray(w_next), relu1=True)
    assert rel_err(y.get(), y_ref) <= 1e-5
    assert rel_err(z.get(), reference.conv2d(y_ref, w_next)) <= 1e-5


def test_bad_input_before_launch():
    import cupy as cp

    u = cp.ones((1, 8, 6, 6), cp.float32)
    core, w_last = cp.ones((8, 8, 3, 3), cp.float32), cp.ones((12, 8, 1, 1), cp.float32)
    y = cp.full((1, 12, 6, 6), 7.0, cp.float32)
    with pytest.raises(ValueError, match="tile must be one of"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last, tile=tail.Tile(12), y_out=y)
    with pytest.raises(ValueError, match="packed weights have shapes"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last, y_out=y,
                         packed=tail.pack_weights(core, w_last, cp.ones((4, 12, 1, 1), cp.float32)))
    with pytest.raises(ValueError, match="residual has shape"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last, residual=cp.ones((1, 12, 5, 6), cp.float32),
                                y_out=y)
    with pytest.raises(ValueError, match="y_out has shape"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last, y_out=cp.empty((1, 12, 5, 6), cp.float32))
    with pytest.raises(ValueError, match="do not fit"):
        tail.tucker_tail_conv2d(cp.ones((1, 512, 7, 7), cp.float32), cp.ones((512, 512, 3, 3),
                                                                             cp.float32),
                         1, 1, cp.ones((8, 512, 1, 1), cp.float32))
    assert bool((y == 7.0).all())
