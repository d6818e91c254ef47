"""The tensor-core kernels built for one tf32 pass (tensorconv.precision "tf32").

Where a kernel multiplies the operands as given, its tf32 result must equal the product of
the operands rounded to the nearest tf32, accumulated (float64 reference: <= 3e-5
relative), which checks the rounding and that no remainder product is left; everywhere
its error against fp32 must be that of tf32 (neither fp32's nor a broken kernel's), and
the fp32 build of the same call must still be fp32-accurate after a tf32 one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, ops, precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import conv_maxpool as conv_pool
from tensorconv.ops import pointwise_pair as pair
from tensorconv.ops import winograd_conv as winograd
from tensorconv.ops._launch import round_tf32
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


def _rt(a):
    """float64 of ``a`` rounded to the nearest tf32 (as the kernels round)."""
    return round_tf32(np.asarray(a, np.float32), np).astype(np.float64)


def _tf32_err(err):
    """TF32's error on these random sums: far above fp32's, far below a wrong result's."""
    assert 2e-5 < err < 3e-3, err


def _poisoned(cp, shape):
    return cp.full(shape, cp.nan, dtype=cp.float32)


@pytest.mark.parametrize("trial", sweep(6, 3))
def test_core_tf32x3_products_of_rounded_operands(rng, trial):
    import cupy as cp

    b, c, n = int(rng.integers(1, 3)), int(rng.integers(1, 90)), int(rng.integers(1, 90))
    h, w = (int(v) for v in rng.integers(3, 40, size=2))
    stride, pad = int(rng.choice([1, 2])), int(rng.choice([0, 1]))
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((n, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    exact = reference.conv2d(x.astype(np.float64), wt.astype(np.float64), None, stride, pad)
    rounded = reference.conv2d(_rt(x), _rt(wt), None, stride, pad)
    xg, wg = cp.asarray(x), cp.asarray(wt)
    out = _poisoned(cp, exact.shape)
    with precision.using("tf32"):
        ops.core_conv2d(xg, wg, stride, pad, variant="tf32x3", out=out)
    got = cp.asnumpy(out)
    assert np.isfinite(got).all()
    assert rel_err(got, rounded) <= 3e-5
    _tf32_err(rel_err(got, exact))
    fp32 = cp.asnumpy(ops.core_conv2d(xg, wg, stride, pad, variant="tf32x3"))
    assert rel_err(fp32, exact) <= 1e-5


@pytest.mark.parametrize("trial", sweep(4, 2))
def test_stem_conv_maxpool_products_of_rounded_operands(rng, trial):
    import cupy as cp

    stem = conv_pool.Problem(conv_geometry((1, 3, 224, 224), (64, 3, 7, 7), 2, 3), (3, 3),
                             (2, 2), (1, 1))
    tile = conv_pool.candidates(stem, backend.device_facts())[trial % 3]
    shape = (1, 3, 224, 224) if trial == 0 else (int(rng.integers(1, 3)), 3, 61, 47)
    x = rng.standard_normal(shape).astype(np.float32)
    wt = (rng.standard_normal((64, 3, 7, 7)) / np.sqrt(147)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)

    def ref(xx, ww):
        y = np.maximum(reference.conv2d(xx, ww, bias.astype(np.float64), 2, 3), 0)
        return reference.pool2d(y, (3, 3), (2, 2), (1, 1), "max")

    exact, rounded = ref(x.astype(np.float64), wt.astype(np.float64)), ref(_rt(x), _rt(wt))
    args = (cp.asarray(x), cp.asarray(wt), cp.asarray(bias), 2, 3, 3, 2, 1)
    out = _poisoned(cp, exact.shape)
    with precision.using("tf32"):
        ops.conv2d_maxpool(*args, relu=True, tile=tile, out=out)
    got = cp.asnumpy(out)
    assert np.isfinite(got).all()
    assert rel_err(got, rounded) <= 3e-5
    _tf32_err(rel_err(got, exact))
    assert rel_err(cp.asnumpy(ops.conv2d_maxpool(*args, relu=True, tile=tile)), exact) <= 1e-5


def _fitting(c, m, j):
    return pair.candidates(pair.Problem(1, 1, c, m, j), backend.device_facts())


@pytest.mark.parametrize("tile", [t for t in pair.TILES if t.mma],
                         ids=lambda t: f"p{t.p}cl{t.cl}")
def test_pointwise_pair_mma_products_of_rounded_operands(rng, tile):
    """y = relu(A x + a) rounded again before z = B y + b, as the kernel keeps it."""
    import cupy as cp

    # no empty cluster slice (the op refuses those tiles)
    lowest = next(mm for mm in range(1, 1024) if (tile.cl - 1) * tile.slice(mm) < mm)
    n, c, m, j, h, w = 2, 40, max(48, lowest), 24, 9, 11
    for _ in range(4):  # wide tiles: narrower layers
        if tile in _fitting(c, m, j):
            break
        c, j = max(8, c // 2), max(8, j // 2)
    assert tile in _fitting(c, m, j)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    w1 = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    w2 = (rng.standard_normal((j, m, 1, 1)) / np.sqrt(m)).astype(np.float32)
    b1 = rng.standard_normal(m).astype(np.float32)
    y_exact = np.maximum(reference.conv2d(x.astype(np.float64), w1.astype(np.float64),
                                          b1.astype(np.float64)), 0)
    z_exact = reference.conv2d(y_exact, w2.astype(np.float64))
    args = (cp.asarray(x), cp.asarray(w1), cp.asarray(w2), cp.asarray(b1))
    y_out, z_out = _poisoned(cp, y_exact.shape), _poisoned(cp, z_exact.shape)
    with precision.using("tf32"):
        pair.conv1x1_pair(*args, relu1=True, tile=tile, y_out=y_out, z_out=z_out)
    y, z = cp.asnumpy(y_out), cp.asnumpy(z_out)
    assert np.isfinite(y).all() and np.isfinite(z).all()
    y_rounded = np.maximum(reference.conv2d(_rt(x), _rt(w1), b1.astype(np.float64)), 0)
    assert rel_err(y, y_rounded) <= 3e-5
    assert rel_err(z, reference.conv2d(_rt(y), _rt(w2))) <= 3e-5  # from the y it stored
    _tf32_err(rel_err(y, y_exact))
    _tf32_err(rel_err(z, z_exact))
    y32, z32 = pair.conv1x1_pair(*args, relu1=True, tile=tile)
    assert rel_err(cp.asnumpy(y32), y_exact) <= 1e-5 and rel_err(cp.asnumpy(z32), z_exact) <= 1e-5


def _winograd_tf32(x, wt):
    """F(2x2, 3x3) of ``x`` (padding 1) with the transformed tiles B^T d B and the
    transformed filters G g G^T rounded to tf32 before their products, as the kernel
    multiplies them; float64 otherwise."""
    b, c, h, w = x.shape
    th, tw = -(-h // 2), -(-w // 2)
    xp = np.zeros((b, c, 2 * th + 2, 2 * tw + 2))
    xp[:, :, 1:h + 1, 1:w + 1] = x
    idx_h = 2 * np.arange(th)[:, None] + np.arange(4)   # (tiles, 4) rows of each tile
    idx_w = 2 * np.arange(tw)[:, None] + np.arange(4)
    d = xp[:, :, idx_h[:, None, :, None], idx_w[None, :, None, :]]  # (b, c, th, tw, 4, 4)
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
    v = _rt(np.einsum("ir,bcxyrs,js->bcxyij", bt, d, bt).astype(np.float32))
    u = _rt(winograd.transform_weights(wt, np))
    m = np.einsum("ncij,bcxyij->bnxyij", u, v)
    y = np.einsum("ai,bnxyij,cj->bnxayc", at, m, at).reshape(b, -1, 2 * th, 2 * tw)
    return y[:, :, :h, :w]


@pytest.mark.parametrize("trial", sweep(4, 2))
def test_winograd_products_of_rounded_transforms(rng, trial):
    import cupy as cp

    b, c, n = int(rng.integers(1, 3)), int(rng.integers(1, 80)), int(rng.integers(1, 80))
    h, w = (int(v) for v in rng.integers(4, 40, size=2))  # odd sizes: ragged tiles
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((n, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    assert winograd.supported(conv_geometry(x.shape, wt.shape, 1, 1)) is None
    exact = reference.conv2d(x.astype(np.float64), wt.astype(np.float64), None, 1, 1)
    assert rel_err(_winograd_tf32(x.astype(np.float64), wt), exact) < 3e-3  # the emulation
    xg, wg = cp.asarray(x), cp.asarray(wt)
    out = _poisoned(cp, exact.shape)
    with precision.using("tf32"):
        ops.core_conv2d(xg, wg, 1, 1, variant="winograd", out=out)
    got = cp.asnumpy(out)
    assert np.isfinite(got).all()
    assert rel_err(got, _winograd_tf32(x.astype(np.float64), wt)) <= 3e-5
    _tf32_err(rel_err(got, exact))
    fp32 = cp.asnumpy(ops.core_conv2d(xg, wg, 1, 1, variant="winograd"))
    assert rel_err(fp32, exact) <= 1e-5


def test_engine_plans_tunes_and_replays_at_its_precision(rng, tmp_path, monkeypatch):
    """An engine built for tf32 runs tf32 kernels in its graph and eagerly (its stem forced
    onto the tensor-core conv + max pool), keeps what it tunes under tf32 keys, and leaves
    the caller's precision as it was."""
    import json

    import cupy as cp

    from tensorconv import tunecache
    from tensorconv.engine import InferenceEngine
    from tests.gpu.test_engine import small_imagenet_resnet

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    lookup = tunecache.lookup
    monkeypatch.setattr(tunecache, "lookup", lambda key: ({"fused": True, "tile": [4, 8, 16]}
                                                      if key.startswith("stem_pool")
                                                      else lookup(key)))
    model = small_imagenet_resnet().to("gpu").eval()
    x = cp.asarray(rng.standard_normal((1, 3, 64, 64)).astype(np.float32))
    fp32 = InferenceEngine(model, x.shape)
    assert fp32.precision == "fp32" and "max pool" in fp32.plan.steps[0].label
    want = fp32(x)
    tf32 = InferenceEngine(model, x.shape, precision="tf32", tune=True)
    assert tf32.precision == "tf32" and precision.current() == "fp32"
    got = tf32(x)
    assert 2e-5 < rel_err(cp.asnumpy(got), cp.asnumpy(want)) < 2e-2
    eager = InferenceEngine(model, x.shape, precision="tf32", graph=False)  # the tuned plan
    assert [s.label for s in eager.plan.steps] == [s.label for s in tf32.plan.steps]
    assert rel_err(cp.asnumpy(eager(x)), cp.asnumpy(got)) <= 1e-6
    keys = json.loads((tmp_path / "tune.json").read_text())
    assert keys and all("|tf32|" in k for k in keys)
    with pytest.raises(ValueError, match="precision must be one of"):
        InferenceEngine(model, x.shape, precision="fp16")
