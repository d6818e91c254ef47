"""The sparse convolution kernels against the dense reference: random shapes, densities
and layouts (shared rows, overlapping blocks, no block, a block covering everything, empty
rows), every tile, strides, batches, the epilogue; poisoned outputs."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tensorconv import backend, ops, precision, reference
from tensorconv import blocksparse as bs
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_blocks_tc
from tensorconv.ops import sparse_conv as sc
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct as sud
from tests.helpers import check_sparse_conv2d, random_sparse_layer, rel_err, sweep

pytestmark = pytest.mark.gpu


def _case(rng, k, c, r, density, nblocks):
    w, packed, _ = random_sparse_layer(rng, k, c, r, density, nblocks)
    return w, packed


def _check(rng, w, packed, x_shape, stride, padding, *, epilogue=True, pieces=None,
           remainder="tiled", **kwargs):
    check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, epilogue=epilogue,
                        pieces=pieces, remainder=remainder, **kwargs)


@pytest.mark.parametrize("trial", sweep(24, 8))
def test_random_layers_match_the_dense_reference(rng, trial):
    k, c = int(rng.integers(1, 80)), int(rng.integers(1, 24))
    r = int(rng.choice([1, 3, 5, 7]))
    stride, padding = int(rng.integers(1, 3)), int(rng.integers(0, r // 2 + 1))
    density = float(rng.choice([0.02, 0.125, 0.25, 0.6, 1.0]))
    w, packed = _case(rng, k, c, r, density, int(rng.integers(0, 5)))
    n, h = int(rng.integers(1, 4)), int(rng.integers(r, 20))
    print(f"K={k} C={c} R={r} stride={stride} pad={padding} density={density} "
          f"blocks={len(packed.layout.blocks)} N={n} H={h}")
    remainder = sc.REMAINDERS[trial // 2 % 4]
    if remainder == "pointwise" and r != 1:
        remainder = "tiled"
    try:
        _check(rng, w, packed, (n, c, h, h + 1), stride, padding, epilogue=bool(trial % 2),
               remainder=remainder)
    except ValueError as e:
        # dense rows of a large filter can need more shared memory than a block may have:
        # the tiled remainder asked for by name refuses them before any launch
        if remainder != "tiled" or "use remainder='rows'" not in str(e):
            raise
        need = int(re.search(r"needs (\d+) bytes", str(e)).group(1))
        assert need > backend.device_facts().smem_per_block_optin
        _check(rng, w, packed, (n, c, h, h + 1), stride, padding, epilogue=bool(trial % 2),
               remainder="rows")


@pytest.mark.parametrize("tile", sc.TILES, ids=str)
def test_every_tile_on_a_block_shared_with_the_remainder(rng, tile):
    w, packed = _case(rng, 70, 9, 3, 0.3, 2)          # 70 rows: every tile has a ragged edge
    pieces = tuple(sc.Piece(b, 0, rows.size, tile)
                   for b, (rows, _) in enumerate(packed.layout.blocks))
    _check(rng, w, packed, (2, 9, 13, 11), 1, 1, pieces=pieces)


@pytest.mark.parametrize("split", sc.SPLITS)
def test_both_row_splits_of_tall_blocks(rng, split):
    w, packed = _case(rng, 300, 5, 3, 0.3, 3)         # blocks of up to 300 rows
    geom = conv_geometry((2, 5, 12, 9), w.shape, 1, 1)
    pieces = sc.default_pieces(packed, geom, backend.device_facts(), split=split)
    _check(rng, w, packed, (2, 5, 12, 9), 1, 1, pieces=pieces)


EDGE_LAYOUTS = ["none", "everything", "overlapping", "empty rows"]


def _edge_layout(rng, layout):
    """A 48 x 8 x 3 x 3 kernel at density 0.2 and an edge-case layout of it: no block, one
    block covering everything (with every third row empty), three overlapping blocks."""
    shape = (48, 8, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.2)).astype(np.float32)
    m = bs.kernel_matrix(w)
    if layout == "empty rows":
        m[::3] = 0
    everything = (np.arange(48), np.arange(72))
    blocks = {"none": [], "everything": [everything], "empty rows": [everything],
              "overlapping": [(np.arange(0, 40), np.arange(0, 50)),
                              (np.arange(20, 48), np.arange(30, 72)),
                              (np.arange(10, 30), np.arange(0, 72))]}[layout]
    return w, bs.pack(w, bs.layout_from_pattern(m != 0, shape, blocks))


@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
def test_edge_layouts(rng, layout):
    w, packed = _edge_layout(rng, layout)
    for stride in (1, 2):
        for remainder in sc.REMAINDERS:
            # a 3x3 kernel: not the 1x1 kernel (pointwise); the unrolled remainder runs
            # stride 1 only; the sparse tensor cores (pairs) one tf32 pass only
            if remainder == "pairs":
                with precision.using("tf32"):
                    _check(rng, w, packed, (3, 8, 10, 10), stride, 1, remainder=remainder,
                           tol=3e-3)
            elif remainder != "pointwise" and (remainder != "unrolled" or stride == 1):
                _check(rng, w, packed, (3, 8, 10, 10), stride, 1, remainder=remainder)


def test_a_zero_kernel_gives_bias_residual_relu(rng):
    w = np.zeros((16, 4, 3, 3), np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(np.zeros((16, 36), bool), w.shape))
    _check(rng, w, packed, (2, 4, 8, 8), 1, 1)


def test_prepared_weights_are_reused_and_checked(rng):
    import cupy as cp

    w, packed = _case(rng, 32, 8, 3, 0.25, 2)
    x = cp.asarray(rng.standard_normal((1, 8, 12, 12)).astype(np.float32))
    weights = sc.pack_weights(packed, (12, 12), cp)
    once = ops.sparse_conv2d(x, packed, None, 1, 1, weights=weights)
    again = ops.sparse_conv2d(x, packed, None, 1, 1, weights=weights)
    assert cp.array_equal(once, again)
    with pytest.raises(ValueError, match="weights must be pack_weights"):
        ops.sparse_conv2d(x, packed, None, 1, 1, weights=sc.pack_weights(packed, (11, 12), cp))


@pytest.mark.parametrize("hw,k", [((32, 32), 64), ((4, 4), 40), ((3, 2), 8), ((9, 7), 5)])
def test_the_tiled_remainder_on_each_geometry(rng, hw, k):
    """Wide and narrow maps, few rows, many images per block (and the 2-pixel tile)."""
    c = 19                                      # three channel stages, the last partial
    w = (rng.standard_normal((k, c, 3, 3)) * (rng.random((k, c, 3, 3)) < 0.15)).astype(
        np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    for stride in (1, 2):
        _check(rng, w, packed, (5, c) + hw, stride, 1)


@pytest.mark.parametrize("x_shape,stride", [((2, 19, 6, 70), 1), ((2, 19, 7, 136), 2),
                                            ((3, 9, 30, 56), 1), ((2, 9, 29, 58), 2)])
def test_the_tiled_remainder_on_wide_maps(rng, x_shape, stride):
    """Outputs wider than a warp: 64-column tiles (a lane's pixels 32 apart on one row),
    columns past the output, ImageNet-like widths."""
    k, c = 24, x_shape[1]
    w = (rng.standard_normal((k, c, 3, 3)) * (rng.random((k, c, 3, 3)) < 0.2)).astype(
        np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    _check(rng, w, packed, x_shape, stride, 1)


def _remainder_case(rng, k, x_shape, r, stride, density):
    """A random ``k``-row kernel of ``r`` x ``r`` taps at ``density``, all of it in the
    remainder, with its geometry, an input and the float64 reference output."""
    w = (rng.standard_normal((k, x_shape[1], r, r))
         * (rng.random((k, x_shape[1], r, r)) < density)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    geom = conv_geometry(x_shape, w.shape, stride, r // 2)
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, r // 2)
    return packed, geom, x, want


@pytest.mark.parametrize("tile", sc.REMAINDER_TILES, ids=str)
def test_every_remainder_tile_on_every_kind_of_map(rng, tile):
    """Each tile of the tiled remainder, forced, on maps of 4 to 40 columns (images, rows
    and columns of a tile past the output), strides 1 and 2, 1x1 and 3x3, a chunk short of
    channels; outputs poisoned."""
    import cupy as cp

    ran = 0
    for x_shape, r, stride in [((3, 19, 4, 4), 3, 1), ((2, 11, 7, 7), 3, 1),
                               ((2, 11, 8, 8), 3, 2), ((2, 11, 13, 13), 3, 1),
                               ((1, 9, 11, 40), 3, 2), ((2, 9, 12, 20), 1, 2),
                               ((2, 9, 9, 18), 1, 1)]:
        packed, geom, x, want = _remainder_case(rng, 21, x_shape, r, stride, 0.25)
        out = cp.full(geom.output_shape, cp.nan, cp.float32)
        xd, weights = cp.asarray(x), sc.pack_weights(packed, (geom.h, geom.w), cp)
        optin = backend.device_facts().smem_per_block_optin
        if sc.tiled_launch(xd, weights, geom, tile).smem > optin:
            with pytest.raises(ValueError, match="shared memory"):   # forced: no fallback
                sc.run(xd, weights, out, geom, (), remainder="tiled", remainder_tile=tile)
            continue
        sc.run(xd, weights, out, geom, (), remainder="tiled", remainder_tile=tile)
        assert rel_err(out.get(), want) <= 1e-5, (x_shape, r, stride)
        ran += 1
    assert ran >= 5                      # a wide stage may pass the limit on one or two maps


@pytest.mark.parametrize("x_shape,r,stride", [((3, 11, 16, 16), 3, 2), ((2, 9, 13, 29), 3, 2),
                                              ((2, 7, 21, 40), 5, 4), ((5, 9, 8, 8), 3, 2),
                                              ((1, 10, 15, 33), 5, 3), ((3, 11, 31, 31), 3, 2),
                                              ((2, 5, 27, 30), 3, 2)])
def test_the_tiled_remainder_in_order_or_by_column_phase(rng, x_shape, r, stride):
    """Strided filters wider than a tap, their lines staged in order (16-byte copies where
    aligned, or word copies), and by column phase (word copies, consecutive reads), on
    every tile that fits; 16-wide tiles copied a word at a time by row phase as well;
    outputs poisoned."""
    import cupy as cp

    packed, geom, x, want = _remainder_case(rng, 37, x_shape, r, stride, 0.2)
    ran = by_row = 0
    xd, weights = cp.asarray(x), sc.pack_weights(packed, (geom.h, geom.w), cp)
    optin = backend.device_facts().smem_per_block_optin
    for tile in (sc.RemainderTile(32, 2, 8), sc.RemainderTile(16, 4, 8),
                 sc.RemainderTile(64, 1, 32), sc.RemainderTile(8, 8, 8)):
        for staging in (sc.Staging(1), sc.Staging(stride, True), sc.Staging(1, True)):
            launch = sc.tiled_launch(xd, weights, geom, tile, staging.phases,
                                     vec=1 if staging.words else None)
            if launch.smem > optin:
                continue
            out = cp.full(geom.output_shape, cp.nan, cp.float32)
            sc.run(xd, weights, out, geom, (), remainder="tiled", remainder_tile=tile,
                   remainder_staging=staging)
            assert rel_err(out.get(), want) <= 1e-5, (tile, staging)
            ran += 1
            by_row += launch.g.rphases > 1
    assert ran >= 6                      # a wide stage may pass the limit on some tiles
    assert by_row >= (x_shape[3] in (31, 30))   # 16-wide tiles, word copies: by row phase
    # by default, by column phase where the copies are words anyway
    auto = sc.tiled_launch(xd, weights, geom, sc.RemainderTile(32, 2, 8)).g
    assert auto.phases == (sc.column_phases(geom) if geom.w % 4 else 1)


@pytest.mark.parametrize("w_in,stride,padding", [(12, 1, 1), (16, 2, 1), (20, 1, 2), (8, 2, 0)])
def test_the_tiled_remainder_copies_16_bytes_or_words_by_alignment(rng, w_in, stride, padding):
    """Rows a multiple of 4 floats: 16-byte copies from a line starting up to 3 columns
    early; the same input one float off 16-byte alignment: word copies.  Both poisoned,
    both against the reference."""
    import cupy as cp

    k, c, r = 40, 11, 5 if padding == 2 else 3
    w = (rng.standard_normal((k, c, r, r)) * (rng.random((k, c, r, r)) < 0.2)).astype(
        np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    x = rng.standard_normal((3, c, 9, w_in)).astype(np.float32)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, padding)
    flat = cp.empty(x.size + 1, cp.float32)
    for off in (0, 1):
        xd = flat[off:off + x.size].reshape(x.shape)
        xd[...] = cp.asarray(x)
        assert (xd.data.ptr % 16 == 0) == (off == 0)
        geom = conv_geometry(x.shape, w.shape, stride, padding)
        out = cp.full(geom.output_shape, cp.nan, cp.float32)
        ops.sparse_conv2d(xd, packed, None, stride, padding, remainder="tiled", out=out)
        assert rel_err(out.get(), want) <= 1e-5


@pytest.mark.parametrize("hw,k,nblocks", [((4, 4), 64, 0), ((8, 8), 24, 2), ((5, 3), 40, 3)])
def test_the_tiled_remainder_with_its_chunks_shared_among_blocks(rng, hw, k, nblocks):
    """Few blocks on a small map: the channel chunks shared among blocks, their partial
    outputs summed in order with the dense blocks' rows and the epilogue added once."""
    c = 75                                      # ten channel stages, the last partial
    w, packed = _case(rng, k, c, 3, 0.15, nblocks)
    sm = backend.device_facts().sm_count
    for stride in (1, 2):
        geom = conv_geometry((2, c) + hw, w.shape, stride, 1)
        tile = sc.default_remainder_tile(geom)
        assert sc.remainder_shares(geom, tile, sc.remainder_geometry(geom, tile), sm)[0] > 1
        _check(rng, w, packed, (2, c) + hw, stride, 1)
        _check(rng, w, packed, (2, c) + hw, stride, 1, epilogue=False)


@pytest.mark.parametrize("x_shape,k,stride,tile,staging", [
    ((32, 64, 4, 4), 256, 1, None, None),
    ((32, 64, 4, 4), 256, 1, sc.RemainderTile(128, 4, 8, 16), None),
    ((32, 40, 8, 7), 256, 2, sc.RemainderTile(64, 2, 8, 16), sc.Staging(1, True)),
    ((9, 24, 4, 3), 40, 1, None, None), ((33, 20, 2, 2), 24, 1, None, None),
    ((7, 19, 3, 4), 16, 1, sc.RemainderTile(16, 4, 8), None)])
def test_the_tiled_remainder_pads_images_apart_where_a_warp_spans_several(rng, x_shape, k,
                                                                          stride, tile, staging):
    """Small maps: a warp's pixels span images, whose staged lines are padded apart (16-byte
    and word copies, chunks shared among blocks or not, a last image group short of
    images), outputs poisoned."""
    import cupy as cp

    w, packed = _case(rng, k, x_shape[1], 3, 0.15, 0)
    geom = conv_geometry(x_shape, w.shape, stride, 1)
    x = rng.standard_normal(x_shape).astype(np.float32)
    xd = cp.asarray(x)
    launch = sc.tiled_launch(xd, sc.pack_weights(packed, x_shape[2:], cp), geom, tile,
                             None if staging is None else staging.phases,
                             vec=1 if staging is not None and staging.words else None)
    g = launch.g
    assert g.nb > 1 and g.tw * g.th < 32 and g.ipad > 0
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, 1)
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    ops.sparse_conv2d(xd, packed, None, stride, 1, remainder_tile=tile,
                      remainder_staging=staging, out=out)
    assert np.isfinite(out.get()).all() and rel_err(out.get(), want) <= 1e-5
    if tile is None and staging is None:
        _check(rng, w, packed, x_shape, stride, 1)


def test_the_automatic_remainder_is_the_chosen_kernel_and_falls_back_to_rows(rng):
    import cupy as cp

    for x_shape, w_shape, stride in [((4, 16, 12, 12), (24, 16, 3, 3), 1),
                                     ((4, 16, 7, 7), (24, 16, 3, 3), 1),
                                     ((4, 16, 12, 12), (24, 16, 3, 3), 2),
                                     ((4, 16, 12, 12), (24, 16, 1, 1), 1)]:
        w, packed = _case(rng, w_shape[0], w_shape[1], w_shape[2], 0.2, 1)
        geom = conv_geometry(x_shape, w_shape, stride, w_shape[2] // 2)
        x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
        auto = ops.sparse_conv2d(x, packed, None, stride, w_shape[2] // 2)
        chosen = ops.sparse_conv2d(x, packed, None, stride, w_shape[2] // 2,
                                   remainder=sc.choose_remainder(geom))
        assert cp.array_equal(auto, chosen)
    # A dense 11x11 kernel: 16 rows x 8 channels x 121 taps of (weight, offset) pairs in
    # two stages want more shared memory than a block has.
    w = rng.standard_normal((16, 16, 11, 11)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    x_shape = (1, 16, 16, 16)                   # 16 columns: 16-row tiles
    geom = conv_geometry(x_shape, w.shape, 1, 5)
    assert sc.choose_remainder(geom) == "tiled"
    x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
    with pytest.raises(ValueError, match="shared memory"):
        ops.sparse_conv2d(x, packed, None, 1, 5, remainder="tiled")
    got = ops.sparse_conv2d(x, packed, None, 1, 5).get()
    want = reference.conv2d(x.get().astype(np.float64), w.astype(np.float64), None, 1, 5)
    assert rel_err(got, want) <= 1e-5


@pytest.mark.parametrize("trial", sweep(12, 4))
def test_the_block_table_on_random_layers(rng, trial):
    k, c = int(rng.integers(1, 90)), int(rng.integers(1, 24))
    r = int(rng.choice([1, 3, 5]))
    stride, padding = int(rng.integers(1, 3)), int(rng.integers(0, r // 2 + 1))
    w, packed = _case(rng, k, c, r, float(rng.choice([0.05, 0.3, 1.0])),
                      int(rng.integers(0, 5)))
    n, h = int(rng.integers(1, 5)), int(rng.integers(r, 18))
    x_shape = (n, c, h, h + 2)
    geom = conv_geometry(x_shape, w.shape, stride, padding)
    tile = sc.TABLE_TILES[trial % len(sc.TABLE_TILES)]
    span = [None, 16, 5, 10 ** 6][trial % 4]          # ragged spans: a stage's edge
    table = sc.block_table(packed.layout, geom, backend.device_facts().sm_count, tile, span)
    print(f"K={k} C={c} R={r} stride={stride} pad={padding} blocks={len(packed.layout.blocks)} "
          f"N={n} H={h} tile={tile} span={table.span} items={len(table)}")
    _check(rng, w, packed, x_shape, stride, padding, epilogue=bool(trial % 2), pieces=table,
           remainder=sc.REMAINDERS[trial % 3])


@pytest.mark.parametrize("bm", sparse_blocks_tc.ROWS)
def test_the_tensor_core_table_at_fp32_and_tf32(rng, bm):
    import cupy as cp

    w, packed = _case(rng, 150, 13, 3, 0.3, 3)     # ragged rows and columns, shared rows
    x_shape = (3, 13, 15, 14)
    geom = conv_geometry(x_shape, w.shape, 2, 1)
    tile = sparse_blocks_tc.Tile(bm)
    for span in (None, 24, 5):                      # 5: a slice's tail inside an item
        table = sc.block_table(packed.layout, geom, 132, tile, span)
        _check(rng, w, packed, x_shape, 2, 1, pieces=table)          # 3xTF32: fp32 accuracy
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, 2, 1)
    with precision.using("tf32"):
        table = sc.default_pieces(packed, geom, backend.device_facts())
        assert isinstance(table.tile, sparse_blocks_tc.Tile)
        out = cp.full(geom.output_shape, cp.nan, cp.float32)
        got = ops.sparse_conv2d(cp.asarray(x), packed, None, 2, 1, pieces=table, out=out)
        again = ops.sparse_conv2d(cp.asarray(x), packed, None, 2, 1, pieces=table)
    assert cp.array_equal(got, again)
    assert 1e-6 < rel_err(got.get(), want) <= 3e-3    # one tf32 pass: tf32's rounding shows


@pytest.mark.parametrize("rows", [40, 64, 0])
def test_blocks_over_every_weight_skip_the_empty_remainder(rng, rows):
    """No remainder and no epilogue: the blocks' launches alone write the (poisoned) output,
    rows no block covers (their weights all zero) included."""
    shape = (70, 7, 3, 3)
    w = rng.standard_normal(shape).astype(np.float32)
    w[rows:] = 0
    blocks = [(np.arange(rows), np.arange(63))] if rows else []
    if rows == 64:
        blocks = [(np.arange(0, 40), np.arange(63)), (np.arange(30, 64), np.arange(63))]
        w[30:40] = 0          # the overlap: both blocks hold these rows' zeros
    layout = bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape, blocks)
    packed = bs.pack(w, layout)
    assert packed.layout.indptr[-1] == 0
    for split in ("table", "merged"):
        geom = conv_geometry((2, 7, 9, 12), shape, 1, 1)
        pieces = sc.default_pieces(packed, geom, backend.device_facts(), split=split)
        _check(rng, w, packed, (2, 7, 9, 12), 1, 1, pieces=pieces, epilogue=False)
        _check(rng, w, packed, (2, 7, 9, 12), 1, 1, pieces=pieces)


@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
def test_the_block_table_on_edge_layouts_is_deterministic(rng, layout):
    import cupy as cp

    w, packed = _edge_layout(rng, layout)
    shape = w.shape
    x_shape = (3, 8, 10, 10)
    for stride in (1, 2):
        geom = conv_geometry(x_shape, shape, stride, 1)
        table = sc.default_pieces(packed, geom, backend.device_facts(), split="table")
        _check(rng, w, packed, x_shape, stride, 1, pieces=table)
        x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
        small = sc.block_table(packed.layout, geom, 132, span=16)   # many slots a row
        once = ops.sparse_conv2d(x, packed, None, stride, 1, pieces=small)
        assert cp.array_equal(once, ops.sparse_conv2d(x, packed, None, stride, 1, pieces=small))


def test_a_deep_layer_splits_its_columns_and_matches_the_pieces(rng):
    import cupy as cp

    shape = (256, 64, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    blocks = [(np.arange(0, 100), np.arange(0, 400)), (np.arange(60, 256), np.arange(100, 576)),
              (np.arange(0, 256, 3), np.arange(0, 576, 2))]    # shared rows, cut columns
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape, blocks))
    x_shape = (8, 64, 4, 4)
    geom = conv_geometry(x_shape, w.shape, 1, 1)
    table = sc.default_pieces(packed, geom, backend.device_facts(), split="table")
    assert (table.items[:, 5] - table.items[:, 4]).max() < max(
        cols.size for _, cols in packed.layout.blocks)
    _check(rng, w, packed, x_shape, 1, 1, pieces=table)
    x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
    a = ops.sparse_conv2d(x, packed, None, 1, 1, pieces=table)
    b = ops.sparse_conv2d(x, packed, None, 1, 1)
    assert rel_err(a.get(), b.get().astype(np.float64)) <= 1e-5


@pytest.mark.parametrize("covered", [True, False])
def test_the_block_table_stores_straight_into_the_output_where_no_row_is_shared(rng, covered):
    shape = (40, 6, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.3)).astype(np.float32)
    rows = rng.permutation(np.arange(40) if covered else np.arange(0, 40, 2))
    half = rows.size // 2
    blocks = [(np.sort(rows[:half]), np.arange(0, 30)), (np.sort(rows[half:]), np.arange(20, 54))]
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape, blocks))
    for stride in (1, 2):
        geom = conv_geometry((2, 6, 11, 9), shape, stride, 1)
        table = sc.block_table(packed.layout, geom, 132, span=10 ** 6)
        assert table.direct and table.covers_every_row == covered
        assert all(r.name != sc.sparse_blocks.REDUCE for r in sc.layer_kernels(table, geom))
        _check(rng, w, packed, (2, 6, 11, 9), stride, 1, pieces=table)        # poisoned out
        _check(rng, w, packed, (2, 6, 11, 9), stride, 1, pieces=table, epilogue=False)


@pytest.mark.parametrize("tile", sc.POINTWISE_TILES, ids=str)
def test_every_pointwise_tile_on_1x1_layers(rng, tile):
    """The unstaged 1x1 remainder, each tile forced: strides 1-3, padding (a padded pixel's
    output is the epilogue of 0), pixels past the output in the last tile, batches, rows
    past the last slot group, channels shared among blocks (96 and 200 channels on a few
    pixels); strided layers without padding also on their gathered input; outputs
    poisoned."""
    import cupy as cp

    shared = gathered = 0
    for x_shape, k, stride, padding in [((3, 19, 4, 4), 21, 1, 0), ((2, 11, 13, 13), 70, 2, 0),
                                        ((2, 9, 12, 20), 5, 2, 1), ((1, 40, 9, 18), 64, 3, 0),
                                        ((5, 7, 3, 2), 130, 1, 1), ((2, 96, 5, 5), 24, 1, 0),
                                        ((1, 200, 6, 6), 9, 2, 1), ((2, 96, 9, 7), 33, (2, 1), 0),
                                        ((3, 200, 11, 11), 9, 3, 0)]:
        shape = (k, x_shape[1], 1, 1)
        w = (rng.standard_normal(shape) * (rng.random(shape) < 0.25)).astype(np.float32)
        packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape))
        geom = conv_geometry(x_shape, shape, stride, padding)
        x = rng.standard_normal(x_shape).astype(np.float32)
        want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride,
                                padding)
        out = cp.full(geom.output_shape, cp.nan, cp.float32)
        xd, weights = cp.asarray(x), sc.pack_weights(packed, (geom.h, geom.w), cp)
        sc.run(xd, weights, out, geom, (), remainder="pointwise", remainder_tile=tile)
        assert rel_err(out.get(), want) <= 1e-5, (x_shape, k, stride, padding)
        shared += sc.pointwise_shares(geom, tile, backend.device_facts().sm_count) > 1
        if tile.batch > 1:   # the same products in the same order as one pair at a time
            plain = cp.full(geom.output_shape, cp.nan, cp.float32)
            sc.run(xd, weights, plain, geom, (), remainder="pointwise",
                   remainder_tile=dataclasses.replace(tile, batch=1))
            assert bool(cp.array_equal(out, plain)), (x_shape, k, stride, padding)
        if sc.gathers(geom):
            out = cp.full(geom.output_shape, cp.nan, cp.float32)
            sc.run(xd, weights, out, geom, (), remainder="pointwise", remainder_tile=tile,
                   remainder_staging=sc.GATHERED)
            assert rel_err(out.get(), want) <= 1e-5, (x_shape, k, stride, "gathered")
            gathered += sc.pointwise_shares(sc.gathered_geometry(geom), tile,
                                            backend.device_facts().sm_count) > 1
    assert shared >= 1 and gathered >= 1


def test_a_large_strided_1x1_layer_reads_a_gathered_input_by_default(rng):
    """Past the byte bound (a 17 MB input), the automatic remainder of a strided 1x1 layer
    without padding is the rule's pointwise tile on a gathered input: against float64
    with the output poisoned, the same bits as that choice asked for, and its kernel among
    those the layer lists for compiling."""
    import cupy as cp

    w, packed = _case(rng, 40, 64, 1, 0.2, 1)
    x_shape = (8, 64, 91, 91)
    geom = conv_geometry(x_shape, w.shape, 2, 0)
    assert sc.default_staging(geom) == sc.GATHERED
    _check(rng, w, packed, x_shape, 2, 0, remainder="auto")
    tile, staging = sc.default_pointwise_choice(geom, backend.device_facts().sm_count)
    x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
    auto = ops.sparse_conv2d(x, packed, None, 2, 0)
    asked = ops.sparse_conv2d(x, packed, None, 2, 0, remainder_tile=tile,
                              remainder_staging=staging)
    assert bool(cp.array_equal(auto, asked))
    assert sc._pointwise_name(tile) in {r.name for r in sc.remainder_kernels(geom)}


@pytest.mark.parametrize("c", [33, 70])
def test_a_gathered_input_replays_in_a_cuda_graph(rng, c):
    """The gathered path captured once (the copy into the stream's scratch, one or two
    channel shares after it) and replayed on new input values into a poisoned output:
    the same as the ungathered kernel, against float64."""
    import cupy as cp

    from tensorconv.graph import CapturedGraph

    w, packed = _case(rng, 90, c, 1, 0.2, 2)
    geom = conv_geometry((3, c, 15, 12), w.shape, 2, 0)
    tile = sc.default_pointwise_tile(sc.gathered_geometry(geom), backend.device_facts().sm_count)
    xd = cp.asarray(rng.standard_normal((3, c, 15, 12)).astype(np.float32))
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    weights = sc.pack_weights(packed, (geom.h, geom.w), cp)      # as the engine: made once
    pieces = sc.default_pieces(packed, geom, backend.device_facts())
    fn = lambda: sc.run(xd, weights, out, geom, pieces, remainder_tile=tile,  # noqa: E731
                        remainder_staging=sc.GATHERED)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()      # the tables made and the scratch sized before capture
        stream.synchronize()
        graph = CapturedGraph(stream, fn, programmatic=False)
        x = rng.standard_normal((3, c, 15, 12)).astype(np.float32)
        xd.set(x)
        out.fill(cp.nan)
        graph.launch(stream)
        stream.synchronize()
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, 2, 0)
    assert rel_err(out.get(), want) <= 1e-5
    plain = ops.sparse_conv2d(xd, packed, None, 2, 0, remainder="pointwise")
    assert rel_err(out.get(), plain.get()) <= 1e-6


@pytest.mark.parametrize("nblocks,c", [(1, 33), (3, 33), (2, 70)])
def test_the_pointwise_remainder_adds_to_blocks_and_applies_the_epilogue(rng, nblocks, c):
    """Blocks sharing rows with the remainder (the remainder adds into their output, its
    first channel share where there are two), bias, residual and ReLU, through the op;
    outputs poisoned."""
    w, packed = _case(rng, 90, c, 1, 0.2, nblocks)
    for stride, padding in ((1, 0), (2, 0), (2, 1)):
        geom = conv_geometry((3, c, 11, 12), w.shape, stride, padding)
        tile = sc.default_pointwise_tile(geom, backend.device_facts().sm_count)
        assert sc.pointwise_shares(geom, tile, backend.device_facts().sm_count) == \
            (2 if c == 70 else 1)
        _check(rng, w, packed, (3, c, 11, 12), stride, padding, remainder="pointwise")
        if sc.gathers(geom):      # the copy and the shares' partials in one scratch buffer
            _check(rng, w, packed, (3, c, 11, 12), stride, padding, remainder="pointwise",
                   remainder_staging=sc.GATHERED)


@pytest.mark.parametrize("x_shape,r,stride", [((3, 20, 16, 16), 1, 2), ((2, 9, 31, 31), 3, 2),
                                              ((2, 40, 7, 9), 1, 1), ((1, 6, 20, 24), 3, 2)])
def test_every_tuned_choice_through_the_public_op(rng, x_shape, r, stride):
    """sparse_conv2d on every (tile, staging) a tuned plan times for the layer, each
    against float64 with the output poisoned; a forced tiled tile whose densest rows do
    not fit is refused before any launch (the output stays poisoned)."""
    import cupy as cp

    packed, geom, x, want = _remainder_case(rng, 40, x_shape, r, stride, 0.3)
    xd = cp.asarray(x)
    bias = rng.standard_normal(geom.k).astype(np.float32)
    want = np.maximum(want + bias[None, :, None, None], 0)
    choices = sc.remainder_choices(geom, backend.device_facts().sm_count)
    # 1x1: every pointwise tile (27 plain, 12 batched; strided, each on a gathered input
    # too), the tiled rule's and the unstaged unrolled kernel's; 3x3 stride 2: the tiled
    # rule's tile on three stagings and the unstaged unrolled kernel's tiles (the staged
    # one runs, but is not timed)
    unrolled = len(sud.candidates(sud.Problem(geom), None))
    pointwise = len(sc.POINTWISE_TILES) * (2 if stride > 1 else 1)   # and on a gathered input
    assert unrolled and len(choices) == (pointwise + 1 if r == 1 else 3) + unrolled
    if r == 1:          # 40 rows: every rows a group, and 8 a group four warps a block
        tiles = sud.candidates(sud.Problem(geom), None)
        assert {t.rb for t in tiles if t.gb == 1} == set(sud.ROWS)
        assert [(t.rb, t.gb) for t in tiles if t.gb > 1] == [(8, 4)]
    assert r == 1 or su.candidates(su.Problem(geom), None)
    for tile, staging in choices:
        out = cp.full(geom.output_shape, cp.nan, cp.float32)
        ops.sparse_conv2d(xd, packed, cp.asarray(bias), stride, r // 2, relu=True,
                          remainder_tile=tile, remainder_staging=staging, out=out)
        assert rel_err(out.get(), want) <= 1e-5, (tile, staging)
    dense = np.ones((64, 512, 3, 3), np.float32)   # a chunk's taps: 64 rows x 288 (337 KiB)
    big = bs.pack(dense, bs.layout_from_pattern(bs.kernel_matrix(dense) != 0, dense.shape))
    xb = cp.ones((1, 512, 8, 8), cp.float32)
    out = cp.full((1, 64, 8, 8), cp.nan, cp.float32)
    tile = sc.RemainderTile(64, 1, 32)
    weights = sc.pack_weights(big, (8, 8), cp)
    assert sc.tiled_launch(xb, weights, conv_geometry(xb.shape, dense.shape, 1, 1), tile).smem \
        > backend.device_facts().smem_per_block_optin
    with pytest.raises(ValueError, match="shared memory"):
        ops.sparse_conv2d(xb, big, None, 1, 1, remainder_tile=tile, weights=weights, out=out)
    assert bool(cp.isnan(out).all())
