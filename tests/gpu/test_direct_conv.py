"""The CUDA direct convolution against the float64 NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import direct_conv
from tests.helpers import fp32_tol, random_conv_case, rel_err, sweep

pytestmark = pytest.mark.gpu
TOL = 1e-5
# the algorithms that take any geometry ("depthwise": tests/gpu/test_depthwise_conv_gpu.py;
# "winograd": tests/gpu/test_winograd_pass_gpu.py)
GENERAL = tuple(a for a in direct_conv.ALGORITHMS if a not in ("depthwise", "winograd"))


def _case(rng, xs, ws, with_bias):
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if with_bias else None
    return x, w, b


def _check(rng, xs, ws, kw, *, relu=False, with_bias=True, **algo):
    import cupy as cp

    x, w, b = _case(rng, xs, ws, with_bias)
    geom = conv_geometry(xs, ws, **kw)
    out = cp.full(geom.output_shape, cp.nan,
                  dtype=cp.float32)  # poisoned: every element must be written
    ops.conv2d(cp.asarray(x), cp.asarray(w), None if b is None else cp.asarray(b),
               relu=relu, out=out, **algo, **kw)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                           None if b is None else b.astype(np.float64), **kw)
    if relu:
        ref = np.maximum(ref, 0)
    got = out.get()
    assert not np.isnan(got).any(), "unwritten outputs"
    err = rel_err(got, ref)
    # the tensor cores' accumulation truncates: its bound grows with the reduction (the
    # default algorithm takes them for large layers)
    tol = TOL if algo.get("algorithm") in ("igemm", "direct") else fp32_tol(w[0].size)
    assert err <= tol, f"rel err {err:.2e} for x{xs} w{ws} {kw} {algo}"


@pytest.mark.parametrize("trial", sweep(60, 20))
def test_random_shapes(rng, trial):
    xs, ws, kw = random_conv_case(rng, max_hw=40, max_channels=40)
    _check(rng, xs, ws, kw, relu=bool(trial % 3 == 0), with_bias=bool(trial % 2))


@pytest.mark.parametrize("algorithm", GENERAL)
@pytest.mark.parametrize("trial", sweep(30, 10))
def test_random_shapes_each_algorithm(rng, algorithm, trial):
    xs, ws, kw = random_conv_case(rng, max_hw=30, max_channels=80)
    _check(rng, xs, ws, kw, relu=bool(trial % 2), algorithm=algorithm)


@pytest.mark.parametrize("splits", [1, 2, 3, 7, 32])
def test_igemm_reduction_splits(rng, splits):
    # 150 = 16 * 9 + 6: a ragged last reduction step; 70 output channels: a ragged M tile
    _check(rng, (2, 50, 9, 11), (70, 50, 3, 1), dict(padding=(1, 0)), relu=True,
           algorithm="igemm", splits=splits)


RESNET_LIKE = [
    ((1, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),
    ((1, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ((2, 128, 28, 28), (256, 128, 3, 3), dict(stride=2, padding=1)),
    ((1, 512, 7, 7), (512, 512, 3, 3), dict(padding=1)),
    ((3, 256, 14, 14), (512, 256, 1, 1), dict(stride=2)),
    ((1, 96, 17, 13), (96, 1, 3, 3), dict(padding=1, groups=96)),  # depthwise
]


@pytest.mark.parametrize("algorithm", GENERAL)
@pytest.mark.parametrize("xs,ws,kw", RESNET_LIKE)
def test_network_layers(rng, xs, ws, kw, algorithm):
    _check(rng, xs, ws, kw, algorithm=algorithm)


@pytest.mark.parametrize("tile", [direct_conv.Tile(1, 32, 16, 3), direct_conv.Tile(8, 8, 4, 1),
                                  direct_conv.Tile(4, 16, 8, 16), direct_conv.Tile(16, 4, 2, 5),
                                  direct_conv.Tile(2, 8, 1, 7)])
def test_explicit_tiles(rng, tile):
    # channel counts that are not multiples of the staged chunk exercise the ragged last stage
    _check(rng, (2, 37, 19, 23), (29, 37, 3, 3), dict(padding=1, stride=(1, 2)), tile=tile)


def test_allocates_output_and_accepts_torch_tensors(rng):
    import cupy as cp

    x, w, _ = _case(rng, (2, 8, 10, 10), (4, 8, 3, 3), False)
    y = ops.conv2d(cp.asarray(x), cp.asarray(w), padding=1)
    assert isinstance(y, cp.ndarray) and y.shape == (2, 4, 10, 10)
    assert rel_err(y.get(), reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                             padding=1)) <= TOL
    torch = pytest.importorskip("torch")
    xt, wt = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
    assert backend.as_array(xt).data.ptr == xt.data_ptr()  # shared, not copied
    yt = ops.conv2d(xt, wt, padding=1)
    assert rel_err(yt.get(), y.get()) == 0.0


def test_bad_input_on_gpu_leaves_output_untouched(rng):
    import cupy as cp

    x = cp.ones((1, 4, 8, 8), cp.float32)
    w = cp.ones((4, 4, 3, 3), cp.float32)
    out = cp.full((1, 4, 8, 8), cp.nan, cp.float32)
    with pytest.raises(TypeError, match="different device"):
        ops.conv2d(x, np.ones((4, 4, 3, 3), np.float32), out=out)
    with pytest.raises(TypeError, match="x must be float32"):
        ops.conv2d(x.astype(cp.float64), w, out=out)
    with pytest.raises(ValueError, match="w must be C-contiguous"):
        ops.conv2d(x, cp.ones((4, 4, 3, 6), cp.float32)[..., ::2], out=out)
    with pytest.raises(ValueError, match="out has shape"):
        ops.conv2d(x, w, out=out)  # no padding: the output is 6x6
    with pytest.raises(ValueError, match="shared memory"):
        ops.conv2d(x, w, padding=1, out=out, tile=direct_conv.Tile(32, 32, 16, 4096))
    with pytest.raises(ValueError, match="tile.tk"):
        ops.conv2d(x, w, padding=1, out=out, tile=direct_conv.Tile(8, 8, 3, 1))
    with pytest.raises(ValueError, match="algorithm must be"):
        ops.conv2d(x, w, padding=1, out=out, algorithm="fft")
    with pytest.raises(ValueError, match="3x3 filters at stride 1"):
        ops.conv2d_backward_weight(x, cp.ones((1, 4, 4, 4), cp.float32), w.shape, 2,
                                   padding=1, algorithm="winograd")
    with pytest.raises(ValueError, match="tile and splits"):
        ops.conv2d(x, w, padding=1, out=out, algorithm="winograd", splits=2)
    with pytest.raises(ValueError, match="splits must be"):
        ops.conv2d(x, w, padding=1, out=out, splits=0)
    with pytest.raises(ValueError, match="tile applies"):
        ops.conv2d(x, w, padding=1, out=out, algorithm="igemm", tile=direct_conv.Tile(8, 8, 4, 1))
    assert bool(cp.isnan(out).all())


@pytest.mark.parametrize("trial", sweep(30, 10))
def test_backward_kernels_random_shapes(rng, trial):
    import cupy as cp

    xs, ws, kw = random_conv_case(rng, max_hw=30, max_channels=40)
    geom = conv_geometry(xs, ws, **kw)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    splits = [None, 1, int(rng.integers(2, 9))][trial % 3]
    gx = cp.full(xs, cp.nan, cp.float32)
    gw = cp.full(ws, cp.nan, cp.float32)
    fp32 = dict(algorithm="igemm", splits=splits)  # the tensor-core one: test_igemm_tf32x3_gpu
    ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(w), xs, out=gx, **fp32, **kw)
    ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), ws, out=gw, **fp32, **kw)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    ref_gx = reference.conv2d_backward_data(gy64, w64, xs, **kw)
    ref_gw = reference.conv2d_backward_weight(x64, gy64, ws, **kw)
    assert not cp.isnan(gx).any() and not cp.isnan(gw).any()
    assert rel_err(gx.get(), ref_gx) <= TOL, (xs, ws, kw, splits)
    assert rel_err(gw.get(), ref_gw) <= TOL, (xs, ws, kw, splits)


@pytest.mark.parametrize("algorithm,splits,k,groups",
                         [("igemm", 1, 32, 1), ("igemm", 4, 32, 1), ("direct", None, 32, 1),
                          ("direct", None, 6, 2), (None, None, 6, 2)])
def test_residual_epilogue(rng, algorithm, splits, k, groups):
    import cupy as cp

    x = rng.standard_normal((2, 24, 9, 9)).astype(np.float32)
    w = rng.standard_normal((k, 24 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    res = rng.standard_normal((2, k, 9, 9)).astype(np.float32)
    out = cp.full((2, k, 9, 9), cp.nan, cp.float32)
    ops.conv2d(cp.asarray(x), cp.asarray(w), cp.asarray(b), padding=1, groups=groups,
               relu=True, residual=cp.asarray(res), out=out, splits=splits, algorithm=algorithm)
    ref = np.maximum(reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                      b.astype(np.float64), padding=1, groups=groups) + res, 0)
    assert rel_err(out.get(), ref) <= TOL
    with pytest.raises(ValueError, match="residual has shape"):
        ops.conv2d(cp.asarray(x), cp.asarray(w), groups=groups, residual=cp.asarray(res),
                   out=out, algorithm=algorithm)


@pytest.mark.parametrize("xs, ws, want", [
    ((128, 1, 32, 32), (16, 1, 3, 3), "direct"),      # a grey stem at a training batch
    ((16, 1, 32, 32), (64, 1, 3, 3), "direct"),       # too small for the tensor cores
    ((4, 1, 30, 30), (8, 1, 3, 3), "depthwise"),      # under STEM_OUTPUTS
    ((64, 3, 17, 19), (16, 3, 3, 3), "direct"),
    ((2, 3, 33, 31), (64, 3, 5, 5), "direct"),
])
def test_thin_and_grey_forwards_take_their_measured_default(rng, xs, ws, want):
    """The defaults ops.conv_algorithm measured for thin forwards, poisoned and checked."""
    kw = {"padding": ws[2] // 2}
    assert direct_conv.choose_algorithm(conv_geometry(xs, ws, **kw)) == want
    _check(rng, xs, ws, kw, relu=True)

