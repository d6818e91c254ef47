"""The dense-convolution kernels of a Tucker core — the paper's (tdc), the cluster kernel, the
tensor-core implicit GEMM (tf32x3) and Winograd — through ``ops.core_conv2d`` and their own
ops, against the NumPy reference on random shapes and tiles (outputs poisoned with NaN);
their tuners and the core choice."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tensorconv import backend, ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import core_conv
from tensorconv.ops import tucker_core_cluster as cluster
from tensorconv.ops import tucker_core_tdc as tdc
from tensorconv.ops import tucker_core_tf32x3 as tf32x3
from tensorconv.ops import winograd_conv as winograd
from tensorconv.tuning import oracle, tdc_model
from tests.helpers import fp32_tol, rel_err, sweep

pytestmark = pytest.mark.gpu


def check(rng, xs, ws, stride, padding, *, bias=False, residual=False, relu=False, **kw):
    """``core_conv2d`` (with ``kw``) on random data of these shapes, NaN-poisoned output,
    against the float64 reference with the same epilogue."""
    import cupy as cp

    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    geom = conv_geometry(xs, ws, stride, padding)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    r = rng.standard_normal(geom.output_shape).astype(np.float32) if residual else None
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    ops.core_conv2d(cp.asarray(x), cp.asarray(w), stride, padding, out=out, relu=relu,
                    bias=None if b is None else cp.asarray(b),
                    residual=None if r is None else cp.asarray(r), **kw)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                           None if b is None else b.astype(np.float64), stride, padding)
    ref = ref + (0 if r is None else r)
    ref = np.maximum(ref, 0) if relu else ref
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= fp32_tol(ws[1] * ws[2] * ws[3]), (xs, ws, stride, padding,
                                                                         kw)


def _splits(allowed):
    """Cluster sizes this device runs: clusters need sm_90."""
    return allowed if backend.device_facts().compute_capability >= (9, 0) else (1,)


def _pick(values, trial: int, salt: int = 0):
    """``values[(trial + salt) % len]``: over the trials every value is covered."""
    return values[(trial + salt) % len(values)]


def _random_cluster_tile(rng, geom, trial):
    """Any valid cluster tile (odd channel groups, stages not dividing C, every cluster size),
    the template arguments (NT, PT, splits) cycling over the trials."""
    nt, pt = _pick(cluster.NT, trial), _pick(cluster.PT, trial // 4)
    splits = _pick(_splits(cluster.SPLITS), trial, 1)
    for _ in range(1000):
        tile = cluster.Tile(nt, pt, nt * int(rng.integers(1, 9)), int(rng.integers(1, 9)),
                            int(rng.integers(1, 5)), int(rng.integers(1, 17)), splits)
        if tile.threads <= cluster.MAX_THREADS and tile.smem_bytes(geom) <= 96 * 1024:
            return tile
    return cluster.Tile(nt, pt, nt, 1, 1, 1, splits)


def _random_tf32x3_tile(rng, geom, trial):
    """Any valid tile: every warp tile, widths wider than the output, stages deeper than C,
    every cluster size (also more splits than stages: blocks with no channels)."""
    wm, wn = _pick(tf32x3.WARP_TILES, trial), _pick(tf32x3.WARP_TILES, trial // 3)
    splits = _pick(_splits(tf32x3.SPLITS), trial, 2)
    for _ in range(1000):
        warps_m, warps_n = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4]))
        tw = int(rng.choice(tf32x3.TILE_WIDTHS))
        tile = tf32x3.Tile(wm, wn, warps_m, warps_n, tw, int(rng.choice(tf32x3.STAGE_CHANNELS)),
                           splits)
        if (warps_m * warps_n <= tf32x3.MAX_WARPS and tile.pixels % tw == 0
                and tile.smem_bytes(geom) <= 96 * 1024):
            return tile
    # large filters on many channels: no random tile of these template arguments fits;
    # a candidate of the same warp tile where the ranked list keeps one, else the best
    cands = tf32x3.candidates(geom, backend.device_facts())
    return next((t for t in cands if (t.wm, t.wn) == (wm, wn)), cands[0])


def _random_winograd_tile(rng, trial):
    wm, wn = _pick(winograd.WARP_TILES_M, trial), _pick(winograd.WARP_TILES_N, trial // 2)
    widths = [t for t in winograd.TILE_WIDTHS if (16 * wm) % t == 0]
    return winograd.Tile(wm, wn, int(rng.choice(widths)))


def _random_case(rng, trial, filters=(1, 3, 3, 3, 5, 7), max_hw=40):
    """Batch 1-3, channels not multiples of 4, 8 or 32, odd planes, a stride and padding."""
    b = int(rng.integers(1, 4))
    c, n = (int(v) for v in rng.integers(1, 100, size=2))
    h, w = (int(v) for v in rng.integers(3, max_hw, size=2))
    k = _pick(filters, trial)
    stride = int(rng.choice([1, 2]))
    padding = int(rng.integers(0, k // 2 + 1))
    if h + 2 * padding < k or w + 2 * padding < k:
        padding = k
    return (b, c, h, w), (n, c, k, k), stride, padding


@pytest.mark.parametrize("trial", sweep(16, 8))
@pytest.mark.parametrize("variant", ["tdc", "cluster", "tf32x3", "winograd"])
def test_random_shapes_and_tiles(rng, variant, trial):
    """Every kernel on random shapes and tiles, their template arguments cycling over the
    trials; the fused epilogue (bias, residual, ReLU) on every kernel that has one."""
    filters = (3,) if variant in ("tdc", "winograd") else (1, 3, 3, 5, 7)
    xs, ws, stride, padding = _random_case(rng, trial, filters, 70 if variant != "tdc" else 40)
    if variant == "winograd":
        stride = 1
    geom = conv_geometry(xs, ws, stride, padding)
    if variant == "tdc":
        tiles = tdc.candidates(geom, backend.device_facts())
        tile = tiles[int(rng.integers(len(tiles)))]               # tc < C: the atomics
    else:
        tile = {"cluster": lambda: _random_cluster_tile(rng, geom, trial),
                "tf32x3": lambda: _random_tf32x3_tile(rng, geom, trial),
                "winograd": lambda: _random_winograd_tile(rng, trial)}[variant]()
    epilogue = {} if variant == "tdc" else dict(bias=trial % 3 > 0, residual=trial % 2 > 0,
                                                relu=trial % 4 < 2)
    print("case", xs, ws, stride, padding, tile)
    check(rng, xs, ws, stride, padding, variant=variant, tile=tile, **epilogue)


@pytest.mark.parametrize("op,variant", [(ops.cluster_conv2d, "cluster"),
                                        (ops.tf32x3_conv2d, "tf32x3"),
                                        (ops.tdc_conv2d, "tdc")])
def test_each_kernels_own_op_matches_the_dispatcher(rng, op, variant):
    import cupy as cp

    x = cp.asarray(rng.standard_normal((2, 24, 17, 20)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((40, 24, 3, 3)).astype(np.float32))
    a = op(x, w, 2, 1)
    b = ops.core_conv2d(x, w, 2, 1, variant=variant)
    assert rel_err(a.get(), b.get()) < 1e-6
    wino = ops.winograd_conv2d(x, w, 1)
    assert rel_err(wino.get(), ops.core_conv2d(x, w, 1, 1, variant="winograd").get()) < 1e-6


@pytest.mark.parametrize("width", [17, 20])   # word-by-word and 16-byte row copies
@pytest.mark.parametrize("ks,stride,padding", [(1, 1, 0), (5, 1, 2), (7, 2, 3), (2, 2, 0)])
def test_tf32x3_other_filters(rng, ks, stride, padding, width):
    check(rng, (2, 24, 31, width), (40, 24, ks, ks), stride, padding, variant="tf32x3")


def test_winograd_on_resnet_layer_shapes(rng):
    """The shapes it is for: a ResNet stage's 3x3 layers at batch 1 (default tile)."""
    for c, hw in ((64, 56), (128, 28), (256, 14), (512, 7)):
        check(rng, (1, c, hw, hw), (c, c, 3, 3), 1, 1, variant="winograd")


@pytest.mark.parametrize("variant", ["cluster", "tf32x3"])
def test_split_channels_are_deterministic(rng, variant):
    import cupy as cp

    x = cp.asarray(rng.standard_normal((1, 96, 28, 28)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((64, 96, 3, 3)).astype(np.float32))
    tile = (cluster.Tile(4, 4, 32, 4, 4, 8, max(_splits(cluster.SPLITS))) if variant == "cluster"
            else tf32x3.Tile(1, 2, 4, 1, 16, 8, max(_splits(tf32x3.SPLITS))))
    first = ops.core_conv2d(x, w, 1, 1, variant=variant, tile=tile)
    for _ in range(3):                            # fixed-order cluster sums, no atomics
        assert bool((ops.core_conv2d(x, w, 1, 1, variant=variant, tile=tile) == first).all())


@pytest.mark.parametrize("variant", ["tf32x3", "winograd"])   # both split into tf32 parts
def test_fp32_accuracy_on_wide_ranges(rng, variant):
    """Operands spread over six decades still give fp32-level error (a tf32 product would not)."""
    import cupy as cp

    x = (rng.standard_normal((1, 64, 30, 30)) * 10.0 ** rng.uniform(-3, 3, (1, 64, 1, 1)))
    w = rng.standard_normal((32, 64, 3, 3)) * 10.0 ** rng.uniform(-3, 3, (32, 1, 1, 1))
    x, w = x.astype(np.float32), w.astype(np.float32)
    out = cp.full((1, 32, 30, 30), cp.nan, cp.float32)
    ops.core_conv2d(cp.asarray(x), cp.asarray(w), 1, 1, variant=variant, out=out)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1)
    assert rel_err(out.get(), ref) <= 1e-5


def test_default_tiles_fallback_and_igemm(rng, caplog):
    for variant in (None, "cluster", "tf32x3", "winograd", "igemm", "tdc"):
        check(rng, (1, 64, 28, 28), (32, 64, 3, 3), 1, 1, variant=variant)
    check(rng, (1, 16, 9, 9), (8, 16, 5, 5), 1, 2)                   # the cluster kernel
    with caplog.at_level(logging.INFO, logger="tensorconv.ops.core_conv"):
        check(rng, (1, 16, 12, 12), (8, 16, 9, 9), 1, 4)             # none takes 9x9: igemm
    assert "falls back to igemm" in caplog.text


def test_bad_input_before_launch():
    import cupy as cp

    x = cp.ones((1, 16, 14, 14), cp.float32)
    w = cp.ones((8, 16, 3, 3), cp.float32)
    out = cp.full((1, 8, 14, 14), cp.nan, cp.float32)
    C, T, W = cluster.Tile, tf32x3.Tile, winograd.Tile
    wide = cp.ones((1, 2048, 14, 14), cp.float32)  # a 2048-channel cube of 10 x 6 is 480 KiB
    cases = [
        (dict(x=wide, w=cp.ones((8, 2048, 3, 3), cp.float32), variant="tdc",
              tile=tdc.Tile(8, 4, 2048)), "shared memory"),
        (dict(variant="tdc", tile=tdc.Tile(2, 2, 0)), "tile.tc"),
        (dict(variant="tdc", tile=tdc.Tile(3, 2, 4)), "tile sides"),
        (dict(variant="tdc", packed=cp.ones((8, 3, 3, 16), cp.float32)), "packed has shape"),
        (dict(variant="fft"), "variant must be"),
        (dict(variant="cluster", tile=tdc.Tile(2, 2, 4)), "does not fit variant='cluster'"),
        (dict(variant="cluster", tile=C(4, 4, 8, 2, 2, 8, 3)), "tile.splits"),
        (dict(variant="cluster", tile=C(4, 4, 6, 2, 2, 8, 1)), "multiple of tile.nt"),
        (dict(variant="cluster", tile=C(1, 4, 64, 8, 2, 8, 1)), "threads"),
        (dict(stride=3, variant="cluster"), "stride 1 or 2"),
        (dict(variant="tdc", relu=True), "not available with variant='tdc'"),
        (dict(variant="cluster", residual=cp.ones((1, 8, 7, 7), cp.float32)), "residual has shape"),
        (dict(variant="tf32x3", bias=cp.ones(9, cp.float32)), "bias"),
        (dict(variant="tf32x3", tile=T(3, 1, 1, 1, 8, 8)), "tile.wm and tile.wn"),
        (dict(variant="tf32x3", tile=T(1, 1, 8, 4, 8, 8)), "warps"),
        (dict(variant="tf32x3", tile=T(1, 1, 1, 1, 32, 8)), "tile.tw"),
        (dict(variant="tf32x3", tile=T(1, 1, 1, 1, 8, 12)), "tile.ck"),
        (dict(variant="tf32x3", tile=T(1, 1, 1, 1, 8, 8, 3)), "tile.splits"),
        (dict(variant="tf32x3", packed=cp.ones((2, 9, 1, 32, 3), cp.float32)), "packed has shape"),
        (dict(variant="tf32x3", stride=3), "stride 1 or 2"),
        (dict(variant="winograd", tile=W(4, 1, 4)), "tile.wm must be"),
        (dict(variant="winograd", tile=W(1, 1, 3)), "tile.tbw"),
        (dict(variant="winograd", tile=W(1, 1, 32)), "tile.tbw"),
        (dict(variant="winograd", packed=cp.ones((1, 2, 9, 32, 4), cp.float32)),
         "packed has shape"),
        (dict(variant="winograd", stride=2), "stride 1 only"),
        (dict(variant="igemm", tile=W(1, 1, 4)), "does not fit variant='igemm'"),
    ]
    for kw, match in cases:
        args = dict(x=x, w=w, stride=1, padding=1, out=out) | kw
        with pytest.raises(ValueError, match=match):
            ops.core_conv2d(args.pop("x"), args.pop("w"), args.pop("stride"), args.pop("padding"),
                            **args)
    with pytest.raises(ValueError, match="shared memory"):
        ops.core_conv2d(cp.ones((1, 64, 300, 300), cp.float32), cp.ones((32, 64, 7, 7), cp.float32),
                        1, 3, variant="tf32x3", tile=T(4, 4, 8, 1, 64, 32))
    for variant, ws, match in (("tdc", (8, 16, 5, 5), "3x3 filters only"),
                               ("cluster", (8, 16, 9, 9), "filters up to 7x7"),
                               ("tf32x3", (8, 16, 9, 9), "filters up to 7x7"),
                               ("winograd", (8, 16, 5, 5), "3x3 filters only")):
        with pytest.raises(ValueError, match=match):
            ops.core_conv2d(cp.ones((1, 16, 12, 12), cp.float32), cp.ones(ws, cp.float32),
                            variant=variant)
    with pytest.raises(TypeError, match="runs on the GPU"):
        ops.core_conv2d(np.ones((1, 16, 14, 14), np.float32), np.ones((8, 16, 3, 3), np.float32))
    assert bool(cp.isnan(out).all())


def test_tdc_oracle_and_model(rng, tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x = cp.asarray(rng.standard_normal((1, 32, 14, 14)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((32, 32, 3, 3)).astype(np.float32))
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    best, times = oracle.oracle_tile(x, w, geom, repeat=3)
    assert best in times and times[best] == min(times.values())
    assert oracle.oracle_tile(x, w, geom) == (best, {})        # from the tune cache
    assert tdc_model.choose_tile(geom) in times                 # a valid, timed candidate
    assert tdc_model.choose_tile(geom, method="paper") in times


@pytest.mark.parametrize("variant,shape", [("cluster", (1, 32, 14, 14, 48)),
                                           ("tf32x3", (1, 32, 56, 56, 40)),
                                           ("winograd", (1, 64, 56, 56, 64))])
def test_tuner_core_choice_and_cache(rng, variant, shape, tmp_path, monkeypatch):
    """Each kernel's tuner times its candidates and stores the fastest, which its op then
    takes by default; ``tune_core`` stores the fastest kernel, which ``core_conv2d`` takes."""
    import cupy as cp

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    b, c, h, w_, n = shape
    x = cp.asarray(rng.standard_normal((b, c, h, w_)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((n, c, 3, 3)).astype(np.float32))
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    kernel = core_conv.KERNELS[variant]
    assert kernel.tuned_tile(geom) is None and core_conv.tuned_choice(geom) is None
    tune = {"cluster": lambda: oracle.tune_cluster_tile(x, w, geom, candidates=6, repeat=3),
            "tf32x3": lambda: oracle.tune_tf32x3_tile(x, w, geom, candidates=5, repeat=3),
            "winograd": lambda: oracle.tune_winograd_tile(x, w, geom, repeat=3)}[variant]
    best, times = tune()
    if variant == "winograd":
        assert set(times) == set(winograd.candidates(geom, backend.device_facts()))
    else:
        assert len(times) == (6 if variant == "cluster" else 5)
    assert times[best] == min(times.values())
    assert tune() == (best, {}) and kernel.tuned_tile(geom) == best
    choice = oracle.tune_core(x, w, geom, repeat=3)
    assert choice[0] in core_conv.competing(geom)
    assert core_conv.tuned_choice(geom) == choice == core_conv.default_choice(geom)
    if choice[0] == variant:
        assert choice[1] == best
    check(rng, (b, c, h, w_), (n, c, 3, 3), 1, 1)          # the default path runs the choice
