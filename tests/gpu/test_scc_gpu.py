"""Sliding-channel convolution on CuPy: the dense-masked form and the paper's two operator
stacks (Base, Opt) against the NumPy reference, forward and gradients."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.reference import scc
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("impl", ["scc_conv", "scc_channel_stack", "scc_conv_stack"])
@pytest.mark.parametrize("cin,cout,cg,co", [(32, 48, 2, 0.5), (24, 20, 4, 0.33),
                                            (16, 16, 8, 0.25)])
def test_scc_on_the_gpu_matches_the_reference(rng, impl, cin, cout, cg, co):
    import cupy as cp

    g = scc.scc_geometry(cin, cout, cg, co)
    x = rng.standard_normal((3, cin, 7, 5)).astype(np.float32)
    w = rng.standard_normal((cout, g.u)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    gy = rng.standard_normal((3, cout, 7, 5)).astype(np.float32)
    ts = [Tensor(cp.asarray(a), requires_grad=True) for a in (x, w, b)]
    y = getattr(F, impl)(ts[0], ts[1], g, ts[2])
    y.backward(cp.asarray(gy))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    assert rel_err(y.data.get(), scc.scc_forward(x64, w64, g, b.astype(np.float64))) <= 1e-5
    gx, gw = scc.scc_backward(x64, w64, gy.astype(np.float64), g)
    assert rel_err(ts[0].grad.get(), gx) <= 1e-5
    assert rel_err(ts[1].grad.get(), gw) <= 1e-5
    assert rel_err(ts[2].grad.get(), gy.astype(np.float64).sum(axis=(0, 2, 3))) <= 1e-5


def _grid():
    """cg in {1, 2, 4, 8} x co in {0, 25, 33, 50, 75} %, Cout a multiple of the cycle, not
    one, and smaller than it; odd sizes."""
    out = []
    for cin, cout in ((32, 48), (24, 20), (64, 64), (16, 7), (40, 130)):
        for cg in (1, 2, 4, 8):
            for co in (0.0, 0.25, 0.33, 0.5, 0.75):
                try:
                    out.append(scc.scc_geometry(cin, cout, cg, co))
                except ValueError:
                    pass
    return out


def _layer_data(rng, geom, n: int, h: int, wd: int):
    """Random float32 ``(x, w, b, gy)`` of one layer at batch ``n`` on ``h`` x ``wd`` maps."""
    return (rng.standard_normal((n, geom.cin, h, wd)).astype(np.float32),
            rng.standard_normal((geom.cout, geom.u)).astype(np.float32),
            rng.standard_normal(geom.cout).astype(np.float32),
            rng.standard_normal((n, geom.cout, h, wd)).astype(np.float32))


@pytest.mark.parametrize("geom", _grid(), ids=lambda g: f"{g.cin}-{g.cout}-cg{g.cg}-co{g.co}")
def test_scc_kernels_match_the_reference(rng, geom):
    """Forward (bias, ReLU), both input-gradient forms and the weight gradient against the
    float64 reference; outputs poisoned; batch > 1, odd spatial sizes."""
    import cupy as cp

    from tensorconv import ops

    n, h, wd = 3, 9, 7
    x, w, b, gy = _layer_data(rng, geom, n, h, wd)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    poison = lambda shape: cp.full(shape, cp.nan, cp.float32)  # noqa: E731
    y = poison((n, geom.cout, h, wd))
    ops.scc_conv2d(cp.asarray(x), cp.asarray(w), geom, cp.asarray(b), relu=True, out=y)
    want = np.maximum(scc.scc_forward(x64, w64, geom, b.astype(np.float64)), 0)
    assert rel_err(y.get(), want) <= 1e-5
    gx_want, gw_want = scc.scc_backward(x64, w64, gy64, geom)
    for variant, splits in (("input", None), ("input", 1), ("input", 3), ("gather", None),
                            ("output", None)):
        gx = poison(x.shape)
        ops.scc_conv2d_backward_data(cp.asarray(gy), cp.asarray(w), geom, variant=variant,
                                     splits=splits, out=gx)
        assert rel_err(gx.get(), gx_want) <= 1e-5, (variant, splits)
    for splits in (None, 1, 5):
        gw = poison(w.shape)
        ops.scc_conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), geom, splits=splits,
                                       out=gw)
        assert rel_err(gw.get(), gw_want) <= 1e-5, splits


def _shapes():
    from tensorconv.ops import scc_conv

    return [(t, scc_conv.BAND_TILES[i % len(scc_conv.BAND_TILES)])
            for i, t in enumerate(scc_conv.PIXEL_TILES)]


@pytest.mark.parametrize("walk,hw", [(1, 13), (1, 12), (2, 12), (0, 13)],
                         ids=["tile-a-block", "tile-a-block-aligned", "two-blocks", "one-block"])
@pytest.mark.parametrize("shape", range(7), ids=lambda i: f"shape{i}")
@pytest.mark.parametrize("cin,cout,cg,co", [(96, 150, 2, 0.33), (130, 64, 2, 0.5),
                                            (256, 200, 8, 0.25), (64, 64, 1, 0.0),
                                            (64, 70, 2, 0.5)])
def test_scc_kernels_on_every_block_shape(rng, monkeypatch, shape, cin, cout, cg, co, walk, hw):
    """Forward, input gradient and weight gradient on each block shape (forced: 64, 32 and
    16 rows, 4 x 4, 8 x 4 or 4 x 8 sums a thread, 64 to 256 pixels), several filter and
    channel tiles, pixels flat across images (13x13 or 12x12 maps, not a tile multiple:
    scalar or vector staging); the forward and input-gradient blocks each on one pixel
    tile (staged through registers or, the input gradient's on aligned maps, by cp.async),
    or walking every other tile (two blocks along the pixels), or all of them (one
    block), by cp.async."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.ops import scc_conv, scc_tiles

    assert len(_shapes()) == 7, "parametrize over every pixel tile"
    tile, band = _shapes()[shape]
    for module in (scc_conv, scc_tiles):
        monkeypatch.setattr(module, "row_tiles", lambda g: (tile.rows, tile.rows, band))
        monkeypatch.setattr(module, "pixel_tile", lambda *_, **__: tile)
    grids = []

    def pixel_grid(pixel_tiles, *_):
        grids.append(pixel_tiles)
        return pixel_tiles if walk == 1 else min(walk, pixel_tiles) if walk else 1
    if walk != 1:
        monkeypatch.setattr(scc_conv, "pixel_grid", pixel_grid)
    scc_conv.band_tiles.cache_clear()                      # memoised on the real choice
    try:
        geom = scc.scc_geometry(cin, cout, cg, co)
        x = rng.standard_normal((5, cin, hw, hw)).astype(np.float32)
        w = rng.standard_normal((cout, geom.u)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        gy = rng.standard_normal((5, cout, hw, hw)).astype(np.float32)
        x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
        y = cp.full((5, cout, hw, hw), cp.nan, cp.float32)
        ops.scc_conv2d(cp.asarray(x), cp.asarray(w), geom, cp.asarray(b), relu=True,
                       path="tiled", out=y)
        want = np.maximum(scc.scc_forward(x64, w64, geom, b.astype(np.float64)), 0)
        assert rel_err(y.get(), want) <= 1e-5
        gx_want, gw_want = scc.scc_backward(x64, w64, gy64, geom)
        for splits in (None, 1, 2):
            gx = cp.full(x.shape, cp.nan, cp.float32)
            ops.scc_conv2d_backward_data(cp.asarray(gy), cp.asarray(w), geom, splits=splits,
                                         out=gx)
            assert rel_err(gx.get(), gx_want) <= 1e-5, splits
        assert walk == 1 or (len(grids) == 4 and min(grids) > max(walk, 1)), grids
        for splits in (None, 3):
            gw = cp.full(w.shape, cp.nan, cp.float32)
            ops.scc_conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), geom, splits=splits,
                                           path="tiled", out=gw)
            assert rel_err(gw.get(), gw_want) <= 1e-5
    finally:
        scc_conv.band_tiles.cache_clear()


@pytest.mark.parametrize("cin,cout,cg,co,n,h,wd", [
    (64, 64, 2, 0.5, 4, 8, 8), (64, 64, 2, 0.33, 3, 6, 10), (96, 150, 2, 0.33, 2, 9, 9),
    (40, 130, 4, 0.75, 3, 5, 7), (16, 7, 8, 0.25, 5, 4, 4), (24, 20, 4, 0.0, 2, 3, 3),
    (32, 48, 2, 0.5, 7, 2, 2), (130, 64, 2, 0.5, 2, 7, 7), (48, 200, 8, 0.33, 1, 11, 12)])
@pytest.mark.parametrize("aligned", [True, False])
def test_the_wide_kernels_match_the_reference(rng, cin, cout, cg, co, n, h, wd, aligned):
    """The wide forward and weight gradient, forced: the most pixels a lane that fit,
    vector and scalar (planes not a multiple of 4, maps off 16 bytes), several tiles and
    blocks, pixels past the last tile; outputs poisoned."""
    import cupy as cp

    from tensorconv import ops

    geom = scc.scc_geometry(cin, cout, cg, co)
    x, w, b, gy = _layer_data(rng, geom, n, h, wd)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    want_y = np.maximum(scc.scc_forward(x64, w64, geom, b.astype(np.float64)), 0)
    want_gw = scc.scc_backward(x64, w64, gy64, geom)[1]

    def on_gpu(a):                     # off 16 bytes: one float into a bigger buffer
        if aligned:
            return cp.asarray(a)
        buf = cp.empty(a.size + 1, cp.float32)
        buf[1:] = cp.asarray(a).ravel()
        return buf[1:].reshape(a.shape)

    xd, gyd = on_gpu(x), on_gpu(gy)
    y = on_gpu(np.full(want_y.shape, np.nan, np.float32))
    ops.scc_conv2d(xd, cp.asarray(w), geom, cp.asarray(b), relu=True, path="wide", out=y)
    assert rel_err(y.get(), want_y) <= 1e-5
    for splits in (None, 1, 3):
        gw = cp.full(w.shape, cp.nan, cp.float32)
        ops.scc_conv2d_backward_weight(xd, gyd, geom, splits=splits, path="wide", out=gw)
        assert rel_err(gw.get(), want_gw) <= 1e-5, splits


@pytest.mark.parametrize("blocks", [None, 3])
@pytest.mark.parametrize("px", [4, 2, 1])
def test_the_wide_kernels_at_each_pixel_count(rng, monkeypatch, px, blocks):
    """Each pixel-per-lane instance of the two wide kernels, forced; with 3 blocks, each
    walks several pixel tiles (its next tile's copies in flight)."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.ops import scc_conv

    monkeypatch.setattr(scc_conv, "wide_px", lambda *a, **k: px)
    if blocks is not None:
        monkeypatch.setattr(scc_conv, "wide_grid", lambda *a: blocks)
    geom = scc.scc_geometry(48, 72, 2, 0.33)
    x = rng.standard_normal((3, 48, 6, 6)).astype(np.float32)
    w = rng.standard_normal((72, geom.u)).astype(np.float32)
    gy = rng.standard_normal((3, 72, 6, 6)).astype(np.float32)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    want_gw = scc.scc_backward(x64, w64, gy64, geom)[1]
    y = ops.scc_conv2d(cp.asarray(x), cp.asarray(w), geom, path="wide")
    assert rel_err(y.get(), scc.scc_forward(x64, w64, geom)) <= 1e-5
    gw = ops.scc_conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), geom, path="wide")
    assert rel_err(gw.get(), want_gw) <= 1e-5


@pytest.mark.parametrize("cin,cout,cg,co,n,h,wd", [
    (64, 64, 2, 0.5, 4, 8, 8), (64, 128, 2, 0.5, 3, 6, 10), (128, 128, 2, 0.5, 2, 9, 9),
    (40, 130, 4, 0.75, 3, 5, 7), (12, 20, 2, 0.5, 5, 4, 4), (24, 20, 4, 0.0, 2, 3, 3),
    (32, 64, 2, 0.25, 7, 2, 2), (96, 100, 2, 0.33, 1, 11, 12), (20, 7, 4, 0.0, 2, 6, 6),
    (8, 200, 2, 0.5, 2, 4, 4), (60, 36, 3, 0.5, 2, 7, 5)])
@pytest.mark.parametrize("layout", ["aligned", "odd-plane", "off-16-bytes"])
@pytest.mark.parametrize("chunk", [(2, 64, None, False), (2, 64, 5, True), (1, 32, 3, False),
                                   (2, 32, 1000, False)])
def test_the_one_pass_backward_matches_the_reference(rng, cin, cout, cg, co, n, h, wd, layout,
                                                     chunk):
    """Both gradients by blocks over every filter and channel, forced: each staging
    (double-buffered or not, 64- or 32-pixel chunks), the gradients on the same warps or
    on their own, one share, a few or one a chunk (many partial sums), octets past Cin,
    filter octets past Cout, bands wrapping, vector and scalar copies (a plane not a
    multiple of 4, maps off 16 bytes), pixels past the last chunk; outputs poisoned."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.ops import scc_fused

    stages, bn, shares, split = chunk
    if layout == "odd-plane":
        h, wd = h | 1, wd | 1
    geom = scc.scc_geometry(cin, cout, cg, co)
    x = rng.standard_normal((n, cin, h, wd)).astype(np.float32)
    w = rng.standard_normal((cout, geom.u)).astype(np.float32)
    gy = rng.standard_normal((n, cout, h, wd)).astype(np.float32)
    want_gx, want_gw = scc.scc_backward(*(a.astype(np.float64) for a in (x, w, gy)), geom)

    def on_gpu(a):                     # off 16 bytes: one float into a bigger buffer
        if layout != "off-16-bytes":
            return cp.asarray(a)
        buf = cp.empty(a.size + 1, cp.float32)
        buf[1:] = cp.asarray(a).ravel()
        return buf[1:].reshape(a.shape)

    plan = scc_fused.onepass_plan(geom, n * h * wd, stages=stages, bn=bn, shares=shares,
                                  split=split)
    assert plan is not None and plan[0].split == split
    gx = on_gpu(np.full(x.shape, np.nan, np.float32))
    gw = cp.full(w.shape, cp.nan, cp.float32)
    scc_fused._run_onepass(on_gpu(x), on_gpu(gy), on_gpu(w), geom, gx, gw, plan)
    assert rel_err(gx.get(), want_gx) <= 1e-5
    assert rel_err(gw.get(), want_gw) <= 1e-5
    gx[...] = cp.nan
    gw[...] = cp.nan
    out = ops.scc_conv2d_backward(on_gpu(x), on_gpu(gy), on_gpu(w), geom, path="onepass",
                                  out_x=gx, out_w=gw)
    assert out[0] is gx and out[1] is gw
    assert rel_err(gx.get(), want_gx) <= 1e-5
    assert rel_err(gw.get(), want_gw) <= 1e-5


@pytest.mark.parametrize("cin,cout,cg,co", [(256, 256, 2, 0.5), (96, 150, 2, 0.33)])
def test_the_one_pass_backward_refuses_a_layer_a_block_cannot_hold(rng, cin, cout, cg, co):
    """Past two weight-gradient items a thread (32,768 weights; 150 filters over bands of
    up to 80 channels): a clear error when forced, another path when automatic."""
    import cupy as cp

    from tensorconv import ops

    geom = scc.scc_geometry(cin, cout, cg, co)
    x = cp.zeros((1, cin, 4, 4), cp.float32)
    gy = cp.zeros((1, cout, 4, 4), cp.float32)
    w = cp.zeros((cout, geom.u), cp.float32)
    with pytest.raises(ValueError, match="path='onepass'"):
        ops.scc_conv2d_backward(x, gy, w, geom, path="onepass")
    gx, gw = ops.scc_conv2d_backward(x, gy, w, geom)   # auto: another path
    assert gx.shape == x.shape and gw.shape == w.shape


def test_the_backward_paths_agree_and_check_their_buffers(rng, monkeypatch, tmp_path):
    """'auto' (untuned: the one-pass kernel here), 'onepass' and 'parts' each give the
    reference's gradients; auto is the one-pass kernel bit for bit; the output buffers
    are checked by name."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.ops import scc_tc

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    scc_tc.forget_verdicts()
    geom = scc.scc_geometry(64, 64, 2, 0.5)
    xs = rng.standard_normal((64, 64, 16, 16)).astype(np.float32)
    gys = rng.standard_normal((64, 64, 16, 16)).astype(np.float32)
    ws = rng.standard_normal((64, 32)).astype(np.float32)
    want = scc.scc_backward(*(a.astype(np.float64) for a in (xs, ws, gys)), geom)
    x, gy, w = cp.asarray(xs), cp.asarray(gys), cp.asarray(ws)
    paths = ("auto", "onepass", "parts")
    got = {p: ops.scc_conv2d_backward(x, gy, w, geom, path=p) for p in paths}
    for p in paths:
        for a, b in zip(got[p], want):
            assert rel_err(a.get(), b) <= 1e-5, p
    assert all(cp.array_equal(a, b) for a, b in zip(got["auto"], got["onepass"]))
    with pytest.raises(ValueError, match="out_x has shape"):
        ops.scc_conv2d_backward(x, gy, w, geom, out_x=cp.empty((64, 64, 16, 15), cp.float32))
    with pytest.raises(ValueError, match="out_w has shape"):
        ops.scc_conv2d_backward(x, gy, w, geom, out_w=cp.empty((64, 31), cp.float32))


def test_the_gradients_are_deterministic(rng):
    import cupy as cp

    from tensorconv import ops

    geom = scc.scc_geometry(64, 96, 2, 0.5)
    x = cp.asarray(rng.standard_normal((16, 64, 14, 14)).astype(np.float32))
    gy = cp.asarray(rng.standard_normal((16, 96, 14, 14)).astype(np.float32))
    for path in ("wide", "tiled"):
        first = ops.scc_conv2d_backward_weight(x, gy, geom, path=path).copy()
        for _ in range(3):
            assert cp.array_equal(ops.scc_conv2d_backward_weight(x, gy, geom, path=path),
                                  first)
    w = cp.asarray(rng.standard_normal((96, 32)), cp.float32)
    for splits in (1, 3):                 # partial maps summed in a fixed order
        first = ops.scc_conv2d_backward_data(gy, w, geom, splits=splits).copy()
        assert bool(cp.isfinite(first).all())
        assert cp.array_equal(ops.scc_conv2d_backward_data(gy, w, geom, splits=splits), first)
    first = [a.copy() for a in ops.scc_conv2d_backward(x, gy, w, geom, path="onepass")]
    for _ in range(3):                    # each gx value written once, shares summed in order
        again = ops.scc_conv2d_backward(x, gy, w, geom, path="onepass")
        assert all(cp.array_equal(a, b) for a, b in zip(again, first))


@pytest.mark.parametrize("geom", _grid()[::3], ids=lambda g: f"{g.cin}-{g.cout}-cg{g.cg}-co{g.co}")
def test_the_window_map_in_constant_memory_equals_the_arithmetic(rng, geom):
    """The paper's per-thread forward with each window start from the channel-cyclic map in
    constant memory and with it computed: equal bit for bit, and to the reference; layers
    of different cycles in turn (each launch copies its own map in), also inside a graph."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.graph import CapturedGraph

    other = scc.scc_geometry(24, 20, 4, 0.33)
    x = cp.asarray(rng.standard_normal((3, geom.cin, 5, 7)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((geom.cout, geom.u)).astype(np.float32))
    b = cp.asarray(rng.standard_normal(geom.cout).astype(np.float32))
    x2 = cp.asarray(rng.standard_normal((2, 24, 3, 3)).astype(np.float32))
    w2 = cp.asarray(rng.standard_normal((20, other.u)).astype(np.float32))
    want = np.maximum(scc.scc_forward(x.get().astype(np.float64), w.get().astype(np.float64),
                                      geom, b.get().astype(np.float64)), 0)
    outs = {p: cp.full((3, geom.cout, 5, 7), cp.nan, cp.float32) for p in ("map", "arith")}
    y2 = cp.full((2, 20, 3, 3), cp.nan, cp.float32)

    def run():
        ops.scc_conv2d(x, w, geom, b, relu=True, path="map", out=outs["map"])
        ops.scc_conv2d(x2, w2, other, path="map", out=y2)
        ops.scc_conv2d(x, w, geom, b, relu=True, path="arith", out=outs["arith"])

    run()
    assert cp.array_equal(outs["map"], outs["arith"])
    assert rel_err(outs["map"].get(), want) <= 1e-5
    assert rel_err(y2.get(), scc.scc_forward(x2.get().astype(np.float64),
                                             w2.get().astype(np.float64), other)) <= 1e-5
    for o in (*outs.values(), y2):
        o.fill(cp.nan)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        graph = CapturedGraph(stream, run, programmatic=False)
    graph.launch(stream)
    stream.synchronize()
    assert cp.array_equal(outs["map"], outs["arith"])
    assert rel_err(outs["map"].get(), want) <= 1e-5


def _on_gpu(a, layout: str):
    """``a`` on the GPU; "off-16-bytes": one float into a bigger buffer (no vector copies)."""
    import cupy as cp

    if layout != "off-16-bytes":
        return cp.asarray(a)
    buf = cp.empty(a.size + 1, cp.float32)
    buf[1:] = cp.asarray(a).ravel()
    return buf[1:].reshape(a.shape)


@pytest.mark.parametrize("geom", _grid(), ids=lambda g: f"{g.cin}-{g.cout}-cg{g.cg}-co{g.co}")
def test_the_tensor_core_kernels_match_the_reference(rng, geom):
    """path="tc" (3xTF32 mma.sync): forward (bias, ReLU), input gradient (one share, three,
    the default) and weight gradient (one pixel share, five, the default) within fp32's
    1e-5 of the float64 reference over the cg x co grid; odd planes; outputs poisoned."""
    import cupy as cp

    from tensorconv import ops

    n, h, wd = 3, 9, 7
    x, w, b, gy = _layer_data(rng, geom, n, h, wd)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    y = cp.full((n, geom.cout, h, wd), cp.nan, cp.float32)
    ops.scc_conv2d(cp.asarray(x), cp.asarray(w), geom, cp.asarray(b), relu=True, path="tc",
                   out=y)
    want = np.maximum(scc.scc_forward(x64, w64, geom, b.astype(np.float64)), 0)
    assert rel_err(y.get(), want) <= 1e-5
    gx_want, gw_want = scc.scc_backward(x64, w64, gy64, geom)
    for splits in (None, 1, 3):
        gx = cp.full(x.shape, cp.nan, cp.float32)
        ops.scc_conv2d_backward_data(cp.asarray(gy), cp.asarray(w), geom, splits=splits,
                                     path="tc", out=gx)
        assert rel_err(gx.get(), gx_want) <= 1e-5, splits
    for splits in (None, 1, 5):
        gw = cp.full(w.shape, cp.nan, cp.float32)
        ops.scc_conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), geom, splits=splits,
                                       path="tc", out=gw)
        assert rel_err(gw.get(), gw_want) <= 1e-5, splits
    gx, gw = ops.scc_conv2d_backward(cp.asarray(x), cp.asarray(gy), cp.asarray(w), geom,
                                     path="tc")
    assert rel_err(gx.get(), gx_want) <= 1e-5 and rel_err(gw.get(), gw_want) <= 1e-5


@pytest.mark.parametrize("rows", [16, 32, 64, 128])
@pytest.mark.parametrize("cols", [64, 128])
@pytest.mark.parametrize("layout", ["aligned", "odd-plane", "off-16-bytes"])
@pytest.mark.parametrize("cin,cout,cg,co", [(96, 150, 2, 0.33), (130, 64, 2, 0.5),
                                            (256, 200, 8, 0.25), (64, 70, 2, 0.5)])
def test_the_tensor_core_kernels_on_every_tile(rng, monkeypatch, rows, cols, layout, cin,
                                               cout, cg, co):
    """Every instantiated tile of the three GEMMs, forced: several row tiles (a last one
    part full), bands over several column tiles, pixels flat across images and past the
    last tile, 16-byte copies (planes of 4k pixels) and 4-byte ones (odd planes, maps off
    16 bytes); outputs poisoned."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.ops import scc_tc

    monkeypatch.setattr(scc_tc, "_band_rows", lambda g, c: rows)
    monkeypatch.setattr(scc_tc, "_data_rows", lambda g: rows)
    monkeypatch.setattr(scc_tc, "_pixel_cols", lambda *_: cols)
    monkeypatch.setattr(scc_tc, "COLS", (cols,))
    n, h, wd = (5, 13, 13) if layout == "odd-plane" else (4, 12, 8)
    geom = scc.scc_geometry(cin, cout, cg, co)
    x, w, b, gy = _layer_data(rng, geom, n, h, wd)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    y = _on_gpu(np.full((n, cout, h, wd), np.nan, np.float32), layout)
    ops.scc_conv2d(_on_gpu(x, layout), cp.asarray(w), geom, cp.asarray(b), path="tc", out=y)
    assert rel_err(y.get(), scc.scc_forward(x64, w64, geom, b.astype(np.float64))) <= 1e-5
    gx_want, gw_want = scc.scc_backward(x64, w64, gy64, geom)
    gx = _on_gpu(np.full(x.shape, np.nan, np.float32), layout)
    gw = cp.full(w.shape, cp.nan, cp.float32)
    ops.scc_conv2d_backward(_on_gpu(x, layout), _on_gpu(gy, layout), cp.asarray(w), geom,
                            path="tc", out_x=gx, out_w=gw)
    assert rel_err(gx.get(), gx_want) <= 1e-5
    assert rel_err(gw.get(), gw_want) <= 1e-5


def _force_walk(monkeypatch, blocks, chunk) -> None:
    """scc_tc_walk's walking blocks a row tile (``blocks``) and chunk rows (``chunk``)
    forced where not None."""
    from tensorconv.ops import scc_tc_walk

    if blocks is not None:
        monkeypatch.setattr(scc_tc_walk, "_walk_blocks", lambda *_: blocks)
    if chunk is not None:
        chunks = tuple(c for c in scc_tc_walk.WALK_CHUNKS if c[0] == chunk)
        monkeypatch.setattr(scc_tc_walk, "WALK_CHUNKS", chunks)


@pytest.mark.parametrize("layout", ["aligned", "odd-plane", "off-16-bytes"])
@pytest.mark.parametrize("blocks,chunk", [(None, None), (3, None), (None, 16), (3, 32)])
@pytest.mark.parametrize("cin,cout,cg,co", [(96, 150, 2, 0.33), (130, 64, 2, 0.5),
                                            (256, 200, 8, 0.25), (64, 70, 2, 0.5),
                                            (60, 90, 3, 0.75), (200, 64, 2, 0.0),
                                            (8, 48, 2, 0.5), (12, 40, 2, 0.5)])
def test_the_walking_tensor_core_kernels_match_the_reference(rng, monkeypatch, layout, blocks,
                                                             chunk, cin, cout, cg, co):
    """scc_tc_walk, forced on (and scc_tc, forced off, the same arrays): the forward (bias,
    ReLU) and the input gradient within fp32's 1e-5 of the float64 reference; blocks that
    fill the GPU once or three blocks a row tile, each walking many pixel tiles (a last
    one part full); the plan's chunks, or 16- or 32-row ones forced; the input gradient
    on blocks of 16 and of 32 rows; 16-byte copies and 4-byte ones; fewer input channels
    than a chunk's rows (the carried channels wrap more than once); outputs poisoned."""
    import cupy as cp

    from tensorconv.ops import scc_tc, scc_tc_walk

    _force_walk(monkeypatch, blocks, chunk)
    n, h, wd = (5, 13, 13) if layout == "odd-plane" else (4, 12, 8)
    geom = scc.scc_geometry(cin, cout, cg, co)
    x, w, b, gy = _layer_data(rng, geom, n, h, wd)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    y_want = np.maximum(scc.scc_forward(x64, w64, geom, b.astype(np.float64)), 0)
    gx_want, _ = scc.scc_backward(x64, w64, gy64, geom)
    xg, gyg, wg, bg = _on_gpu(x, layout), _on_gpu(gy, layout), cp.asarray(w), cp.asarray(b)
    for walk in (True, False):
        if walk:
            for mode in (0, 1):
                tile, _ = scc_tc.walk_plan(geom, n * h * wd, mode, force=True)
                assert chunk is None or tile.kc == chunk
        y = _on_gpu(np.full(y_want.shape, np.nan, np.float32), layout)
        scc_tc.run_forward(xg, wg, geom, bg, True, y, walk=walk)
        assert rel_err(y.get(), y_want) <= 1e-5, walk
        gx = _on_gpu(np.full(x.shape, np.nan, np.float32), layout)
        scc_tc.run_backward_data(gyg, wg, geom, None, gx, walk=walk)
        assert rel_err(gx.get(), gx_want) <= 1e-5, walk
    for rows in scc_tc_walk.WALK_SHAPES:        # the input gradient on either block rows
        if scc_tc.walk_plan(geom, n * h * wd, 1, force=True, rows=rows) is None:
            continue
        gx = _on_gpu(np.full(x.shape, np.nan, np.float32), layout)
        scc_tc.run_backward_data(gyg, wg, geom, None, gx, walk=True, rows=rows)
        assert rel_err(gx.get(), gx_want) <= 1e-5, rows


@pytest.mark.parametrize("shape", [(2, 8, 64, 3), (1, 16, 64, 3), (4, 4, 64, 3),
                                   (1, 8, 64, 3), (2, 4, 32, 2), (2, 4, 64, 3)])
@pytest.mark.parametrize("layout", ["aligned", "odd-plane", "off-16-bytes"])
@pytest.mark.parametrize("cin,cout,cg,co", [(96, 150, 2, 0.33), (130, 64, 2, 0.5),
                                            (256, 200, 8, 0.25), (60, 90, 3, 0.75),
                                            (8, 48, 2, 0.5)])
def test_the_tensor_core_weight_gradient_by_warp_shares_matches_the_reference(
        rng, monkeypatch, shape, layout, cin, cout, cg, co):
    """scc_tc_wgrad on every instantiated tile (and the smallest with 64-pixel chunks three
    deep), forced: one pixel share (written in place), the default and seven (a last one
    part full; chunks past the map zero), bands over several column tiles, a last row
    tile part full; 16-byte and 4-byte copies; within fp32's 1e-5 of the float64
    reference, poisoned, and the same bits twice."""
    import cupy as cp

    from tensorconv.ops import scc_tc, scc_tc_walk

    tile = scc_tc_walk.WGradTile(*shape)
    monkeypatch.setattr(scc_tc_walk, "_wgrad_tile", lambda g: tile)
    n, h, wd = (5, 13, 13) if layout == "odd-plane" else (4, 12, 8)
    geom = scc.scc_geometry(cin, cout, cg, co)
    x, w, _, gy = _layer_data(rng, geom, n, h, wd)
    _, gw_want = scc.scc_backward(x.astype(np.float64), w.astype(np.float64),
                                  gy.astype(np.float64), geom)
    xg, gyg = _on_gpu(x, layout), _on_gpu(gy, layout)
    for splits in (1, None, 7):
        gw = cp.full(w.shape, cp.nan, cp.float32)
        scc_tc.run_backward_weight(xg, gyg, geom, splits, gw, walk=True)
        assert rel_err(gw.get(), gw_want) <= 1e-5, splits
        again = cp.full(w.shape, cp.nan, cp.float32)
        scc_tc.run_backward_weight(xg, gyg, geom, splits, again, walk=True)
        assert cp.array_equal(gw, again), splits


def test_the_tensor_core_gradients_are_deterministic_and_captured(rng):
    """path="tc": the same bits on every run (each value one block's sum, the shares added
    in order), eager and replayed from a CUDA graph (programmatic edges too); the weight
    gradient's shares summed by the input gradient's launch (carry) or by their own, both
    within fp32's 1e-5 of the reference."""
    import cupy as cp

    from tensorconv import ops
    from tensorconv.graph import CapturedGraph, supported
    from tensorconv.ops import scc_tc

    geom = scc.scc_geometry(64, 96, 2, 0.5)
    xs = rng.standard_normal((16, 64, 14, 14)).astype(np.float32)
    gys = rng.standard_normal((16, 96, 14, 14)).astype(np.float32)
    ws = rng.standard_normal((96, 32)).astype(np.float32)
    want = scc.scc_backward(*(a.astype(np.float64) for a in (xs, ws, gys)), geom)
    x, gy, w = cp.asarray(xs), cp.asarray(gys), cp.asarray(ws)
    assert scc_tc.run_backward(x, gy, w, geom, cp.empty_like(x), cp.empty_like(w))
    apart = ops.scc_conv2d_backward(x, gy, w, geom, path="tc", carry=False)
    first = [a.copy() for a in ops.scc_conv2d_backward(x, gy, w, geom, path="tc")]
    for a, b, ref in zip(first, apart, want):
        assert rel_err(a.get(), ref) <= 1e-5 and rel_err(b.get(), ref) <= 1e-5
    gx, gw = cp.empty_like(first[0]), cp.empty_like(first[1])
    stream = cp.cuda.Stream(non_blocking=True)

    def run():
        ops.scc_conv2d_backward(x, gy, w, geom, path="tc", out_x=gx, out_w=gw)

    run()
    for programmatic in (False, supported()):   # programmatic: the training step's edges
        with stream:
            run()
            graph = CapturedGraph(stream, run, programmatic=programmatic)
        for _ in range(3):
            with stream:
                gx.fill(cp.nan)
                gw.fill(cp.nan)
            graph.launch(stream)
            stream.synchronize()
            assert cp.array_equal(gx, first[0]) and cp.array_equal(gw, first[1])


@pytest.mark.parametrize("layout", ["aligned", "odd-plane"])
@pytest.mark.parametrize("blocks", [None, 2, 5, 40])
@pytest.mark.parametrize("cin,cout,cg,co", [(64, 96, 2, 0.5), (60, 90, 3, 0.75),
                                            (96, 150, 2, 0.33), (12, 40, 2, 0.5)])
def test_the_input_gradient_carries_the_weight_gradients_share_sums(
        rng, monkeypatch, layout, blocks, cin, cout, cg, co):
    """scc_tc_walk summing scc_tc_wgrad's pixel shares (a slice a block, 1 to 32 threads a
    value, a last block part full): both gradients within fp32's 1e-5 of the float64
    reference, poisoned (the weight gradient untouched until the carrying launch), the
    same bits twice; carried exactly where one pass of the grid holds the sums, a sum
    past it refused."""
    import cupy as cp

    from tensorconv import backend
    from tensorconv.ops import scc_tc, scc_tc_walk

    if blocks is not None:
        monkeypatch.setattr(scc_tc_walk, "_walk_blocks", lambda *_: blocks)
    n, h, wd = (5, 13, 13) if layout == "odd-plane" else (4, 12, 8)
    geom = scc.scc_geometry(cin, cout, cg, co)
    x, w, _, gy = _layer_data(rng, geom, n, h, wd)
    gx_want, gw_want = scc.scc_backward(*(a.astype(np.float64) for a in (x, w, gy)), geom)
    xg, gyg, wg = _on_gpu(x, layout), _on_gpu(gy, layout), cp.asarray(w)
    q, size = n * h * wd, geom.cout * geom.u
    dplan = scc_tc.walk_plan(geom, q, 1, force=True)
    sms = backend.device_facts().sm_count
    gx, gw = cp.empty_like(xg), cp.empty_like(wg)
    carried = []
    for splits in (2, 7, 40):
        wplan = scc_tc_walk.wgrad_plan(geom, q, sms, splits, force=True)
        if not scc_tc_walk.carries(dplan, geom, q, size):
            continue
        outs = []
        for _ in range(2):
            gx = _on_gpu(np.full(x.shape, np.nan, np.float32), layout)
            gw = cp.full(w.shape, cp.nan, cp.float32)
            carry = scc_tc_walk.run_wgrad(wplan, xg, gyg, geom, gw, reduce=False)
            assert carry is not None and carry[2] == wplan[2] and bool(cp.isnan(gw).all())
            scc_tc_walk.run_walk(dplan, gyg, wg, geom, None, False, gx, carry=carry)
            assert rel_err(gx.get(), gx_want) <= 1e-5 and rel_err(gw.get(), gw_want) <= 1e-5
            outs.append((gx, gw))
        assert all(cp.array_equal(a, b) for a, b in zip(*outs)), splits
        carried.append(splits)
    walking, rows = scc_tc_walk.walk_grid(dplan, geom, q)
    assert bool(carried) == (walking * rows * scc_tc_walk.WALK_THREADS >= size)
    assert carried or blocks != 40              # forty blocks a row tile carry every layer here
    if blocks == 2:
        with pytest.raises(ValueError, match="cannot carry"):
            scc_tc_walk.run_walk(dplan, gyg, wg, geom, None, False, gx,
                                 carry=(gw, gw, 2, 1 << 20))


@pytest.mark.parametrize("layout", ["aligned", "odd-plane", "off-16-bytes"])
@pytest.mark.parametrize("blocks,chunk", [(None, None), (3, None), (1, None), (None, 16)])
@pytest.mark.parametrize("cin,cout,cg,co", [(64, 96, 2, 0.5), (60, 90, 3, 0.75),
                                            (96, 150, 2, 0.33), (12, 40, 2, 0.5),
                                            (130, 64, 2, 0.5), (64, 64, 2, 0.5),
                                            (64, 2, 4, 0.0)])
def test_both_gradients_in_one_walk_match_the_reference(rng, monkeypatch, layout, blocks,
                                                        chunk, cin, cout, cg, co):
    """scc_tc_walk's mode 2 (run_both): the input gradient and the weight gradient from
    one walk over gy, within fp32's 1e-5 of the float64 reference; blocks that fill the
    GPU once, three or one a channel tile (one: its share is the gradient, written in
    place), each walking many pixel tiles, a last one part full; 16- and 32-row chunks
    (one or two a tile, so two to four x buffers); 16-byte and 4-byte copies; a last
    channel tile part full, and channel tiles no window meets (Cout under the cycle:
    their gx zero); outputs poisoned; the same bits twice."""
    import cupy as cp

    from tensorconv.ops import scc_tc, scc_tc_walk
    from tensorconv.ops.scc_tiles import data_tiles

    _force_walk(monkeypatch, blocks, chunk)
    n, h, wd = (5, 13, 13) if layout == "odd-plane" else (4, 12, 8)
    geom = scc.scc_geometry(cin, cout, cg, co)
    x, w, _, gy = _layer_data(rng, geom, n, h, wd)
    gx_want, gw_want = scc.scc_backward(*(a.astype(np.float64) for a in (x, w, gy)), geom)
    plan = scc_tc.walk_plan(geom, n * h * wd, 2, force=True)
    tile1, _ = scc_tc.walk_plan(geom, n * h * wd, 1, force=True)
    kc = max(c for c, _ in scc_tc_walk.WALK_CHUNKS)
    longest = int(np.max(np.diff(data_tiles(geom, tile1.rows)[0])))
    assert (plan is None) == (longest > scc_tc_walk.BOTH_CHUNKS * kc)
    if plan is None:   # a filter list longer than two chunks
        return
    assert chunk is None or plan[0].kc == chunk
    xg, gyg, wg = _on_gpu(x, layout), _on_gpu(gy, layout), cp.asarray(w)
    outs = []
    for _ in range(2):
        gx = _on_gpu(np.full(x.shape, np.nan, np.float32), layout)
        gw = cp.full(w.shape, cp.nan, cp.float32)
        scc_tc_walk.run_both(plan, xg, gyg, wg, geom, gx, gw)
        assert rel_err(gx.get(), gx_want) <= 1e-5 and rel_err(gw.get(), gw_want) <= 1e-5
        outs.append((gx, gw))
    assert all(cp.array_equal(a, b) for a, b in zip(*outs))


def test_the_walk_path_runs_both_gradients_in_one_walk_and_auto_follows_its_verdict(
        rng, monkeypatch, tmp_path):
    """ops.scc_conv2d_backward(path="walk"): scc_tc.run_both's bits, within fp32's 1e-5 of
    the float64 reference; a clear ValueError where the filter lists are past two chunks;
    a stored "walk" verdict makes "auto" run it, and "parts" or "onepass" verdicts what
    they name."""
    import cupy as cp

    from tensorconv import ops, tunecache
    from tensorconv.ops import scc_tc

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    scc_tc.forget_verdicts()
    geom = scc.scc_geometry(64, 128, 2, 0.5)
    x, w, _, gy = _layer_data(rng, geom, 6, 16, 16)
    want = scc.scc_backward(*(a.astype(np.float64) for a in (x, w, gy)), geom)
    xg, gyg, wg = cp.asarray(x), cp.asarray(gy), cp.asarray(w)
    gx, gw = cp.full(x.shape, cp.nan, cp.float32), cp.full(w.shape, cp.nan, cp.float32)
    got = ops.scc_conv2d_backward(xg, gyg, wg, geom, path="walk", out_x=gx, out_w=gw)
    assert got[0] is gx and got[1] is gw
    assert rel_err(gx.get(), want[0]) <= 1e-5 and rel_err(gw.get(), want[1]) <= 1e-5
    direct = (cp.empty_like(gx), cp.empty_like(gw))
    scc_tc.run_both(xg, gyg, wg, geom, *direct)
    assert cp.array_equal(direct[0], gx) and cp.array_equal(direct[1], gw)
    for path in ("walk", "parts", "onepass"):
        tunecache.store(scc_tc.decision_key(geom, 6 * 256, 256, "backward"), {"path": path})
        scc_tc.forget_verdicts()
        auto = ops.scc_conv2d_backward(xg, gyg, wg, geom)
        named = ops.scc_conv2d_backward(xg, gyg, wg, geom, path=path)
        assert all(cp.array_equal(a, b) for a, b in zip(auto, named)), path
    scc_tc.forget_verdicts()
    wide = scc.scc_geometry(96, 192, 2, 0.25)            # lists of 128 filters: no plan
    x2, w2, _, gy2 = _layer_data(rng, wide, 2, 8, 8)
    with pytest.raises(ValueError, match="walk"):
        ops.scc_conv2d_backward(cp.asarray(x2), cp.asarray(gy2), cp.asarray(w2), wide,
                                path="walk")


def test_auto_follows_the_tuners_verdicts(rng, monkeypatch, tmp_path):
    """tuning.scc_paths.tune times both kernel families and stores a verdict a side; the
    ops' path="auto" then runs exactly what the verdict names (the same bits as forcing
    it), also after the opposite verdicts are stored; untuned, the FMA kernels."""
    import cupy as cp

    from tensorconv import ops, tunecache
    from tensorconv.ops import scc_tc
    from tensorconv.tuning import scc_paths

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    scc_tc.forget_verdicts()
    geom = scc.scc_geometry(64, 96, 2, 0.5)
    shape = (16, 64, 8, 8)
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    gy = cp.asarray(rng.standard_normal((16, 96, 8, 8)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((96, 32)).astype(np.float32))
    fams = {"forward": lambda p: ops.scc_conv2d(x, w, geom, path=p),
            "data": lambda p: ops.scc_conv2d_backward_data(gy, w, geom, path=p),
            "weight": lambda p: ops.scc_conv2d_backward_weight(x, gy, geom, path=p)}
    for side, fn in fams.items():                           # untuned: the FMA kernels
        assert cp.array_equal(fn("auto"), fn("fma")), side
    times = scc_paths.tune(geom, shape, repeat=3)
    assert all(v > 0 for v in vars(times).values() if v is not None)
    for flip in (False, True):
        if flip:                                            # the opposite verdicts
            for side in fams:
                key = scc_tc.decision_key(geom, 16 * 64, 64, side)
                tunecache.store(key, {"tc": not scc_tc.verdict(geom, 16 * 64, 64, side)})
            scc_tc.forget_verdicts()
        for side, fn in fams.items():
            want = "tc" if scc_tc.verdict(geom, 16 * 64, 64, side) else "fma"
            assert cp.array_equal(fn("auto"), fn(want)), (side, flip)
    chosen = scc_tc.verdict(geom, 16 * 64, 64, "backward")
    assert chosen in scc_tc.BACKWARD_CHOICES
    got = ops.scc_conv2d_backward(x, gy, w, geom)
    want = ops.scc_conv2d_backward(x, gy, w, geom, path=chosen)
    assert all(cp.array_equal(a, b) for a, b in zip(got, want))
    scc_tc.forget_verdicts()
