"""The tensor-core remainder's host side (``tensorconv.ops.sparse_tc_remainder``): its
records walked in NumPy as the kernel walks them give the convolution; its pixel tables
cover the tile once and put a warp's gathers on distinct banks; its columns fill the
fewest k steps; bad choices are refused."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import blocksparse as bs
from tensorconv import precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_conv as sc
from tensorconv.ops import sparse_tc_remainder as stc
from tests.helpers import device_facts, random_sparse_layer, rel_err


def walk(x, weights, geom, tile):
    """The kernel's arithmetic from the records, in float64: per block tile and chunk the
    staged input (its padding zero), per k step a warp's A fragments times the gathered B
    values at each slot's offset plus each lane's pixel word."""
    g = stc.tc_geometry(geom, tile)
    rec = stc.tc_records(weights, tile, g, np)
    exact = precision.current() != "tf32"
    areal = 32 * tile.mt * (2 if exact else 1)
    recs = rec.recs.reshape(-1, areal + 2, 4).astype(np.float64)
    n, c, h, w = x.shape
    (sh, sw), (ph, pw) = geom.stride, geom.padding
    pt, groups, chunks = tile.pixels, rec.segs.shape[1], rec.segs.shape[0]
    pix = np.array(g.pixtab)
    words, qs = pix[:pt].reshape(-1, 8) // 4, pix[pt:].reshape(-1, 8)
    assert sorted(qs.ravel()) == list(range(pt))
    lane_g, lane_t = np.arange(32) >> 2, np.arange(32) & 3
    y = np.full(geom.output_shape, np.nan)
    for b0 in range(0, n, g.nb):
        for oh0 in range(0, geom.oh, g.th):
            for ow0 in range(0, geom.ow, g.tw):
                acc = np.zeros((groups * tile.rows, pt))
                for j in range(chunks):
                    stage = np.zeros(g.nb * g.img + 8)
                    for b in range(g.nb):
                        for cl in range(tile.ck):
                            for li in range(g.iht):
                                for col in range(g.iwt):
                                    ni, ci = b0 + b, j * tile.ck + cl
                                    ih, iw = oh0 * sh - ph + li, ow0 * sw - pw + col
                                    if ni < n and ci < c and 0 <= ih < h and 0 <= iw < w:
                                        stage[b * g.img + cl * g.ch + li * g.pitch + col] = \
                                            x[ni, ci, ih, iw]
                    for gi in range(groups):
                        first, steps = rec.segs[j, gi]
                        for r in recs[first:first + steps]:
                            a = np.zeros((tile.rows, 8))
                            for m in range(tile.mt):
                                f = r[32 * m:32 * m + 32]
                                if exact:
                                    f = f + r[32 * tile.mt + 32 * m:32 * tile.mt + 32 * m + 32]
                                for e, (dg, dt) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))):
                                    a[16 * m + lane_g + dg, lane_t + dt] = f[:, e]
                            pairs = r[-2:].astype(np.float32).view(np.int32).reshape(4, 2) // 4
                            off = np.concatenate([pairs[:, 0], pairs[:, 1]])
                            for grp in range(words.shape[0]):
                                bv = stage[off[:, None] + words[grp][None, :]]
                                acc[gi * tile.rows:(gi + 1) * tile.rows, qs[grp]] += a @ bv
                for i, k in enumerate(rec.row_of):
                    if k < 0:
                        continue
                    for q in range(pt):
                        b, rem = divmod(q, g.th * g.tw)
                        oi, oj = divmod(rem, g.tw)
                        if b0 + b < n and oh0 + oi < geom.oh and ow0 + oj < geom.ow:
                            y[b0 + b, k, oh0 + oi, ow0 + oj] = acc[i, q]
    return y


def _layer(rng, k, c, r, density, nblocks=0):
    return random_sparse_layer(rng, k, c, r, density, nblocks, empty_row=True)


@pytest.mark.parametrize("tile", stc.TILES, ids=str)
@pytest.mark.parametrize("x_shape,k,r,stride,padding,density", [
    ((2, 19, 7, 9), 21, 3, 1, 1, 0.3), ((3, 20, 4, 4), 40, 3, 1, 1, 0.2),
    ((1, 5, 6, 13), 9, 3, 2, 1, 1.0), ((2, 17, 9, 9), 33, 1, 2, 0, 0.25),
    ((1, 6, 11, 10), 18, 5, 1, 2, 0.15)])
def test_the_records_walked_give_the_convolution(rng, tile, x_shape, k, r, stride, padding,
                                                 density):
    w, packed, _ = _layer(rng, k, x_shape[1], r, density)
    x = rng.standard_normal(x_shape).astype(np.float32)
    geom = conv_geometry(x_shape, w.shape, stride, padding)
    weights = sc.pack_weights(packed, x_shape[2:], np)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, padding)
    assert rel_err(walk(x, weights, geom, tile), want) <= 1e-12    # big + small parts: exact
    with precision.using("tf32"):
        assert rel_err(walk(x, weights, geom, tile), want) <= 2e-3  # weights rounded to tf32


def test_the_records_leave_out_the_blocks_nonzeros(rng):
    w, packed, layout = _layer(rng, 24, 10, 3, 0.3, nblocks=3)
    x = rng.standard_normal((2, 10, 6, 6)).astype(np.float32)
    geom = conv_geometry(x.shape, w.shape, 1, 1)
    weights = sc.pack_weights(packed, (6, 6), np)
    remainder = w * (bs.kernel_matrix(packed.to_kernel()) != 0).reshape(w.shape)
    for rows, cols in layout.blocks:
        flat = remainder.reshape(w.shape[0], -1)
        flat[np.ix_(rows, cols)] = 0
    want = reference.conv2d(x.astype(np.float64), remainder.astype(np.float64), None, 1, 1)
    assert rel_err(walk(x, weights, geom, stc.TILES[0]), want) <= 1e-12


@pytest.mark.parametrize("tile", stc.TILES, ids=str)
@pytest.mark.parametrize("hw,stride,r", [((32, 32), 1, 3), ((16, 16), 1, 3), ((8, 8), 1, 3),
                                         ((4, 4), 1, 3), ((32, 32), 2, 3), ((16, 16), 2, 1),
                                         ((8, 8), 2, 3), ((56, 56), 1, 3), ((7, 7), 1, 3)])
def test_a_warps_gathers_fall_on_distinct_banks(tile, hw, stride, r):
    geom = conv_geometry((32, 64) + hw, (64, 64, r, r), stride, r // 2)
    g = stc.tc_geometry(geom, tile)
    assert g.bad == 0 and g.pitch >= g.iwt and g.ch >= g.iht * g.pitch and g.ch % 2 == 1
    pt = tile.pixels
    words = np.array(g.pixtab[:pt]).reshape(-1, 8) // 4
    for grp in words:
        assert len(set(grp % 4)) == 1 and len(set(grp % 32)) == 8


def test_columns_fill_the_fewest_k_steps_with_distinct_residues_where_they_can():
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 30, 64):
        res = rng.integers(0, 4, n)
        slots = stc._slots(res)
        assert slots.shape == (-(-n // 8), 8)
        cols = slots[slots >= 0]
        assert sorted(cols) == list(range(n))
        for half in slots.reshape(-1, 4):          # a padding slot takes a missing residue
            real = {int(res[v]) for v in half if v >= 0}
            pads = [-1 - int(v) for v in half if v < 0]
            assert len(set(pads)) == len(pads) and not real & set(pads)
    slots = stc._slots(np.array([0, 1, 2, 3, 0, 1, 2, 3]))
    for half in (slots[0, :4], slots[0, 4:]):
        assert sorted(np.array([0, 1, 2, 3, 0, 1, 2, 3])[half]) == [0, 1, 2, 3]


def test_the_tc_remainder_is_offered_under_tf32_and_checked():
    geom = conv_geometry((32, 64, 16, 16), (64, 64, 3, 3), 1, 1)
    assert not any(isinstance(t, stc.Tile) for t, _ in sc.remainder_choices(geom))
    with precision.using("tf32"):
        assert [t for t, _ in sc.remainder_choices(geom) if isinstance(t, stc.Tile)] == \
            list(stc.TILES)
    assert sc.check_remainder_choice(geom, "auto", stc.TILES[0]) == "tc"
    assert sc.check_remainder_choice(geom, "tc") == "tc"
    with pytest.raises(ValueError, match="remainder_tile"):
        sc.check_remainder_choice(geom, "tc", sc.REMAINDER_TILES[0])
    with pytest.raises(ValueError, match="remainder_staging"):
        sc.check_remainder_choice(geom, "tc", stc.TILES[0], sc.Staging(1, True))
    assert sc.choice_name(stc.TILES[0]) == stc.name(stc.TILES[0])


def test_shares_fill_one_wave_of_resident_blocks():
    """ResNet-18-8x's pruned 128x128 layer at batch 32 (H200: 4 shares of 128 blocks at 3
    an SM, 1.3 waves, took 60.6 µs; 3 shares, one wave, 35.7)."""
    facts = device_facts()
    geom = conv_geometry((32, 128, 16, 16), (128, 128, 3, 3), 1, 1)
    tile = stc.Tile(8, 1, 8, 1)
    g = stc.tc_geometry(geom, tile)
    assert g.grid(geom, tile)[:2] == (128, 1)
    assert stc.tc_shares(geom, tile, g, 80, facts) == (3, 3)      # 384 of 396 slots
    assert stc.tc_shares(geom, tile, g, 255, facts) == (1, 8)     # one block an SM: a wave
    deep = conv_geometry((32, 512, 4, 4), (512, 512, 3, 3), 1, 1)
    g = stc.tc_geometry(deep, tile)
    shares, per = stc.tc_shares(deep, tile, g, 80, facts)
    blocks = g.grid(deep, tile)[0] * g.grid(deep, tile)[1] * shares
    assert shares > 1 and blocks <= 3 * facts.sm_count and shares * per >= 32
