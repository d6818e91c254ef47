"""The naive and fused CP convolution kernels against the dense reference."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, reference
from tensorconv.decomp import cp as cpd
from tensorconv.ops import cp_conv as cpops
from tests.helpers import rel_err, sweep

pytestmark = pytest.mark.gpu


def _case(rng, n, c, k, ih, iw, kh, kw, r):
    x = rng.standard_normal((n, c, ih, iw)).astype(np.float32)
    f = [rng.standard_normal(shape).astype(np.float32)
         for shape in ((c, r), (kh, r), (kw, r), (k, r))]
    return x, f


@pytest.mark.parametrize("variant", cpops.VARIANTS)
@pytest.mark.parametrize("trial", sweep(20, 6))
def test_random_shapes(rng, variant, trial):
    import cupy as cp

    n = int(rng.integers(1, 4))
    c, k = (int(v) for v in rng.integers(1, 70, size=2))
    ih, iw = (int(v) for v in rng.integers(3, 30, size=2))
    kh, kw = (int(v) for v in rng.choice([1, 3, 5], size=2))
    r = int(rng.integers(1, 33))
    stride = int(rng.choice([1, 2]))
    padding = ((kh - 1) // 2, (kw - 1) // 2)  # "SAME" for stride 1
    x, f = _case(rng, n, c, k, ih, iw, kh, kw, r)
    ref = reference.conv2d(x.astype(np.float64),
                           cpd.reconstruct(cpd.CPFactors(*(a.astype(np.float64) for a in f))),
                           stride=stride, padding=padding)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    tiles = [None] + cpops.candidates(cpops.problem(x.shape, f, stride, padding),
                                      backend.device_facts())
    tile = tiles[int(rng.integers(len(tiles)))] if variant == "fused" else None
    cpops.cp_conv2d(cp.asarray(x), *(cp.asarray(a) for a in f), stride, padding,
                    variant=variant, out=out, **({"tile": tile} if variant == "fused" else {}))
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (n, c, k, ih, iw, kh, kw, r, stride, tile)


@pytest.mark.parametrize("trial", sweep(12, 4))
def test_separable_scheme(rng, trial):
    """The separable fused kernel (stride 1) on random shapes, paddings and ranks, with and
    without the epilogue, against float64."""
    import cupy as cp

    n, c, k = int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 120))
    ih, iw = (int(v) for v in rng.integers(3, 70, size=2))
    kh, kw = (int(v) for v in rng.choice([3, 5, 7, 11], size=2))
    kh, kw = min(kh, ih + 2), min(kw, iw + 2)
    r = int(rng.integers(1, 33))
    padding = (int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    if ih + 2 * padding[0] < kh or iw + 2 * padding[1] < kw:
        padding = ((kh - 1) // 2, (kw - 1) // 2)
    x, f = _case(rng, n, c, k, ih, iw, kh, kw, r)
    ref = reference.conv2d(x.astype(np.float64),
                           cpd.reconstruct(cpd.CPFactors(*(a.astype(np.float64) for a in f))),
                           padding=padding)
    args = {}
    if trial % 2:
        bias = rng.standard_normal(k)
        res = rng.standard_normal(ref.shape)
        ref = np.maximum(ref + bias[None, :, None, None] + res, 0)
        args = dict(bias=cp.asarray(bias.astype(np.float32)),
                    residual=cp.asarray(res.astype(np.float32)), relu=True)
    tile = cpops.Tile(1, [64, 128, 256][trial % 3], scheme="separable")
    out = cp.full(ref.shape, cp.nan, cp.float32)
    cpops.cp_conv2d(cp.asarray(x), *(cp.asarray(a) for a in f), 1, padding, tile=tile, out=out,
                    **args)
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (n, c, k, ih, iw, kh, kw, r, padding, tile)


@pytest.mark.parametrize("trial", sweep(6, 3))
def test_fused_epilogue(rng, trial):
    """bias + residual + ReLU in the epilogue, against the NumPy path of the same op."""
    import cupy as cp

    n, c, k, r = 2, int(rng.integers(1, 300)), int(rng.integers(1, 90)), int(rng.integers(1, 33))
    x, f = _case(rng, n, c, k, 9, 11, 3, 3, r)
    bias = rng.standard_normal(k).astype(np.float32)
    res = rng.standard_normal((n, k, 9, 11)).astype(np.float32)
    ref = cpops.cp_conv2d(x, *f, 1, 1, bias=bias, residual=res, relu=True)
    tiles = cpops.candidates(cpops.problem(x.shape, f, 1, 1), backend.device_facts())
    tile = tiles[trial * 7 % len(tiles)]
    out = cp.full(ref.shape, cp.nan, cp.float32)
    cpops.cp_conv2d(cp.asarray(x), *(cp.asarray(a) for a in f), 1, 1, bias=cp.asarray(bias),
                    residual=cp.asarray(res), relu=True, tile=tile, out=out)
    assert rel_err(out.get(), ref) <= 1e-5, (c, k, r, tile)
    assert float(out.min()) >= 0.0


def test_tuner_picks_a_timed_tile(tmp_path, monkeypatch, rng):
    import cupy as cp

    from tensorconv.tuning import cp_tuner

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x, f = _case(rng, 1, 48, 64, 13, 13, 3, 3, 4)
    factors = tuple(cp.asarray(a) for a in f)
    best, times = cp_tuner.tune_tile(cp.asarray(x), factors, 1, 1, repeat=3, use_cache=False)
    assert best in times and times[best] == min(times.values())
    assert (tmp_path / "tune.json").exists()


def test_bad_input():
    import cupy as cp

    x = cp.ones((1, 4, 8, 8), cp.float32)
    good = [cp.ones(s, cp.float32) for s in ((4, 3), (3, 3), (3, 3), (5, 3))]
    with pytest.raises(ValueError, match="share their rank"):
        cpops.cp_conv2d(x, good[0], good[1], good[2], cp.ones((5, 2), cp.float32))
    with pytest.raises(ValueError, match="s has 5 rows"):
        cpops.cp_conv2d(x, cp.ones((5, 3), cp.float32), *good[1:])
    with pytest.raises(ValueError, match="template limit 32"):
        big = [cp.ones((s[0], 33), cp.float32) for s in ((4,), (3,), (3,), (5,))]
        cpops.cp_conv2d(x, *big)
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        cpops.cp_conv2d(x, *good, tile=cpops.Tile(3, 96))
    with pytest.raises(ValueError, match="separable scheme needs stride 1"):
        cpops.cp_conv2d(x, *good, 2, tile=cpops.Tile(1, 64, scheme="separable"))
    with pytest.raises(ValueError, match="no epilogue"):
        cpops.cp_conv2d(x, *good, variant="naive", relu=True)
    with pytest.raises(ValueError, match="bias has 4 entries"):
        cpops.cp_conv2d(x, *good, bias=cp.ones(4, cp.float32))
    with pytest.raises(TypeError, match="float32"):
        cpops.cp_conv2d(x.astype(cp.float64), *good)


@pytest.mark.parametrize("gemm", ["cublas", "igemm"])
@pytest.mark.parametrize("trial", sweep(4, 2))
def test_pairwise_executor_on_library_calls(rng, monkeypatch, gemm, trial):
    """The gnetcon sequence on the GPU: contractions as GEMMs, convolution edges on our
    depthwise kernel (counted: the windowed-einsum fallback must not run)."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.decomp import gnetcon as g

    n, s, t = int(rng.integers(1, 3)), int(rng.integers(2, 60)), int(rng.integers(2, 60))
    y, x = (int(v) for v in rng.integers(3, 20, size=2))
    kh, kw = (int(v) for v in rng.choice([1, 3, 5], size=2))
    r = int(rng.integers(1, 17))
    net = g.cp_conv_network(n, s, t, y, x, kh, kw, r)
    plan = g.gnetcon(net)
    x_, f = _case(rng, n, s, t, y, x, kh, kw, r)
    calls = []
    real = ops.conv2d
    monkeypatch.setattr(ops, "conv2d", lambda *a, **k: calls.append(k) or real(*a, **k))
    standard = plan.sequence == (((("U", "S"), "H"), "W"), "T")
    if standard:  # other orders (ties with 1x1 filters) may convolve through windowed einsum
        monkeypatch.setattr(g, "_windowed", None)
    out = g.execute(net, plan, dict(zip("USHWT", (cp.asarray(a) for a in [x_] + f))), gemm=gemm)
    ref = reference.conv2d(x_.astype(np.float64),
                           cpd.reconstruct(cpd.CPFactors(*(a.astype(np.float64) for a in f))),
                           padding=((kh - 1) // 2, (kw - 1) // 2))
    assert rel_err(out.get(), ref) <= 1e-5
    convs = sum(1 for k in calls if "groups" in k)
    assert convs == 2 or not standard
    if gemm == "igemm" and standard:   # other orders may contract with no 1x1-conv shape
        assert sum(1 for k in calls if k.get("algorithm") == "igemm") >= 1


def test_parafac_and_cpize_on_the_gpu(rng):
    """CP-ALS through tensorly's CuPy backend: factors stay on the GPU, the exact rank-2 kernel
    the CPU test recovers is recovered here too, and cpize of a GPU model keeps the model's
    output within the CP error."""
    import cupy as cp

    from tensorconv.autograd import Tensor, no_grad
    from tensorconv.compress import cpize
    from tensorconv.nn import get_model
    from tests.test_cp import _factors

    # the CPU test's kernel: ALS from a random start can stall on nearly collinear factors
    w = cp.asarray(cpd.reconstruct(_factors(np.random.default_rng(0), 8, 6, 3, 3, 2)))
    got = cpd.parafac(w, 2, n_iter_max=500)
    assert all(isinstance(a, cp.ndarray) for a in (got.s, got.h, got.w, got.t))
    assert cpd.relative_error(w, got) < 1e-4

    model = get_model("small_cnn", in_channels=1).to("gpu")
    model.eval()
    x = Tensor(cp.asarray(rng.standard_normal((2, 1, 16, 16)).astype(np.float32)))
    with no_grad():
        dense = model(x).data
    errors = cpize(model, 32)
    with no_grad():
        out = model(x).data
    assert errors and all(0 <= e < 1 for e in errors.values())
    change = float(cp.linalg.norm(out - dense) / cp.linalg.norm(dense))
    assert change < 2 * max(errors.values()) + 0.05
