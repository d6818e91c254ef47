"""The tensor-core implicit GEMM (forward, data and weight gradients) against the float64
NumPy reference: every block height, split, mode and instruction path (mma.sync, and
wgmma where the device has it), outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import igemm_tf32x3
from tests.helpers import fp32_tol, random_conv_case, rel_err, sweep

pytestmark = pytest.mark.gpu
ALGO = "igemm_tf32x3"


def _paths():
    """The instruction paths this device runs: mma.sync, and wgmma on sm_90."""
    from tensorconv import backend

    return (False, True) if igemm_tf32x3.has_wgmma(backend.device_facts()) else (False,)


def _run(mode, x, w, gy, kw, poisoned=True, **opts):
    """Run ``mode`` of the kernel into a NaN-poisoned output; returns (got, want, terms).
    ``poisoned=False``: the caller checks for unwritten outputs itself."""
    import cupy as cp

    geom = conv_geometry(x.shape, w.shape, **kw)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    if mode == 0:
        out = cp.full(geom.output_shape, cp.nan, cp.float32)
        ops.conv2d(cp.asarray(x), cp.asarray(w), out=out, algorithm=ALGO, **opts, **kw)
        want, terms = reference.conv2d(x64, w64, **kw), w[0].size
    elif mode == 1:
        out = cp.full(x.shape, cp.nan, cp.float32)
        ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(w), x.shape, out=out,
                                 algorithm=ALGO, **opts, **kw)
        want = reference.conv2d_backward_data(gy64, w64, x.shape, **kw)
        terms = (w.shape[0] // geom.groups) * w.shape[2] * w.shape[3]
    else:
        out = cp.full(w.shape, cp.nan, cp.float32)
        ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), w.shape, out=out,
                                   algorithm=ALGO, **opts, **kw)
        want = reference.conv2d_backward_weight(x64, gy64, w.shape, **kw)
        terms = geom.n * geom.oh * geom.ow
    got = out.get()
    assert not poisoned or not np.isnan(got).any(), f"mode {mode}: unwritten outputs"
    return got, want, terms


def _arrays(rng, xs, ws, kw):
    geom = conv_geometry(xs, ws, **kw)
    return (rng.standard_normal(xs).astype(np.float32),
            rng.standard_normal(ws).astype(np.float32),
            rng.standard_normal(geom.output_shape).astype(np.float32))


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("trial", sweep(24, 6))
def test_random_shapes_every_mode(rng, mode, trial):
    xs, ws, kw = random_conv_case(rng, max_hw=28, max_channels=70)
    x, w, gy = _arrays(rng, xs, ws, kw)
    bm = igemm_tf32x3.ROWS[trial % 4]
    splits = [1, int(rng.integers(2, 9)), None][trial % 3]
    paths = _paths()
    tile = igemm_tf32x3.Tile(bm, splits or 1, paths[trial // 3 % len(paths)]) if splits else None
    why = igemm_tf32x3.supported(igemm_tf32x3.problem(conv_geometry(xs, ws, **kw), mode))
    if why is not None:  # a strided, dilated data gradient: said, before any launch
        with pytest.raises(ValueError, match="dilated"):
            _run(mode, x, w, gy, kw, tile=tile)
        kw = {**kw, "dilation": 1}
        x, w, gy = _arrays(rng, xs, ws, kw)
    got, want, terms = _run(mode, x, w, gy, kw, tile=tile)
    assert rel_err(got, want) <= fp32_tol(terms), (mode, xs, ws, kw, tile)


LAYERS = [  # ResNet-style training layers at a small batch: 3x3, stride 2, 1x1 projections
    ((4, 64, 16, 16), (64, 64, 3, 3), dict(padding=1)),
    ((4, 64, 16, 16), (128, 64, 3, 3), dict(stride=2, padding=1)),
    ((4, 64, 16, 16), (128, 64, 1, 1), dict(stride=2)),
    ((8, 256, 4, 4), (256, 256, 3, 3), dict(padding=1)),
    ((2, 3, 32, 32), (16, 3, 3, 3), dict(padding=1)),
    ((2, 48, 9, 9), (96, 16, 3, 3), dict(padding=1, groups=3)),
    ((2, 20, 12, 12), (40, 20, 5, 3), dict(padding=(2, 1), dilation=(1, 2))),
]


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("xs,ws,kw", LAYERS)
def test_network_layers_every_block_height(rng, mode, xs, ws, kw):
    x, w, gy = _arrays(rng, xs, ws, kw)
    for bm in igemm_tf32x3.ROWS:
        for wg in _paths():
            got, want, terms = _run(mode, x, w, gy, kw, tile=igemm_tf32x3.Tile(bm, 3, wg))
            assert rel_err(got, want) <= fp32_tol(terms), (mode, bm, wg)


def test_forward_epilogue_with_and_without_split(rng):
    import cupy as cp

    x, w, _ = _arrays(rng, (2, 40, 11, 13), (48, 40, 3, 3), dict(padding=1))
    b = rng.standard_normal(48).astype(np.float32)
    res = rng.standard_normal((2, 48, 11, 13)).astype(np.float32)
    want = np.maximum(reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                       b.astype(np.float64), padding=1) + res, 0)
    for splits in (1, 5):
        for wg in _paths():
            for halo in (False, True):   # the gather, and the halo path's column mapping
                out = cp.full(want.shape, cp.nan, cp.float32)
                ops.conv2d(cp.asarray(x), cp.asarray(w), cp.asarray(b), padding=1, relu=True,
                           residual=cp.asarray(res), out=out,
                           tile=igemm_tf32x3.Tile(64, splits, wg, halo))
                assert rel_err(out.get(), want) <= 1e-5, (splits, wg, halo)


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
def test_forward_weights_copied_in_16_byte_words_or_one_by_one(rng, prec):
    """w's rows copied in 16-byte words (C*R*S a multiple of 4, w 16-byte aligned) give the
    bits of the one-by-one copies (the same w one float past an aligned address), on every
    block height, path and B layout; rows of other lengths take the one-by-one copies."""
    import cupy as cp

    for cin, k in ((40, 48), (7, 20), (12, 130)):   # C*R*S = 360, 63 and 108
        x, w, _ = _arrays(rng, (2, cin, 11, 13), (k, cin, 3, 3), dict(padding=1))
        want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1)
        aligned = cp.asarray(w)
        shifted = cp.empty(w.size + 1, cp.float32)[1:].reshape(w.shape)   # 4 bytes past
        shifted[...] = aligned
        assert aligned.data.ptr % 16 == 0 and shifted.data.ptr % 16 == 4
        with precision.using(prec):
            for bm in igemm_tf32x3.ROWS:
                for wg in _paths():
                    for halo in (False, True):
                        tile = igemm_tf32x3.Tile(bm, 1, wg, halo)
                        outs = []
                        for ww in (aligned, shifted):
                            out = cp.full(want.shape, cp.nan, cp.float32)
                            ops.conv2d(cp.asarray(x), ww, padding=1, out=out, tile=tile)
                            outs.append(out.get())
                        assert rel_err(outs[0], want) <= (1e-5 if prec == "fp32" else 3e-3)
                        np.testing.assert_array_equal(outs[0], outs[1], err_msg=str(tile))


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
def test_data_gradient_reads_w_transposed_to_the_same_bits(rng, prec, monkeypatch):
    """The data gradient on w transposed per group (rows of K/G*R*S words, or at stride 2,
    by phase, runs of K/G words a tap, copied 16 bytes at a time) gives the bits of w read
    in place, on every block height, path, B layout and a split, groups included; other
    lengths read w in place."""
    import cupy as cp

    cases = [((2, 24, 11, 13), (40, 24, 3, 3), 1, 1), ((2, 20, 9, 7), (7, 20, 3, 3), 1, 1),
             ((1, 32, 10, 10), (16, 16, 3, 3), 2, 1),   # K/G*R*S = 360, 63 and 72
             ((2, 24, 12, 13), (40, 24, 3, 3), 1, 2), ((2, 12, 9, 9), (18, 12, 3, 3), 1, 2),
             ((1, 32, 11, 10), (16, 16, 1, 1), 2, 2)]   # by phase: K/G = 40, 18 and 8
    for xs, ws, groups, stride in cases:
        kw = dict(padding=ws[2] // 2, groups=groups, stride=stride)
        x, w, gy = _arrays(rng, xs, ws, kw)
        want = reference.conv2d_backward_data(gy.astype(np.float64), w.astype(np.float64),
                                              xs, **kw)
        layouts = ((False, 1), (True, 1), (False, 3)) if stride == 1 else ((False, 1), (False, 3))
        with precision.using(prec):
            for bm in igemm_tf32x3.ROWS:
                for wg in _paths():
                    for halo, splits in layouts:
                        tile = igemm_tf32x3.Tile(bm, splits, wg, halo)
                        outs = []
                        for transposed in (True, False):
                            monkeypatch.setattr(igemm_tf32x3, "TRANSPOSE_DGRAD_W",
                                                (1, 3) if transposed else ())
                            out = cp.full(xs, cp.nan, cp.float32)
                            ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(w), xs, out=out,
                                                     tile=tile, **kw)
                            outs.append(out.get())
                        assert rel_err(outs[0], want) <= (1e-5 if prec == "fp32" else 3e-3)
                        np.testing.assert_array_equal(outs[0], outs[1], err_msg=str(tile))


@pytest.mark.parametrize("wg", [False, True])
def test_deterministic_and_tf32_is_one_pass(rng, wg):
    """Replays give the same bits; under precision "tf32" the error is tf32's (well above
    the fp32 build's), so the one-pass build is what ran."""
    if wg not in _paths():
        pytest.skip("wgmma needs an sm_90 device")
    xs, ws, kw = (4, 64, 12, 12), (64, 64, 3, 3), dict(padding=1)
    x, w, gy = _arrays(rng, xs, ws, kw)
    tile = igemm_tf32x3.Tile(64, 4, wg)
    for mode in (0, 1, 2):
        a, want, terms = _run(mode, x, w, gy, kw, tile=tile)
        b, _, _ = _run(mode, x, w, gy, kw, tile=tile)
        np.testing.assert_array_equal(a, b)
        exact = rel_err(a, want)
        with precision.using("tf32"):
            one, _, _ = _run(mode, x, w, gy, kw, tile=tile)
            again, _, _ = _run(mode, x, w, gy, kw, tile=tile)
        np.testing.assert_array_equal(one, again)
        rough = rel_err(one, want)
        assert exact <= fp32_tol(terms) and 3 * exact < rough <= 3e-3, (mode, exact, rough)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_wgmma_and_mma_sync_agree_at_tf32(rng, mode):
    """At one tf32 pass on every block height, both paths are within tf32's error of the
    reference (and of each other), outputs poisoned; a strided data gradient included."""
    if True not in _paths():
        pytest.skip("wgmma needs an sm_90 device")
    for xs, ws, kw in (((3, 40, 13, 11), (72, 40, 3, 3), dict(padding=1)),
                       ((2, 24, 15, 17), (40, 24, 3, 3), dict(stride=2, padding=1))):
        x, w, gy = _arrays(rng, xs, ws, kw)
        for bm in igemm_tf32x3.ROWS:
            with precision.using("tf32"):
                got = [_run(mode, x, w, gy, kw, tile=igemm_tf32x3.Tile(bm, s, wg))
                       for wg in (False, True) for s in (1, 3)]
            want = got[0][1]
            for g, *_ in got:
                assert rel_err(g, want) <= 3e-3, (mode, bm, xs)
            assert rel_err(got[0][0], got[2][0]) <= 4e-3


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
def test_weight_gradients_on_the_splits_the_estimate_picks(rng, prec):
    """The default weight-gradient split (``ops.reduction_splits``) from one way to a wave of
    them (one output tile over a 16,384-deep reduction: 128 splits on 132 SMs, past the
    reduction's 64-split lane sharing), groups and stride 2 included, against the float64
    reference, outputs poisoned."""
    from tensorconv import backend

    cases = [((16, 64, 32, 32), (128, 64, 1, 1), {}),
             ((8, 32, 16, 16), (64, 32, 3, 3), dict(padding=1)),
             ((4, 128, 8, 8), (256, 128, 3, 3), dict(stride=2, padding=1)),
             ((2, 48, 9, 9), (96, 16, 3, 3), dict(padding=1, groups=3))]
    picked = []
    for xs, ws, kw in cases:
        x, w, gy = _arrays(rng, xs, ws, kw)
        p = igemm_tf32x3.problem(conv_geometry(xs, ws, **kw), 2)
        with precision.using(prec):
            picked.append(igemm_tf32x3.default_tile(p, backend.device_facts()).splits)
            got, want, terms = _run(2, x, w, gy, kw)
        tol = fp32_tol(terms) if prec == "fp32" else 3e-3
        assert rel_err(got, want) <= tol, (xs, ws, picked[-1])
    sms = backend.device_facts().sm_count
    assert picked[0] >= min(sms // 2, 128) and min(picked) == 1, picked


def test_default_choice_takes_large_layers():
    geom = conv_geometry((128, 64, 32, 32), (64, 64, 3, 3), padding=1)
    assert ops.direct_conv.choose_algorithm(geom, 1) == ALGO
    assert ops.direct_conv.choose_algorithm(conv_geometry((1, 8, 4, 4), (16, 8, 1, 1))) == "igemm"


def test_bad_options_raise_before_launch(rng):
    import cupy as cp

    x, w = cp.ones((1, 16, 8, 8), cp.float32), cp.ones((16, 16, 3, 3), cp.float32)
    out = cp.full((1, 16, 8, 8), cp.nan, cp.float32)
    with pytest.raises(ValueError, match="tile.bm"):
        ops.conv2d(x, w, padding=1, out=out, tile=igemm_tf32x3.Tile(48))
    with pytest.raises(ValueError, match="splits must be"):
        ops.conv2d(x, w, padding=1, out=out, tile=igemm_tf32x3.Tile(64, 0))
    with pytest.raises(ValueError, match="not a direct_conv.Tile"):
        ops.conv2d(x, w, padding=1, out=out, algorithm="direct", tile=igemm_tf32x3.Tile(64))
    with pytest.raises(ValueError, match="weight gradient only"):
        ops.conv2d_backward_data(out, w, x.shape, padding=1, algorithm="direct")
    assert bool(cp.isnan(out).all())


def _halo_case(rng, mode):
    """A random convolution the halo path takes in ``mode``: planes under and over 128
    pixels (whole planes or rows a block, last tile short), channels off the 16-channel
    chunk, strided and dilated forwards, groups."""
    while True:
        xs, ws, kw = random_conv_case(rng, max_hw=40, max_channels=40)
        if mode == 1:
            kw = {**kw, "stride": 1}
        try:
            geom = conv_geometry(xs, ws, **kw)
        except ValueError:
            continue
        if igemm_tf32x3.halo_supported(igemm_tf32x3.problem(geom, mode)) is None:
            return xs, ws, kw


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("trial", sweep(24, 8))
def test_halo_path_random_shapes(rng, mode, trial):
    """The halo path against the float64 reference on random shapes, every block height,
    split and instruction path, at fp32 accuracy and at one tf32 pass, outputs poisoned."""
    xs, ws, kw = _halo_case(rng, mode)
    x, w, gy = _arrays(rng, xs, ws, kw)
    bm = igemm_tf32x3.ROWS[trial % 4]
    splits = [1, int(rng.integers(2, 6))][trial % 2]
    wg = _paths()[trial // 2 % len(_paths())]
    tile = igemm_tf32x3.Tile(bm, splits, wg, halo=True)
    got, want, terms = _run(mode, x, w, gy, kw, tile=tile)
    assert rel_err(got, want) <= fp32_tol(terms), (mode, xs, ws, kw, tile)
    with precision.using("tf32"):
        one, _, _ = _run(mode, x, w, gy, kw, tile=tile)
    assert rel_err(one, want) <= 3e-3, (mode, xs, ws, kw, tile)


HALO_LAYERS = [  # every halo tile shape: rows of a large plane, whole planes, 2 x 2 planes
    ((3, 20, 32, 32), (24, 20, 3, 3), dict(padding=1)),
    ((5, 40, 8, 8), (36, 40, 3, 3), dict(padding=1)),
    ((9, 33, 4, 4), (17, 33, 3, 3), dict(padding=1)),
    ((33, 16, 2, 2), (16, 16, 3, 3), dict(padding=1)),
    ((2, 16, 14, 14), (32, 16, 3, 3), dict(padding=1)),
    ((2, 8, 23, 31), (8, 8, 5, 5), dict(padding=2, dilation=(2, 1))),
]


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("xs,ws,kw", HALO_LAYERS)
def test_halo_path_layers_match_the_gather(rng, mode, xs, ws, kw):
    """The halo path and the gather agree within fp32's error on each tile shape, both
    against the reference; bias, residual and ReLU in the forward's epilogue."""
    x, w, gy = _arrays(rng, xs, ws, kw)
    for bm in (16, 64, 128):
        for wg in _paths():
            got, want, terms = _run(mode, x, w, gy, kw, tile=igemm_tf32x3.Tile(bm, 2, wg, True))
            plain, _, _ = _run(mode, x, w, gy, kw, tile=igemm_tf32x3.Tile(bm, 2, wg))
            assert rel_err(got, want) <= fp32_tol(terms), (mode, bm, wg)
            assert rel_err(got, plain) <= 2 * fp32_tol(terms), (mode, bm, wg)


def test_halo_path_bad_tiles_raise_before_launch(rng):
    import cupy as cp

    x, w, _ = _arrays(rng, (3, 24, 9, 11), (40, 24, 3, 3), dict(padding=1))
    res = rng.standard_normal((3, 40, 9, 11)).astype(np.float32)
    out = cp.full((3, 40, 9, 11), cp.nan, cp.float32)
    with pytest.raises(ValueError, match="tile.halo=True: .*three taps|3 taps"):
        ops.conv2d(cp.asarray(x), cp.asarray(w[:, :, :1, :1]), out=out,
                   tile=igemm_tf32x3.Tile(32, 1, None, halo=True))
    with pytest.raises(ValueError, match="tile.halo=True: .*forward"):
        ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(res), w.shape, padding=1,
                                   tile=igemm_tf32x3.Tile(32, 1, None, halo=True))
    assert bool(cp.isnan(out).all())


STRIDED = [  # the data gradient by phase (mode 3)
    ((2, 24, 15, 17), (40, 24, 3, 3), dict(stride=2, padding=1)),
    ((2, 24, 16, 16), (40, 24, 1, 1), dict(stride=2)),  # three phases of four have no tap
    ((1, 16, 23, 19), (32, 16, 7, 7), dict(stride=3, padding=3)),
    ((3, 18, 12, 13), (36, 6, 5, 3), dict(stride=(2, 3), padding=(2, 0), groups=3)),
    ((2, 16, 9, 10), (16, 16, 3, 3), dict(stride=4)),  # stride > filter: pixels no tap reaches
    ((2, 16, 9, 10), (16, 16, 2, 2), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("xs,ws,kw", STRIDED)
def test_strided_data_gradient_by_phase(rng, xs, ws, kw):
    geom = conv_geometry(xs, ws, **kw)
    assert igemm_tf32x3.problem(geom, 1).mode == 3
    x, w, gy = _arrays(rng, xs, ws, kw)
    tiles = [igemm_tf32x3.Tile(16, 1, wg) for wg in _paths()]
    tiles += [igemm_tf32x3.Tile(64, 3, wg) for wg in _paths()] + [None]
    for tile in tiles:
        got, want, terms = _run(1, x, w, gy, kw, tile=tile)
        assert rel_err(got, want) <= fp32_tol(terms), tile


ADDEND_LAYERS = [  # the gather, the halo path, by phase (phases without taps), groups
    ((2, 24, 11, 13), (40, 24, 3, 3), dict(padding=1)),
    ((3, 20, 16, 16), (24, 20, 3, 3), dict(padding=1)),
    ((2, 24, 15, 17), (40, 24, 3, 3), dict(stride=2, padding=1)),
    ((2, 24, 16, 16), (40, 24, 1, 1), dict(stride=2)),
    ((2, 48, 9, 9), (96, 16, 3, 3), dict(padding=1, groups=3)),
]


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
@pytest.mark.parametrize("xs,ws,kw", ADDEND_LAYERS)
def test_data_gradient_adds_its_addend_to_the_same_bits(rng, prec, xs, ws, kw):
    """``addend`` + gx from one launch: bit for bit the kernel's gx plus the addend added
    after (every block height, split, instruction path, halo where it applies, and the
    other algorithms, which add after), near the float64 reference, outputs poisoned."""
    import cupy as cp

    _, w, gy = (cp.asarray(a) for a in _arrays(rng, xs, ws, kw))
    add = cp.asarray(rng.standard_normal(xs).astype(np.float32))
    want = reference.conv2d_backward_data(gy.get().astype(np.float64),
                                          w.get().astype(np.float64), xs, **kw) + add.get()
    geom = conv_geometry(xs, ws, **kw)
    tol = 3e-3 if prec == "tf32" else fp32_tol(geom.k // geom.groups * geom.r * geom.s)
    halo = igemm_tf32x3.halo_supported(igemm_tf32x3.problem(geom, 1)) is None
    runs = [dict(tile=igemm_tf32x3.Tile(bm, sp, wg, h)) for bm in igemm_tf32x3.ROWS
            for sp in (1, 3) for wg in _paths() for h in {False, halo}]
    runs += [dict(algorithm=a) for a in ("igemm", "winograd")
             if a != "winograd" or geom.stride == (1, 1) and geom.groups == 1]
    with precision.using(prec):
        for opts in runs + [{}]:
            plain = ops.conv2d_backward_data(gy, w, xs, **kw, **opts)
            out = cp.full(xs, cp.nan, cp.float32)
            got = ops.conv2d_backward_data(gy, w, xs, **kw, addend=add, out=out, **opts)
            assert got is out and not bool(cp.isnan(out).any()), opts
            cp.testing.assert_array_equal(out, add + plain)
            assert rel_err(out.get(), want) <= tol, opts


def test_bad_addends_raise_before_launch(rng):
    import cupy as cp

    _, w, gy = (cp.asarray(a) for a in _arrays(rng, (2, 8, 6, 6), (8, 8, 3, 3), {}))
    out = cp.full((2, 8, 6, 6), cp.nan, cp.float32)
    for bad, msg in [(cp.zeros((2, 8, 6, 5), cp.float32), "addend has shape"),
                     (cp.zeros((2, 8, 6, 6), cp.float64), "addend"),
                     (out, "addend and out share memory"),
                     (out.reshape(-1)[:2 * 8 * 6 * 6].reshape(2, 8, 6, 6), "share memory")]:
        with pytest.raises((ValueError, TypeError), match=msg):
            ops.conv2d_backward_data(gy, w, (2, 8, 6, 6), addend=bad, out=out)
    assert bool(cp.isnan(out).all())


def test_non_finite_inputs_reach_exactly_the_outputs_they_touch(rng):
    """An inf or NaN input makes exactly the outputs it reaches non-finite (the split keeps
    a non-finite value in its big part) and leaves the others exact."""
    xs, ws, kw = (2, 32, 12, 12), (32, 32, 3, 3), dict(padding=1)
    x, w, gy = _arrays(rng, xs, ws, kw)
    x[0, 3, 5, 5], x[1, 7, 0, 11] = np.inf, np.nan
    for mode in (0, 2):
        for wg in _paths():
            got, want, terms = _run(mode, x, w, gy, kw, False, tile=igemm_tf32x3.Tile(32, 2, wg))
            bad = ~np.isfinite(want)   # a NaN left in the poisoned output shows up here too
            assert bad.any() and (~np.isfinite(got) == bad).all(), (mode, wg)
            assert rel_err(got[~bad], want[~bad]) <= fp32_tol(terms)
