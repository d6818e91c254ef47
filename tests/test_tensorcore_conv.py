"""Tensor-core convolution (issue 24) on the CPU: the kernel's implicit-im2col indexing and
weight packing emulated in NumPy, the tile ranking, the fp16 reference path, bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tensorconv.backend import DeviceFacts
from tensorconv.checks import conv_geometry
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.reference import conv as reference
from tests.helpers import device_facts

H100 = DeviceFacts("H100", 0, (9, 0), 132, 1024, 48 * 1024, 227 * 1024, 228 * 1024, 65536,
                   65536, 2048, 50 * 2**20, 80 * 2**30, 1_980_000, 13000, 13000)


def _im2col(x, p, vector):
    """A (M x K) as the kernel reads it from the flat input, element by element: through the
    tap table (scalar loads) or, ``vector`` (NHWC), dividing k by C per 8-channel group."""
    g, flat, table = p.geom, x.ravel(), tcc.tap_table(p)
    a = np.zeros((p.m, p.k))
    for m in range(p.m):
        n, q = divmod(m, g.oh * g.ow)
        oh, ow = divmod(q, g.ow)
        ih0, iw0 = oh * g.stride[0] - g.padding[0], ow * g.stride[1] - g.padding[1]
        for k in range(p.k):
            if vector:
                rs, c = divmod(k, g.c)
                r, s = divmod(rs, g.s)
                at = n * g.h * g.w * g.c + ((ih0 + r) * g.w + iw0 + s) * g.c + c
            else:
                r, s = table[k, 1] >> 16, table[k, 1] & 0xFFFF
                corner = (((n * g.h + ih0) * g.w + iw0) * g.c if p.layout == "nhwc"
                          else n * g.c * g.h * g.w + ih0 * g.w + iw0)
                at = corner + table[k, 0]
            if 0 <= ih0 + r < g.h and 0 <= iw0 + s < g.w:
                a[m, k] = flat[at]
    return a


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("n,c,h,w,k,r,stride,padding", [(1, 3, 9, 7, 5, 3, 1, 1),
                                                        (2, 4, 8, 8, 6, 1, 2, 0),
                                                        (1, 2, 11, 11, 3, 7, 2, 3)])
def test_the_kernels_gemm_view_is_the_convolution(rng, layout, n, c, h, w, k, r, stride, padding):
    """im2col(x) · pack_weights(w)ᵀ, with the kernel's index formulas (both load paths), is
    the convolution in the output layout."""
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((k, c, r, r)).astype(np.float16)
    p = tcc.Problem(conv_geometry(x.shape, wt.shape, stride, padding), layout)
    xl = x if layout == "nchw" else x.transpose(0, 2, 3, 1)
    g = p.geom
    want = reference.conv2d(x, wt.astype(np.float64), None, stride, padding)
    for vector in (False, True) if layout == "nhwc" else (False,):
        y = _im2col(xl, p, vector) @ tcc.pack_weights(wt, layout).astype(np.float64).T
        got = y.reshape(g.n, g.oh, g.ow, g.k).transpose(0, 3, 1, 2)    # (M, Cout) -> NCHW
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_batch_one_deep_layers_split_k_and_every_tile_is_instantiated():
    p = tcc.Problem(conv_geometry((1, 512, 7, 7), (512, 512, 3, 3), 1, 1), "nchw")
    tile = tcc.default_tile(p, H100)
    assert tile.splits > 1                                  # 49 pixels x 512: few tiles
    assert tcc.split_k(p, tile) % tcc.BK == 0 and tcc.split_k(p, tile) * tile.splits >= p.k
    cands = tcc.candidates(p, H100)
    assert len(cands) == len(set(cands)) and all(
        t.splits == 1 or tcc.split_k(p, t) >= 2 * tcc.BK for t in cands)
    names = set(tcc.instantiations())
    every = tcc.candidates(p, H100, paths=tuple(tcc.PATHS))
    assert {t.path for t in every} == set(tcc.PATHS) - {tcc.FRAG}        # 3x3: no fragments
    halo = [t for t in every if t.path == tcc.HALO]
    assert every[-len(halo):] == halo and tcc.default_tile(p, H100).path == 0   # ring first
    nhwc = tcc.candidates(tcc.Problem(p.geom, "nhwc"), H100, paths=tuple(tcc.PATHS))
    assert tcc.HALO not in {t.path for t in nhwc}                       # NCHW only
    pw = tcc.Problem(conv_geometry((1, 512, 7, 7), (512, 512, 1, 1), 1, 0), "nchw")
    every += tcc.candidates(pw, H100, paths=(tcc.FRAG,))
    assert all(tcc.path_fits(t.shape, t.path) for t in every)
    for lay in tcc.LAYOUTS:
        for dtype in tcc.DTYPES:
            q = tcc.Problem(p.geom, lay, dtype)
            assert all(tcc.kernels(q, t)[0].name in names for t in every
                       if (t.path in (tcc.FRAG, tcc.HALO) or dtype == "float16")
                       and (t.path != tcc.HALO or lay == "nchw"))


def _fragment_words(a, pk, tile0, step, lane, mt):
    """Lane's 16 bytes of each of the warp's ``mt`` channel tiles (from ``tile0``) at
    ``step`` of the fragment-ordered weights ``pk``, into the registers a0..a3 of
    ``a[i][row][column]`` (rows g, g + 8; columns 2t, 2t + 1 and + 8); tiles past Cout
    are not read."""
    g, t = divmod(lane, 4)
    for i in range(mt):
        if tile0 + i < pk.shape[0]:
            v = pk[tile0 + i, step, lane]
            for reg, (row, col) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8),
                                              (g + 8, 2 * t + 8))):
                a[i, row, col:col + 2] = v[2 * reg:2 * reg + 2]


def _fragments(x, packed, p, tile):
    """``tc_frag``'s output (M x Cout, fp64) from its own index formulas: each lane's pixel
    offsets, its channels 4t..4t+3 of a 16-wide step and its weight-row words, the
    m16n8k16 fragments assembled from every lane's registers, the K shares summed."""
    g, xf, pk = p.geom, x.ravel(), packed.astype(np.float64)
    assert pk.shape == tcc.packed_shape(p, tile)
    mt, nt = tile.wn // 16, tile.wm // 8
    wc, wp = tile.bn // tile.wn, tile.bm // tile.wm
    hw, ohw, steps = g.h * g.w, g.oh * g.ow, -(-g.c // 16)
    y = np.zeros((p.m, g.k))
    for bx, by in np.ndindex(tile.grid(p)[:2]):
        for share, c_, w_ in np.ndindex(tile.splits, wc, wp):
            co0, px0 = by * tile.bn + c_ * 16 * mt, bx * tile.bm + w_ * 8 * nt
            for s in range(share * steps // tile.splits, (share + 1) * steps // tile.splits):
                a = np.zeros((mt, 16, 16))                    # A[co][logical k]
                b = np.zeros((nt, 16, 8))                     # B[logical k][pixel]
                for lane in range(32):
                    gr, t = divmod(lane, 4)
                    ks = (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)   # registers' columns
                    _fragment_words(a, pk, co0 // 16, s, lane, mt)
                    if 16 * s + 4 * t >= g.c:
                        continue                              # all four channels or none
                    for j in range(nt):
                        m = px0 + 8 * j + gr
                        if m >= p.m:
                            continue
                        n, q = divmod(m, ohw)
                        oh, ow = divmod(q, g.ow)
                        at = oh * g.stride[0] * g.w + ow * g.stride[1]
                        xo = ((n * hw + at) * g.c + 4 * t if p.layout == "nhwc"
                              else n * g.c * hw + at + 4 * t * hw)
                        step = 16 if p.layout == "nhwc" else 16 * hw
                        plane = 1 if p.layout == "nhwc" else hw
                        for e, k in enumerate(ks):
                            b[j, k, gr] = xf[xo + s * step + e * plane]
                for i, j in np.ndindex(mt, nt):
                    d = a[i] @ b[j]                                # (16 channels, 8 pixels)
                    for r_, c2 in np.ndindex(16, 8):
                        m, co = px0 + 8 * j + c2, co0 + 16 * i + r_
                        if m < p.m and co < g.k:
                            y[m, co] += d[r_, c2]
    return y


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("tile", [tcc.Tile(32, 32, 16, 32, 4, tcc.FRAG, 2, vec=False),
                                  tcc.Tile(16, 32, 8, 32, 2, tcc.FRAG, 4, vec=False)])
def test_the_fragments_kernels_index_formulas_are_the_convolution(rng, layout, tile):
    """tc_frag's loads, emulated lane by lane (pixels across images, stride 2, channels not
    a multiple of 16, Cout not a multiple of the tile, shares with no k-step), give the
    1x1 convolution."""
    x = rng.standard_normal((2, 20, 7, 9))
    wt = rng.standard_normal((21, 20, 1, 1)).astype(np.float16)
    p = tcc.Problem(conv_geometry(x.shape, wt.shape, 2, 0), layout)
    tcc.check_tile(tile, p)
    xl = x if layout == "nchw" else x.transpose(0, 2, 3, 1)
    got = _fragments(np.ascontiguousarray(xl), tcc.pack_weights(wt, layout, tile=tile), p, tile)
    want = reference.conv2d(x, wt.astype(np.float64), None, 2, 0)
    np.testing.assert_allclose(got.reshape(2, 4, 5, 21).transpose(0, 3, 1, 2), want,
                               rtol=1e-10, atol=1e-10)


def _halo_slot(c):
    """tcc::halo_slot: where channel c sits in a pixel's row of the copy."""
    return (c & ~15) + 8 * ((c >> 1) & 1) + 2 * ((c >> 2) & 3) + (c & 1)


def _halo(x, packed, p, tile):
    """``tc_halo``'s output (M x Cout, fp64) from its own index formulas: each block's copy
    of its input rows, walked by every thread as the kernel steps (pixel, 16-channel step),
    each lane's ldmatrix row address at every tap, its weight words, the m16n8k16
    fragments assembled from the lanes' registers, the K shares summed."""
    g, xf, pk = p.geom, x.ravel(), packed.astype(np.float64)
    assert pk.shape == tcc.packed_shape(p, tile)
    mt, nt = tile.wn // 16, tile.wm // 8
    wc, wp = tile.bn // tile.wn, tile.bm // tile.wm
    px, threads = tile.bm, tile.threads
    ohw, hw = g.oh * g.ow, g.h * g.w
    cols, ldc = tcc.halo_cols(p), tcc.halo_pitch(p)
    tiles = -(-ohw // px)
    y = np.zeros((p.m, g.k))
    for bx, by in np.ndindex(tile.grid(p)[:2]):
        n, p0 = divmod(bx, tiles)
        p0 *= px
        pend, oh0 = min(p0 + px, ohw), p0 // g.ow
        rows = ((pend - 1) // g.ow - oh0) * g.stride[0] + g.r
        ih0 = oh0 * g.stride[0] - g.padding[0]
        assert rows <= tcc.halo_rows(p, px)
        smem = np.full(rows * cols * ldc, np.nan)       # every cell a k-step reads is written
        writes = np.zeros(smem.size, int)
        npx, csteps16 = rows * cols, (ldc - tcc.HALO_PAD) // 16
        dq, rem = divmod(threads, npx)
        di, dj = divmod(rem, cols)
        for tid in range(threads):
            cs, pi = divmod(tid, npx)
            i, j = divmod(pi, cols)
            while cs < csteps16:
                ih, iw = ih0 + i, j - g.padding[1]
                ok = 0 <= ih < g.h and 0 <= iw < g.w
                h = [xf[n * g.c * hw + (16 * cs + e) * hw + ih * g.w + iw]
                     if ok and 16 * cs + (e & ~3) < g.c else 0 for e in range(16)]
                at = ((i * cols + j) * ldc + 16 * cs) // 8      # 16-byte words
                assert ((i * cols + j) * ldc + 16 * cs) % 8 == 0
                for word, es in ((at, (0, 1, 4, 5, 8, 9, 12, 13)),
                                 (at + 1, (2, 3, 6, 7, 10, 11, 14, 15))):
                    smem[8 * word:8 * word + 8] = [h[e] for e in es]
                    writes[8 * word:8 * word + 8] += 1
                j, i, cs = j + dj, i + di, cs + dq
                if j >= cols:
                    j, i = j - cols, i + 1
                if i >= rows:
                    i, cs = i - rows, cs + 1
        assert writes.max() <= 1
        csteps = -(-g.c // 16)
        steps = g.r * g.s * csteps
        for share, c_, w_ in np.ndindex(tile.splits, wc, wp):
            co0, pw0 = by * tile.bn + c_ * 16 * mt, p0 + w_ * 8 * nt
            bo = {}
            for lane in range(32):
                for jj in range(nt // 2):
                    pp = pw0 + 8 * (2 * jj + (lane >> 4)) + (lane & 7)
                    at = 0
                    if pp < pend:
                        oh, ow = divmod(pp, g.ow)
                        at = (oh - oh0) * g.stride[0] * cols + ow * g.stride[1]
                    bo[lane, jj] = at * ldc + 8 * ((lane >> 3) & 1)
            f0 = share * steps // tile.splits
            tap, cs = divmod(f0, csteps)
            r, s = divmod(tap, g.s)
            tb = 2 * ((r * cols + s) * ldc + 16 * cs)          # the kernel's running offset
            for f in range(f0, (share + 1) * steps // tile.splits):
                tap, cs = divmod(f, csteps)
                r, s = divmod(tap, g.s)
                tap_h = (r * cols + s) * ldc + 16 * cs
                assert tb == 2 * tap_h
                tb += 32
                if cs + 1 == csteps:
                    tb += 2 * (ldc - 16 * csteps)
                    if s + 1 == g.s:
                        tb += 2 * (cols - g.s) * ldc
                a = np.zeros((mt, 16, 16))                    # A[co][slot]
                b = np.zeros((nt, 16, 8))                     # B[slot][pixel]
                for jj, h, hf, row in np.ndindex(nt // 2, 2, 2, 8):
                    lane = 8 * (2 * h + hf) + row             # matrix 2h + hf, row `row`
                    b[2 * jj + h, 8 * hf:8 * hf + 8, row] = \
                        smem[bo[lane, jj] + tap_h:][:8]
                for lane in range(32):
                    _fragment_words(a, pk, co0 // 16, f, lane, mt)
                for i, j in np.ndindex(mt, nt):
                    d = a[i] @ b[j]                            # (16 channels, 8 pixels)
                    for r_, c2 in np.ndindex(16, 8):
                        pp, co = pw0 + 8 * j + c2, co0 + 16 * i + r_
                        if pp < pend and co < g.k:
                            y[n * ohw + pp, co] += d[r_, c2]
    return y


@pytest.mark.parametrize("stride,padding,r,w", [(1, 1, 3, 9), (2, 1, 3, 9), (1, 0, 1, 9),
                                               (2, 2, 5, 9), (1, 3, 3, 9), (2, 0, 3, 10)])
@pytest.mark.parametrize("tile", [tcc.Tile(32, 32, 16, 16, 4, tcc.HALO, 4, vec=False),
                                  tcc.Tile(16, 64, 16, 32, 2, tcc.HALO, 2, vec=False),
                                  tcc.Tile(16, 16, 16, 16, 8, tcc.HALO, 4, vec=False)])
def test_the_halo_kernels_index_formulas_are_the_convolution(rng, stride, padding, r, w, tile):
    """tc_halo's copy and loads, emulated lane by lane (two images, odd planes, strides 1
    and 2, channels not a multiple of 16 or 8, Cout not a multiple of the tile, 1x1 to 5x5,
    padding wider than the filter's reach, input columns no output reads), give the
    convolution; every copy cell a k-step reads has been written, none twice."""
    x = rng.standard_normal((2, 20, 7, w))
    wt = rng.standard_normal((21, 20, r, r)).astype(np.float16)
    p = tcc.Problem(conv_geometry(x.shape, wt.shape, stride, padding), "nchw")
    tcc.check_tile(tile, p, H100)
    got = _halo(x, tcc.pack_weights(wt, "nchw", tile=tile), p, tile)
    want = reference.conv2d(x, wt.astype(np.float64), None, stride, padding)
    g = p.geom
    np.testing.assert_allclose(got.reshape(2, g.oh, g.ow, 21).transpose(0, 3, 1, 2), want,
                               rtol=1e-10, atol=1e-10)


def test_the_halo_path_takes_nchw_layers_whose_copy_fits():
    def problem(c, h, r, stride, padding, layout="nchw"):
        return tcc.Problem(conv_geometry((2, c, h, h), (24, c, r, r), stride, padding), layout)

    halo = lambda p: [t for t in tcc.candidates(p, H100) if t.path == tcc.HALO]  # noqa: E731
    p = problem(64, 28, 3, 1, 1)
    tiles = halo(p)
    assert {t.shape for t in tiles} == set(tcc.HALO_SHAPES)
    assert len(tiles) == sum(len(tcc.halo_shares(s)) for s in tcc.HALO_SHAPES)
    assert tcc.default_tile(p, H100).path == 0
    for t in tiles:
        tcc.check_tile(t, p, H100)
        assert t.grid(p) == (2 * -(-28 * 28 // t.bm), -(-24 // t.bn), 1)
        assert t.stages == tcc.frag_unroll(t.shape) and not (t.vec or t.cluster)
    # blocks of 32 output pixels (starting at multiples of 32) of a 28-wide plane touch at
    # most 2 output rows: 1 + 3 input rows; 30 columns; 64 channels + 8 halves a pixel
    t = tcc.Tile(32, 32, 16, 16, 4, tcc.HALO, 4, vec=False)
    assert tcc.halo_rows(p, 32) == 4 and tcc.halo_cols(p) == 30 and tcc.halo_pitch(p) == 72
    assert t.smem_bytes(p) == max(2 * 4 * 30 * 72, 4 * 4 * 32 * 36)
    assert t.threads == 512 and tcc.halo_shares(t.shape) == (1, 2, 4)
    s2 = problem(64, 28, 3, 2, 1)      # 14 x 14 out: pixels 96..127 span rows 6..9: 3·2 + 3
    assert tcc.halo_rows(s2, 32) == 9 and tcc.halo_cols(s2) == 29
    for bad in (problem(64, 28, 3, 1, 1, "nhwc"), problem(62, 28, 3, 1, 1)):
        assert halo(bad) == [] and tcc.halo_fits(bad, H100) is not None
        with pytest.raises(ValueError, match="halo path"):
            tcc.check_tile(t, bad, H100)
    big = problem(1024, 112, 3, 1, 1)                   # no copy fits in 227 KB
    assert halo(big) == [] and "shared memory" in tcc.halo_fits(big, H100)
    some = problem(384, 56, 3, 1, 1)                    # only the smaller blocks' copies fit
    assert 0 < len(halo(some)) < len(tiles)
    assert all(u.smem_bytes(some) <= H100.smem_per_block_optin for u in halo(some))
    for bad in (replace(t, splits=3), replace(t, splits=8), replace(t, stages=2),
                replace(t, vec=True), tcc.Tile(64, 64, 32, 32, 8, tcc.HALO, 2),
                tcc.Tile(16, 32, 8, 32, 1, tcc.HALO, 4)):
        with pytest.raises(ValueError, match="halo tile"):
            tcc.check_tile(bad, p, H100)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_fragments_path_takes_unpadded_1x1_layers_with_even_channels(layout):
    def problem(c, r, stride, padding):
        return tcc.Problem(conv_geometry((2, c, 9, 11), (24, c, r, r), stride, padding),
                           layout)

    frag = lambda p: [t for t in tcc.candidates(p, H100) if t.path == tcc.FRAG]  # noqa: E731
    tiles = frag(problem(96, 1, 2, 0))
    cands = tcc.candidates(problem(96, 1, 2, 0), H100)       # the ring's first: the default
    assert cands[-len(tiles):] == tiles and tcc.default_tile(problem(96, 1, 2, 0), H100).path == 0
    assert {t.shape for t in tiles} == set(tcc.FRAG_SHAPES)
    assert len(tiles) == sum(len(tcc.frag_shares(s)) for s in tcc.FRAG_SHAPES)
    for t in tiles:
        tcc.check_tile(t, problem(96, 1, 2, 0))
        assert t.grid(problem(96, 1, 2, 0))[2] == 1 and t.threads <= 1024
        assert t.stages == tcc.frag_unroll(t.shape) and not (t.vec or t.cluster)
    for c, r, padding in ((96, 3, 1), (94, 1, 0), (96, 1, 1)):         # 3x3, C % 4, padded
        assert frag(problem(c, r, 1, padding)) == []
        assert tcc.frag_fits(problem(c, r, 1, padding)) is not None
        with pytest.raises(ValueError, match="fragments path"):
            tcc.check_tile(tiles[0], problem(c, r, 1, padding))
    t = tcc.Tile(32, 32, 16, 16, 8, tcc.FRAG, tcc.frag_unroll((32, 32, 16, 16)), vec=False)
    tcc.check_tile(t, problem(96, 1, 1, 0))
    assert t.threads == 4 * 32 * 8
    # the K shares' fp32 partial tiles, rows padded by 4 floats: channels x (pixels + 4)
    # in NCHW, pixels x (channels + 4) in NHWC
    assert t.smem_bytes(problem(96, 1, 1, 0)) == 4 * 8 * 32 * 36
    for bad in (replace(t, splits=3), replace(t, stages=2), replace(t, vec=True),
                tcc.Tile(64, 64, 32, 32, 8, tcc.FRAG, 2), tcc.Tile(64, 32, 32, 16, 1, tcc.FRAG, 4)):
        with pytest.raises(ValueError, match="fragments tile"):
            tcc.check_tile(bad, problem(96, 1, 1, 0))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_numpy_path_is_the_fp32_reference_on_fp16_values(rng, layout):
    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float16)
    w = rng.standard_normal((3, 5, 3, 3)).astype(np.float16)
    b = rng.standard_normal(3).astype(np.float32)
    xl = x if layout == "nchw" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = tcc.tc_conv2d(xl, w, b, 1, 1, layout=layout, relu=True)
    want = np.maximum(reference.conv2d(x.astype(np.float32), w.astype(np.float32), b, 1, 1), 0)
    if layout == "nhwc":
        want = want.transpose(0, 2, 3, 1)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_bad_input_is_refused_by_name(rng):
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float16)
    w = rng.standard_normal((2, 4, 3, 3)).astype(np.float16)
    with pytest.raises(TypeError, match="x must be one of"):
        tcc.tc_conv2d(x.astype(np.float32), w)
    with pytest.raises(ValueError, match="layout"):
        tcc.tc_conv2d(x, w, layout="nwhc")
    with pytest.raises(ValueError, match="bias has 3 entries"):
        tcc.tc_conv2d(x, w, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="residual has shape"):
        tcc.tc_conv2d(x, w, residual=np.zeros((1, 2, 5, 5), np.float16))
    with pytest.raises(ValueError, match="out is supported on the GPU"):
        tcc.tc_conv2d(x, w, out=np.zeros((1, 2, 3, 3), np.float16))
    p = tcc.Problem(conv_geometry((1, 4, 5, 5), (4, 1, 3, 3), 1, 1, groups=4), "nchw")
    assert "groups" in tcc.supported(p)
    assert not tcc.path_fits((32, 32, 16, 16), 2)          # a 16-row warp tile: no 32x8
    # three stages of A k-major (32 x 72 halves) and B (64 x 40), over the 64 x 68 fp32
    # tile, then the tap table of K = 36 rounded up to chunks (8 bytes per k)
    assert tcc.Tile(64, 64, 32, 32).smem_bytes(p) == 3 * 2 * (32 * 72 + 64 * 40) + 8 * 64
    assert tcc.Tile(128, 64, 64, 32, stages=2).smem_bytes(p) == 4 * 128 * 68 + 8 * 64
    cl = tcc.Tile(64, 64, 32, 32, 2, cluster=True)
    assert cl.slots_at(p) == cl.table_at(p) + 8 * 32 and cl.share == 64 * 64 // 2
    with pytest.raises(ValueError, match="tile.vec needs"):
        tcc.check_tile(tcc.Tile(64, 64, 32, 32), tcc.problem((1, 5, 5, 3), (8, 3, 3, 3), 1, 1,
                                                              "nhwc"))
    with pytest.raises(ValueError, match="stages"):
        tcc.check_tile(tcc.Tile(64, 64, 32, 32, path=1, stages=3), p)
    nchw = tcc.problem((1, 64, 8, 8), (64, 64, 3, 3), 1, 1, "nchw")
    with pytest.raises(ValueError, match="register ring"):      # 16 A halves x 4 stages + B
        tcc.check_tile(tcc.Tile(64, 64, 32, 32, stages=4, vec=False), nchw)
    assert all(tcc.ring_fits(t.shape, t.stages, t.mode(nchw))
               for t in tcc.candidates(nchw, H100) if t.path != tcc.HALO)


@pytest.mark.parametrize("seconds", [0.0, 1e9])
def test_the_search_sweeps_in_rank_order_within_its_time_and_confirms_the_fastest(
        monkeypatch, tmp_path, seconds):
    """The sweep logic without a GPU (timings faked): chunks in the rank's order until the
    time is spent (after the first chunk at least), the fastest CONFIRM timed again with
    more replays, and only that second timing stored."""
    from tensorconv import backend
    from tensorconv.ops import tensorcore_conv as tcc
    from tensorconv.tuning import tc_search

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    monkeypatch.setattr(backend, "device_facts", device_facts)
    monkeypatch.setattr(tc_search, "SWEEP_SECONDS", seconds)
    calls = []

    def fake(key, tiles, run, kernels, *, repeat, what):
        tiles = list(tiles)
        calls.append((key, tiles, repeat))
        # deterministic "times": the rank's 100th tile is fastest, then its neighbours
        times = {t: 1.0 + abs(ranked.index(t) - 100) + (0.5 if repeat > 20 else 0.0)
                 for t in tiles}
        return min(times, key=times.get), times

    monkeypatch.setattr(tc_search, "time_tiles", fake)
    compiled = []
    monkeypatch.setattr(tc_search.cuda, "compile_all", lambda ks, desc: compiled.extend(ks))
    x = np.zeros((1, 64, 14, 14), np.float16)
    w = np.zeros((96, 64, 3, 3), np.float16)
    p = tcc.problem(x.shape, w.shape, 1, 1, "nchw")
    ranked = tcc.candidates(p, device_facts())
    assert len(ranked) > 2 * tc_search.CHUNK
    best, times = tc_search.tune_tc_tile(x, w, 1, 1, layout="nchw", store=False)
    sweep, confirm = calls[:-1], calls[-1]
    assert all(key is None and rep == 20 for key, _, rep in sweep)
    swept = [t for _, tiles, _ in sweep for t in tiles]
    assert swept == ranked[:len(swept)]                     # rank order, no repeats
    assert len(sweep) == (1 if seconds == 0 else -(-len(ranked) // tc_search.CHUNK))
    assert confirm[2] == 100 and len(confirm[1]) == tc_search.CONFIRM
    assert set(confirm[1]) == set(sorted(swept, key=lambda t: abs(ranked.index(t) - 100))
                                  [:tc_search.CONFIRM])
    assert times[best] == min(times[t] for t in confirm[1]) and len(times) == len(swept)
    if seconds:
        assert best == ranked[100]
    assert {k for t in ranked for k in tcc.kernels(p, t)} == set(compiled)   # all, first


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fragment_order_places_each_weight_where_its_lane_reads_it(rng, dtype):
    """pack_weights for a fragments or halo tile: (Cout/16, R·S·C/16, 32, 8), zero past
    Cout and C; lane (g, t) of channel tile m at step (tap, cs) holds rows 16m + g and
    16m + g + 8 at channels 16cs + 4t .. + 3 as a0..a3; ring tiles get (Cout, K) rows."""
    elem = tcc.element_dtype(dtype)
    w = rng.standard_normal((21, 20, 3, 3)).astype(np.float32)
    p = tcc.Problem(conv_geometry((1, 20, 9, 9), w.shape, 1, 1), "nchw", dtype)
    halo = tcc.Tile(16, 32, 16, 16, 2, tcc.HALO, 4, vec=False)
    got = tcc.pack_weights(w, "nchw", dtype=dtype, tile=halo)
    assert got.dtype == elem and got.shape == tcc.packed_shape(p, halo) == (2, 9 * 2, 32, 8)
    rows = tcc.pack_weights(w, "nchw", dtype=dtype)
    assert rows.shape == tcc.packed_shape(p) == (21, 180)
    wr = w.astype(elem)                                  # (Cout, C, R, S), rounded alike
    for m, tap, cs, lane in ((0, 0, 0, 0), (1, 4, 1, 13), (1, 8, 0, 31), (0, 5, 1, 6)):
        g, t = divmod(lane, 4)
        r, s = divmod(tap, 3)
        want = []
        for pair in (0, 1):                              # a0, a1 then a2, a3
            for row in (16 * m + g, 16 * m + g + 8):
                for e in (0, 1):
                    c = 16 * cs + 4 * t + 2 * pair + e
                    want.append(wr[row, c, r, s] if row < 21 and c < 20 else 0)
        np.testing.assert_array_equal(got[m, tap * 2 + cs, lane].astype(np.float32),
                                      np.array(want, elem).astype(np.float32))
        assert np.array_equal(rows[min(16 * m + g, 20)].reshape(3, 3, 20)[r, s],
                              wr[min(16 * m + g, 20), :, r, s])
    # tile 1's lanes with g >= 5 hold rows 21-23 and 29-31 only: all past Cout = 21
    assert not np.any(got[1, :, 4 * 5:].astype(np.float32))
    frag = tcc.Tile(32, 32, 16, 16, 4, tcc.FRAG, 4, vec=False)
    assert tcc.fragment_order(frag) and tcc.fragment_order(halo)
    assert not tcc.fragment_order(tcc.Tile(64, 64, 32, 32)) and not tcc.fragment_order(None)


def test_bf16_is_the_reference_on_bf16_values_in_its_own_smaller_space(rng):
    """bf16 in and out (ml_dtypes' bfloat16): the NumPy path is the fp32 reference on the
    bf16-rounded values; its tiles are mma.sync at the depths instantiated for it; its tune
    key is its own; a residual of the other 16-bit type is refused by name."""
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    x = rng.standard_normal((2, 8, 7, 7)).astype(bf16)
    w = rng.standard_normal((5, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    y = tcc.tc_conv2d(x, w, b, 1, 1, relu=True)
    wr = w.astype(bf16).astype(np.float32)
    want = np.maximum(reference.conv2d(x.astype(np.float32), wr, b, 1, 1), 0)
    assert y.dtype == bf16 and y.shape == want.shape
    np.testing.assert_array_equal(y, want.astype(bf16))
    packed = tcc.pack_weights(w, "nhwc", dtype="bfloat16")
    assert packed.dtype == bf16 and np.array_equal(
        packed, w.transpose(0, 2, 3, 1).reshape(5, -1).astype(bf16))
    with pytest.raises(TypeError, match="residual must be bfloat16"):
        tcc.tc_conv2d(x, w, residual=np.zeros(want.shape, np.float16))
    p = tcc.problem(x.shape, w.shape, 1, 1, "nchw", "bfloat16")
    q = tcc.problem(x.shape, w.shape, 1, 1, "nchw")
    assert tcc.tile_key(p) != tcc.tile_key(q)
    cands = tcc.candidates(p, H100)
    assert cands and {t.path for t in cands} == {0, tcc.HALO}
    assert {t.stages for t in cands if not t.cluster and t.path == 0} == set(tcc.BF16_STAGES[0])
    assert {t.stages for t in cands if t.cluster} <= set(tcc.BF16_CLUSTER_STAGES)
    assert len(cands) < len(tcc.candidates(q, H100))
    names = set(tcc.instantiations())
    assert all(tcc.kernels(p, t)[0].name in names and t.mode(p) & 4 for t in cands)
    with pytest.raises(ValueError, match="stages"):
        tcc.check_tile(tcc.Tile(64, 64, 32, 32, path=1, stages=2), p)
    with pytest.raises(ValueError, match="dtype"):
        tcc.problem(x.shape, w.shape, 1, 1, "nchw", "float32")


def test_bf16_weights_on_an_array_module_without_bf16_say_so():
    """A CuPy that cannot hold bfloat16 (CuPy 13) gets a message saying what can."""
    import types

    def refuse(a):
        if a.dtype.name == "bfloat16":
            raise TypeError("Unsupported dtype bfloat16")
        return a

    old = types.SimpleNamespace(__name__="cupy", __version__="13.6.0", asarray=refuse,
                                ascontiguousarray=np.ascontiguousarray)
    w = np.ones((4, 8, 1, 1), np.float32)
    with pytest.raises(TypeError, match="cannot hold bfloat16.*CuPy 14"):
        tcc.pack_weights(w, "nchw", old, "bfloat16")
