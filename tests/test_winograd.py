"""Winograd F(2x2, 3x3): the weight transform and the tile rules, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import winograd_conv as winograd
from tests.helpers import device_facts, rel_err

_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)


def _winograd_conv(x, w, padding):
    """The algorithm the kernel runs, in NumPy: 2x2 output tiles from 4x4 input patches."""
    b, c, h, wd = x.shape
    oh, ow = h + 2 * padding - 2, wd + 2 * padding - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    xp = np.zeros((b, c, 2 * th + 2, 2 * tw + 2))
    xp[:, :, padding:padding + h, padding:padding + wd] = x
    u = winograd.transform_weights(w).astype(np.float64)              # (N, C, 4, 4)
    y = np.zeros((b, w.shape[0], 2 * th, 2 * tw))
    for i in range(th):
        for j in range(tw):
            d = xp[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4]              # (B, C, 4, 4)
            v = np.einsum("ir,bcrs,js->bcij", _BT, d, _BT)
            m = np.einsum("ncij,bcij->bnij", u, v)
            y[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = np.einsum("ai,bnij,cj->bnac", _AT, m, _AT)
    return y[:, :, :oh, :ow]


@pytest.mark.parametrize("shape,padding", [((2, 5, 7, 9), 1), ((1, 3, 6, 5), 0), ((1, 4, 4, 4), 2)])
def test_transform_reproduces_the_convolution(rng, shape, padding):
    x = rng.standard_normal(shape)
    w = rng.standard_normal((6, shape[1], 3, 3)).astype(np.float32)
    ref = reference.conv2d(x, w.astype(np.float64), padding=padding)
    assert rel_err(_winograd_conv(x, w, padding), ref) <= 1e-6


def test_prepared_weights_are_transformed_filters_in_fragment_order(rng):
    w = rng.standard_normal((10, 12, 3, 3)).astype(np.float32)
    packed = winograd.pack_weights(w)
    geom = conv_geometry((1, 12, 8, 8), w.shape, 1, 1)
    assert packed.shape == winograd.packed_shape(geom) == (2, 2, 16, 32, 2)
    u = winograd.transform_weights(w)
    # lane (g, t) of output tile 0, channel group 1, point 5: u[g, 8 + t] and u[g, 8 + t + 4]
    lane = packed[0, 1, 5].reshape(8, 4, 2)
    assert np.array_equal(lane[:, :, 0], u[:8, 8:12, 1, 1])
    assert not lane[:, :, 1].any()                  # channels 12..15: past C, zeros


def test_tiles_and_default():
    geom = conv_geometry((1, 64, 56, 56), (64, 64, 3, 3), 1, 1)
    facts = device_facts()
    tiles = winograd.candidates(geom, facts)
    assert winograd.default_tile(geom, facts) in tiles
    for t in tiles:
        assert t.tiles % t.tbw == 0 and t.ck * t.tiles == winograd.THREADS
        assert t.smem_bytes(geom) <= 227 * 1024
    # 28 x 28 tiles of 16 (4 x 4) and 32 channels: 49 x 2 blocks
    assert winograd.Tile(1, 4, 4).grid(geom) == (49, 2, 1)
    small = conv_geometry((2, 8, 5, 5), (4, 8, 3, 3), 1, 1)
    assert all(t.wn == 1 for t in winograd.candidates(small, facts))
    assert winograd.default_tile(small, facts) == winograd.Tile(1, 1, 4)


def test_transform_is_g_w_gt_without_an_upload_or_a_gemm(rng):
    """The adds-and-halvings transform equals G g G^T computed by einsum in float64, bit for
    bit after the cast (what a captured training step can hold)."""
    w = (rng.standard_normal((7, 5, 3, 3)) * 10.0 ** rng.integers(-3, 4, (7, 5, 1, 1)))
    w = w.astype(np.float32)
    want = np.einsum("ir,ncrs,js->ncij", winograd._G, w.astype(np.float64), winograd._G)
    np.testing.assert_array_equal(winograd.transform_weights(w), want.astype(np.float32))


def test_batch_tile_is_the_measured_fastest_and_a_candidate():
    facts = device_facts()
    measured = {(16, 32): winograd.Tile(2, 2, 16), (32, 16): winograd.Tile(2, 4, 8),
                (64, 8): winograd.Tile(1, 4, 4)}   # ResNet-20's layers at batch 128 (H200)
    for (c, hw), tile in measured.items():
        geom = conv_geometry((128, c, hw, hw), (c, c, 3, 3), 1, 1)
        assert winograd.batch_tile(geom, facts) == tile
    for c, h, w, pad in ((16, 7, 5, 1), (48, 56, 56, 1), (24, 3, 40, 0), (64, 2, 2, 2),
                         (20, 130, 9, 1)):
        geom = conv_geometry((64, c, h, w), (c, c, 3, 3), 1, pad)
        assert winograd.batch_tile(geom, facts) in winograd.candidates(geom, facts), geom


def test_passes_winograd_runs_and_says_why_not():
    def why(xs, ws, mode, **kw):
        return winograd.pass_supported(conv_geometry(xs, ws, **kw), mode)

    assert why((2, 8, 9, 9), (8, 8, 3, 3), 0, padding=1) is None
    assert why((2, 8, 9, 9), (8, 8, 3, 3), 1, padding=2) is None
    assert why((2, 8, 9, 9), (8, 8, 3, 3), 2, padding=1) is None   # winograd_wgrad
    assert "3x3 filters at stride 1" in why((2, 8, 9, 9), (8, 8, 3, 3), 2, stride=2)
    assert "modes 0, 1 and 2" in why((2, 8, 9, 9), (8, 8, 3, 3), 3, padding=1)
    assert "3x3 filters at stride 1" in why((2, 8, 9, 9), (8, 8, 3, 3), 0, stride=2)
    assert "3x3 filters at stride 1" in why((2, 8, 9, 9), (8, 8, 5, 5), 0, padding=2)
    assert "dilation nor groups" in why((2, 8, 9, 9), (8, 4, 3, 3), 0, groups=2)
    assert "padding <= 2" in why((2, 8, 9, 9), (8, 8, 3, 3), 1, padding=3)
    geom = conv_geometry((2, 8, 9, 9), (8, 8, 3, 3), 1, 1)
    with pytest.raises(ValueError, match="tile and splits"):
        winograd.check_pass(geom, 0, None, 2)
    with pytest.raises(ValueError, match="tile and splits"):
        winograd.check_pass(geom, 1, winograd.Tile(1, 1, 4), None)
    winograd.check_pass(geom, 1, None, None)


def test_default_choice_takes_thin_training_layers(monkeypatch):
    """ResNet-20's stride-1 3x3 layers at batch 128 (forward and data gradient) on a tensor-
    core device; not ResNet-18's, small batches, weight gradients, stems, strided layers."""
    from tensorconv import backend
    from tensorconv.ops import conv_algorithm, direct_conv

    hopper, turing = device_facts(), device_facts(compute_capability=(7, 5))
    choose = conv_algorithm.choose_algorithm
    for c, hw in ((16, 32), (32, 16), (64, 8)):
        geom = conv_geometry((128, c, hw, hw), (c, c, 3, 3), 1, 1)
        assert choose(geom, 0, hopper) == choose(geom, 1, hopper) == "winograd"
        assert choose(geom, 2, hopper) != "winograd"
        assert choose(geom, 0, turing) != "winograd"
        small = conv_geometry((8, c, hw, hw), (c, c, 3, 3), 1, 1)
        assert choose(small, 0, hopper) != "winograd"
    others = [((128, 64, 32, 32), (64, 64, 3, 3), 1, 1),     # 4.8 G multiply-adds
              ((128, 256, 8, 8), (256, 256, 3, 3), 1, 1),
              ((128, 3, 32, 32), (16, 3, 3, 3), 1, 1),       # a stem
              ((128, 16, 32, 32), (32, 16, 3, 3), 2, 1)]     # strided
    for xs, ws, stride, pad in others:
        geom = conv_geometry(xs, ws, stride, pad)
        assert choose(geom, 0, hopper) != "winograd" and choose(geom, 1, hopper) != "winograd"
    monkeypatch.setattr(backend, "device_facts", lambda *a: hopper)
    geom = conv_geometry((128, 16, 32, 32), (16, 16, 3, 3), 1, 1)
    pack, fwd = direct_conv.kernels(geom, "winograd", mode=0)
    assert direct_conv.kernels(geom, "winograd", mode=1) == (pack, fwd)   # same shape
    assert pack.file == fwd.file == winograd.FILE and pack.name == winograd.PACK_NAME
    assert fwd.name == "winograd_f2x2_3x3_tf32x3<2, 2>"


def test_flipped_packing_is_the_data_gradients_filters(rng):
    """``flip=True`` packs w transposed and turned 180 degrees: the forward of gy with them
    (padding 2 - p) is the stride-1 data gradient."""
    w = rng.standard_normal((6, 11, 3, 3)).astype(np.float32)
    flipped = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    np.testing.assert_array_equal(winograd.pack_weights(w, flip=True),
                                  winograd.pack_weights(flipped))
    assert winograd.pack_weights(w, flip=True).shape == (2, 1, 16, 32, 2)
    gy = rng.standard_normal((2, 6, 7, 5))
    for pad in (0, 1, 2):
        gx_shape = (2, 11, 7 + 2 - 2 * pad, 5 + 2 - 2 * pad)
        want = reference.conv2d_backward_data(gy, w.astype(np.float64), gx_shape, padding=pad)
        assert rel_err(_winograd_conv(gy, flipped, 2 - pad), want) <= 1e-6
