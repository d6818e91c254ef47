"""The sparse convolution op on the CPU: the paper's row split, the pieces, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorconv import blocksparse as bs
from tensorconv import ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_conv as sc
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct as sud
from tests.helpers import device_facts


@pytest.mark.parametrize("rows,parts", [
    (5, [(0, 5)]), (16, [(0, 16)]), (17, [(0, 9), (9, 17)]), (32, [(0, 32)]),
    (37, [(0, 32), (32, 37)]), (63, [(0, 32), (32, 48), (48, 63)]), (64, [(0, 64)]),
    (100, [(0, 96), (96, 100)]),
])
def test_split_rows_follows_the_paper(rows, parts):
    assert sc.split_rows(rows) == parts


def _packed(rng, shape=(40, 6, 3, 3), density=0.3, blocks=2):
    w = (rng.standard_normal(shape) * (rng.random(shape) < density)).astype(np.float32)
    k, cols = shape[0], int(np.prod(shape[1:]))
    layout_blocks = [(np.unique(rng.integers(0, k, rng.integers(1, k + 1))),
                      np.unique(rng.integers(0, cols, rng.integers(1, cols + 1))))
                     for _ in range(blocks)]
    return w, bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape,
                                                layout_blocks))


@pytest.mark.parametrize("shape", [(40, 6, 3, 3), (300, 4, 3, 3)])
def test_default_pieces_cover_every_block_row_once(rng, shape):
    w, packed = _packed(rng, shape, blocks=3)
    from tensorconv.checks import conv_geometry

    geom = conv_geometry((2, shape[1], 9, 9), w.shape, 1, 1)
    merged = sc.default_pieces(packed, geom, device_facts(), split="merged")
    assert isinstance(sc.default_pieces(packed, geom, device_facts()), sc.BlockTable)
    paper = sc.default_pieces(packed, geom, device_facts(), split="paper")
    for pieces in (merged, paper):
        sc.check_pieces(pieces, packed)
    for piece in merged:         # the rest in one piece, on the shortest tile holding it
        rows = piece.stop - piece.start
        assert piece.tile == min((t for t in sc.TILES if t.bn == 128 and t.bm >= min(32, rows)),
                                 key=lambda t: t.bm)
    for piece in paper:          # the paper's: no tile taller than its piece (8 at least)
        assert piece.tile.bm <= max(8, piece.stop - piece.start) and piece.tile.bn == 128
    with pytest.raises(ValueError, match="split"):
        sc.default_pieces(packed, geom, device_facts(), split="halves")


@pytest.mark.parametrize("rows,parts", [(5, [(0, 5)]), (32, [(0, 32)]), (63, [(0, 32), (32, 63)]),
                                        (300, [(0, 288), (288, 300)])])
def test_merged_rows_keep_the_rest_in_one_piece(rows, parts):
    assert sc.merged_rows(rows) == parts


def test_bad_pieces_are_refused(rng):
    w, packed = _packed(rng, blocks=1)
    rows = packed.layout.blocks[0][0].size
    tile = sc.TILES[0]
    for pieces, msg in (((), "exactly once"),
                        ((sc.Piece(0, 0, rows, tile), sc.Piece(0, 0, 1, tile)), "exactly once"),
                        ((sc.Piece(1, 0, 1, tile),), "outside the blocks"),
                        ((sc.Piece(0, 0, rows, sc.Tile(7, 7, 7, 1, 1)),), "one of")):
        with pytest.raises(ValueError, match=msg):
            sc.check_pieces(pieces, packed)


def test_the_cpu_path_is_the_reference(rng):
    w, packed = _packed(rng)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    got = ops.sparse_conv2d(x, packed, b, 2, 1, relu=True)
    want = np.maximum(reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                       b.astype(np.float64), 2, 1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.dtype == np.float32


def test_bad_input_is_refused_by_name(rng):
    w, packed = _packed(rng)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    for kwargs, exc, msg in ((dict(x=np.ascontiguousarray(x[:, :5])), ValueError, "packed has"),
                             (dict(packed=w), TypeError, "packed must be a BlockSparse"),
                             (dict(bias=np.ones(3, np.float32)), ValueError, "bias has 3"),
                             (dict(relu="yes"), TypeError, "relu must be"),
                             (dict(x=x.astype(np.float64)), TypeError, "x must be float32"),
                             (dict(remainder_tile=sc.PointwiseTile(16, 2, 4)), ValueError,
                              "remainder='pointwise' needs a 1x1 filter, got 3x3"),
                             (dict(remainder_tile=sc.RemainderTile(7, 1, 8)), ValueError,
                              "remainder_tile must be one of the tiled"),
                             (dict(remainder="rows", remainder_tile=sc.RemainderTile(32, 2, 8)),
                              ValueError, "remainder_tile must be None for remainder='rows'"),
                             (dict(remainder_staging=(2, True)), TypeError,
                              "remainder_staging must be a Staging"),
                             (dict(remainder_staging=sc.Staging(2)), ValueError,
                              "remainder_staging.phases must be 1, or the horizontal stride 1"),
                             (dict(remainder="rows", remainder_staging=sc.Staging()), ValueError,
                              "applies to the tiled remainder only")):
        call = dict(x=x, packed=packed)
        call.update(kwargs)
        with pytest.raises(exc, match=msg):
            ops.sparse_conv2d(**call)


def _emulate_tiled(x, packed, geom, vec, tile=None, phases=1, row_phases=None):
    """The tiled remainder kernel's arithmetic in NumPy: its geometry, staging and tables."""
    tile = tile or sc.default_remainder_tile(geom)
    g = sc.remainder_geometry(geom, tile, vec=vec, phases=phases, row_phases=row_phases)
    assert g.pitch % g.phases == 0 and (g.phases == 1 or g.vec == 1)
    weights = sc.pack_weights(packed, (geom.h, geom.w), np)
    row_tab, taps, row_of, longest = sc.remainder_tables(weights, tile, g, np)
    assert sorted(row_of[row_of >= 0]) == list(range(geom.k))
    chunks = -(-geom.c // tile.ck)
    data, tap = taps[:, 0], taps[:, 1].view(np.int32)
    assert (tap % 4 == 0).all() and (row_tab[..., 0] % 2 == 0).all()
    assert (row_tab[..., -1, 1] <= longest).all() and (row_tab[..., -1, 0] % 2 == 0).all()
    (sh, sw), (ph, pw) = geom.stride, geom.padding
    big = 4 * (g.iht + g.pitch)
    xpad = np.zeros((geom.n + g.nb, geom.c + tile.ck, geom.h + 2 * big, geom.w + 2 * big))
    xpad[:geom.n, :geom.c, big:big + geom.h, big:big + geom.w] = x
    y = np.zeros(geom.output_shape)
    rows_per_image = tile.ck * g.iht
    rsh, rsw = g.read_stride(geom)
    assert g.image_words(tile) == rows_per_image * g.pitch + g.ipad and g.ipad % g.vec == 0

    def word(p):                                      # the kernel's word(p)
        return p // (g.tw * g.th) * g.image_words(tile) + (p // g.tw) % g.th * rsh * g.pitch \
            + p % g.tw * rsw

    assert sc.lane_words(g.pitch, g.tw, g.th, (rsh, rsw), rows_per_image, g.ipad) == \
        [word(p) for p in range(32)]
    for n0 in range(0, geom.n, g.nb):
        for oh0 in range(0, geom.oh, g.th):
            for ow0 in range(0, geom.ow, g.tw):
                ih0, iw0 = oh0 * sh - ph, ow0 * sw - pw
                lead = iw0 % 4 if g.vec == 4 else 0       # the kernel's iw0 & 3
                for chunk in range(chunks):
                    c0, cols = chunk * tile.ck, iw0 - lead + big
                    run = g.pitch // g.phases            # a line's words: its phases' runs
                    line_cols = cols + np.concatenate(
                        [ph + g.phases * g.cstep * np.arange(run) for ph in range(g.phases)])
                    lines = ih0 + big + g.rstep * g.line_rows()   # in order or by phase
                    xs = xpad[n0:n0 + g.nb, c0:c0 + tile.ck][:, :, lines][..., line_cols]
                    pad = np.full((g.nb, g.ipad), np.nan)    # never read
                    xs = np.concatenate([xs.reshape(g.nb, -1), pad], axis=1).ravel()
                    for slot, k in enumerate(row_of):
                        if k < 0:
                            continue
                        grp, i = divmod(slot, tile.rb)
                        first = row_tab[grp, chunk, tile.rb, 0]
                        start, count = row_tab[grp, chunk, i]
                        for e in range(first + start, first + start + count):
                            for lane in range(32):
                                for j in range(tile.px):
                                    p = lane + 32 * j
                                    n = n0 + p // (g.tw * g.th)
                                    oh, ow = oh0 + (p // g.tw) % g.th, ow0 + p % g.tw
                                    if n >= geom.n or oh >= geom.oh or ow >= geom.ow:
                                        continue
                                    at = word(lane) + word(32 * j) + lead + tap[e] // 4
                                    assert at == word(p) + lead + tap[e] // 4
                                    y[n, k, oh, ow] += data[e] * xs[at]
    return y


@pytest.mark.parametrize("shape,x_shape,stride,vec", [((6, 11, 3, 3), (2, 11, 7, 9), 1, 1),
                                                       ((6, 11, 3, 3), (2, 11, 7, 12), 1, 4),
                                                       ((20, 9, 1, 1), (3, 9, 5, 3), 2, 1),
                                                       ((20, 9, 1, 1), (3, 9, 5, 8), 2, 4),
                                                       ((4, 3, 5, 5), (1, 3, 12, 10), 2, 1),
                                                       ((4, 3, 5, 5), (1, 3, 12, 20), 2, 4),
                                                       ((20, 9, 1, 1), (3, 9, 8, 12), 2, 4),
                                                       ((7, 5, 1, 1), (2, 5, 9, 7), 3, 1),
                                                       ((6, 4, 3, 3), (1, 4, 3, 70), 1, 1),
                                                       ((6, 4, 3, 3), (1, 4, 5, 136), 2, 4),
                                                       # warps over several images, padded
                                                       ((6, 11, 3, 3), (5, 11, 4, 4), 1, 4),
                                                       ((6, 11, 3, 3), (5, 11, 4, 3), 1, 1),
                                                       ((6, 11, 3, 3), (9, 11, 2, 2), 1, 1),
                                                       ((8, 6, 3, 3), (7, 6, 7, 7), 2, 1),
                                                       ((8, 6, 3, 3), (7, 6, 8, 8), 2, 4)])
def test_the_tiled_remainder_tables_and_geometry_compute_the_convolution(rng, shape, x_shape,
                                                                         stride, vec):
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    pad = shape[2] // 2
    geom = conv_geometry(x_shape, shape, stride, pad)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, pad)
    for phases in {1, stride if shape[3] > 1 else 1}:   # lines in order, and by phase
        for rows in (False, True):                       # rows in order, and by phase
            np.testing.assert_allclose(
                _emulate_tiled(x, packed, geom, vec, phases=phases, row_phases=rows), want,
                rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("x_shape,w_shape,stride,tile,vec,phased", [
    ((32, 64, 32, 32), (128, 64, 3, 3), 2, (64, 2, 8, 16), 1, True),
    ((32, 128, 28, 28), (256, 128, 3, 3), 2, (64, 2, 8, 16), 1, True),
    ((32, 64, 32, 32), (128, 64, 3, 3), 2, (64, 2, 8, 16), 4, False),
    ((32, 128, 16, 16), (256, 128, 3, 3), 2, (64, 2, 8, 16), 1, False),
    ((2, 8, 30, 90), (16, 8, 5, 5), 3, (32, 2, 8, 4), 1, False),
    ((4, 64, 16, 16), (64, 64, 3, 3), 1, (16, 8, 8, 4), 1, False)])
def test_row_phases_spread_a_strided_tiles_reads_where_they_can(x_shape, w_shape, stride,
                                                                tile, vec, phased):
    """Staged by row phase only where that takes bank conflicts off (16-wide tiles at
    stride 2 copied a word at a time: an odd pitch, 2 -> 1; 16-byte copies keep the pitch
    even, and every lane then reads words of one parity), each tap row of each output row
    on the line holding its input row; otherwise, or told not to, in order."""
    geom = conv_geometry(x_shape, w_shape, stride, w_shape[2] // 2)
    tile = sc.RemainderTile(*tile)
    g, flat = (sc.remainder_geometry(geom, tile, vec, row_phases=b) for b in (None, False))
    conflicts = lambda g: sc.bank_conflicts(  # noqa: E731
        g.pitch, g.tw, g.th, g.read_stride(geom), tile.ck * g.iht)
    assert flat.rphases == 1 and (g.rphases > 1) == phased
    if phased:
        assert conflicts(g) < conflicts(flat) and g.pitch % 2 == 1
    else:
        assert g == flat
    rows = g.line_rows()
    assert sorted(rows) == list(range(g.iht))
    for i in range(min(g.th, geom.oh)):
        for r in range(geom.r):
            assert rows[g.row_line(r) + i * g.read_stride(geom)[0]] == i * stride + r


@pytest.mark.parametrize("x_shape,w_shape,stride", [((2, 8, 32, 32), (16, 8, 3, 3), 2),
                                                     ((2, 8, 16, 16), (16, 8, 3, 3), 2),
                                                     ((4, 8, 8, 8), (16, 8, 3, 3), 2),
                                                     ((1, 8, 30, 90), (16, 8, 5, 5), 4)])
def test_column_phases_make_a_strided_tiles_reads_conflict_free(x_shape, w_shape, stride):
    """In order, an even stride's tile reads every other word; by column phase its reads
    are consecutive (stride 2: one lane a bank), every tap's columns inside its run.  Odd
    strides stay in order."""
    geom = conv_geometry(x_shape, w_shape, stride, w_shape[2] // 2)
    tile = sc.RemainderTile(32, 2, 8)
    assert sc.column_phases(geom) == stride
    flat, split = (sc.remainder_geometry(geom, tile, phases=p) for p in (1, stride))
    args = lambda g: (g.pitch, g.tw, g.th, g.read_stride(geom), tile.ck * g.iht)  # noqa: E731
    assert sc.bank_conflicts(*args(split)) < sc.bank_conflicts(*args(flat))
    assert stride != 2 or sc.bank_conflicts(*args(split)) == 1
    run = split.pitch // stride
    last = split.column_word(np.arange(geom.s)) + split.tw - 1   # the last column's words
    assert (last // run == np.arange(geom.s) % stride).all()     # each inside its own run
    with pytest.raises(ValueError, match="phases"):
        sc.remainder_geometry(geom, tile, phases=stride + 1)
    odd = conv_geometry(x_shape, w_shape, stride + 1, w_shape[2] // 2)
    assert sc.column_phases(odd) == 1


@pytest.mark.parametrize("k,rb,warps", [(64, 16, 4), (21, 8, 4), (21, 32, 4), (130, 64, 4),
                                        (3, 16, 4), (130, 64, 8), (300, 128, 16), (21, 32, 8)])
def test_balanced_rows_give_each_warp_about_the_same_nonzeros(rng, k, rb, warps):
    """Every row in one slot, empty slots -1; no warp's nonzeros past the lightest's by more
    than the longest row (longest first to the least loaded); skewed rows in order are
    worse than balanced."""
    counts = (rng.pareto(1.5, k) * 20).astype(np.int64)
    slots = sc.balanced_rows(counts, rb, warps)
    rw = rb // warps
    assert slots.shape == (-(-k // rb) * rb,)
    assert sorted(slots[slots >= 0]) == list(range(k)) and (slots[slots < 0] == -1).all()
    loads = np.where(slots >= 0, counts[slots], 0).reshape(-1, rw).sum(1)
    assert loads.max() - loads.min() <= counts.max()
    in_order = np.pad(counts, (0, slots.size - k)).reshape(-1, rw).sum(1)
    assert loads.max() <= in_order.max()
    assert np.array_equal(sc.balanced_rows(counts, rb, warps), slots)   # deterministic


@pytest.mark.parametrize("tile", sc.REMAINDER_TILES, ids=str)
def test_every_remainder_tile_computes_the_convolution(rng, tile):
    """Each tile on a map narrower than a warp's row of pixels (several images a tile)."""
    shape, x_shape = (10, 5, 3, 3), (3, 5, 5, 6)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    geom = conv_geometry(x_shape, shape, 1, 1)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, 1, 1)
    np.testing.assert_allclose(_emulate_tiled(x, packed, geom, 1, tile), want, rtol=1e-9,
                               atol=1e-9)


def test_remainder_geometry_stays_within_the_block_limits():
    for shape in [(32, 64, 32, 32), (32, 512, 4, 4), (1, 3, 224, 224), (7, 5, 2, 3),
                  (32, 64, 56, 56), (32, 256, 14, 14), (32, 512, 7, 7)]:
        for k, r, stride in [(64, 3, 1), (512, 3, 2), (5, 7, 2), (8, 1, 1)]:
            geom = conv_geometry(shape, (k, shape[1], r, r), stride, r // 2)
            tile = sc.default_remainder_tile(geom)
            g = sc.remainder_geometry(geom, tile)
            assert g.nb * g.th * g.tw == 32 * tile.px
            for v in (g.nb, g.th, g.tw):
                assert v & (v - 1) == 0            # the kernel's bit fields
            assert g.threads(tile) == 32 * tile.warps <= 1024 and tile.rb % tile.warps == 0
            assert g.pitch >= g.iwt + (3 if g.vec == 4 else 0) and g.pitch % g.vec == 0
            if tile.px > 1:                         # chosen within the stage limit
                assert g.smem_bytes(tile) <= 2 * 24 * 1024 + 2 * 4 * 32 * 4


@pytest.mark.parametrize("x_shape,stride,worst", [((32, 64, 32, 32), 1, 1),
                                                  ((32, 64, 16, 16), 1, 1),
                                                  ((32, 64, 8, 8), 1, 1),
                                                  ((32, 64, 4, 4), 1, 1),
                                                  ((32, 512, 4, 4), 1, 1),
                                                  ((32, 256, 8, 8), 2, 2),   # even banks
                                                  ((32, 64, 2, 2), 1, 2),
                                                  ((32, 64, 32, 32), 2, 2)])
def test_the_remainder_pitch_spreads_a_warps_reads_over_the_banks(x_shape, stride, worst):
    geom = conv_geometry(x_shape, (64, x_shape[1], 3, 3), stride, 1)
    tile = sc.default_remainder_tile(geom)
    g = sc.remainder_geometry(geom, tile)
    got = sc.bank_conflicts(g.pitch, g.tw, g.th, g.read_stride(geom), tile.ck * g.iht, g.ipad)
    assert got == worst
    assert got <= sc.bank_conflicts(g.iwt, g.tw, g.th, g.read_stride(geom), tile.ck * g.iht)
    # images padded apart only where a warp's pixels span several
    assert (g.ipad > 0) == (g.nb > 1 and g.tw * g.th < 32 and
                            sc.bank_conflicts(g.pitch, g.tw, g.th, g.read_stride(geom),
                                              tile.ck * g.iht) > got)


@pytest.mark.parametrize("x_shape,k", [((32, 512, 4, 4), 512), ((32, 256, 8, 8), 256),
                                       ((2, 75, 5, 3), 40), ((32, 64, 32, 32), 64),
                                       ((1, 9, 6, 6), 8)])
def test_remainder_shares_cover_every_chunk_where_the_blocks_leave_sms_idle(x_shape, k):
    geom = conv_geometry(x_shape, (k, x_shape[1], 3, 3), 1, 1)
    tile = sc.default_remainder_tile(geom)
    g = sc.remainder_geometry(geom, tile)
    shares, per_share = sc.remainder_shares(geom, tile, g, 132)
    chunks = -(-geom.c // tile.ck)
    assert (shares - 1) * per_share < chunks <= shares * per_share   # no share left empty
    threads = math.prod(g.grid(geom, tile)) * g.threads(tile)
    if 4 * threads > 1024 * 132 or chunks < 4:
        assert shares == 1
    else:
        assert shares > 1 and per_share >= 2
        assert threads * shares <= 2 * 1024 * 132


@pytest.mark.parametrize("w_shape,stride,hw,want", [((64, 64, 3, 3), 1, 32, "tiled"),
                                                    ((256, 256, 3, 3), 1, 8, "tiled"),
                                                    ((512, 512, 3, 3), 1, 4, "tiled"),
                                                    ((512, 512, 3, 3), 1, 7, "tiled"),
                                                    ((256, 256, 3, 3), 1, 14, "tiled"),
                                                    ((128, 64, 3, 3), 2, 32, "tiled"),
                                                    ((512, 256, 3, 3), 2, 14, "tiled"),
                                                    ((128, 64, 1, 1), 1, 32, "pointwise"),
                                                    ((128, 512, 1, 1), 1, 8, "pointwise"),
                                                    ((128, 64, 1, 1), 2, 32, "pointwise"),
                                                    ((256, 128, 1, 1), 2, 16, "pointwise"),
                                                    ((512, 256, 1, 1), 2, 8, "pointwise"),
                                                    ((256, 128, 1, 1), 2, 56, "pointwise"),
                                                    ((256, 128, 1, 1), 1, 56, "pointwise")])
def test_the_automatic_remainder_follows_the_measured_rule(w_shape, stride, hw, want):
    geom = conv_geometry((32, w_shape[1], hw, hw), w_shape, stride, w_shape[2] // 2)
    assert sc.choose_remainder(geom) == want


def test_a_large_strided_1x1_input_is_gathered_by_default():
    """Past the byte bound, a strided 1x1 layer without padding reads a gathered input
    on the pointwise rule's tile for the compact plane (a tuned plan's first choice); a
    padded one stays on the tiled kernel; smaller, unstrided or wider layers are read as
    given."""
    big = conv_geometry((32, 128, 56, 56), (256, 128, 1, 1), 2, 0)
    assert sc.choose_remainder(big) == "pointwise" and sc.default_staging(big) == sc.GATHERED
    tile, staging = sc.default_pointwise_choice(big, 132)
    assert staging == sc.GATHERED
    assert tile == sc.default_pointwise_tile(sc.gathered_geometry(big), 132)
    assert sc.remainder_choices(big, 132)[0] == (tile, staging)
    padded = conv_geometry((32, 128, 56, 56), (256, 128, 1, 1), 2, 1)
    assert sc.choose_remainder(padded) == "tiled" and sc.default_staging(padded) is None
    assert sc.remainder_choices(padded, 132)[0] == (sc.default_remainder_tile(padded), None)
    for g in (conv_geometry((32, 128, 16, 16), (256, 128, 1, 1), 2, 0),
              conv_geometry((32, 128, 56, 56), (256, 128, 1, 1), 1, 0),
              conv_geometry((32, 128, 56, 56), (256, 128, 3, 3), 2, 0)):
        assert sc.default_staging(g) is None
        assert sc.default_pointwise_choice(g, 132) == (sc.default_pointwise_tile(g, 132), None)


@pytest.mark.parametrize("w_shape,stride,hw,want", [((64, 64, 3, 3), 1, 32, (16, 8, 8)),
                                                    ((256, 256, 3, 3), 1, 8, (128, 4, 8, 16)),
                                                    ((512, 512, 3, 3), 1, 4, (128, 2, 8, 16)),
                                                    ((256, 256, 3, 3), 1, 14, (128, 4, 8, 16)),
                                                    ((64, 64, 3, 3), 1, 8, (32, 4, 8)),
                                                    ((128, 128, 3, 3), 1, 28, (32, 4, 8)),
                                                    ((128, 64, 3, 3), 2, 32, (64, 2, 8, 16)),
                                                    ((256, 128, 3, 3), 2, 16, (64, 2, 8, 16)),
                                                    ((32, 64, 3, 3), 2, 32, (32, 2, 8)),
                                                    ((128, 64, 1, 1), 2, 32, (64, 1, 32)),
                                                    ((8, 64, 3, 3), 2, 32, (8, 2, 8))])
def test_the_automatic_tile_follows_the_measured_rule(w_shape, stride, hw, want):
    """Strided, 64 rows or more: 16 warps of 4 rows; fewer, 32 rows a block; strided 1x1:
    64 rows and 32-channel stages; stride 1 from 128 rows on maps of 16 columns or fewer:
    16 warps of 8 rows; else 32 rows for 4 pixels on 8x8 maps."""
    geom = conv_geometry((32, w_shape[1], hw, hw), w_shape, stride, w_shape[2] // 2)
    assert sc.default_remainder_tile(geom) == sc.RemainderTile(*want)


@pytest.mark.parametrize("w_shape,stride,hw", [((128, 64, 1, 1), 2, 32), ((48, 832, 1, 1), 1, 4),
                                               ((256, 128, 1, 1), 2, 56),
                                               ((128, 64, 3, 3), 2, 32), ((64, 64, 3, 3), 1, 32)])
def test_a_tuned_plan_times_every_pointwise_tile_and_the_rules_tiled_one(w_shape, stride, hw):
    """The rules' choice first; on a 1x1 filter every pointwise tile, the tiled rule's and
    the unstaged unrolled kernel's tiles, each once; on a wider one the tiled rule's tile
    on every staging (strided: by column phase where even, word copies), then the staged
    unrolled kernel's tiles at stride 1, the unstaged one's at any stride; each named
    apart, and each runs its own kernel under remainder="auto"."""
    geom = conv_geometry((32, w_shape[1], hw, hw), w_shape, stride, w_shape[2] // 2)
    choices = sc.remainder_choices(geom, 132)
    tiled = sc.default_remainder_tile(geom)
    if w_shape[2] == 1:
        first = sc.default_pointwise_tile(geom, 132) \
            if sc.choose_remainder(geom) == "pointwise" else tiled
        assert choices[0] == ((first, None) if sc.default_staging(geom) is None else
                              sc.default_pointwise_choice(geom, 132))
        unrolled = tuple(sud.candidates(sud.Problem(geom), None))
        gathered = [(t, sc.GATHERED) for t in sc.POINTWISE_TILES] if stride > 1 else []
        assert sc.gathers(geom) == (stride > 1)
        assert sorted(choices, key=repr) == sorted(
            [(t, None) for t in sc.POINTWISE_TILES + (tiled,) + unrolled] + gathered, key=repr)
        rest = [c for c in choices[1:] if c[1] is not None]     # the gathered timed last
        assert choices[len(choices) - len(rest):] == tuple(rest) and len(rest) >= \
            len(gathered) - 1
    else:
        want = [None] + ([sc.Staging(2, True), sc.Staging(1, True)] if stride == 2 else [])
        # the staged unrolled kernel's tiles at stride 1, then the unstaged one's
        mods = (su, sud) if stride == 1 else (sud,)
        unrolled = tuple((t, None) for m in mods for t in m.candidates(m.Problem(geom), None))
        assert unrolled
        assert choices == tuple((tiled, st) for st in want) + unrolled
    names = [sc.choice_name(*c) for c in choices]
    assert len(set(names)) == len(choices)
    assert {n.split(" (")[0] for n in names if not n.startswith("sparse_unrolled")} <= \
        set(sc.instantiations())
    assert [sc.remainder_kind(geom, "auto", t) for t, _ in choices] == \
        ["pointwise" if isinstance(t, sc.PointwiseTile) else
         "unrolled" if isinstance(t, (su.Tile, sud.Tile)) else "tiled" for t, _ in choices]
    assert sc.remainder_kind(geom) == sc.choose_remainder(geom)
    with pytest.raises(TypeError, match="tile must be"):
        sc.choice_name((16, 2, 4))


@pytest.mark.parametrize("shape,x_shape,blocks,span", [((40, 6, 3, 3), (2, 6, 9, 9), 3, None),
                                                       ((70, 5, 3, 3), (1, 5, 4, 4), 4, 16),
                                                       ((300, 4, 3, 3), (2, 4, 6, 5), 3, 7),
                                                       ((12, 9, 1, 1), (3, 9, 5, 5), 0, None)])
def test_the_block_table_computes_the_blocks_with_each_row_once_in_order(rng, shape, x_shape,
                                                                          blocks, span):
    w, packed = _packed(rng, shape, blocks=blocks)     # random blocks: shared rows, zero cells
    geom = conv_geometry(x_shape, shape, 1, 1)
    for tile in sc.TABLE_TILES:
        table = sc.block_table(packed.layout, geom, 132, tile, span)
        sc.check_pieces(table, packed)
        assert (table.items[:, 3] <= tile.bm).all() and (table.items[:, 3] > 0).all()
        assert (table.items[:, 5] - table.items[:, 4] <= table.span).all()
        # every slot is one row of one item, and every slot is reduced exactly once
        assert table.slots == table.items[:, 3].sum()
        assert np.array_equal(np.sort(table.red_idx), np.arange(table.slots))
        x = rng.standard_normal(x_shape)
        xcols = _im2col(x, shape[2:], 1)
        blocks_only = np.zeros(w.shape[:1] + (w[0].size,))
        for (rows, cols), v in zip(packed.layout.blocks, packed.values):
            blocks_only[np.ix_(rows, cols)] += v
        np.testing.assert_allclose(_emulate_table(table, packed, xcols), blocks_only @ xcols,
                                   rtol=1e-9, atol=1e-9)
    other = sc.block_table(_packed(rng, shape, blocks=1)[1].layout, geom, 132)
    if len(other) and other.digest != table.digest:
        with pytest.raises(ValueError, match="another layout"):
            sc.check_pieces(other, packed)
    with pytest.raises(ValueError, match="tile must be"):
        sc.block_table(packed.layout, geom, 132, sc.TILES[0])


def test_the_table_span_fills_the_gpu_and_cuts_fewer_columns_on_more_pixels(rng):
    shape = (256, 512, 3, 3)                                  # 4,608 columns
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    blocks = [(np.arange(0, 128), np.arange(0, 3000)), (np.arange(128, 256), np.arange(1000, 4608))]
    layout = bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape, blocks)
    deep = conv_geometry((32, 512, 4, 4), shape, 1, 1)       # 512 pixels: cut the columns
    wide = conv_geometry((32, 512, 32, 32), shape, 1, 1)     # 32768 pixels
    t = sc.TABLE_TILES[0]
    table = sc.block_table(layout, deep, 132, t)
    assert table.span < 3000
    assert len(table) * math.ceil(512 / t.bn) >= 4 * 132       # about 8 thread blocks an SM
    assert len(table) == sum(math.ceil(r.size / t.bm) * math.ceil(c.size / table.span)
                             for r, c in blocks)
    assert sc.table_span(layout, wide, t, 132) > table.span
    small = bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape,
                                   [(np.arange(8), np.arange(20))])
    assert sc.table_span(small, deep, t, 132) == 64             # the least span binds


def _im2col(x, rs, pad):
    """(C·R·S, N·OH·OW) float64 im2col of ``x`` at stride 1 (column c·R·S + r·S + s)."""
    n, c, h, w = x.shape
    r, s = rs
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - r + 1, w + 2 * pad - s + 1
    cols = np.empty((c, r, s, n, oh, ow))
    for i in range(r):
        for j in range(s):
            cols[:, i, j] = xp[:, :, i:i + oh, j:j + ow].transpose(1, 0, 2, 3)
    return cols.reshape(c * r * s, n * oh * ow)


def test_the_block_table_is_direct_only_where_no_channel_has_two_slots(rng):
    shape = (16, 4, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.5)).astype(np.float32)
    apart = [(np.arange(0, 8), np.arange(0, 20)), (np.arange(8, 16), np.arange(10, 36))]
    shared = [(np.arange(0, 10), np.arange(0, 20)), (np.arange(8, 16), np.arange(20, 36))]
    geom = conv_geometry((2, 4, 9, 9), shape, 1, 1)
    for blocks, span, direct, covers in ((apart, 10 ** 6, True, True), (apart, 16, False, True),
                                         (shared, 10 ** 6, False, True),
                                         (apart[:1], 10 ** 6, True, False)):
        layout = bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape, blocks)
        table = sc.block_table(layout, geom, 132, span=span)
        assert table.direct == direct and table.covers_every_row == covers
        assert np.array_equal(np.bincount(table.slot_rows, minlength=16),
                              np.diff(table.red_ptr))      # each slot's channel, reduced there
        if span > 36:                                       # no cut: one slot a block row
            assert np.array_equal(np.sort(table.slot_rows),
                                  np.sort(np.concatenate([r for r, _ in blocks])))


def _emulate_table(table, packed, xcols):
    """What the table's two launches leave in the output, in NumPy: ``xcols`` the im2col
    matrix ((C·R·S, Q), float64); returns (K, Q), each item's partial sums through its
    slots, each channel's slots added in the kernel's order."""
    cols = [c for _, c in packed.layout.blocks]
    values = np.concatenate([v.ravel() for v in packed.values]) if cols else np.zeros(0)
    starts = np.cumsum([0] + [c.size for c in cols])
    partial = np.zeros((table.slots, xcols.shape[1]))
    for val_off, ld, tab_off, m, k0, k1, slot, _ in table.items:
        block = int(np.searchsorted(starts, tab_off, side="right")) - 1
        w = values[val_off:val_off + m * ld].reshape(m, ld)[:, k0:k1]
        partial[slot:slot + m] = w @ xcols[cols[block][k0:k1]]
    out = np.zeros((table.red_ptr.size - 1, xcols.shape[1]))
    for k in range(out.shape[0]):
        for s in table.red_idx[table.red_ptr[k]:table.red_ptr[k + 1]]:
            out[k] += partial[s]
    return out


def _emulate_pointwise(x, packed, geom, tile, shares):
    """The unstaged 1x1 kernel's arithmetic in NumPy, through its tables: each share's
    partial sums of each slot's taps (weight, channel offset c·H·W), read at every pixel's
    one input position, then the shares added in order."""
    weights = sc.pack_weights(packed, (geom.h, geom.w), np)
    slot_tab, taps, row_of = sc.pointwise_tables(weights, tile, shares, np)
    assert row_of.size % tile.rb == 0 and sorted(row_of[row_of >= 0]) == list(range(geom.k))
    assert slot_tab.shape == (shares, row_of.size, 2) and (slot_tab % 2 == 0).all()
    data, off = taps[:, 0].astype(np.float64), taps[:, 1].view(np.int32)
    hw = geom.h * geom.w
    bounds = sc.share_bounds(geom.c, shares)
    (sh, sw), (ph, pw) = geom.stride, geom.padding
    flat = x.reshape(geom.n, -1).astype(np.float64)
    partial = np.zeros((shares,) + geom.output_shape)
    ih = np.arange(geom.oh) * sh - ph
    iw = np.arange(geom.ow) * sw - pw
    inside = ((ih >= 0) & (ih < geom.h))[:, None] & ((iw >= 0) & (iw < geom.w))[None, :]
    pos = np.clip(ih, 0, geom.h - 1)[:, None] * geom.w + np.clip(iw, 0, geom.w - 1)[None, :]
    for share in range(shares):
        for slot, k in enumerate(row_of):
            first, count = slot_tab[share, slot]
            if k < 0:
                assert count == 0
                continue
            for t in range(first, first + count):
                if data[t]:                        # a padding tap reads channel 0, times 0
                    assert bounds[share] <= off[t] // hw < bounds[share + 1]
                partial[share, :, k] += data[t] * flat[:, off[t] + pos]
    return np.where(inside, partial.sum(0), 0.0)


@pytest.mark.parametrize("tile", sc.POINTWISE_TILES, ids=str)
@pytest.mark.parametrize("x_shape,k,stride,padding,shares", [((2, 9, 6, 7), 21, 1, 0, 1),
                                                             ((3, 13, 9, 8), 70, 2, 0, 3),
                                                             ((1, 5, 5, 5), 3, 1, 1, 2),
                                                             ((2, 4, 7, 9), 40, 3, 1, 1)])
def test_the_pointwise_tables_compute_the_convolution(rng, tile, x_shape, k, stride, padding,
                                                      shares):
    """Every run even, empty slots none, each row once, each share's taps in its
    channels; strides and padding (a padded pixel reads nothing)."""
    shape = (k, x_shape[1], 1, 1)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    w[::5] = 0                                                       # empty rows
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    geom = conv_geometry(x_shape, shape, stride, padding)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, padding)
    np.testing.assert_allclose(_emulate_pointwise(x, packed, geom, tile, shares), want,
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("stride", [2, 3, (2, 1), (1, 3)])
def test_a_gathered_input_is_the_stride_1_convolution_of_the_pixels_read(rng, stride):
    """A strided 1x1 layer without padding on its gathered input: the stride-1 geometry
    of its output's size, the weights' channel offsets of that size (the same tables as
    weights packed for it), and the same convolution; refused on padded, unstrided or
    wider filters and on other kernels, by name."""
    shape = (21, 13, 1, 1)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape))
    x = rng.standard_normal((3, 13, 11, 10)).astype(np.float32)
    geom = conv_geometry(x.shape, shape, stride, 0)
    assert sc.gathers(geom)
    g1 = sc.gathered_geometry(geom)
    assert (g1.h, g1.w, g1.oh, g1.ow, g1.stride) == (geom.oh, geom.ow, geom.oh, geom.ow, (1, 1))
    weights = sc.pack_weights(packed, (geom.h, geom.w), np)
    compact = sc.gathered_weights(weights, (g1.h, g1.w), np)
    assert sc.gathered_weights(weights, (g1.h, g1.w), np) is compact        # made once
    np.testing.assert_array_equal(compact.col_off,
                                  sc.pack_weights(packed, (g1.h, g1.w), np).col_off)
    tile = sc.POINTWISE_TILES[0]
    for a, b in zip(sc.pointwise_tables(compact, tile, 2, np),
                    sc.pointwise_tables(sc.pack_weights(packed, (g1.h, g1.w), np), tile, 2, np)):
        np.testing.assert_array_equal(a, b)
    xs = np.ascontiguousarray(x[:, :, ::geom.stride[0], ::geom.stride[1]])
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, 0)
    np.testing.assert_allclose(_emulate_pointwise(xs, packed, g1, tile, 2), want,
                               rtol=1e-9, atol=1e-9)
    for g, kind in ((conv_geometry(x.shape, shape, stride, 1), "pointwise"),
                    (conv_geometry(x.shape, shape, 1, 0), "pointwise"),
                    (geom, "tiled"), (geom, "rows"), (geom, "unrolled")):
        with pytest.raises(ValueError, match="gathered input"):
            sc.check_remainder_choice(g, kind, None, sc.GATHERED)
    with pytest.raises(ValueError, match="gathered input"):
        sc.check_remainder_choice(geom, "pointwise", None, sc.Staging(2, gather=True))
    with pytest.raises(TypeError, match="gather must be a bool"):
        sc.check_remainder_choice(geom, "pointwise", None, sc.Staging(gather=1))
    assert sc.check_remainder_choice(geom, "auto", tile, sc.GATHERED) == "pointwise"
    with pytest.raises(ValueError, match="gathered input"):
        ops.sparse_conv2d(x, packed, None, stride, 1, remainder_tile=tile,
                          remainder_staging=sc.GATHERED)
    np.testing.assert_allclose(ops.sparse_conv2d(x, packed, None, stride, 0, remainder_tile=tile,
                                                 remainder_staging=sc.GATHERED), want,
                               rtol=1e-5, atol=1e-5)


def test_the_pointwise_remainder_is_refused_for_wider_filters(rng):
    w, packed = _packed(rng)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="remainder='pointwise' needs a 1x1 filter, got 3x3"):
        ops.sparse_conv2d(x, packed, remainder="pointwise")


@pytest.mark.parametrize("q,k,c", [(32 * 32 * 32, 128, 64), (32 * 8 * 8, 256, 128),
                                   (32 * 4 * 4, 512, 256), (32 * 4 * 4, 48, 832), (1, 8, 8)])
def test_pointwise_shares_give_every_sm_its_warps(q, k, c):
    """Channels shared only where the blocks alone leave SMs short of warps, each share at
    least 32 channels, and only as many shares as bring the warps up."""
    geom = conv_geometry((q, c, 1, 1), (k, c, 1, 1), 1, 0)
    for tile in sc.POINTWISE_TILES:
        shares = sc.pointwise_shares(geom, tile, 132)
        alone = sc.pointwise_warps(geom, tile)
        assert 1 <= shares <= max(1, c // 32)
        if alone >= 16 * 132:
            assert shares == 1
        elif shares > 1:
            assert sc.pointwise_warps(geom, tile, shares - 1) < 16 * 132


def test_pointwise_tiles_are_distinct_and_the_rule_takes_an_unbatched_one():
    from tensorconv.ops.sparse_remainder import choice_name

    names = [choice_name(t) for t in sc.POINTWISE_TILES]
    assert len(set(names)) == len(names) == len(set(sc.POINTWISE_TILES))
    assert {t.batch for t in sc.POINTWISE_TILES} == {1, 4, 8}
    for shape, stride, hw in (((512, 256, 1, 1), 2, 8), ((16, 480, 1, 1), 1, 16),
                              ((64, 192, 1, 1), 1, 32)):
        geom = conv_geometry((32, shape[1], hw, hw), shape, stride, 0)
        assert sc.default_pointwise_tile(geom, 132).batch == 1
