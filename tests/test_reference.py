"""The NumPy references against the definition, finite differences and each other."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorconv import reference
from tensorconv.checks import conv_geometry
from tests.helpers import device_facts, naive_conv2d, random_conv_case, rel_err


@pytest.mark.parametrize("trial", range(12))
def test_conv2d_matches_definition(rng, trial):
    xs, ws, kw = random_conv_case(rng, max_hw=9, max_channels=4)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    ref = naive_conv2d(x, w, kw["stride"], kw["padding"], kw["dilation"], kw["groups"])
    assert rel_err(reference.conv2d(x, w, **kw), ref) < 1e-12


def test_conv2d_bias_and_dtype(rng):
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    y = reference.conv2d(x, w, b, padding=1)
    assert y.dtype == np.float32 and y.flags.c_contiguous
    np.testing.assert_allclose(y - reference.conv2d(x, w, padding=1),
                               np.broadcast_to(b[None, :, None, None], y.shape), rtol=1e-5,
                               atol=1e-5)


def _numeric_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    it = np.nditer(a, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = a[i]
        a[i] = old + eps
        fp = f()
        a[i] = old - eps
        fm = f()
        a[i] = old
        g[i] = (fp - fm) / (2 * eps)
    return g


@pytest.mark.parametrize("trial", range(6))
def test_gradients_match_finite_differences(rng, trial):
    xs, ws, kw = random_conv_case(rng, max_hw=6, max_channels=3)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    y = reference.conv2d(x, w, **kw)
    gy = rng.standard_normal(y.shape)
    loss = lambda: float((reference.conv2d(x, w, **kw) * gy).sum())  # noqa: E731
    gx = reference.conv2d_backward_data(gy, w, x.shape, **kw)
    gw = reference.conv2d_backward_weight(x, gy, w.shape, **kw)
    assert rel_err(gx, _numeric_grad(loss, x)) < 1e-7
    assert rel_err(gw, _numeric_grad(loss, w)) < 1e-7


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_backward_data_is_the_adjoint(seed):
    """<conv(x), gy> == <x, conv_backward_data(gy)> for any shapes (larger than FD allows)."""
    rng = np.random.default_rng(seed)
    xs, ws, kw = random_conv_case(rng, max_hw=20, max_channels=8)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    y = reference.conv2d(x, w, **kw)
    gy = rng.standard_normal(y.shape)
    lhs = float((y * gy).sum())
    assert np.isclose(lhs, float((x * reference.conv2d_backward_data(gy, w, xs, **kw)).sum()),
                      rtol=1e-9, atol=1e-9)
    assert np.isclose(lhs, float((w * reference.conv2d_backward_weight(x, gy, ws, **kw)).sum()),
                      rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("m", [1, 2])
def test_depthwise_matches_grouped_conv(rng, m):
    c = int(rng.integers(1, 6))
    x = rng.standard_normal((2, c, 11, 8))
    w = rng.standard_normal((c * m, 1, 3, 5))
    b = rng.standard_normal(c * m)
    kw = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    assert rel_err(reference.depthwise_conv2d(x, w, b, **kw),
                   reference.conv2d(x, w, b, groups=c, **kw)) < 1e-12


def test_conv1x1_matches_conv2d(rng):
    x = rng.standard_normal((3, 5, 6, 7))
    w = rng.standard_normal((4, 5))
    b = rng.standard_normal(4)
    ref = reference.conv2d(x, w[:, :, None, None], b)
    assert rel_err(reference.conv1x1(x, w, b), ref) < 1e-12
    assert rel_err(reference.conv1x1(x, w[:, :, None, None], b), ref) < 1e-12


def test_backward_rejects_wrong_gy_shape(rng):
    x = rng.standard_normal((1, 2, 5, 5))
    w = rng.standard_normal((3, 2, 3, 3))
    with pytest.raises(ValueError, match="gy"):
        reference.conv2d_backward_data(np.ones((1, 3, 5, 5)), w, x.shape)
    with pytest.raises(ValueError, match="gy"):
        reference.conv2d_backward_weight(x, np.ones((1, 3, 4, 4)), w.shape, padding=1)


def test_conv1x1_rejects_bad_weights(rng):
    x = rng.standard_normal((1, 2, 5, 5))
    with pytest.raises(ValueError, match="w must be"):
        reference.conv1x1(x, np.ones((3, 2, 3, 3)))
    with pytest.raises(ValueError, match="input channels"):
        reference.conv1x1(x, np.ones((3, 4)))


@pytest.mark.parametrize("trial", range(10))
def test_pool_reference_matches_the_autograd_pooling(rng, trial):
    """reference.pool2d (the pool kernel's ground truth) against the training-side pooling."""
    from tensorconv.autograd import Tensor
    from tensorconv.autograd.functions import avg_pool2d, max_pool2d

    k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    x = rng.standard_normal((2, 3, int(rng.integers(k[0], 12)), int(rng.integers(k[1], 12))))
    assert np.allclose(reference.pool2d(x, k, s, p, "max"), max_pool2d(Tensor(x), k, s, p).data)
    assert np.allclose(reference.pool2d(x, k, s, p, "avg"), avg_pool2d(Tensor(x), k, s, p).data)
    from tensorconv import ops

    x32 = x.astype(np.float32)
    assert np.allclose(ops.pool2d(x32, k, s, p, mode="avg"), reference.pool2d(x32, k, s, p, "avg"))
    x[0, 0, 0, 0] = np.nan
    assert np.isnan(reference.pool2d(x, k, (1, 1), (0, 0), "max")[0, 0, 0, 0])


def test_ceil_mode_pooled_sizes_are_pytorchs():
    """Worked by hand from PyTorch's rule: ceil((n + 2p - k) / s) + 1 windows, less one
    when the last would start past the input and its left padding."""
    from tensorconv.checks import pooled_size

    for n, k, s, p, floor, ceil in ((109, 3, 2, 0, 54, 54), (54, 3, 2, 0, 26, 27),
                                    (27, 3, 2, 0, 13, 13), (6, 3, 2, 0, 2, 3),
                                    (5, 2, 2, 0, 2, 3), (5, 2, 2, 1, 3, 3), (4, 2, 2, 1, 3, 3),
                                    (7, 3, 3, 1, 3, 3), (8, 3, 3, 0, 2, 3)):
        assert pooled_size(n, n, (k, k), (s, s), (p, p)) == (floor, floor), (n, k, s, p)
        assert pooled_size(n, 2 * n, (k, k), (s, s), (p, p), True)[0] == ceil, (n, k, s, p)


@pytest.mark.parametrize("trial", range(8))
def test_ceil_mode_max_pooling_reference_autograd_and_gradient(rng, trial):
    """Ceil-mode max pooling: the reference (last windows clipped at the border) against
    a brute-force window max, the autograd CPU path against the reference, its gradient
    by finite differences; average pooling refuses ceil mode."""
    from tensorconv import ops
    from tensorconv.autograd import Tensor
    from tensorconv.autograd.functions import max_pool2d
    from tensorconv.autograd.gradcheck import gradcheck
    from tensorconv.checks import pooled_size

    k = (int(rng.integers(2, 4)), int(rng.integers(1, 4)))
    s = (int(rng.integers(2, 4)), int(rng.integers(1, 3)))
    p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    h, w = int(rng.integers(k[0], 12)), int(rng.integers(k[1], 12))
    x = rng.standard_normal((2, 3, h, w))
    ref = reference.pool2d(x, k, s, p, "max", ceil_mode=True)
    oh, ow = pooled_size(h, w, k, s, p, True)
    assert ref.shape == (2, 3, oh, ow)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s[0] - p[0], j * s[1] - p[1]
            cells = x[:, :, max(r0, 0):r0 + k[0], max(c0, 0):c0 + k[1]]
            assert cells.size, (i, j)        # every window holds a cell of the input
            np.testing.assert_array_equal(ref[:, :, i, j], cells.max(axis=(2, 3)))
    np.testing.assert_array_equal(max_pool2d(Tensor(x), k, s, p, ceil_mode=True).data, ref)
    np.testing.assert_array_equal(ops.pool2d(x.astype(np.float32), k, s, p, ceil_mode=True),
                                  ref.astype(np.float32))
    assert gradcheck(lambda t: max_pool2d(t, k, s, p, ceil_mode=True),
                     [Tensor(x, requires_grad=True)])
    with pytest.raises(ValueError, match="max pooling only"):
        ops.pool2d(x.astype(np.float32), k, s, p, mode="avg", ceil_mode=True)
    with pytest.raises(TypeError, match="ceil_mode"):
        ops.pool2d(x.astype(np.float32), k, s, p, ceil_mode="yes")


def test_head_reference_is_the_model_head(rng):
    """reference.gap_linear (the classifier-head kernel's ground truth) against the model's
    own GlobalAvgPool2d -> Linear; ops.gap_linear's NumPy path and its argument checks."""
    from tensorconv import ops
    from tensorconv.autograd import Tensor, no_grad
    from tensorconv.nn import layers as L

    x = rng.standard_normal((3, 5, 4, 6)).astype(np.float32)
    fc = L.Linear(5, 7)
    with no_grad():
        expect = fc(L.GlobalAvgPool2d()(Tensor(x))).data
    w, b = fc.weight.data, fc.bias.data
    assert np.allclose(reference.gap_linear(x, w, b), expect, atol=1e-6)
    assert np.allclose(ops.gap_linear(x, w, b), expect, atol=1e-6)
    assert np.allclose(ops.gap_linear(x, w), expect - b, atol=1e-6)
    with pytest.raises(ValueError, match="input features"):
        ops.gap_linear(x, w[:, :4].copy())
    with pytest.raises(ValueError, match="bias has"):
        ops.gap_linear(x, w, b[:6].copy())
    with pytest.raises(ValueError, match="x must be 4-D"):
        ops.gap_linear(x[0], w)
    with pytest.raises(TypeError, match="w must be float32"):
        ops.gap_linear(x, w.astype(np.float64))


def test_pointwise_numpy_path_and_shape_checks(rng):
    """ops.conv1x1 on NumPy is the reference convolution with its epilogue; shapes it cannot
    run are refused with the reason."""
    from tensorconv import ops

    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    w = rng.standard_normal((6, 5, 1, 1)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    r = rng.standard_normal((2, 6, 3, 4)).astype(np.float32)
    expect = np.maximum(reference.conv2d(x, w, b) + r, 0)
    assert np.allclose(ops.conv1x1(x, w, b, residual=r, relu=True), expect, atol=1e-5)
    with pytest.raises(ValueError, match="1x1 filter"):
        ops.conv1x1(x, rng.standard_normal((6, 5, 3, 3)).astype(np.float32))
    with pytest.raises(ValueError, match="out is supported on the GPU"):
        ops.conv1x1(x, w, out=np.empty((2, 6, 3, 4), np.float32))


def test_pointwise_pair_numpy_path_layout_and_checks(rng):
    """ops.conv1x1_pair on NumPy is the two reference convolutions with their epilogues;
    packed weights are the zero-padded transposes; shapes it cannot run are refused."""
    from tensorconv.ops import pointwise_pair as pair

    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    w1 = rng.standard_normal((6, 5, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((3, 6, 1, 1)).astype(np.float32)
    b1, b2 = rng.standard_normal(6).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    r = rng.standard_normal((2, 6, 3, 4)).astype(np.float32)
    y_ref = np.maximum(reference.conv2d(x, w1, b1) + r, 0)
    y, z = pair.conv1x1_pair(x, w1, w2, b1, b2, residual=r, relu1=True)
    assert np.allclose(y, y_ref, atol=1e-5)
    assert np.allclose(z, reference.conv2d(y_ref, w2, b2), atol=1e-5)
    at, bt = pair.pack_weights(w1, w2, pair.Tile(4, 2))  # slices of 4, J padded to 4
    assert at.shape == (5, 8) and bt.shape == (8, 4)
    assert np.array_equal(at[:, :6], w1[:, :, 0, 0].T) and not at[:, 6:].any()
    assert np.array_equal(bt[:6, :3], w2[:, :, 0, 0].T) and not bt[6:].any() and not bt[:, 3:].any()
    assert pair.Tile(8, 8).slice(512) == 64 and pair.Tile(4, 8).slice(5) == 4
    with pytest.raises(ValueError, match="w2 must take w1's 6 output channels"):
        pair.conv1x1_pair(x, w1, w2[:, :5].copy())
    with pytest.raises(ValueError, match="w1 needs a 1x1 filter"):
        pair.conv1x1_pair(x, rng.standard_normal((6, 5, 3, 3)).astype(np.float32), w2)
    with pytest.raises(ValueError, match="b2 has 2 entries; expected 3"):
        pair.conv1x1_pair(x, w1, w2, b2=b2[:2].copy())
    with pytest.raises(ValueError, match="z_out is supported on the GPU"):
        pair.conv1x1_pair(x, w1, w2, z_out=np.empty((2, 3, 3, 4), np.float32))
    # a projection shortcut of the block input (stride 2): the residual it would add
    xs = rng.standard_normal((2, 7, 6, 7)).astype(np.float32)
    ws = rng.standard_normal((6, 7, 1, 1)).astype(np.float32)
    y, z = pair.conv1x1_pair(x, w1, w2, b1, skip_x=xs, skip_w=ws, skip_stride=2, relu1=True)
    y_ref = np.maximum(reference.conv2d(x, w1, b1) + reference.conv2d(xs, ws, stride=2), 0)
    assert np.allclose(y, y_ref, atol=1e-5) and np.allclose(z, reference.conv2d(y_ref, w2),
                                                            atol=1e-5)
    at, _ = pair.pack_weights(w1, w2, pair.Tile(4, 2), ws)  # ws's channels after w1's
    assert at.shape == (12, 8) and np.array_equal(at[5:, :6], ws[:, :, 0, 0].T)
    with pytest.raises(ValueError, match="skip_w must be"):
        pair.conv1x1_pair(x, w1, w2, skip_x=xs, skip_w=ws[:5].copy(), skip_stride=2)
    with pytest.raises(ValueError, match="skip_stride must be a positive int"):
        pair.conv1x1_pair(x, w1, w2, skip_x=xs, skip_w=ws, skip_stride=0)
    with pytest.raises(ValueError, match="the shortcut maps"):
        pair.conv1x1_pair(x, w1, w2, skip_x=xs, skip_w=ws, skip_stride=1)


def _from_fragments(f):
    """Rebuild (O, K) from one matrix in mma A-fragment order, lane by lane, as
    tc::mma_product reads it: lane (g, t), value e -> row g + 8 (e & 1), col t + 4 (e >> 1)."""
    o16, k8 = f.shape[:2]
    w = np.full((16 * o16, 8 * k8), np.nan, np.float32)
    for a, b, lane, e in np.ndindex(f.shape):
        g, t = divmod(lane, 4)
        w[16 * a + g + 8 * (e & 1), 8 * b + t + 4 * (e >> 1)] = f[a, b, lane, e]
    return w


def test_pointwise_pair_mma_packing(rng):
    """mma tiles: each slice's rows of w1 (padded to 16 x C8) and columns of w2 (padded
    to JP16 x MB) in fragment order, slice after slice; zeros elsewhere."""
    from tensorconv.ops import pointwise_pair as pair
    from tensorconv.ops._launch import mma_stride

    m, c, j = 37, 13, 21
    w1 = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((j, m, 1, 1)).astype(np.float32)
    tile = pair.Tile(16, 2, mma=True)
    mb = tile.slice(m)
    assert mb == 32 and tile.padded_j(j) == 32 and tile.share(j) == 256
    at, bt = pair.pack_weights(w1, w2, tile)
    p = pair.Problem(1, 1, c, m, j)
    assert (at.shape, bt.shape) == tile.packed_shapes(p) == ((2, 2, 2, 32, 4), (2, 2, 4, 32, 4))
    a_full = np.zeros((2 * mb, 16), np.float32)
    a_full[:m, :c] = w1[:, :, 0, 0]
    b_full = np.zeros((32, 2 * mb), np.float32)
    b_full[:j, :m] = w2[:, :, 0, 0]
    for s in range(2):
        assert np.array_equal(_from_fragments(at[s]), a_full[s * mb:(s + 1) * mb])
        assert np.array_equal(_from_fragments(bt[s]), b_full[:, s * mb:(s + 1) * mb])
    assert mma_stride(8) == 8 and mma_stride(16) == 24 and mma_stride(64) == 72
    # shared memory: x and y twice (split), C padded to 8, slots after the partials
    assert tile.slots_offset(p) == 2 * 16 * 24 + 16 * 32 + 2 * 32 * 24 + 32 * 32 + 4 * 32 * 16


def test_tucker_tail_numpy_path_layout_and_checks(rng):
    """ops.tucker_tail on NumPy is the core convolution then the two 1x1s with their
    epilogues (or one, without w_next); packed weights are zero-padded transposes."""
    from tensorconv.ops import tucker_tail as tail

    u = rng.standard_normal((2, 5, 7, 6)).astype(np.float32)
    core = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    w_last = rng.standard_normal((9, 6, 1, 1)).astype(np.float32)
    w_next = rng.standard_normal((3, 9, 1, 1)).astype(np.float32)
    b_last = rng.standard_normal(9).astype(np.float32)
    r = rng.standard_normal((2, 9, 4, 3)).astype(np.float32)
    t = reference.conv2d(u, core, stride=2, padding=1)
    y_ref = np.maximum(reference.conv2d(t, w_last, b_last) + r, 0)
    y, z = tail.tucker_tail_conv2d(u, core, 2, 1, w_last, w_next, b_last, residual=r, relu1=True)
    assert np.allclose(y, y_ref, atol=1e-4) and np.allclose(z, reference.conv2d(y_ref, w_next),
                                                            atol=1e-4)
    assert tail.tucker_tail_conv2d(u, core, 2, 1, w_last)[1] is None
    wct, at, bt = tail.pack_weights(core, w_last, w_next)
    assert wct.shape == (45, 8) and at.shape == (8, 12) and bt.shape == (12, 4)
    assert np.array_equal(wct[:, :6], core.reshape(6, 45).T) and not wct[:, 6:].any()
    assert np.array_equal(at[:6, :9], w_last[:, :, 0, 0].T) and not at[6:].any()
    assert np.array_equal(bt[:9, :3], w_next[:, :, 0, 0].T) and not bt[:, 3:].any()
    with pytest.raises(ValueError, match="w_last must take the core's 6 output channels"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last[:, :5].copy())
    with pytest.raises(ValueError, match="w_next must take w_last's 9 output channels"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last, w_next[:, :8].copy())
    with pytest.raises(ValueError, match="Tucker tail takes stride 1 or 2"):
        tail.tucker_tail_conv2d(u, core, 3, 1, w_last)
    with pytest.raises(ValueError, match="b_next needs w_next"):
        tail.tucker_tail_conv2d(u, core, 1, 1, w_last, b_next=b_last)


def test_conv_maxpool_numpy_path_tiles_and_packing(rng):
    """The fused stem op on NumPy is conv -> ReLU -> max pool through the references;
    every stem tile fits (accumulators, 227 KiB of shared memory) but five too big;
    the packed weights hold w's rows, zero-padded to whole slices and K8."""
    from tensorconv import ops
    from tensorconv.autograd import Tensor
    from tensorconv.autograd.functions import max_pool2d
    from tensorconv.ops import conv_maxpool as conv_pool

    x = rng.standard_normal((2, 3, 30, 26)).astype(np.float32)
    w = rng.standard_normal((20, 3, 7, 7)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    y = np.maximum(reference.conv2d(x, w, b, 2, 3), 0)
    ref = max_pool2d(Tensor(y), 3, 2, 1).data
    assert rel_err(ops.conv2d_maxpool(x, w, b, 2, 3, 3, 2, 1, relu=True), ref) < 1e-6
    stem = conv_pool.Problem(conv_geometry((1, 3, 224, 224), (64, 3, 7, 7), 2, 3), (3, 3),
                             (2, 2), (1, 1))
    fits = conv_pool.candidates(stem, device_facts())
    too_big = {(4, 8, 64), (8, 8, 32), (8, 8, 64), (4, 16, 32), (4, 16, 64)}
    assert set(conv_pool.TILES) - set(fits) == {conv_pool.Tile(*t) for t in too_big}
    assert max(t.tiles_per_warp(3, 2) for t in fits) == 6
    tile = conv_pool.Tile(4, 4, 16)
    packed = conv_pool.pack_weights(w, tile)             # (2 strips, 19 k8, 2 parts, 32, 4)
    assert packed.shape == (2, 19, 2, 32, 4)
    frags = packed.reshape(2, 19, 2, 8, 4, 2, 2)        # (o16, k8, part, g, t, k+4?, o+8?)
    dense = frags.transpose(2, 0, 6, 3, 1, 5, 4).reshape(2, 32, 152)  # (part, M pad, K8)
    big, small = dense.astype(np.float64)
    assert not (dense[0].view(np.uint32) & 0x1FFF).any()  # tf32 parts: 10 mantissa bits
    assert np.array_equal(big[:20, :147] + small[:20, :147], w.reshape(20, 147))
    assert not dense[:, 20:].any() and not dense[:, :, 147:].any()
    with pytest.raises(ValueError, match="at most half"):
        ops.conv2d_maxpool(x, w, b, 2, 3, 3, 2, 2)
