"""Sliding-channel convolution: the channel map, the reference against the dense-masked
1x1 form, gradients, bad parameters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.reference import scc

GRID = [(cin, cout, cg, co) for cin, cout in ((8, 8), (12, 20), (16, 5), (6, 11))
        for cg in (1, 2, 4) if cin % cg == 0 for co in (0.0, 0.25, 1 / 3, 0.5, 0.75)
        if (cin // cg) - int(np.floor(co * (cin // cg) + 0.5)) >= 1]


def test_the_papers_figures():
    g = scc.scc_geometry(4, 4, 2, 0.5)                 # Fig. 2(c): windows {0,1}, {1,2}, ...
    assert g.u == 2 and g.stride == 1 and g.channels().tolist() == [[0, 1], [1, 2], [2, 3],
                                                                     [3, 0]]
    assert g.cycle == 4                                # Fig. 5(a): every four filters repeat
    assert scc.scc_geometry(6, 6, 2, 1 / 3).cycle == 3  # Fig. 5(b) (co 33 %)
    assert scc.scc_geometry(8, 8, 1, 0.5).u == 8       # cg = 1: every channel


@pytest.mark.parametrize("cin,cout,cg,co", GRID)
def test_forward_and_backward_equal_the_dense_masked_1x1(rng, cin, cout, cg, co):
    g = scc.scc_geometry(cin, cout, cg, co)
    x = rng.standard_normal((2, cin, 3, 4))
    w = rng.standard_normal((cout, g.u))
    b = rng.standard_normal(cout)
    dense = scc.dense_weights(w, g)
    assert np.count_nonzero(dense) == cout * g.u       # windows never repeat a channel
    y = scc.scc_forward(x, w, g, b)
    want = reference.conv2d(x, dense[:, :, None, None], b)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    gy = rng.standard_normal(y.shape)
    gx, gw = scc.scc_backward(x, w, gy, g)
    np.testing.assert_allclose(gx, np.einsum("kc,nkhw->nchw", dense, gy), atol=1e-12)
    gdense = np.einsum("nkhw,nchw->kc", gy, x)
    np.testing.assert_allclose(gw, gdense[np.arange(cout)[:, None], g.channels()], atol=1e-12)


@pytest.mark.parametrize("args,exc,msg", [
    ((6, 8, 4, 0.5), ValueError, "cg=4 does not divide the 6"),
    ((8, 8, 2, 1.0), ValueError, "co must be < 1"),
    ((8, 8, 2, -0.1), ValueError, "co must be >= 0"),
    ((8, 8, 8, 0.6), ValueError, "stride of 0"),
    ((8, 8, 2.0, 0.5), TypeError, "cg must be an int"),
    ((8, 0, 2, 0.5), ValueError, "cout must be >= 1"),
])
def test_bad_parameters_are_refused(args, exc, msg):
    with pytest.raises(exc, match=msg):
        scc.scc_geometry(*args)


def test_parameter_and_flop_counts_against_pw_and_gpw():
    g = scc.scc_geometry(64, 128, 2, 0.5)
    assert g.params == 128 * 32                        # GPW-cg2's count, PW's half
    assert g.macs(56 * 56) == 128 * 32 * 56 * 56


def test_the_layer_trains_through_the_autograd(rng):
    from tensorconv.autograd import Tensor, gradcheck
    from tensorconv.autograd import functions as F
    from tensorconv.nn.scc import SCCConv2d

    layer = SCCConv2d(12, 10, 2, 0.5, bias=True, rng=rng)
    x = rng.standard_normal((2, 12, 3, 3))
    w = Tensor(layer.weight.data.astype(np.float64), requires_grad=True)
    b = Tensor(rng.standard_normal(10), requires_grad=True)
    xt = Tensor(x, requires_grad=True)
    assert gradcheck(lambda a, ww, bb: F.scc_conv(a, ww, layer.geom, bb), [xt, w, b])
    y = layer(Tensor(x.astype(np.float32)))
    np.testing.assert_allclose(y.data, scc.scc_forward(x, layer.weight.data, layer.geom),
                               rtol=1e-5, atol=1e-5)
    assert layer.macs == 10 * 6 * 2 * 9 and layer.num_parameters() == 10 * 6 + 10
    with pytest.raises(ValueError, match="cg=5 does not divide"):
        SCCConv2d(12, 10, 5, 0.5)


@pytest.mark.parametrize("cin,cout,cg,co", [(12, 10, 2, 0.5), (8, 3, 4, 0.0), (9, 14, 3, 0.34),
                                            (6, 6, 1, 0.0), (16, 40, 2, 0.75)])
@pytest.mark.parametrize("impl", ["scc_channel_stack", "scc_conv_stack"])
def test_the_papers_operator_stacks_compute_scc_and_its_gradients(rng, cin, cout, cg, co, impl):
    """Base (channel stack) and Opt (convolution stack, channel-cyclic): forward against the
    window-by-window reference, gradients against the dense-masked SCC, and gradcheck."""
    from tensorconv.autograd import Tensor, gradcheck
    from tensorconv.autograd import functions as F

    g = scc.scc_geometry(cin, cout, cg, co)
    fn = getattr(F, impl)
    x = rng.standard_normal((2, cin, 3, 4))
    w, b = rng.standard_normal((cout, g.u)), rng.standard_normal(cout)
    y = fn(Tensor(x), Tensor(w), g, Tensor(b)).data
    np.testing.assert_allclose(y, scc.scc_forward(x, w, g, b), rtol=1e-12, atol=1e-12)
    gy = rng.standard_normal(y.shape)
    grads = []
    for f in (fn, F.scc_conv):
        ts = [Tensor(a, requires_grad=True) for a in (x, w, b)]
        f(ts[0], ts[1], g, ts[2]).backward(gy)
        grads.append([t.grad for t in ts])
    for ours, dense in zip(*grads):
        np.testing.assert_allclose(ours, dense, rtol=1e-10, atol=1e-10)
    ts = [Tensor(a, requires_grad=True) for a in (x[:1, :, :2, :2], w, b)]
    assert gradcheck(lambda a, ww, bb: fn(a, ww, g, bb), ts)
    with pytest.raises(ValueError, match="w must be"):
        fn(Tensor(x), Tensor(w[:, :-1]), g)


def test_the_operator_stacks_build_what_the_paper_says():
    """Base slices every filter's window (two slices when it wraps); Opt builds each of the
    cycle's windows once and one convolution per filter."""
    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F
    from tensorconv.autograd.functions import connection, math

    calls = {"slice": 0, "conv": 0}
    g = scc.scc_geometry(8, 12, 2, 0.5)          # U 4, stride 2, cycle 4: windows wrap at k=3
    orig_slice, orig_conv = math.Slice.apply, connection.Conv2d.apply

    def counting(kind, orig):
        def apply(*a, **kw):
            calls[kind] += 1
            return orig(*a, **kw)
        return apply

    x, w = Tensor(np.ones((1, 8, 2, 2))), Tensor(np.ones((12, 4)))
    try:
        math.Slice.apply = counting("slice", orig_slice)
        connection.Conv2d.apply = counting("conv", orig_conv)
        F.scc_channel_stack(x, w, g)
        assert calls == {"slice": 12 + 3, "conv": 1}     # filters 3, 7, 11 wrap
        calls.update(slice=0, conv=0)
        F.scc_conv_stack(x, w, g)
        assert calls == {"slice": 4 + 1 + 12, "conv": 12}  # 4 windows (one wraps), 12 weights
    finally:
        math.Slice.apply, connection.Conv2d.apply = orig_slice, orig_conv


# ----------------------------------------------------------------------------- networks

@pytest.mark.parametrize("name,kw,mmacs,params", [
    # DSXplore's Table II (CIFAR-10, SCC-cg2-co50): MFLOPs (multiply-adds), parameters (M)
    ("vgg16", {}, 21.85, 0.87), ("vgg19", {}, 26.92, 1.19), ("resnet18", {}, 43.99, 0.84),
    ("resnet50", dict(stem="cifar", num_classes=10), 735.79, 12.87),
])
def test_dw_scc_networks_have_the_papers_costs(name, kw, mmacs, params):
    from tensorconv.compress.separable import separable
    from tensorconv.nn import count_flops_params, get_model

    c = count_flops_params(separable(get_model(name, **kw), "scc", cg=2, co=0.5),
                           (1, 3, 32, 32))
    assert c["params"] / 1e6 == pytest.approx(params, rel=0.01)
    assert c["macs"] / 1e6 == pytest.approx(mmacs, rel=0.06)   # theirs count BN's work too


@pytest.mark.parametrize("pointwise", ["scc", "gpw", "pw"])
def test_separable_forms_run_and_order_their_costs(rng, pointwise):
    from tensorconv.autograd import Tensor, no_grad
    from tensorconv.compress.separable import separable
    from tensorconv.nn import count_flops_params, get_model

    model = separable(get_model("mobilenet_v1", in_channels=1), pointwise, cg=4, co=0.25)
    model.eval()
    with no_grad():
        assert model(Tensor(rng.standard_normal((2, 1, 32, 32)).astype(np.float32))).shape \
            == (2, 10)
    params = count_flops_params(model, (1, 1, 32, 32))["params"]
    full = count_flops_params(get_model("mobilenet_v1", in_channels=1), (1, 1, 32, 32))
    assert params < full["params"] if pointwise != "pw" else params == full["params"]


def test_separable_refuses_what_it_cannot_do():
    from tensorconv.compress.separable import separable
    from tensorconv.nn import get_model

    with pytest.raises(ValueError, match="no depthwise-separable form of a DenseNet"):
        separable(get_model("densenet121"))
    with pytest.raises(ValueError, match="pointwise must be one of"):
        separable(get_model("vgg16"), "dw")
    with pytest.raises(ValueError, match="cg=3 does not divide"):
        separable(get_model("vgg16"), "scc", cg=3)


# ----------------------------------------------------------------------------- the op

@pytest.mark.parametrize("cin,cout,cg,co", [(12, 10, 2, 0.5), (9, 14, 3, 0.34), (16, 40, 2, 0.75),
                                            (8, 3, 4, 0.0)])
def test_the_channel_map_gathers_the_input_gradient(rng, cin, cout, cg, co):
    """The input-centric kernel's table: channel c's (filter, weight) pairs give exactly the
    reference input gradient, in filter order, every weight once."""
    from tensorconv.ops import scc_conv

    g = scc.scc_geometry(cin, cout, cg, co)
    ptr, ks, widx = scc_conv.channel_map(g)
    assert ptr[-1] == cout * g.u and sorted(widx) == list(range(cout * g.u))
    w = rng.standard_normal((cout, g.u))
    gy = rng.standard_normal((2, cout, 3, 2))
    gx = np.zeros((2, cin, 3, 2))
    for c in range(cin):
        pairs = list(zip(ks[ptr[c]:ptr[c + 1]], widx[ptr[c]:ptr[c + 1]]))
        assert [k for k, _ in pairs] == sorted(k for k, _ in pairs)
        for k, i in pairs:
            assert i // g.u == k and g.channels()[k, i % g.u] == c
            gx[:, c] += w.reshape(-1)[i] * gy[:, k]
    want = scc.scc_backward(np.zeros((2, cin, 3, 2)), w, gy, g)[0]
    np.testing.assert_allclose(gx, want, rtol=1e-12, atol=1e-12)


BAND_GRID = [(12, 10, 2, 0.5), (9, 14, 3, 0.34), (16, 40, 2, 0.75), (8, 3, 4, 0.0),
             (64, 150, 2, 0.33), (200, 70, 8, 0.25), (96, 130, 1, 0.0), (130, 64, 2, 0.5)]


def band_tiles(g, rows):
    """(sorted filters, band channels, dense-masked band weights) of each filter tile, as
    the forward and weight-gradient kernels stage them."""
    from tensorconv.ops import scc_conv

    order, starts = scc_conv.sorted_filters(g)
    for t, span in enumerate(scc_conv.band_spans(g, rows)):
        i0 = t * rows
        idx, lo = order[i0:i0 + rows], starts[i0]
        pos = (starts[i0:i0 + rows] - lo)[:, None] + np.arange(g.u)   # (tile, U)
        yield idx, (lo + np.arange(span)) % g.cin, pos


@pytest.mark.parametrize("rows", [64, 32, 16])
@pytest.mark.parametrize("cin,cout,cg,co", BAND_GRID)
def test_filter_bands_give_the_forward_and_the_weight_gradient(rng, cin, cout, cg, co, rows):
    """The forward and weight-gradient kernels' tiles: filters sorted by window start,
    ``rows`` at a time, each tile a GEMM over one band of channels with its weights
    dense-masked (emulated here in NumPy) give the reference; a tile inside one window
    group reads U channels; every (filter, weight) lies in one band."""
    from tensorconv.ops import scc_conv

    g = scc.scc_geometry(cin, cout, cg, co)
    order, starts = scc_conv.sorted_filters(g)
    assert sorted(order) == list(range(cout)) and np.all(np.diff(starts) >= 0)
    assert np.array_equal(starts, g.starts()[order])
    x = rng.standard_normal((2, cin, 3, 2))
    w = rng.standard_normal((cout, g.u))
    gy = rng.standard_normal((2, cout, 3, 2))
    y, gw, seen = np.zeros_like(gy), np.zeros_like(w), np.zeros(w.shape, int)
    for idx, band, pos in band_tiles(g, rows):
        assert band.size < 2 * cin + g.u
        wb = np.zeros((idx.size, band.size))
        np.put_along_axis(wb, pos, w[idx], axis=1)
        y[:, idx] = np.einsum("kv,nvhw->nkhw", wb, x[:, band])
        full = np.einsum("nkhw,nvhw->kv", gy[:, idx], x[:, band])
        gw[idx] = np.take_along_axis(full, pos, axis=1)
        seen[idx] += 1
        if np.unique(g.starts()[idx]).size == 1:
            assert band.size == g.u
    assert np.all(seen == 1)
    want_gx, want_gw = scc.scc_backward(x, w, gy, g)
    np.testing.assert_allclose(y, scc.scc_forward(x, w, g), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, want_gw, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows", [64, 32, 16])
@pytest.mark.parametrize("cin,cout,cg,co", BAND_GRID)
def test_channel_tiles_give_the_input_gradient(rng, cin, cout, cg, co, rows):
    """The input-gradient kernel's table: each tile of ``rows`` channels lists exactly the
    filters whose window meets it (in window order), and pulling from them (weights
    dense-masked, emulated here) gives the reference."""
    from tensorconv.ops import scc_conv

    g = scc.scc_geometry(cin, cout, cg, co)
    ptr, ks = scc_conv.data_tiles(g, rows)
    w = rng.standard_normal((cout, g.u))
    gy = rng.standard_normal((2, cout, 3, 2))
    dense = scc.dense_weights(w, g)
    gx = np.zeros((2, cin, 3, 2))
    for t in range(ptr.size - 1):
        tile = np.arange(t * rows, min((t + 1) * rows, cin))
        listed = ks[ptr[t]:ptr[t + 1]]
        meets = [k for k in range(cout) if np.isin(g.channels()[k], tile).any()]
        assert sorted(listed) == meets
        assert np.all(np.diff(g.starts()[listed]) >= 0)
        gx[:, tile] = np.einsum("kc,nkhw->nchw", dense[listed][:, tile], gy[:, listed])
    want = scc.scc_backward(np.zeros((2, cin, 3, 2)), w, gy, g)[0]
    np.testing.assert_allclose(gx, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows", [32, 16])
@pytest.mark.parametrize("cin,cout,cg,co", BAND_GRID)
def test_padded_lists_hold_each_tiles_filters_and_their_starts(cin, cout, cg, co, rows):
    """scc_tc_walk's lists: tile t's entries at t · stride, each (filter, its window
    start) in the CSR table's order, (-1, 0) past its length; a stride under the longest
    list is refused."""
    from tensorconv.ops import scc_tiles

    g = scc.scc_geometry(cin, cout, cg, co)
    ptr, ks = scc_tiles.data_tiles(g, rows)
    longest = int(np.max(np.diff(ptr)))
    stride = longest + 5
    lengths, pairs = scc_tiles.padded_lists(g, rows, stride)
    assert lengths.dtype == pairs.dtype == np.int32 and pairs.shape == (ptr.size - 1, stride, 2)
    for t in range(ptr.size - 1):
        n = ptr[t + 1] - ptr[t]
        assert lengths[t] == n
        np.testing.assert_array_equal(pairs[t, :n, 0], ks[ptr[t]:ptr[t + 1]])
        np.testing.assert_array_equal(pairs[t, :n, 1], g.starts()[ks[ptr[t]:ptr[t + 1]]])
        assert np.all(pairs[t, n:, 0] == -1) and np.all(pairs[t, n:, 1] == 0)
    if longest > 0:
        with pytest.raises(ValueError, match="stride"):
            scc_tiles.padded_lists(g, rows, longest - 1)


def test_walking_input_gradients_take_lists_a_block_can_hold(monkeypatch):
    """scc_tc_walk reads a list's entries eight a thread (its KL): a plan's depth never
    passes :data:`~tensorconv.ops.scc_tc_walk.MAX_LIST`, even where shared memory would
    hold a longer one (today's cap holds under 900 entries)."""
    from tensorconv.ops import scc_tc_walk

    monkeypatch.setattr(scc_tc_walk, "WALK_SMEM", 1 << 30)
    g = scc.scc_geometry(4096, 4096, 2, 0.5)       # lists of 2,048
    for rows in scc_tc_walk.WALK_SHAPES:
        assert scc_tc_walk.walk_plan(g, 1 << 20, 1, rows, force=True) is None
    g = scc.scc_geometry(512, 512, 2, 0.5)
    plan = scc_tc_walk.walk_plan(g, 1 << 20, 1, 16, force=True)
    assert plan is not None and plan[1] <= scc_tc_walk.MAX_LIST


def test_each_layer_takes_the_tiles_of_least_work():
    """Small window groups take small row tiles (no dense-masked zeros), large ones the
    64-row tiles (32 for the weight gradient, its largest); every chosen tile is one the
    file instantiates."""
    from tensorconv.ops import scc_conv

    small = scc.scc_geometry(64, 64, 2, 0.5)       # 4 groups of 16 filters, U = 32
    fwd, data, band = scc_conv.row_tiles(small)
    assert fwd == 16 and band.rows == 16
    assert scc_conv.band_spans(small, 16).tolist() == [32] * 4
    large = scc.scc_geometry(512, 512, 2, 0.5)     # 4 groups of 128 filters, U = 256
    fwd, data, band = scc_conv.row_tiles(large)
    assert fwd == 64 and data == 64 and band.rows == 32
    for g in (small, large):
        rows = scc_conv.row_tiles(g)[0]
        for side in ("forward", "data"):
            t = scc_conv.pixel_tile(rows, -(-g.cout // rows), 128 * 32 * 32, 132, side=side)
            assert t in scc_conv.PIXEL_TILES and t.rows == rows
        assert scc_conv.band_tiles(g)[0] in scc_conv.BAND_TILES


def test_the_ops_run_the_reference_on_numpy_and_check_their_arguments(rng):
    from tensorconv import ops

    g = scc.scc_geometry(12, 10, 2, 0.5)
    x = rng.standard_normal((2, 12, 4, 3)).astype(np.float32)
    w = rng.standard_normal((10, 6)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    gy = rng.standard_normal((2, 10, 4, 3)).astype(np.float32)
    y = ops.scc_conv2d(x, w, g, b, relu=True)
    np.testing.assert_allclose(y, np.maximum(scc.scc_forward(x, w, g, b), 0), rtol=1e-6)
    gx, gw = scc.scc_backward(x, w, gy, g)
    np.testing.assert_allclose(ops.scc_conv2d_backward_data(gy, w, g), gx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ops.scc_conv2d_backward_weight(x, gy, g), gw, rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(ValueError, match="x has 11 channels"):
        ops.scc_conv2d(x[:, :11].copy(), w, g)
    with pytest.raises(ValueError, match=r"w has shape \(10, 5\)"):
        ops.scc_conv2d(x, w[:, :5].copy(), g)
    with pytest.raises(TypeError, match="geom must be an SCCGeometry"):
        ops.scc_conv2d(x, w, (12, 10, 2, 0.5))
    with pytest.raises(ValueError, match="variant"):
        ops.scc_conv2d_backward_data(gy, w, g, variant="sideways")
    with pytest.raises(ValueError, match="splits is for variant='input' only"):
        ops.scc_conv2d_backward_data(gy, w, g, variant="gather", splits=2)
    with pytest.raises(ValueError, match="splits"):
        ops.scc_conv2d_backward_data(gy, w, g, splits=0)
    with pytest.raises(ValueError, match="batch and spatial sizes"):
        ops.scc_conv2d_backward_weight(x, gy[:, :, :3].copy(), g)
    with pytest.raises(ValueError, match="out is supported on the GPU"):
        ops.scc_conv2d(x, w, g, out=np.empty((2, 10, 4, 3), np.float32))
    with pytest.raises(ValueError, match="path is for variant='input' only"):
        ops.scc_conv2d_backward_data(gy, w, g, variant="output", path="tc")
    with pytest.raises(ValueError, match="path"):
        ops.scc_conv2d_backward_data(gy, w, g, path="wide")
    for fn in (lambda p: ops.scc_conv2d(x, w, g, path=p),
               lambda p: ops.scc_conv2d_backward_weight(x, gy, g, path=p),
               lambda p: ops.scc_conv2d_backward(x, gy, w, g, path=p)):
        with pytest.raises(ValueError, match="path"):
            fn("tensor")
        assert fn("tc") is not None   # NumPy: the reference, whatever the GPU path


def test_the_layer_runs_every_implementation_alike(rng):
    from tensorconv.autograd import Tensor
    from tensorconv.nn.scc import SCCConv2d

    layer = SCCConv2d(12, 10, 2, 0.5, bias=True, rng=rng)
    x = rng.standard_normal((2, 12, 3, 3)).astype(np.float32)
    gy = rng.standard_normal((2, 10, 3, 3)).astype(np.float32)
    results = {}
    for impl in ("auto", "dense", "channel_stack", "conv_stack"):
        layer.impl = impl
        layer.zero_grad()
        xt = Tensor(x, requires_grad=True)
        layer(xt).backward(gy)
        results[impl] = (xt.grad, layer.weight.grad, layer.bias.grad)
    for impl, grads in results.items():
        for got, want in zip(grads, results["dense"]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=impl)
    layer.impl = "kernels"
    with pytest.raises(TypeError, match="CuPy arrays only"):
        layer(Tensor(x))
    layer.impl = "fast"
    with pytest.raises(ValueError, match="impl must be one of"):
        layer(Tensor(x))


def test_forward_and_input_gradient_blocks_walk_pixel_tiles_past_one_round():
    """One block a pixel tile while the grid fits the GPU at once; past that, as few
    blocks as walk every tile in the same number of rounds, unless they would leave a
    tenth of the GPU idle."""
    from tensorconv.ops import scc_tiles

    tile = scc_tiles.BlockShape(4, 32, 4, 8)                  # 32 sums, 128 threads
    assert scc_tiles.resident_blocks(tile, 132) == 528
    assert scc_tiles.resident_blocks(scc_tiles.BlockShape(16, 16, 4), 132) == 528
    assert scc_tiles.pixel_grid(100, 4, tile, 132) == 100     # 400 blocks: one round
    assert scc_tiles.pixel_grid(256, 4, tile, 132) == 128     # 1024: two rounds of 512
    assert scc_tiles.pixel_grid(1568, 4, tile, 132) == 131    # 6272: twelve rounds
    assert scc_tiles.pixel_grid(98, 12, tile, 132) == 98      # 3 rounds would fill 74 %
    for pixel_tiles in range(1, 700, 7):
        grid = scc_tiles.pixel_grid(pixel_tiles, 3, tile, 132)
        assert 1 <= grid <= pixel_tiles


def test_the_wide_kernels_are_taken_where_they_measured_faster(monkeypatch):
    """Automatically: the weight gradient of inputs of at most 64 channels, windows of at
    most 16, window groups filling a warp's 8 filters, never the forward pass; forced:
    any layer whose staging fits."""
    from tensorconv import backend
    from tensorconv.ops import scc_tiles
    from tests.helpers import device_facts

    monkeypatch.setattr(backend, "device_facts", lambda *a: device_facts())
    q = 128 * 32 * 32
    for args, fwd, wgrad in (((64, 64, 2, 0.5), None, None), ((64, 64, 4, 0.5), None, 4),
                             ((32, 64, 2, 0.5), None, 4), ((64, 64, 2, 1 / 3), None, None),
                             ((128, 128, 2, 0.5), None, None), ((16, 7, 8, 0.25), None, None)):
        g = scc.scc_geometry(*args)
        assert scc_tiles.wide_px(g, "forward", q) == fwd, args
        assert scc_tiles.wide_px(g, "filter", q) == wgrad, args
    g = scc.scc_geometry(64, 64, 4, 0.5)
    assert scc_tiles.wide_px(g, "filter", 131 * 128) == 4
    big = scc.scc_geometry(512, 512, 2, 0.5)
    assert scc_tiles.wide_px(big, "forward", q, auto=False) is None  # too much to stage
    assert scc_tiles.wide_px(scc.scc_geometry(130, 64, 2, 0.5), "forward", q, auto=False) == 2
    for side in ("forward", "filter"):
        px = scc_tiles.wide_px(g, side, q, auto=False)
        assert scc_tiles.wide_smem(g, side, px) <= scc_tiles.WIDE_SMEM


def test_the_input_gradient_shares_its_filter_lists_only_where_tiles_are_few():
    """Small maps of many filters split each channel tile's list into shares of at least
    four chunks, none empty; large maps and short lists keep one; a requested count is
    an upper bound whose shares cover the longest list."""
    from tensorconv.ops import scc_tiles

    g = scc.scc_geometry(256, 512, 2, 0.5)
    rows = scc_tiles.row_tiles(g)[1]
    ptr_, _ = scc_tiles.data_tiles(g, rows)
    longest = int(np.max(np.diff(ptr_)))
    tile = scc_tiles.pixel_tile(rows, len(ptr_) - 1, 128 * 16, 132, side="data")
    assert -(-128 * 16 // tile.cols) * (len(ptr_) - 1) < 132          # under a block an SM
    splits, per = scc_tiles.data_splits(g, rows, tile, 128 * 16, 132)
    assert splits > 1 and per >= 4 * scc_tiles.RC and per % scc_tiles.RC == 0
    assert (splits - 1) * per < longest <= splits * per
    assert scc_tiles.data_splits(g, rows, tile, 128 * 64 * 64, 132) == (1, -(-longest // 16) * 16)
    for want in (1, 3, 1000):
        splits, per = scc_tiles.data_splits(g, rows, tile, 128 * 16, 132, want)
        assert splits <= want and (splits - 1) * per < longest <= splits * per
    small = scc.scc_geometry(16, 8, 2, 0.5)               # lists shorter than four chunks
    r = scc_tiles.row_tiles(small)[1]
    tile = scc_tiles.pixel_tile(r, 1, 8, 132, side="data")
    assert scc_tiles.data_splits(small, r, tile, 8, 132)[0] == 1


def test_the_wide_weight_gradient_tiles_cover_every_weight_once():
    """Each (filter, weight) falls in exactly one warp tile's band offsets, and every block
    stages the gy rows and x rows its tiles read."""
    from tensorconv.ops import scc_tiles

    for args in ((64, 64, 2, 0.5), (64, 64, 2, 1 / 3), (40, 130, 4, 0.75), (16, 7, 8, 0.25),
                 (96, 150, 2, 0.33)):
        g = scc.scc_geometry(*args)
        tiles, blocks, gy_rows, x_rows = scc_tiles.filter_tiles(g)
        _, starts = scc_tiles.sorted_filters(g)
        seen = np.zeros((g.cout, g.u), dtype=int)
        for t, (fo, vt) in enumerate(tiles):
            s_lo, g_rows, chan, rows = blocks[t // scc_tiles.WARPS]
            for j in range(8):
                s = 8 * fo + j
                if s >= g.cout:
                    continue
                assert s_lo <= s < s_lo + g_rows
                for v in range(8 * vt, 8 * vt + 8):
                    u = v - (starts[s] - starts[8 * fo])
                    if 0 <= u < g.u:
                        seen[s, u] += 1
                        row = starts[8 * fo] - chan + v
                        assert row < rows or rows == g.cin, args
        assert (seen == 1).all(), args
        assert gy_rows == blocks[:, 1].max() and x_rows == blocks[:, 3].max()


def test_the_backward_refuses_an_unknown_path():
    from tensorconv import ops

    g = scc.scc_geometry(8, 8, 2, 0.5)
    x = np.zeros((1, 8, 2, 2), np.float32)
    for path in ("one", "fused"):
        with pytest.raises(ValueError, match="path"):
            ops.scc_conv2d_backward(x, x, np.zeros((8, 4), np.float32), g, path=path)
    for carry in ("yes", 1, None):
        with pytest.raises(TypeError, match="carry"):
            ops.scc_conv2d_backward(x, x, np.zeros((8, 4), np.float32), g, carry=carry)


def test_algorithm_1_finds_one_cycle_of_windows():
    """The paper's Algorithm 1 (walk the windows until one repeats) gives ``cycle`` starts,
    filter k's window being entry k mod cycle (Algorithm 2) for every filter."""
    for args in ((8, 12, 2, 0.5), (6, 6, 2, 1 / 3), (64, 64, 2, 1 / 3), (16, 7, 8, 0.25),
                 (96, 150, 2, 0.33), (40, 130, 4, 0.75)):
        g = scc.scc_geometry(*args)
        cyc = scc.cycle_map(g)
        assert len(cyc) == min(g.cycle, g.cout), args
        k = np.arange(g.cout)
        np.testing.assert_array_equal(cyc[k % len(cyc)], g.starts())


def test_the_cyclic_forward_paths_check_their_limits(rng):
    """``path="map"`` holds one cycle in constant memory (4096 windows); a bad path is
    named."""
    from tensorconv import ops

    g = scc.scc_geometry(12, 10, 2, 0.5)
    x = rng.standard_normal((1, 12, 2, 2)).astype(np.float32)
    w = rng.standard_normal((10, 6)).astype(np.float32)
    with pytest.raises(ValueError, match="path"):
        ops.scc_conv2d(x, w, g, path="cyclic")
    big = scc.scc_geometry(8194, 8194, 2, 0.999)          # stride 1 -> cycle 8194
    assert big.cycle > 4096
    with pytest.raises(ValueError, match="4096"):
        ops.scc_conv2d(np.zeros((1, 8194, 1, 1), np.float32),
                       np.zeros((8194, big.u), np.float32), big, path="map")


def test_the_tensor_core_tiles_fit_and_keep_the_dense_masked_waste_low():
    """scc_tc's plans: instantiated tiles, shared memory under the opt-in limit, whole
    window groups on the forward where groups are large, shares that split evenly and
    never leave one empty."""
    from tensorconv.ops import _igemm, scc_tc
    from tensorconv.ops.scc_tiles import band_spans, data_tiles

    names = set(scc_tc.instantiations())
    for args in [(64, 128, 2, 0.5), (128, 256, 2, 0.5), (96, 150, 2, 0.33), (256, 200, 8, 0.25),
                 (40, 130, 4, 0.75), (16, 7, 2, 0.0)]:
        g = scc.scc_geometry(*args)
        for q in (1, 338, 8192, 32768):
            f = scc_tc.forward_tile(g, q, 132)
            d, splits, per = scc_tc.data_plan(g, q, 132)
            wt, bands, wsplits, wper = scc_tc.weight_plan(g, q, 132)
            for t in (f, d, wt):
                assert t.name in names and t.smem <= 227 * 1024
            longest = int(np.max(np.diff(data_tiles(g, d.rows)[0])))
            assert per % scc_tc.BK == 0 and (splits - 1) * per < max(longest, 1) <= splits * per
            assert wper % scc_tc.BK == 0 and (wsplits - 1) * wper < q <= wsplits * wper
            assert bands * wt.cols >= int(np.max(band_spans(g, wt.rows)))
            assert (per, splits) == _igemm.split_depth(max(longest, 1), scc_tc.BK, splits)
    g = scc.scc_geometry(128, 128, 2, 0.5)                    # four groups of 32 filters
    assert scc_tc.forward_tile(g, 32768, 132).rows == 32      # one group a tile: span = U


def test_the_walking_tensor_core_plans_cover_their_reductions():
    """scc_tc_walk's plans: instantiated, under their shared-memory cap, a depth of whole
    chunks covering the longest band or filter list; none for small layers unless
    forced, none where the rows of least work have no walking shape."""
    from tensorconv.ops import scc_tc, scc_tc_walk
    from tensorconv.ops.scc_tiles import band_spans, data_tiles

    names = set(scc_tc.instantiations())
    seen = set()
    for args in [(64, 128, 2, 0.5), (128, 256, 2, 0.5), (96, 150, 2, 0.33), (256, 200, 8, 0.25),
                 (40, 130, 4, 0.75), (16, 7, 2, 0.0), (512, 512, 2, 0.5), (96, 192, 2, 0.25)]:
        g = scc.scc_geometry(*args)
        for q in (1, 338, 8192, 32768):
            for mode in (0, 1):
                plan = scc_tc.walk_plan(g, q, mode)
                forced = scc_tc.walk_plan(g, q, mode, force=True)
                big = q * g.cout * g.u >= scc_tc_walk.MIN_WALK_MACS
                assert (plan is not None) == (big and forced is not None)
                if forced is None:
                    continue
                tile, depth = forced
                seen.add((mode, tile.rows))
                assert tile.name in names and tile.smem(depth) <= scc_tc_walk.WALK_SMEM
                longest = (int(np.max(band_spans(g, tile.rows))) if mode == 0
                           else int(np.max(np.diff(data_tiles(g, tile.rows)[0]))))
                kc = tile.shape[2]
                assert depth % kc == 0 and depth - kc < longest <= depth
                least = min(-(-longest // c) * c for c, _ in scc_tc_walk.WALK_CHUNKS)
                assert depth == least and (kc == 32 or -(-longest // 32) * 32 > depth)
    assert {r for _, r in seen} >= {16, 32}
    tile, depth = scc_tc.walk_plan(scc.scc_geometry(128, 128, 2, 0.5), 32768, 0)
    assert (tile.rows, depth) == (32, 64)                     # one window group a tile
    with pytest.raises(ValueError, match="mode"):
        scc_tc.walk_plan(scc.scc_geometry(64, 128, 2, 0.5), 8192, 3)


def test_walking_kernels_ask_for_shared_memory_that_holds_their_planned_blocks(monkeypatch):
    """The walks and the weight gradient plan one wave of so-many blocks an SM; the shared
    memory they ask for lets an SM hold exactly that many (so blocks launched into the tail
    of the kernel before cannot pile onto the SMs freed first), never less than the
    kernel needs, on an H100's and an A100's shared memory."""
    from tensorconv import backend
    from tensorconv.ops import scc_tc_walk
    from tests.helpers import device_facts

    for per_sm_bytes, optin in ((228 * 1024, 227 * 1024), (164 * 1024, 163 * 1024)):
        facts = dataclasses.replace(device_facts(optin), smem_per_sm=per_sm_bytes)
        monkeypatch.setattr(backend, "device_facts", lambda *a, f=facts: f)
        for smem in (0, 9_000, 18_688, 45_472, 49_856, 70_000, 113 * 1024):
            for most in (1, 2, 3, 4, 5, 8):
                per_sm = scc_tc_walk._per_sm(most, smem)
                assert 1 <= per_sm <= most
                pinned = scc_tc_walk._pinned_smem(smem, per_sm)
                assert pinned == smem or (smem < pinned <= optin and pinned % 128 == 0)
                held = per_sm_bytes // (pinned + scc_tc_walk.BLOCK_SMEM)
                assert held == per_sm, (per_sm_bytes, smem, most, per_sm, pinned)


def test_both_gradients_walk_where_a_warp_holds_every_chunks_sums():
    """scc_tc_walk's mode 2 (both gradients in one walk): a plan where the longest filter
    list fits BOTH_CHUNKS chunks (the chunk that pads it least among those), x buffers
    enough for its shortest list's tiles (the kernel's XB), instantiated, under the cap;
    none past BOTH_CHUNKS chunks."""
    from tensorconv.ops import scc_tc, scc_tc_walk
    from tensorconv.ops.scc_tiles import data_tiles

    names = set(scc_tc.instantiations())
    planned = 0
    for args in [(64, 128, 2, 0.5), (128, 128, 2, 0.5), (64, 64, 2, 0.5), (32, 64, 2, 0.5),
                 (128, 256, 2, 0.5), (96, 192, 2, 0.25), (60, 90, 3, 0.75), (64, 2, 4, 0.0),
                 (256, 256, 2, 0.5)]:
        g = scc.scc_geometry(*args)
        plan = scc_tc.walk_plan(g, 32768, 2, force=True)
        one = scc_tc.walk_plan(g, 32768, 1, force=True)
        if one is None:
            assert plan is None
            continue
        lists = np.diff(data_tiles(g, one[0].rows)[0])
        longest = max(int(np.max(lists)), 1)
        fits = [c for c, _ in scc_tc_walk.WALK_CHUNKS
                if -(-longest // c) <= scc_tc_walk.BOTH_CHUNKS]
        if not fits:
            assert plan is None, args
            continue
        tile, depth = plan
        planned += 1
        kc, stages = tile.shape[2:]
        assert tile.mode == 2 and tile.rows == one[0].rows and tile.name in names
        assert depth == min(-(-longest // c) * c for c in fits) and depth // kc <= 2
        fewest = max(1, -(-int(np.min(lists)) // kc))
        assert tile.xbufs == 1 + -(-(stages - 1) // fewest)
        alone = scc_tc_walk.WalkTile(1, tile.rows, kc).smem(depth)
        assert tile.smem(depth) == alone + 4 * tile.xbufs * tile.rows * (tile.cols + 4)
        assert tile.smem(depth) <= scc_tc_walk.WALK_SMEM
    assert planned >= 5
    assert scc_tc.walk_plan(scc.scc_geometry(128, 256, 2, 0.5), 32768, 2, force=True) is None


def test_the_tensor_core_verdicts_are_keyed_read_and_refused_when_malformed(monkeypatch,
                                                                           tmp_path):
    from tensorconv import tunecache
    from tensorconv.ops import scc_tc
    from tensorconv.tuning.scc_paths import PathTimes

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    g = scc.scc_geometry(64, 128, 2, 0.5)
    keys = {scc_tc.decision_key(g, q, p, s) for q, p in ((8192, 64), (8192, 16), (4096, 64))
            for s in scc_tc.SIDES}
    assert len(keys) == 12                                    # pixels, plane and side apart
    with pytest.raises(ValueError, match="side"):
        scc_tc.decision_key(g, 8192, 64, "sideways")
    scc_tc.forget_verdicts()
    assert scc_tc.verdict(g, 8192, 64, "weight") is None      # untuned
    t = PathTimes(forward_fma=10.0, forward_tc=12.0, data_fma=9.0, data_tc=8.0,
                  weight_fma=20.0, weight_tc=15.0, onepass=30.0)
    v = t.verdicts()
    assert [v[s]["tc"] for s in ("forward", "data", "weight")] == [False, True, True]
    assert v["backward"] == {"path": "parts", "onepass_us": 30.0, "parts_us": 23.0,
                             "walk_us": None, "carried_layer_us": None, "both_layer_us": None}
    assert PathTimes(1, 2, 3, 4, 50, 60, 40).verdicts()["backward"]["path"] == "onepass"
    assert PathTimes(1, 2, 3, 4, 5, 6, None).verdicts()["backward"]["path"] == "parts"
    # both gradients in one walk where it beats the others; the carried pair counts as
    # the parts' time only where both gradients' fastest kernels walk
    from tensorconv.tuning.scc_paths import BOTH_MARGIN

    assert PathTimes(1, 2, 3, 4, 50, 60, 40, both=38.0).verdicts()["backward"]["path"] == "walk"
    assert PathTimes(1, 2, 3, 4, 5, 6, None, both=9.5).verdicts()["backward"]["path"] == "parts"
    close = 40.0 / (1 + BOTH_MARGIN) + 0.01                 # faster, but within the margin
    assert PathTimes(1, 2, 3, 4, 50, 60, 40, both=close).verdicts()["backward"]["path"] == (
        "onepass")
    pair = PathTimes(1, 2, 30, 40, 50, 60, None, data_walk=20, weight_walk=25, carried=41,
                     both=43).verdicts()["backward"]
    assert pair == {"path": "parts", "parts_us": 41, "onepass_us": None, "walk_us": 43,
                    "carried_layer_us": None, "both_layer_us": None}
    # against the carried pair, the times after the forward decide, whatever alone says
    walks = dict(data_walk=20, weight_walk=25, carried=41)
    assert PathTimes(1, 2, 30, 40, 50, 60, None, **walks, both=35, carried_layer=50,
                     both_layer=53).verdicts()["backward"]["path"] == "parts"
    assert PathTimes(1, 2, 30, 40, 50, 60, None, **walks, both=40.5, carried_layer=50,
                     both_layer=49).verdicts()["backward"]["path"] == "walk"
    apart = PathTimes(1, 2, 30, 40, 50, 45, None, data_walk=20, carried=41, both=64)
    assert apart.verdicts()["backward"]["parts_us"] == 65    # the weight gradient on scc_tc
    rowed = PathTimes(10, 12, 9, 8, 20, 15, 30, data_walk=7.0, data_rows=32).verdicts()
    assert rowed["data"]["rows"] == 32 and rowed["data"]["walk"]
    assert "rows" not in v["data"]
    walked = PathTimes(10, 12, 9, 8, 20, 15, 30, forward_walk=9.5, data_walk=None,
                       weight_walk=16).verdicts()
    assert [(walked[s]["tc"], walked[s]["walk"]) for s in ("forward", "data", "weight")] == [
        (True, True), (True, False), (True, False)]
    assert walked["backward"]["parts_us"] == 23.0
    tunecache.store(scc_tc.decision_key(g, 8192, 16, "forward"), walked["forward"])
    tunecache.store(scc_tc.decision_key(g, 8192, 16, "weight"), {"tc": False, "walk": 1})
    scc_tc.forget_verdicts()
    assert scc_tc.verdict(g, 8192, 16, "forward") is True
    assert scc_tc.walk_verdict(g, 8192, 16, "forward") is True
    assert scc_tc.walk_verdict(g, 8192, 64, "data") is None             # untuned
    assert scc_tc.verdict(g, 8192, 16, "weight") is None                 # malformed: ignored
    for side, value in v.items():
        tunecache.store(scc_tc.decision_key(g, 8192, 64, side), value)
    scc_tc.forget_verdicts()
    assert [scc_tc.verdict(g, 8192, 64, s) for s in scc_tc.SIDES] == [False, True, True,
                                                                      "parts"]
    # a backward verdict stored for the first fused kernel reads as the one-pass one
    tunecache.store(scc_tc.decision_key(g, 8192, 16, "backward"), {"fused": True})
    tunecache.store(scc_tc.decision_key(g, 4096, 16, "backward"), {"path": "sideways"})
    scc_tc.forget_verdicts()
    assert scc_tc.verdict(g, 8192, 16, "backward") == "onepass"
    assert scc_tc.verdict(g, 4096, 16, "backward") is None    # malformed: a miss
    assert scc_tc.verdict(g, 8192, 16, "weight") is None      # another plane: untuned
    tunecache.store(scc_tc.decision_key(g, 4096, 64, "data"), {"tc": "yes"})
    scc_tc.forget_verdicts()
    assert scc_tc.verdict(g, 4096, 64, "data") is None        # malformed: a miss
    # the input gradient's walking rows: stored, read back; untuned or malformed, the
    # rows of least work
    least = scc_tc._data_rows(g)
    assert scc_tc.data_rows(g, 4096, 64) == least
    other = 48 - least                                        # the other of 16 and 32
    tunecache.store(scc_tc.decision_key(g, 2048, 64, "data"), rowed["data"] | {"rows": other})
    tunecache.store(scc_tc.decision_key(g, 1024, 64, "data"), rowed["data"] | {"rows": 24})
    scc_tc.forget_verdicts()
    assert scc_tc.data_rows(g, 2048, 64) == other and scc_tc.verdict(g, 2048, 64, "data")
    assert scc_tc.data_rows(g, 1024, 64) == least and scc_tc.verdict(g, 1024, 64, "data") is None
    with pytest.raises(ValueError, match="mode 1"):
        scc_tc.walk_plan(g, 8192, 0, rows=16)


def emulate_onepass(g, x, w, gy):
    """``scc_bwd_onepass`` in NumPy, from its tables alone: the input gradient of each
    channel octet from its entries (filter rows in sorted order, 8 weights each, -1 for a
    zero), the weight gradient of each item (4 sorted filters x band offsets cq + 8·b of a
    32-offset run past the octet's first start); returns (gx, gw, how often each gx
    channel and each weight was written)."""
    from tensorconv.ops import scc_fused
    from tensorconv.ops.scc_tiles import sorted_filters

    plan = scc_fused.onepass(g, 1, 32, 1 << 30)
    order, starts = sorted_filters(g)
    gys = gy[:, order]                                        # staged rows, sorted order
    gx, gw = np.full(x.shape, np.nan), np.full(w.shape, np.nan)
    wrote_x, wrote_w = np.zeros(g.cin, int), np.zeros(w.shape, int)
    wflat = np.concatenate([w.reshape(-1), [0.0]])
    for o in range(len(plan.oct_ptr) - 1):
        acc = np.zeros((x.shape[0], 8) + x.shape[2:])
        for e in range(plan.oct_ptr[o], plan.oct_ptr[o + 1]):
            acc += wflat[plan.entry_w[e]][None, :, None, None] * gys[:, plan.entry_row[e]][:, None]
        for j in range(8):
            if 8 * o + j < g.cin:
                gx[:, 8 * o + j] = acc[:, j]
                wrote_x[8 * o + j] += 1
    for item in range(scc_fused.ONEPASS_THREADS * plan.items):
        t = item // scc_fused.ONEPASS_TILE
        if t >= len(plan.tiles):
            continue
        fo, run = plan.tiles[t]
        s0, b0, v0 = 8 * fo + 4 * ((item >> 3) & 1), starts[8 * fo], 32 * run + (item & 7)
        for s in range(s0, min(s0 + 4, g.cout)):
            for c in range(4):
                u = v0 + 8 * c - (starts[s] - b0)
                if 0 <= u < g.u:
                    gw[order[s], u] = np.sum(gys[:, s] * x[:, (b0 + v0 + 8 * c) % g.cin])
                    wrote_w[order[s], u] += 1
    return gx, gw, wrote_x, wrote_w


@pytest.mark.parametrize("cin,cout,cg,co", [
    (64, 128, 2, 0.5), (64, 64, 2, 0.33), (40, 20, 2, 0.25), (24, 36, 4, 0.5), (48, 100, 2, 0.75),
    (8, 200, 2, 0.5), (12, 30, 3, 0.5), (16, 12, 2, 0.0), (128, 128, 2, 0.5), (60, 36, 3, 0.5),
    (20, 7, 4, 0.0), (8, 8, 8, 0.33), (96, 100, 2, 0.33)])
def test_the_one_pass_tables_give_both_gradients(rng, cin, cout, cg, co):
    """Emulated from its tables, the one-pass backward writes every input channel and
    every weight exactly once and gives the reference's gradients; it refuses a layer past
    two items a thread and a shared memory too small for its chunk."""
    from tensorconv.ops import scc_fused

    g = scc.scc_geometry(cin, cout, cg, co)
    x = rng.standard_normal((2, g.cin, 3, 2))
    w = rng.standard_normal((g.cout, g.u))
    gy = rng.standard_normal((2, g.cout, 3, 2))
    gx, gw, wrote_x, wrote_w = emulate_onepass(g, x, w, gy)
    assert (wrote_x == 1).all() and (wrote_w == 1).all()
    want_gx, want_gw = scc.scc_backward(x, w, gy, g)
    np.testing.assert_allclose(gx, want_gx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, want_gw, rtol=1e-12, atol=1e-12)
    assert scc_fused.onepass(g, 2, 64, 1024) is None          # past the shared memory
    for args in ((256, 256, 2, 0.5), (96, 150, 2, 0.33)):
        assert scc_fused.onepass(scc.scc_geometry(*args), 1, 32, 1 << 30) is None


def test_the_path_tuner_checks_its_arguments_before_touching_a_gpu():
    from tensorconv.tuning import scc_paths

    g = scc.scc_geometry(64, 128, 2, 0.5)
    with pytest.raises(TypeError, match="geom must be an SCCGeometry"):
        scc_paths.tune((64, 128, 2, 0.5), (1, 64, 8, 8))
    with pytest.raises(ValueError, match=r"shape must be \(N, 64, H, W\)"):
        scc_paths.tune(g, (1, 32, 8, 8))
    with pytest.raises(ValueError, match="shape H"):
        scc_paths.tune(g, (1, 64, 0, 8))
    with pytest.raises(ValueError, match="repeat"):
        scc_paths.tune(g, (1, 64, 8, 8), repeat=0)
