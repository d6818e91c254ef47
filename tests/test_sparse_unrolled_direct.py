"""The unstaged unrolled remainder on the CPU: the generated code run by the host (every
thread in turn, tests/host/), the kernel file built by nvcc with a generated body, its
tiles, and the choices and errors around it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tensorconv import blocksparse as bs
from tensorconv import reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import sparse_conv as sc
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct as sud
from tensorconv.ops import sparse_unrolled_direct_body as sudb
from tests.helpers import csr_of, run_on_host

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels_cu"
EXAMPLE = KERNELS / "sparse_unrolled_direct_example.inc"

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run it on")


def _host_run(tmp: Path, w, x, tile, stride, padding, **kw):
    """The kernel of ``w``'s body on ``tile`` run on the CPU (:func:`run_on_host`)."""
    g = conv_geometry(x.shape, w.shape, stride, padding)
    (tmp / "body.inc").write_text(sud.body(g, tile, *csr_of(w)))
    epi = sud.epilogue(kw.get("y0") is not None, kw.get("bias") is not None,
                       kw.get("residual") is not None, kw.get("relu", False))
    return run_on_host(tmp, "sparse_unrolled_direct_main.cpp",
                       {"SPARSE_UNROLLED_DIRECT_BODY": f'"{tmp / "body.inc"}"', "SU_EPI": epi}, g,
                       tile.grid(sud.Problem(g)), x, **kw)


def _example_text() -> str:
    """The body CI's offline nvcc build compiles the kernel file with (its default include):
    the generator's own output for a fixed random layer."""
    rng = np.random.default_rng(7)
    shape = (24, 12, 1, 1)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 1 / 4)).astype(np.float32)
    g = conv_geometry((2, 12, 9, 9), shape, 2, 1)
    return ("// The unstaged unrolled kernel's body for a random 24 x 12 x 1 x 1 layer, stride 2, "
            "padding 1, on\n// 9 x 9 maps (1 in 4 weights kept), which CI's offline build "
            "compiles;\n// tensorconv/ops/sparse_unrolled_direct.py writes a layer's own "
            "(sud.body).  Rewritten by\n// `python -m tests.test_sparse_unrolled_direct`.\n"
            + sud.body(g, sud.Tile(16, 64), *csr_of(w)))


def test_the_offline_builds_example_body_is_the_generators_own():
    assert EXAMPLE.read_text() == _example_text(), \
        "the generator changed: rewrite the example with " \
        "`python -m tests.test_sparse_unrolled_direct`"


def _weights(rng, shape, density):
    w = (rng.standard_normal(shape) * (rng.random(shape) < density)).astype(np.float32)
    w[1] = 0                                                # a row with no nonzero
    return w


@needs_gxx
@pytest.mark.parametrize("k,c,hw,n,density,stride,padding,rb,threads,gb", [
    (40, 6, (9, 12), 3, 0.3, 1, 0, 16, 64, 1),     # rows past a group, pixels past a block
    (20, 9, (9, 7), 5, 0.3, 2, 0, 8, 64, 1),       # stride 2, odd sizes
    (33, 20, (8, 8), 2, 0.15, 2, 1, 32, 128, 1),   # padding: border pixels read nothing
    (12, 7, (10, 13), 2, 0.4, (3, 2), (1, 0), 8, 64, 1),   # unequal strides and paddings
    (24, 4, (5, 10), 2, 1.0, 1, 0, 64, 64, 1),     # every weight kept, one group of 64 rows
    (8, 5, (1, 1), 7, 0.6, 1, 0, 8, 128, 1),       # 1x1 maps: one pixel an image
    (40, 6, (9, 12), 3, 0.3, 1, 0, 8, 128, 4),     # four groups a block: groups past the last
    (70, 11, (7, 9), 2, 0.3, 2, 1, 16, 64, 2),     # two a block, stride 2 and padding
    (40, 6, (9, 12), 3, 0.3, 1, 0, 16, -256, 1),   # the groups first (threads < 0 here)
    (70, 11, (7, 9), 2, 0.3, 2, 1, 16, -64, 2),
    # a wide tile's 40 rows a group (WIDE_ONLY_ROWS), the last group 10 rows
    (90, 23, (9, 12), 3, 0.3, 1, 0, 40, -256, 1),
    # rings (threads > 1000: threads - 1000, ring 8 or 16): channels wrap round them
    (40, 37, (9, 12), 3, 0.3, 1, 0, 16, 1064, 1),
    (20, 41, (9, 7), 5, 0.5, 2, 0, 32, 1256, 1),
    (33, 5, (6, 6), 2, 0.4, 1, 0, 8, 1064, 1),     # fewer channels than the ring holds
])
def test_the_generated_code_computes_the_convolution(tmp_path, rng, k, c, hw, n, density,
                                                       stride, padding, rb, threads, gb):
    w = _weights(rng, (k, c, 1, 1), density)
    x = rng.standard_normal((n, c) + hw).astype(np.float32)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, padding)
    ring = 8 if rb == 16 else 16
    tile = (sud.Tile(rb, threads - 1000, gb, False, ring) if threads > 1000 else
            sud.Tile(rb, abs(threads), gb, threads < 0))
    got = _host_run(tmp_path, w, x, tile, stride, padding)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@needs_gxx
@pytest.mark.parametrize("k,c,r,hw,n,stride,padding,rb,threads,ks,gf", [
    (40, 37, 1, (9, 12), 3, 1, 0, 32, 256, 2, True),    # a partial last pixel block
    (90, 37, 1, (9, 12), 3, 1, 0, 40, 256, 2, True),    # 40 rows a group, the last 10
    (70, 41, 1, (9, 7), 5, 2, 0, 16, 256, 4, False),    # stride 2, rows past the last group
    (33, 20, 1, (8, 8), 2, 2, 1, 8, 128, 4, True),      # padding: border pixels read nothing
    (12, 3, 1, (6, 5), 2, 1, 0, 8, 128, 4, False),      # fewer channels than shares
    (20, 6, 3, (11, 9), 2, 2, 1, 8, 64, 2, True),       # a wider filter's taps, guarded
])
def test_a_split_tile_adds_its_shares(tmp_path, rng, k, c, r, hw, n, stride, padding, rb,
                                      threads, ks, gf):
    """Each pixel's ks threads sum their shares of the columns, the first adds the others'
    from shared memory (NaN at each block's start) after the barrier."""
    w = _weights(rng, (k, c, r, r), 0.3)
    x = rng.standard_normal((n, c) + hw).astype(np.float32)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, padding)
    got = _host_run(tmp_path, w, x, sud.Tile(rb, threads, 1, gf, 0, ks), stride, padding)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("ks", [1, 2, 3, 4, 7])
def test_the_shares_take_each_column_once_in_order_and_about_equal_work(rng, ks):
    dense = _weights(rng, (32, 300, 1, 1), 0.125)[:, :, 0, 0]
    dense[:, 40:60] = 0                                    # columns no row uses
    shares = sudb.split_columns(dense, ks)
    assert len(shares) == ks
    np.testing.assert_array_equal(np.concatenate(shares), np.flatnonzero(dense.any(0)))
    work = [int(np.sum(1 + np.count_nonzero(dense[:, s], axis=0))) for s in shares]
    heaviest = int(1 + np.count_nonzero(dense, axis=0).max())
    assert max(work) - min(work) <= 2 * heaviest
    assert [len(s) for s in sudb.split_columns(np.zeros((4, 5), np.float32), 3)] == [0, 0, 0]


def test_a_split_tile_that_cannot_run_is_refused_by_name():
    g = conv_geometry((2, 8, 16, 16), (64, 8, 1, 1), 1, 0)
    w = np.ones((64, 8, 1, 1), np.float32)
    for tile, match in [(sud.Tile(32, 256, 2, False, 0, 2), "one group a block"),
                        (sud.Tile(32, 256, 1, False, 64, 2), "no ring"),
                        (sud.Tile(32, 96, 1, False, 0, 2), "whole warps"),
                        (sud.Tile(32, 256, 1, False, 0, 0), "at least 1"),
                        (sud.Tile(64, 1024, 1, False, 0, 2), "shared memory")]:
        with pytest.raises(ValueError, match=match):
            sud.body(g, tile, *csr_of(w))


@needs_gxx
@pytest.mark.parametrize("k,c,r,hw,n,stride,padding,rb,threads,gb", [
    (20, 6, 3, (11, 9), 2, 2, 1, 8, 64, 1),            # ResNet's strided 3x3: borders on
    (40, 5, 3, (12, 12), 2, 2, 1, 8, 128, 4),          # both sides; four groups a block
    (12, 4, 5, (9, 10), 3, 2, 2, 16, 64, 1),           # 5x5, two taps of padding
    (10, 3, 7, (13, 11), 1, 2, 3, 8, 64, 2),           # 7x7 (the stem's filter)
    (9, 7, 3, (2, 3), 4, 1, 1, 8, 64, 1),              # maps smaller than the filter
    (16, 5, 3, (10, 9), 2, (3, 2), (0, 1), 8, 64, 1),  # unequal strides, paddings
])
def test_wider_filters_load_each_tap_inside_the_image(tmp_path, rng, k, c, r, hw, n, stride,
                                                      padding, rb, threads, gb):
    w = _weights(rng, (k, c, r, r), 0.25)
    x = rng.standard_normal((n, c) + hw).astype(np.float32)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, padding)
    got = _host_run(tmp_path, w, x, sud.Tile(rb, threads, gb), stride, padding)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _ring_trace(text: str, tile):
    """Walk a ring body's statements as the hardware orders them: copies join the open
    commit group, a wait completes every group but the newest ``n``; yields each read's
    (slot, channel the slot last received, whether that copy's group had completed)."""
    slot_of = {}                       # slot -> (channel, group)
    groups, done, cur = 0, -1, []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("SU_RING_CP("):
            off, src = line[len("SU_RING_CP(sr, "):-2].split(", xp + ")
            cur.append((int(off), int(src)))
        elif line.startswith("SU_RING_COMMIT"):
            for off, src in cur:
                slot_of[off] = (src, groups)
            cur, groups = [], groups + 1
        elif line.startswith("SU_RING_WAIT("):
            done = groups - 1 - int(line[len("SU_RING_WAIT("):-2])
        elif line.startswith("{ float v; SU_RING_LD(v, sr, "):
            off = int(line[len("{ float v; SU_RING_LD(v, sr, "):-2])
            src, grp = slot_of[off]
            yield off, src, grp <= done
        elif line.startswith("template"):
            slot_of, groups, done, cur = {}, 0, -1, []


@pytest.mark.parametrize("ring,c", [(8, 3), (8, 40), (16, 100), (64, 70), (64, 600)])
def test_a_ring_reads_each_channel_after_its_copy_has_landed(rng, ring, c):
    """The waits (which the host emulation cannot check): each read finds its slot's copy
    complete and holding the next channel the group uses, every channel once, in order."""
    w = _weights(rng, (40, c, 1, 1), 0.2)
    g = conv_geometry((2, c, 7, 9), w.shape, 1, 0)
    tile = sud.Tile(32, 256, 1, False, ring)
    text = sud.body(g, tile, *csr_of(w))
    reads = list(_ring_trace(text, tile))
    assert reads and all(ok for _, _, ok in reads)
    want = [int(ch) * 63 for grp in range(2) for ch in np.flatnonzero(
        w[32 * grp:32 * grp + 32, :, 0, 0].any(0))]
    assert [src for _, src, _ in reads] == want
    assert {off for off, _, _ in reads} <= {i * 256 * 4 for i in range(ring)}
    assert text.count("SU_RING_WAIT") == sum(-(-len(np.flatnonzero(
        w[32 * grp:32 * grp + 32, :, 0, 0].any(0))) // (ring // sudb.RING_GROUPS))
        for grp in range(2))


def test_a_ring_tile_that_cannot_run_is_refused_by_name():
    for shape, padding, tile, match in [
            ((8, 8, 3, 3), 1, sud.Tile(32, 256, 1, False, 64), "1x1 filters"),
            ((8, 8, 1, 1), 1, sud.Tile(32, 256, 1, False, 64), "padding"),
            ((8, 8, 1, 1), 0, sud.Tile(8, 128, 4, False, 64), "one group a block"),
            ((8, 8, 1, 1), 0, sud.Tile(32, 256, 1, False, 12), "multiple of 8")]:
        g = conv_geometry((2, 8, 16, 16), shape, 1, padding)
        with pytest.raises(ValueError, match=match):
            sud.body(g, tile, *csr_of(np.ones(shape, np.float32)))


def test_a_tap_is_tested_only_where_some_window_puts_it_in_the_padding():
    g = conv_geometry((1, 1, 32, 32), (1, 1, 3, 3), 2, 1)    # ResNet's strided 3x3
    guard = sudb.tap_guard
    assert guard(g, 0, 0) == "rok & cok & 1u" and guard(g, 0, 2) == "rok & 1u"
    assert guard(g, 2, 0) == "cok & 1u" and guard(g, 1, 1) == guard(g, 2, 2) == ""
    one = conv_geometry((1, 1, 1, 1), (1, 1, 3, 3), 1, 1)     # a 1x1 map: the centre only
    assert guard(one, 1, 1) == "" and guard(one, 0, 1) is None and guard(one, 1, 2) is None
    odd = conv_geometry((1, 1, 9, 9), (1, 1, 3, 3), 2, 1)     # odd: the last window too
    assert guard(odd, 2, 2) == "rok >> 2 & cok >> 2 & 1u"
    assert guard(conv_geometry((1, 1, 8, 8), (1, 1, 1, 1), 2, 0), 0, 0) == ""


@needs_gxx
def test_no_nonzero_at_all_writes_the_epilogue_alone(tmp_path, rng):
    w = np.zeros((10, 6, 1, 1), np.float32)
    x = rng.standard_normal((2, 6, 5, 5)).astype(np.float32)
    bias = rng.standard_normal(10).astype(np.float32)
    got = _host_run(tmp_path, w, x, sud.Tile(8, 64), 1, 0, bias=bias)
    np.testing.assert_array_equal(got, np.broadcast_to(bias[None, :, None, None], got.shape))


@needs_gxx
@pytest.mark.parametrize("tile", [sud.Tile(16, 64), sud.Tile(16, 128, ks=4)], ids=["one", "split"])
@pytest.mark.parametrize("epi", range(16))
def test_every_epilogue_adds_what_blocks_wrote_bias_residual_and_relu(tmp_path, rng, epi, tile):
    """Once a pixel: on a split tile, by the first share after adding the others'."""
    w = _weights(rng, (20, 7, 1, 1), 0.25)
    x = rng.standard_normal((3, 7, 6, 8)).astype(np.float32)
    g = conv_geometry(x.shape, w.shape, 2, 1)
    acc, has_bias, has_res, relu = (bool(epi & b) for b in (1, 2, 4, 8))
    bias = rng.standard_normal(20).astype(np.float32) if has_bias else None
    res = rng.standard_normal(g.output_shape).astype(np.float32) if has_res else None
    y0 = rng.standard_normal(g.output_shape).astype(np.float32) if acc else None
    assert sud.epilogue(acc, has_bias, has_res, relu) == epi
    got = _host_run(tmp_path, w, x, tile, 2, 1, bias=bias, residual=res, relu=relu, y0=y0)
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                            None if bias is None else bias.astype(np.float64), 2, 1)
    want = want + (0 if res is None else res) + (0 if y0 is None else y0)
    np.testing.assert_allclose(got, np.maximum(want, 0) if relu else want, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("r,padding,ring,ks,arch", [
    (1, 0, 0, 1, "sm_90"), (3, 1, 0, 1, "sm_90"), (1, 0, sud.RING, 1, "sm_90"),
    (1, 0, 0, 4, "sm_90"), (1, 0, 0, 2, "sm_80")])     # the split's named barrier on both
def test_the_kernel_file_builds_with_a_generated_body(tmp_path, rng, r, padding, ring, ks, arch):
    w = _weights(rng, (48, 40 // r, r, r), 0.12)
    g = conv_geometry((4, 40 // r, 12, 12), w.shape, 2, padding)
    tile = (sud.Tile(32, 256, 1, False, ring, ks) if ring or ks > 1 else
            sud.default_tile(sud.Problem(g), None))
    body = tmp_path / "body.inc"
    body.write_text(sud.body(g, tile, *csr_of(w)))
    subprocess.run(["nvcc", "-std=c++17", "-cubin", f"-arch={arch}", f"-I{KERNELS}",
                    f'-DSPARSE_UNROLLED_DIRECT_BODY="{body}"', "-o", str(tmp_path / "k.cubin"),
                    str(KERNELS / sud.FILE)], check=True, capture_output=True)


@pytest.mark.parametrize("x_shape,w_shape,stride,rb", [
    ((32, 64, 32, 32), (128, 64, 1, 1), 2, 64),     # ResNet-18's shortcuts at batch 32
    ((32, 128, 16, 16), (256, 128, 1, 1), 2, 32),
    ((32, 256, 8, 8), (512, 256, 1, 1), 2, 16),
    ((1, 16, 13, 13), (8, 16, 1, 1), 1, 8),         # fewer rows than a group
    ((32, 512, 16, 16), (128, 512, 1, 1), 1, 64),    # GoogLeNet's 1x1 layers: wide blocks too
    ((32, 256, 28, 28), (512, 256, 1, 1), 1, 64),    # many blocks: no split offered
])
def test_the_rule_and_the_tiles(x_shape, w_shape, stride, rb):
    p = sud.Problem(conv_geometry(x_shape, w_shape, stride, 0))
    tiles = sud.candidates(p, None)
    assert tiles[0].rb == rb and tiles[0].threads == 64 and tiles[0].gb == 1
    assert len(set(tiles)) == len(tiles) and all(t.rb <= max(8, 2 * w_shape[0]) for t in tiles)
    assert all(t.smem_bytes(p) == 4 * t.ring * t.threads for t in tiles if t.ks == 1)
    # four groups a block, a warp each, wherever the layer has four groups of those rows
    assert {t.rb for t in tiles if t.gb > 1} == {r for r in sud.ROWS if -(-w_shape[0] // r) >= 4}
    # wide blocks of one group for the longer groups, on a layer with enough pixels
    rows = {t.rb for t in tiles if t.threads == sud.THREADS[0] and t.gb == 1}
    wide = {(t.rb, t.groups_first, t.ring) for t in tiles
            if t.threads == sud.WIDE_BLOCK and t.ks == 1 and t.rb <= sud.ROWS[-1]}
    big = p.geom.n * p.geom.oh * p.geom.ow >= sud.WIDE_PIXELS
    wide_rows = {r for r in rows if r >= sud.WIDE_BLOCK_ROWS} | {
        r for r in sud.WIDE_ONLY_ROWS if r <= 2 * w_shape[0]}
    assert wide == ({(r, gf, ring) for r in wide_rows
                     for gf in (False, True) for ring in (0, sud.RING)} if big else set())
    # and each of those rows split among SPLITS shares, the groups first, where they fit
    split = {(t.rb, t.ks) for t in tiles if t.ks > 1}
    pixels = p.geom.n * p.geom.oh * p.geom.ow
    assert split == ({(r, ks) for r in wide_rows for ks in sud.SPLITS
                      if 4 * (ks - 1) * r * sud.WIDE_BLOCK // ks <= sud.SPLIT_SMEM
                      and -(-pixels // sud.WIDE_BLOCK) * -(-w_shape[0] // r) <= 132}
                     if big else set())
    assert all(t.threads == sud.WIDE_BLOCK and t.groups_first and not t.ring
               for t in tiles if t.ks > 1)
    # deeper groups on a layer of 65-128 rows: below its rows, and the first holding them all
    k = w_shape[0]
    deep_rows = [r for r in sud.DEEP_ROWS if r < k] + [min(r for r in sud.DEEP_ROWS if r >= k)] \
        if big and sud.ROWS[-1] < k <= sud.DEEP_ROWS[-1] else []
    assert {(t.rb, t.threads, t.groups_first, t.ring) for t in tiles if t.rb > sud.ROWS[-1]} == {
        (r, thr, -(-k // r) > 1, ring) for r in deep_rows for thr in sud.DEEP_THREADS
        for ring in (0, sud.RING)}
    assert all(t.smem_bytes(p) == 4 * (t.ks - 1) * t.rb * t.pixels for t in tiles if t.ks > 1)
    small = [t for t in tiles if t.threads != sud.WIDE_BLOCK and t.rb <= sud.ROWS[-1]]
    assert not any(t.ring or t.groups_first for t in small)
    assert all(t.gb == 1 for t in tiles if t.threads == sud.WIDE_BLOCK or t.rb > sud.ROWS[-1])
    for t in tiles:         # the groups first: the grid's two axes swapped
        if t.groups_first:
            assert t.grid(p) == sud.Tile(t.rb, t.threads, t.gb, ks=t.ks).grid(p)[1::-1] + (1,)
    padded = sud.Problem(conv_geometry(x_shape, w_shape, stride, 1))   # taps in the padding
    assert not any(t.ring for t in sud.candidates(padded, None))
    for t in tiles:
        assert t.pixels * t.gb * t.ks == t.threads and (t.gb == 1 or t.pixels == 32)
        gx, gy, _ = t.grid(p)
        if t.groups_first:
            gx, gy = gy, gx
        assert gx * t.pixels >= p.geom.n * p.geom.oh * p.geom.ow > (gx - 1) * t.pixels
        assert gy == -(-(-(-w_shape[0] // t.rb)) // t.gb)


def test_a_tuned_plan_times_the_tiles_on_every_filter():
    """Every filter at any stride gets the unstaged kernel's tiles; a wider "same" one at
    stride 1 gets the staged kernel's first (its stage serves several taps), and one the
    staged kernel cannot run (stride 1, no padding) the unstaged kernel's alone."""
    g3 = conv_geometry((2, 8, 16, 16), (8, 8, 3, 3), 1, 1)
    assert sud.supported(sud.Problem(g3)) is None
    kinds = [type(t) for t, _ in sc.remainder_choices(g3) if isinstance(t, (su.Tile, sud.Tile))]
    assert kinds == sorted(kinds, key=lambda k: k is sud.Tile) and su.Tile in kinds
    assert [t for t, _ in sc.remainder_choices(g3) if isinstance(t, sud.Tile)] == \
        sud.candidates(sud.Problem(g3), None) != []
    valid = conv_geometry((2, 8, 16, 16), (8, 8, 3, 3), 1, 0)
    assert su.supported(su.Problem(valid)) is not None
    tiles = [t for t, _ in sc.remainder_choices(valid) if isinstance(t, (su.Tile, sud.Tile))]
    assert tiles == sud.candidates(sud.Problem(valid), None) != []
    assert sc.unrolled_module(g3) is su and sc.unrolled_module(g3, sud.Tile(8, 64)) is sud
    for shape, stride, padding in [((16, 8, 3, 3), 2, 1), ((16, 8, 5, 5), 2, 2),
                                   ((16, 8, 3, 3), (2, 1), (1, 0))]:
        g = conv_geometry((2, 8, 17, 17), shape, stride, padding)
        tiles = [t for t, _ in sc.remainder_choices(g) if isinstance(t, sud.Tile)]
        assert tiles == sud.candidates(sud.Problem(g), None) and tiles
        assert not any(isinstance(t, su.Tile) for t, _ in sc.remainder_choices(g))
        assert sc.remainder_kind(g, "auto", tiles[0]) == "unrolled"
        assert sc.check_remainder_choice(g, "unrolled", tiles[-1]) == "unrolled"
        assert {t.rb for t in tiles} <= set(sud.WIDE_ROWS)     # fewer loads, less code
    few = conv_geometry((2, 8, 17, 17), (5, 8, 3, 3), 2, 1)      # fewer rows than a group
    assert [t.rb for t in sud.candidates(sud.Problem(few), None)] == [sud.WIDE_ROWS[0]]
    grouped = conv_geometry((2, 8, 16, 16), (8, 4, 3, 3), 2, 1, groups=2)
    assert "ungrouped" in sud.supported(sud.Problem(grouped))
    assert "32 x 32" in sud.supported(sud.Problem(
        conv_geometry((1, 2, 40, 40), (4, 2, 33, 1), 1, 0)))
    for stride, padding in [(1, 0), (2, 0), (2, 1)]:
        g = conv_geometry((32, 64, 16, 16), (128, 64, 1, 1), stride, padding)
        tiles = [t for t, _ in sc.remainder_choices(g) if isinstance(t, sud.Tile)]
        assert tiles == sud.candidates(sud.Problem(g), None)
        assert not any(isinstance(t, su.Tile) for t, _ in sc.remainder_choices(g))
        assert sc.remainder_kind(g, "auto", tiles[0]) == "unrolled"
        assert sc.unrolled_module(g) is sud and sc.unrolled_module(g3) is su
        assert sc.choice_name(tiles[0]).startswith("sparse_unrolled_direct")
        assert sc.fits(g, tiles[0], su.MAX_FMAS) and not sc.fits(g, tiles[0], su.MAX_FMAS + 1)


def test_a_remainder_too_large_to_unroll_is_refused_before_any_launch(rng):
    shape = (256, 200, 1, 1)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.9)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    g = conv_geometry((2, 200, 8, 8), w.shape, 1, 0)
    weights = sc.pack_weights(packed, (8, 8), np)
    with pytest.raises(ValueError, match="at most"):
        sud.kernels(sud.Problem(g), sud.default_tile(sud.Problem(g), None), weights)


def test_a_tile_not_offered_is_refused_by_name():
    g = conv_geometry((2, 8, 16, 16), (8, 8, 1, 1), 1, 0)
    with pytest.raises(ValueError, match="remainder_tile"):
        sc.check_remainder_choice(g, "unrolled", sud.Tile(48, 64))
    with pytest.raises(ValueError, match="remainder_tile"):
        sc.check_remainder_choice(g, "unrolled", sud.Tile(8, 96))


if __name__ == "__main__":
    EXAMPLE.write_text(_example_text())
