"""The sparse-tensor-core kernel's host side (``ops.sparse_pairs``, ``ops.sparse_pairs_tc``):
records that decode back to the tf32-rounded kernel matrix through the operand layouts
(1x1 and wider filters), the column pairing, tiles and their refusals, the CPU reference
path and bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tensorconv import precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_pairs as spr
from tensorconv.ops import sparse_pairs_tc as sp
from tensorconv.ops._launch import round_tf32
from tests.helpers import device_facts


def decode(rec, k: int, c: int) -> np.ndarray:
    """The (k, c) kernel matrix a layer's records multiply, read back as the tensor cores
    read them: lane (g, t) register i of m16 tile m is row SLOT_ROW and pair SLOT_PAIR, the
    pair's selector a nibble of its holder lane's metadata word, the pair's column the
    step's column at the selected stage row."""
    bm = rec.rows
    recs = np.asarray(rec.recs).reshape(max(rec.steps, 1), bm * 10)
    chans = np.asarray(rec.cols)
    out = np.zeros((k, c), np.float64)
    lane, reg = np.meshgrid(np.arange(32), np.arange(4), indexing="ij")
    r16, j = spr.SLOT_ROW[lane, reg], spr.SLOT_PAIR[lane, reg]
    holder = 4 * (r16 % 8) + spr.META_HOLDER[r16, j]
    for b, (first, steps) in enumerate(np.asarray(rec.segs)):
        for s in range(first, first + steps):
            a = recs[s, :bm * 8].reshape(bm // 16, 32, 4)
            e = recs[s, bm * 8:].view(np.uint32).reshape(bm // 16, 32)
            for m in range(bm // 16):
                code = (e[m][holder] >> (4 * spr.META_NIBBLE[r16, j]).astype(np.uint32)) & 0xF
                assert np.isin(code, (spr.FIRST, spr.SECOND)).all()
                side = (code == spr.SECOND).astype(np.int64)
                ch = chans[s][spr.PAIR_ROWS[j, side]]
                row = b * bm + 16 * m + r16
                live = a[m] != 0
                assert (row[live] < k).all()
                np.add.at(out, (row[live], ch[live]), a[m][live])
    return out


def _kernel(rng, k, c, density, r=1, s=1):
    w = rng.standard_normal((k, c, r, s)).astype(np.float32)
    return (w * (rng.random(w.shape) < density)).astype(np.float32)


@pytest.mark.parametrize("k,c,density,r,s", [
    (64, 64, 0.125, 1, 1), (100, 72, 0.2, 1, 1), (130, 333, 0.125, 1, 1), (16, 9, 1.0, 1, 1),
    (40, 48, 0.0, 1, 1), (33, 17, 0.5, 1, 1), (50, 16, 0.15, 3, 3), (24, 5, 0.3, 5, 5),
    (70, 3, 0.2, 7, 7), (20, 6, 0.4, 1, 3)])
@pytest.mark.parametrize("rows", [16, 32, 64, 128])
def test_records_decode_to_the_tf32_kernel(rng, k, c, density, r, s, rows):
    """Columns c R S + r S + s, as ``dense_csr`` and the sparse layers' CSR number them."""
    w = _kernel(rng, k, c, density, r, s)
    cols = c * r * s
    rec = spr.pair_records(*spr.dense_csr(w), k, cols, rows, np)
    assert np.array_equal(decode(rec, k, cols), round_tf32(w.reshape(k, cols), np))
    assert rec.segs.shape == (-(-k // rows), 2) and rec.max_steps == rec.segs[:, 1].max()
    assert rec.columns == cols


def test_a_broken_layout_table_is_caught(rng, monkeypatch):
    """The decode test can fail: a metadata nibble moved, or the pairs' stage rows
    swapped, reads other values."""
    w = _kernel(rng, 64, 64, 0.2)
    good = spr.pair_records(*spr.dense_csr(w), 64, 64, 64, np)
    monkeypatch.setattr(spr, "META_NIBBLE", spr.META_NIBBLE[:, ::-1].copy())
    bad = spr.pair_records(*spr.dense_csr(w), 64, 64, 64, np)
    monkeypatch.undo()
    assert not np.array_equal(decode(bad, 64, 64), decode(good, 64, 64))


def test_channels_pair_almost_without_clashes_at_8x(rng):
    """At 1/8 density the greedy pairing finds pairs few rows have both of: a block's
    channels in about C / 2 pairs, a handful of its 16,384 nonzeros moved to a later round
    (0-2 on 200 random kernels), at most a pair of k steps more a block."""
    w = _kernel(rng, 256, 512, 0.125)
    rec = spr.pair_records(*spr.dense_csr(w), 256, 512, 64, np)
    assert rec.moved <= 4 and 4 * 250 <= rec.pairs <= 4 * 258
    assert 4 * 32 <= rec.steps <= 4 * 34


def test_a_full_kernel_needs_about_as_many_pairs_as_channels(rng):
    w = _kernel(rng, 32, 64, 1.0)
    rec = spr.pair_records(*spr.dense_csr(w), 32, 64, 32, np)
    assert 64 <= rec.pairs <= 64 + 7 and rec.moved == 32 * 32


def test_pair_channels_prefers_disjoint_partners():
    masks = np.array([[0b0011], [0b1100], [0b0110], [0b1001]], np.uint64)
    assert sorted(map(sorted, spr.pair_channels(masks))) == [[0, 1], [2, 3]]
    assert spr.pair_channels(np.array([[1], [0], [2]], np.uint64)) in ([(0, 2)], [(2, 0)])
    assert spr.pair_channels(np.array([[1]], np.uint64)) == [(0, -1)]


def _greedy_pairs(bits: np.ndarray) -> list[tuple[int, int]]:
    """The docstring's rule, spelt out on a (C, rows) bool matrix."""
    weight = bits.sum(axis=1)
    free = set(np.flatnonzero(weight).tolist())
    out = []
    for a in sorted(free, key=lambda c: (-weight[c], c)):
        if a not in free:
            continue
        free.discard(a)
        if not free:
            out.append((a, -1))
            continue
        b = min(free, key=lambda c: (int((bits[a] & bits[c]).sum()), -weight[c], c))
        free.discard(b)
        out.append((a, b))
    return out


@pytest.mark.parametrize("words", [1, 2, 3])
def test_pair_channels_follows_its_greedy_rule(rng, words):
    for _ in range(40):
        c = int(rng.integers(1, 60))
        bits = rng.random((c, 64 * words)) < rng.choice([0.02, 0.125, 0.5, 0.95])
        bits[rng.random(c) < 0.2] = False                  # unused columns
        masks = np.zeros((c, words), np.uint64)
        for r in range(64 * words):
            masks[:, r // 64] |= bits[:, r].astype(np.uint64) << np.uint64(r % 64)
        assert spr.pair_channels(masks) == _greedy_pairs(bits)


def test_bad_records_input():
    with pytest.raises(ValueError, match="rows must be a positive multiple of 16"):
        spr.pair_records([0, 1], [0], [1.0], 1, 4, 24, np)
    with pytest.raises(ValueError, match="indices must lie in"):
        spr.pair_records([0, 1], [7], [1.0], 1, 4, 16, np)


def _problem(x_shape, w_shape, stride=1, padding=0):
    return sp.Problem(conv_geometry(x_shape, w_shape, stride, padding))


def test_tiles_only_at_one_tf32_pass_and_for_filters_of_at_most_64_taps():
    facts = device_facts()
    p = _problem((2, 64, 8, 8), (32, 64, 1, 1))
    assert sp.candidates(p, facts) == []
    with precision.using("tf32"):
        tiles = sp.candidates(p, facts)
        assert tiles and all(t.splits <= 4 for t in tiles)       # 4 steps of 16 columns
        assert sp.default_tile(p, facts) in tiles
        wide = sp.candidates(_problem((2, 8, 8, 8), (32, 8, 3, 3), padding=1), facts)
        assert wide and max(t.splits for t in wide) == 4           # 72 columns: 5 steps
        assert sp.candidates(_problem((2, 64, 8, 8), (32, 64, 1, 1), stride=2), facts)
        assert sp.candidates(_problem((1, 4, 20, 20), (4, 4, 9, 9)), facts) == []
    assert sp.supported(_problem((1, 4, 5, 5), (4, 4, 3, 3))) is None
    assert sp.supported(_problem((1, 4, 8, 8), (4, 4, 8, 8))) is None        # 64 taps
    assert "at most 64 taps" in sp.supported(_problem((1, 4, 9, 9), (4, 4, 9, 9)))
    assert "dilation" in sp.supported(sp.Problem(conv_geometry((1, 4, 9, 9), (4, 4, 3, 3),
                                                               dilation=2)))


def test_a_plans_tiles_fit_the_largest_device_on_layers_of_many_columns():
    """A 7x7 filter over 512 channels (25,088 columns, two words each a block): without a
    device only the tiles whose clusters split the columns enough to fit 227 KB."""
    p = _problem((1, 512, 14, 14), (64, 512, 7, 7), padding=3)
    with precision.using("tf32"):
        tiles = sp.candidates(p, None)
    assert tiles and all(t.smem_bytes(p) <= sp.MAX_SMEM_OPTIN for t in tiles)
    assert all(t.splits > 1 for t in tiles)
    assert len(tiles) < len(sp.TILES)
    assert sp.default_tile(p, None) in tiles


def test_only_1x1_stride_1_layers_copy_16_bytes():
    assert sp.vectorized(conv_geometry((2, 8, 4, 4), (4, 8, 1, 1)))
    assert not sp.vectorized(conv_geometry((2, 8, 4, 4), (4, 8, 1, 1), 2))
    assert not sp.vectorized(conv_geometry((2, 8, 4, 4), (4, 8, 3, 3), 1, 1))
    assert not sp.vectorized(conv_geometry((2, 8, 4, 4), (4, 8, 1, 1), 1, 1))
    assert not sp.vectorized(conv_geometry((2, 8, 7, 7), (4, 8, 1, 1)))



@pytest.mark.parametrize("w_shape, stride, padding", [
    ((64, 32, 1, 1), 2, 0), ((64, 32, 3, 3), 2, 1), ((64, 32, 5, 5), 1, 0),
    ((64, 32, 3, 3), 1, 1)])
def test_the_grid_tiles_the_output_pixels(w_shape, stride, padding):
    # one block a tile of output pixels and rows: a grid over the input's pixels would
    # run 4x the blocks at stride 2, the surplus doing every product on zeros
    p = _problem((3, 32, 28, 28), w_shape, stride, padding)
    g = p.geom
    for tile in sp.TILES[::5]:
        blocks = sp.cdiv(g.n * g.oh * g.ow, tile.pixels) * sp.cdiv(g.k, tile.rows)
        assert tile.grid(p) == (blocks, 1, tile.splits)

def test_shared_memory_counts_the_columns_of_wider_filters():
    tile = sp.TILES[0]
    one = tile.smem_bytes(_problem((2, 64, 8, 8), (32, 64, 1, 1)))
    nine = tile.smem_bytes(_problem((2, 64, 8, 8), (32, 64, 3, 3), padding=1))
    # two words a decoded column, about one column a pair and 16 a step: 9x the columns
    assert nine - one >= 4 * 2 * (9 * 64 - 64 - 16)


def test_every_shape_and_split_comes_at_four_and_three_stages():
    p = _problem((2, 64, 8, 8), (32, 64, 3, 3), padding=1)
    four = [t for t in sp.TILES if t.stages == 4]
    assert sorted(sp.TILES, key=str) == sorted(four + [replace(t, stages=3) for t in four], key=str)
    for t in four:
        three = replace(t, stages=3)
        assert three.ring_floats() * 4 == t.ring_floats() * 3
        assert t.smem_bytes(p) - three.smem_bytes(p) == 4 * t.stage_floats()
    assert sp.default_tile(p, device_facts()).stages == 4
    with pytest.raises(ValueError, match="stages in"):
        sp.check_tile(sp.Tile(2, 2, 2, 2, 1, 2), p, device_facts())


def test_the_default_tile_splits_a_small_layer_and_not_a_large_one():
    facts = device_facts()
    small = sp.default_tile(_problem((32, 832, 8, 8), (32, 832, 1, 1)), facts)
    large = sp.default_tile(_problem((32, 256, 56, 56), (256, 256, 1, 1)), facts)
    assert small.splits > 1 and large.splits == 1


@pytest.mark.parametrize("c, k", [(1400, 554), (1300, 96), (1500, 200), (1900, 64)])
def test_the_default_tile_fits_a_layer_of_many_columns_where_any_tile_does(c, k):
    # 7x7 over 1,300-1,500 channels: 64k-74k columns, two words each a block; the
    # eight-warp tile's ring does not fit beside them at 8 splits, a four-warp one's does
    # (over 1,900 channels only at 3 stages)
    facts = device_facts()
    p = _problem((1, c, 14, 14), (k, c, 7, 7), padding=3)
    fits = [t for t in sp.TILES if t.smem_bytes(p) <= facts.smem_per_block_optin]
    tile = sp.default_tile(p, facts)
    assert fits and tile in fits
    sp.check_tile(tile, p, facts)


def test_a_layer_no_tile_fits_is_refused_by_name():
    facts = device_facts()
    p = _problem((1, 4096, 14, 14), (64, 4096, 7, 7), padding=3)
    assert not [t for t in sp.TILES if t.smem_bytes(p) <= facts.smem_per_block_optin]
    with pytest.raises(ValueError, match="bytes of shared memory"):
        sp.check_tile(sp.default_tile(p, facts), p, facts)


def test_instantiations_cover_every_tile_and_copy_width():
    names = sp.instantiations()
    assert len(names) == 2 * len(sp.TILES)
    assert "sparse_pairs_tc<2, 2, 2, 2, 4, true, 4>" in names


def test_cpu_reference_and_bad_input(rng):
    x = rng.standard_normal((2, 8, 5, 5)).astype(np.float32)
    w = _kernel(rng, 6, 8, 0.5)
    y = sp.sparse_pairs_conv2d(x, w, relu=True)
    want = np.maximum(np.einsum("kc,nchw->nkhw", w[:, :, 0, 0], x), 0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    w3 = _kernel(rng, 6, 8, 0.5, 3, 3)
    y = sp.sparse_pairs_conv2d(x, w3, None, 2, 1)
    np.testing.assert_allclose(y, reference.conv2d(x, w3, None, 2, 1), rtol=1e-5, atol=1e-5)
    assert y.shape == (2, 6, 3, 3)
    with pytest.raises(ValueError, match="at most 64 taps"):
        sp.sparse_pairs_conv2d(np.zeros((1, 8, 9, 9), np.float32),
                               rng.standard_normal((6, 8, 9, 9)).astype(np.float32))
    with pytest.raises(ValueError, match="w"):
        sp.sparse_pairs_conv2d(x, w[:, :4])
    with pytest.raises(ValueError, match="bias"):
        sp.sparse_pairs_conv2d(x, w, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="out"):
        sp.sparse_pairs_conv2d(x, w, out=np.zeros((2, 6, 5, 5), np.float32))
    with pytest.raises(ValueError, match="tile must be one of"):
        sp.check_tile(sp.Tile(3, 3, 3, 3), _problem((2, 8, 5, 5), (6, 8, 1, 1)), device_facts())


def test_a_tuned_plan_times_the_sparse_tensor_cores_at_one_tf32_pass():
    """Under tf32, a layer gets every sparse-tensor-core tile after the others (each named
    apart, each running its own kernel under "auto"): 1x1 at stride 1 or 2, 3x3 with
    padding; not at fp32 accuracy, not a filter of more than 64 taps; asked for at fp32 or
    on such a filter: an error."""
    from tensorconv.ops import sparse_conv as sc

    geom = conv_geometry((32, 512, 16, 16), (128, 512, 1, 1))
    assert not any(isinstance(t, sp.Tile) for t, _ in sc.remainder_choices(geom, 132))
    with precision.using("tf32"):
        choices = sc.remainder_choices(geom, 132)
        pairs = [t for t, st in choices if isinstance(t, sp.Tile)]
        assert pairs == sp.candidates(sp.Problem(geom), None) and len(pairs) > 1
        assert not isinstance(choices[0][0], sp.Tile)
        names = [sc.choice_name(*c) for c in choices]
        assert len(set(names)) == len(names)
        assert sc.remainder_kind(geom, "auto", pairs[0]) == "pairs"
        assert sc.check_remainder_choice(geom, "pairs", pairs[0]) == "pairs"
        assert sc.remainder_kernels(geom, "pairs", pairs[0]) == sp.kernels(sp.Problem(geom),
                                                                            pairs[0])
        for other in (conv_geometry((32, 512, 16, 16), (128, 512, 1, 1), 2),
                      conv_geometry((32, 64, 16, 16), (64, 64, 3, 3), 1, 1)):
            pairs = [t for t, _ in sc.remainder_choices(other, 132) if isinstance(t, sp.Tile)]
            assert pairs == sp.candidates(sp.Problem(other), None)
            assert sc.remainder_kind(other, "pairs") == "pairs"
        wide = conv_geometry((2, 4, 12, 12), (8, 4, 9, 9))
        assert not any(isinstance(t, sp.Tile) for t, _ in sc.remainder_choices(wide, 132))
        with pytest.raises(ValueError, match="remainder='pairs'"):
            sc.remainder_kind(wide, "pairs")
    with pytest.raises(ValueError, match="one tf32 pass only"):
        sc.remainder_kind(geom, "pairs")
    with pytest.raises(ValueError, match="remainder_tile must be one of the pairs"):
        with precision.using("tf32"):
            sc.check_remainder_choice(geom, "pairs", sp.Tile(3, 3, 3, 3))
