"""The tensor-core implicit GEMM's tiles, splits, limits and default choice (CPU only)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.checks import conv_geometry
from tensorconv.ops import _igemm, direct_conv, igemm_tf32x3, reduction_splits
from tests.helpers import device_facts

P = igemm_tf32x3.Problem
RESNET18_B128 = [conv_geometry((128, c, hw, hw), (k, c, 3, 3), stride=s, padding=1)
                 for c, k, hw, s in ((64, 64, 32, 1), (64, 128, 32, 2), (256, 256, 8, 1),
                                     (512, 512, 4, 1))]


@pytest.mark.parametrize("geom", RESNET18_B128)
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_default_tile_fills_the_gpu_and_fits(geom, mode):
    facts = device_facts()
    p = P(geom, mode)
    tile = igemm_tf32x3.default_tile(p, facts)
    assert tile.bm in igemm_tf32x3.ROWS and tile.smem_bytes(p) <= facts.smem_per_block_optin
    gx, gy, gz = tile.grid(p)
    m, cols, q = p.gemm
    assert gx * 128 >= cols and gy * tile.bm >= m
    # at least half a wave of resident blocks, unless the reduction is too short to split
    # further; the forward and data gradient never past one wave through splitting
    resident = facts.sm_count * tile.blocks_per_sm()
    if mode == 2:
        assert gx * gy * gz >= resident // 2 or gz == q // (16 * reduction_splits.MIN_SLICES)
        assert gz == reduction_splits.wgrad_splits(gx * gy, resident, tile.bm, q // 16,
                                                   m * cols, "fp32")
    else:
        assert gx * gy * gz >= resident // 2 or gz == q // 64 or gz == 64
        assert gz == 1 or gx * gy * (gz - 1) < resident
    assert tile in igemm_tf32x3.candidates(p, facts)


def test_block_rows_follow_the_gemm_rows():
    assert [igemm_tf32x3.rows_for(m) for m in (1, 16, 17, 33, 64, 65, 512)] == [
        16, 16, 32, 64, 64, 128, 128]


def test_split_depth_leaves_no_empty_split():
    for q in (16, 17, 150, 4608, 131072):
        for splits in (1, 2, 3, 7, 64):
            depth, used = _igemm.split_depth(q, 16, splits)
            assert depth % 16 == 0 and used <= splits and (used - 1) * depth < q <= used * depth


def test_shared_memory_is_the_stage_ring():
    facts = device_facts()
    for mode in (0, 2):
        p = P(RESNET18_B128[0], mode)
        small, big = igemm_tf32x3.Tile(64).smem_bytes(p), igemm_tf32x3.Tile(128).smem_bytes(p)
        assert big - small == 4 * igemm_tf32x3.STAGES * 64 * 20
        # two 64-row blocks per SM (the register bound's promise) fit the SM's memory
        assert 2 * small <= facts.smem_per_sm and big <= facts.smem_per_block_optin


def test_wgmma_tiles_sm90_only_and_their_stages():
    """wgmma tiles are sm_90's default and candidates there alone; asked for elsewhere they
    raise before any launch.  Their A stage is bm x 16 words (no padding: the swizzle keeps
    the copies conflict-free), twice over at fp32 accuracy for the remainders; at one tf32
    pass a gathered B is stored as A is, 128 x 16 words."""
    from tensorconv import precision

    hopper, ampere = device_facts(), device_facts(compute_capability=(8, 0))
    p = P(RESNET18_B128[0], 0)
    assert igemm_tf32x3.default_tile(p, hopper).wgmma is True
    assert igemm_tf32x3.default_tile(p, ampere).wgmma is False
    assert {t.wgmma for t in igemm_tf32x3.candidates(p, hopper)} == {True, False}
    assert {t.wgmma for t in igemm_tf32x3.candidates(p, ampere)} == {False}
    assert igemm_tf32x3.resolve(igemm_tf32x3.Tile(64), hopper).wgmma is True
    assert igemm_tf32x3.resolve(igemm_tf32x3.Tile(64, 1, False), hopper).wgmma is False
    with pytest.raises(ValueError, match="sm_90"):
        igemm_tf32x3.check_tile(igemm_tf32x3.Tile(64, 1, True), p, ampere)
    with pytest.raises(ValueError, match="tile.wgmma"):
        igemm_tf32x3.check_tile(igemm_tf32x3.Tile(64, 1, "yes"), p, hopper)
    igemm_tf32x3.check_tile(igemm_tf32x3.Tile(64, 1, True), p, hopper)
    b_words = 16 * 136
    wg = igemm_tf32x3.Tile(64, 1, True)
    assert wg.smem_bytes(p) == 4 * igemm_tf32x3.WG_STAGES * (2 * 64 * 16 + b_words)
    with precision.using("tf32"):   # one pass: B stored as A is (128 x 16), no remainders
        assert wg.smem_bytes(p) == 4 * igemm_tf32x3.WG_STAGES * (64 * 16 + 128 * 16)
        assert wg.smem_bytes(P(RESNET18_B128[0], 2)) == wg.smem_bytes(p)
        assert igemm_tf32x3.Tile(64, 1, False).smem_bytes(p) == (
            4 * igemm_tf32x3.STAGES * (64 * 20 + b_words))
        halo = igemm_tf32x3.Tile(64, 1, True, True)
        assert halo.smem_bytes(p) < wg.smem_bytes(p)   # B is the box there
    # the kernel's 64-byte swizzle needs every stage part on a 512-byte boundary; two
    # blocks of at most 64 rows fit an SM at fp32 accuracy (their launch bound)
    for mode in (0, 2):
        for bm in igemm_tf32x3.ROWS:
            nbytes = igemm_tf32x3.Tile(bm, 1, True).smem_bytes(P(RESNET18_B128[0], mode))
            assert nbytes % (4 * igemm_tf32x3.WG_STAGES * 128) == 0
            assert nbytes * (2 if bm <= 64 else 1) <= hopper.smem_per_sm


def test_choice_needs_tensor_cores_and_a_large_gemm():
    big = RESNET18_B128[1]   # strided: no Winograd weight gradient
    assert direct_conv.choose_algorithm(big, 2, device_facts()) == "igemm_tf32x3"
    assert direct_conv.choose_algorithm(big, 2, device_facts(compute_capability=(7, 5))) == "igemm"
    small = conv_geometry((1, 16, 8, 8), (32, 16, 3, 3), padding=1)
    assert direct_conv.choose_algorithm(small, 0, device_facts()) == "igemm"
    depthwise = conv_geometry((128, 64, 32, 32), (64, 1, 3, 3), padding=1, groups=64)
    assert {direct_conv.choose_algorithm(depthwise, m, device_facts())
            for m in (0, 1, 2)} == {"depthwise"}
    odd = conv_geometry((128, 64, 32, 32), (64, 1, 3, 5), padding=1, groups=64)  # not built
    assert direct_conv.choose_algorithm(odd, 0, device_facts()) == "direct"
    assert direct_conv.choose_algorithm(odd, 2, device_facts()) == "igemm"  # 1-row groups
    thin = conv_geometry((128, 64, 32, 32), (128, 2, 3, 3), padding=1, groups=32)
    assert direct_conv.choose_algorithm(thin, 0, device_facts()) == "direct"
    classifier = conv_geometry((128, 512, 1, 1), (10, 512, 1, 1))   # a Linear as a conv
    assert direct_conv.choose_algorithm(classifier, 0, device_facts()) == "igemm"


def test_thin_layers_and_grey_stems_take_the_direct_forward():
    facts = device_facts()

    def choice(x, w, mode=0, **kw):
        return direct_conv.choose_algorithm(conv_geometry(x, w, padding=w[2] // 2, **kw),
                                            mode, facts)
    # one input channel with many outputs: off the depthwise kernels (its weight gradient
    # stays there), thin filters on the direct kernel, 64 on the tensor cores
    assert choice((128, 1, 32, 32), (16, 1, 3, 3)) == "direct"
    assert choice((128, 1, 32, 32), (32, 1, 3, 3)) == "direct"
    assert choice((128, 1, 32, 32), (64, 1, 3, 3)) == "igemm_tf32x3"
    assert choice((128, 1, 32, 32), (16, 1, 3, 3), mode=2) == "depthwise"
    assert choice((64, 1, 32, 32), (4, 1, 3, 3)) == "direct"   # STEM_OUTPUTS exactly
    assert choice((63, 1, 32, 32), (4, 1, 3, 3)) == "depthwise"
    assert choice((1, 1, 32, 32), (64, 1, 3, 3)) == "depthwise"
    assert choice((16, 1, 32, 32), (64, 1, 3, 3)) == "direct"   # the GEMM would be fp32
    # 16 filters over a reduction of up to 100, 32 over up to 18, wider than 1x1; any
    # number over up to 100 where the tensor cores are not worth it
    assert choice((128, 3, 32, 32), (16, 3, 3, 3)) == "direct"
    assert choice((128, 4, 32, 32), (16, 4, 5, 5)) == "direct"
    assert choice((128, 16, 32, 32), (16, 16, 3, 3)) == "winograd"   # test_winograd.py
    assert choice((32, 16, 32, 32), (16, 16, 3, 3)) == "igemm_tf32x3"
    assert choice((128, 2, 32, 32), (32, 2, 3, 3)) == "direct"
    assert choice((128, 3, 32, 32), (32, 3, 3, 3)) == "igemm_tf32x3"
    assert choice((1, 3, 32, 32), (64, 3, 3, 3)) == "direct"
    assert choice((1, 16, 32, 32), (64, 16, 3, 3)) == "igemm"
    assert choice((1, 16, 32, 32), (64, 16, 1, 1)) == "igemm"
    assert choice((128, 16, 32, 32), (16, 16, 1, 1)) == "igemm_tf32x3"
    assert choice((128, 8, 32, 32), (8, 8, 1, 1)) == "direct"   # under 16 filters: any q
    assert choice((128, 3, 32, 32), (16, 3, 3, 3), mode=1) != "direct"   # forward only


def test_limits_are_said():
    wide = conv_geometry((1, 3, 8, 8), (4, 3, 3, 3), padding=(40000, 0))
    assert igemm_tf32x3.supported(P(wide, 0)) is None
    assert "padding" in igemm_tf32x3.supported(P(wide, 2))
    huge = conv_geometry((64, 64, 1024, 1024), (4, 64, 1, 1))
    assert "2**31" in igemm_tf32x3.supported(P(huge, 0))
    dilated = conv_geometry((1, 8, 16, 16), (16, 8, 3, 3), stride=2, padding=2, dilation=2)
    assert "dilated" in igemm_tf32x3.supported(igemm_tf32x3.problem(dilated, 1))
    assert direct_conv.choose_algorithm(dilated, 1, device_facts()) == "igemm"


def test_cpu_path_takes_the_options_and_checks_them():
    import numpy as np

    x = np.ones((1, 4, 5, 5), np.float32)
    w = np.ones((16, 4, 3, 3), np.float32)
    y = direct_conv.conv2d(x, w, padding=1, algorithm="igemm_tf32x3")
    assert y.shape == (1, 16, 5, 5) and y[0, 0, 2, 2] == 36
    with pytest.raises(ValueError, match="algorithm must be"):
        direct_conv.conv2d_backward_weight(x, y, w.shape, padding=1, algorithm="fft")
    with pytest.raises(ValueError, match="weight gradient only"):
        direct_conv.conv2d_backward_data(y, w, x.shape, padding=1, algorithm="direct")


def test_strided_data_gradient_runs_by_phase():
    geom = conv_geometry((128, 64, 32, 32), (128, 64, 3, 3), stride=2, padding=1)
    p = igemm_tf32x3.problem(geom, 1)
    assert p.mode == 3 and p.phases == 4 and p.base_mode == 1
    # the largest phase: a quarter of the pixels, two taps of three along each axis
    assert p.gemm == (64, 128 * 16 * 16, 128 * 2 * 2)
    assert igemm_tf32x3.Tile(64, 2).grid(p) == (256, 1, 8)
    dilated = conv_geometry((1, 8, 16, 16), (16, 8, 3, 3), stride=2, padding=2, dilation=2)
    assert igemm_tf32x3.problem(dilated, 1).mode == 1
    assert igemm_tf32x3.problem(conv_geometry((1, 8, 8, 8), (16, 8, 3, 3)), 1).mode == 1
    assert "stride > 1" in igemm_tf32x3.supported(igemm_tf32x3.Problem(dilated, 3))


HALO_CASES = [  # (x shape, w shape, kwargs, mode): (images, rows, box rows, box cols, blocks)
    ((128, 64, 32, 32), (64, 64, 3, 3), dict(padding=1), 0, (1, 4, 6, 34, 1024)),
    ((128, 256, 8, 8), (256, 256, 3, 3), dict(padding=1), 1, (2, 8, 10, 10, 64)),
    ((128, 512, 4, 4), (512, 512, 3, 3), dict(padding=1), 0, (8, 4, 6, 6, 16)),
    ((3, 8, 14, 14), (8, 8, 3, 3), dict(padding=1), 0, (1, 9, 11, 16, 6)),
    ((5, 8, 9, 9), (8, 8, 3, 3), dict(padding=1), 1, (1, 9, 11, 11, 5)),
    ((2, 8, 15, 20), (8, 8, 5, 3), dict(stride=2, padding=(2, 1), dilation=(1, 2)), 0,
     (1, 8, 19, 21, 2)),
]


@pytest.mark.parametrize("xs,ws,kw,mode,want", HALO_CASES)
def test_halo_tile_covers_the_output_and_its_box(xs, ws, kw, mode, want):
    geom = conv_geometry(xs, ws, **kw)
    p = igemm_tf32x3.problem(geom, mode)
    h = igemm_tf32x3.halo(p)
    assert (h.images, h.rows, h.box_rows, h.box_cols, h.blocks) == want
    oh, ow = (geom.oh, geom.ow) if mode == 0 else (geom.h, geom.w)
    assert h.images * h.rows * ow <= 128                      # a block's columns
    if h.images > 1:
        assert h.rows == oh and h.blocks * h.images >= geom.n
    else:
        assert h.blocks == geom.n * -(-oh // h.rows)
    assert h.stride >= h.words and h.stride % 32 == 8 and h.stride - h.words < 32
    assert igemm_tf32x3.halo_supported(p) is None
    tile = igemm_tf32x3.Tile(64, 3, True, halo=True)
    assert tile.grid(p)[0] == h.blocks
    depth, splits = tile.split(p)
    assert depth % (16 * geom.r * geom.s) == 0 and splits <= 3


def test_halo_limits_are_said():
    def why(xs, ws, mode, **kw):
        return igemm_tf32x3.halo_supported(igemm_tf32x3.problem(conv_geometry(xs, ws, **kw), mode))

    assert "3 taps" in why((2, 8, 16, 16), (8, 8, 1, 1), 0)
    assert "forward" in why((2, 8, 16, 16), (8, 8, 3, 3), 2, padding=1)
    assert "forward" in why((2, 8, 16, 16), (8, 8, 3, 3), 1, stride=2, padding=1)  # by phase
    assert "rows of at most 128" in why((1, 8, 8, 200), (8, 8, 3, 3), 0, padding=1)
    assert "words a channel" in why((1, 3, 224, 224), (64, 3, 7, 7), 0, stride=2, padding=3)
    assert why((1, 8, 8, 128), (8, 8, 3, 3), 0, padding=1) is None


def test_halo_is_the_default_where_measured_faster():
    """On wgmma: blocks of at most 64 rows and no split (ResNet-20's layers, ResNet-18's
    first stage); not on 128-row blocks, splits, mma.sync, 1x1 filters or weight gradients."""
    hopper, ampere = device_facts(), device_facts(compute_capability=(8, 0))
    r20 = conv_geometry((128, 16, 32, 32), (16, 16, 3, 3), padding=1)
    for mode in (0, 1):
        tile = igemm_tf32x3.default_tile(P(r20, mode), hopper)
        assert tile.halo and tile.bm == 16 and tile.splits == 1
        assert tile in igemm_tf32x3.candidates(P(r20, mode), hopper)
        assert not igemm_tf32x3.default_tile(P(r20, mode), ampere).halo
        assert any(t.halo for t in igemm_tf32x3.candidates(P(r20, mode), ampere))
    assert igemm_tf32x3.default_tile(P(RESNET18_B128[0], 0), hopper).halo     # 64 x 64
    assert not igemm_tf32x3.default_tile(P(RESNET18_B128[2], 0), hopper).halo  # 128 rows
    assert not igemm_tf32x3.default_tile(P(r20, 2), hopper).halo
    assert not any(t.halo for t in igemm_tf32x3.candidates(P(r20, 2), hopper))
    assert not igemm_tf32x3.halo_wins(P(r20, 0), igemm_tf32x3.Tile(16, 2, True))
    stem = conv_geometry((128, 1, 32, 32), (64, 1, 3, 3), padding=1)   # chunks mostly zeros
    assert not igemm_tf32x3.default_tile(P(stem, 0), hopper).halo
    thin = conv_geometry((128, 64, 32, 32), (8, 64, 3, 3), padding=1)  # K/G = 8 in mode 1
    assert igemm_tf32x3.default_tile(P(thin, 0), hopper).halo
    assert not igemm_tf32x3.default_tile(P(thin, 1), hopper).halo


def test_the_data_gradient_by_phase_takes_the_rows_it_has():
    """By phase, 128 input channels take 128-row blocks (64-row ones were 1.03-1.19x slower
    on ResNet-18's stride-2 layers on the H200)."""
    hopper = device_facts()
    for c, bm in ((32, 32), (64, 64), (128, 128), (256, 128)):
        geom = conv_geometry((128, c, 16, 16), (2 * c, c, 3, 3), stride=2, padding=1)
        p = igemm_tf32x3.problem(geom, 1)
        assert p.mode == 3 and igemm_tf32x3.default_tile(p, hopper).bm == bm


def test_halo_tiles_fit_and_say_why_not():
    from tensorconv import precision

    hopper = device_facts()
    for geom in RESNET18_B128:
        p = P(geom, 0)
        if igemm_tf32x3.halo_supported(p) is not None:
            continue
        for bm in igemm_tf32x3.ROWS:
            tile = igemm_tf32x3.Tile(bm, 1, True, halo=True)
            h = igemm_tf32x3.halo(p)
            fp32 = 4 * (igemm_tf32x3.WG_STAGES * bm * 16 * 2 + 2 * 16 * h.stride + 16 * 9)
            assert tile.smem_bytes(p) == fp32
            assert tile.smem_bytes(p) * (2 if bm <= 64 else 1) <= hopper.smem_per_sm
            with precision.using("tf32"):
                assert tile.smem_bytes(p) == fp32 - 4 * igemm_tf32x3.WG_STAGES * bm * 16
            igemm_tf32x3.check_tile(tile, p, hopper)
    one = P(conv_geometry((2, 8, 8, 8), (8, 8, 1, 1)), 0)
    with pytest.raises(ValueError, match="tile.halo=True: the halo path needs"):
        igemm_tf32x3.check_tile(igemm_tf32x3.Tile(16, 1, True, True), one, hopper)
    with pytest.raises(ValueError, match="tile.halo must be"):
        igemm_tf32x3.check_tile(igemm_tf32x3.Tile(16, 1, True, "yes"), one, hopper)
    names = igemm_tf32x3.instantiations()
    assert "conv2d_igemm_tf32x3<0, 3, 3, 64, true, true>" in names
    assert "conv2d_igemm_tf32x3<1, 0, 0, 16, false, true>" in names
    assert not any(n.startswith("conv2d_igemm_tf32x3<2,") and n.endswith("true, true>")
                   for n in names)


@pytest.mark.parametrize("mode, stride, groups", [(1, 1, 1), (1, 1, 2), (3, 2, 1), (3, 2, 2)])
def test_transposed_w_holds_the_elements_the_kernel_addresses(mode, stride, groups,
                                                              monkeypatch):
    """``run``'s copy of w (mode 1: (G, C/G, K/G, R, S); mode 3: (G, C/G, R, S, K/G)) read at
    the kernel's addresses (row c at c * K/G*R*S; mode 1 column q; mode 3 column q = t K/G + k
    of phase (a, b) at ((a + tr s) S + b + ts s) K/G + k) gives A's element w[k, c, r, s]."""
    rng = np.random.default_rng(0)
    k, c, r, s = 8 * groups, 3 * groups, 3, 3
    w = rng.standard_normal((k, c // groups, r, s)).astype(np.float32)
    geom = conv_geometry((1, c, 9, 9), w.shape, stride=stride, padding=1, groups=groups)
    p = igemm_tf32x3.problem(geom, 1)
    monkeypatch.setattr(igemm_tf32x3, "TRANSPOSE_DGRAD_W", (1, 3))
    assert p.mode == mode and igemm_tf32x3.transposes_w(p)
    kg, cg, rs = k // groups, c // groups, r * s
    order = (0, 2, 1, 3) if mode == 1 else (0, 2, 3, 1)
    flat = np.ascontiguousarray(w.reshape(groups, kg, cg, rs).transpose(order)).ravel()
    for g in range(groups):
        for cc in range(cg):
            if mode == 1:
                for q in range(kg * rs):
                    kk, t = divmod(q, rs)
                    got = flat[g * cg * kg * rs + cc * kg * rs + q]
                    assert got == w[g * kg + kk, cc, t // s, t % s]
                continue
            for a in range(stride):
                for b in range(stride):
                    taps_c = len(range(b, s, stride))
                    taps = len(range(a, r, stride)) * taps_c
                    for q in range(kg * taps):
                        t, kk = divmod(q, kg)
                        tr, ts = divmod(t, taps_c)
                        rr, ss = a + tr * stride, b + ts * stride
                        got = flat[g * cg * rs * kg + cc * rs * kg + (rr * s + ss) * kg + kk]
                        assert got == w[g * kg + kk, cc, rr, ss]


def test_by_default_both_data_gradients_read_w_transposed_where_its_runs_are_whole_words():
    """Timed on an H200, the transposed w pays in mode 1 and by phase (mode 3); a run that
    is not whole 16-byte words (mode 1: K/G*R*S words, mode 3: K/G) reads w in place."""
    def transposed(k, stride):
        geom = conv_geometry((1, 8, 9, 9), (k, 8, 3, 3), stride=stride, padding=1)
        return igemm_tf32x3.transposes_w(igemm_tf32x3.problem(geom, 1))
    assert transposed(8, 1) and transposed(8, 2)
    assert transposed(4, 1) and not transposed(5, 1)   # K/G*R*S = 36 and 45 words
    assert transposed(4, 2) and not transposed(6, 2)   # K/G = 4 and 6 words a tap


@pytest.mark.parametrize("stride, padding, size, filt", [
    ((2, 2), (1, 1), (8, 8), (3, 3)), ((2, 2), (0, 0), (7, 9), (1, 1)),
    ((3, 3), (2, 2), (11, 10), (5, 5)), ((2, 2), (0, 0), (6, 6), (2, 2)),
    ((2, 3), (0, 2), (9, 7), (3, 3)), ((4, 4), (0, 0), (5, 5), (3, 3))])
def test_phase_sizes_count_the_pixels_and_taps_of_each_phase(stride, padding, size, filt):
    """Against the definition: input pixel h takes filter row r where h + pad - r is a
    multiple of the stride, so the pixels with (h + pad) % stride == a take r = a (mod)."""
    (sh, sw), (ph, pw), (h, w), (r, s) = stride, padding, size, filt
    geom = conv_geometry((1, 2, h, w), (3, 2, r, s), stride=stride, padding=padding)
    want = []
    for a in range(sh):
        for b in range(sw):
            pixels = sum((i + ph) % sh == a and (j + pw) % sw == b
                         for i in range(h) for j in range(w))
            taps = sum(i % sh == a for i in range(r)) * sum(j % sw == b for j in range(s))
            want.append((pixels, taps))
    assert _igemm.phase_sizes(geom) == want
    assert sum(p for p, _ in want) == h * w


def test_the_phase_split_comes_from_the_phase_estimate():
    """Mode 3's split: :func:`reduction_splits.phase_splits` over the phases' own blocks
    and slices (3x3, stride 2: 4, 2, 2 and 1 taps); a phase-split layer that already fills
    a wave is not split, ResNet-18's 256 -> 512 layer (128 blocks, 132 SMs) is."""
    hopper = device_facts()
    r20 = conv_geometry((128, 32, 16, 16), (64, 32, 3, 3), stride=2, padding=1)
    assert igemm_tf32x3.default_tile(igemm_tf32x3.problem(r20, 1), hopper).splits == 1
    r18 = conv_geometry((128, 256, 8, 8), (512, 256, 3, 3), stride=2, padding=1)
    tile = igemm_tf32x3.default_tile(igemm_tf32x3.problem(r18, 1), hopper)
    phases = [(16 * 2, 128), (16 * 2, 64), (16 * 2, 64), (16 * 2, 32)]
    assert tile.bm == 128 and tile.splits == reduction_splits.phase_splits(
        phases, hopper.sm_count, 128, 128 * 256 * 64, "fp32", igemm_tf32x3.AUTO_SPLITS) > 1


def test_weight_gradients_run_on_wgmma_where_the_device_has_it():
    """Timed on the H200 (2026-12-01): every weight gradient of 64-row blocks, long splits
    at fp32 included, ran 1.10-1.38x slower on mma.sync than wgmma, so the default tile
    takes wgmma on sm_90 whatever the split, and mma.sync on a device without it."""
    from tensorconv import precision

    hopper, ampere = device_facts(), device_facts(compute_capability=(8, 0))

    def tile(n, c, hw, mode=2, facts=hopper):
        geom = conv_geometry((n, c, hw, hw), (c, c, 3, 3), stride=1, padding=1)
        return igemm_tf32x3.default_tile(igemm_tf32x3.problem(geom, mode), facts)

    for prec in ("fp32", "tf32"):
        with precision.using(prec):
            long = tile(128, 64, 32)               # 8192 slices in 52 splits: 158 each
            assert long.bm == 64 and long.splits > 1 and long.wgmma is True
            for shape in ((32, 64, 56), (128, 64, 16), (128, 128, 16), (128, 32, 32)):
                assert tile(*shape).wgmma is True
            assert tile(128, 64, 32, facts=ampere).wgmma is False
