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
