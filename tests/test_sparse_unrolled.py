"""The unrolled sparse remainder on the CPU: the generated code run by the host (each CUDA
thread a host thread, tests/host/), the kernel file built by nvcc with a generated body, its
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
from tests.helpers import csr_of, run_on_host

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels_cu"


def _host_run(tmp: Path, w, x, tile, *, bias=None, residual=None, relu=False, y0=None,
              vec=1, stride=1):
    """The kernel of ``w``'s body on ``tile`` run on the CPU (:func:`run_on_host`)."""
    g = conv_geometry(x.shape, w.shape, stride, (w.shape[2] - 1) // 2)
    (tmp / "body.inc").write_text(su.body(g, tile, *csr_of(w)))
    return run_on_host(tmp, "sparse_unrolled_main.cpp",
                       {"SPARSE_UNROLLED_BODY": f'"{tmp / "body.inc"}"', "SU_VEC": vec}, g,
                       tile.grid(su.Problem(g)), x, bias=bias, residual=residual, relu=relu,
                       y0=y0)


EXAMPLE = KERNELS / "sparse_unrolled_example.inc"


def _example_text() -> str:
    """The body CI's offline nvcc build compiles the kernel file with (its default include):
    the generator's own output for a fixed random layer."""
    rng = np.random.default_rng(7)
    shape = (16, 8, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 1 / 7)).astype(np.float32)
    g = conv_geometry((2, 8, 8, 8), shape, 1, 1)
    return ("// The unrolled kernel's body for a random 16 x 8 x 3 x 3 layer on 8 x 8 maps (1 in "
            "7 weights\n// kept), which CI's offline build compiles; "
            "tensorconv/ops/sparse_unrolled.py writes a\n// layer's own (su.body).  Rewritten "
            "by `python -m tests.test_sparse_unrolled`.\n"
            + su.body(g, su._tile(g, 32, 2, 64), *csr_of(w)))


def test_the_offline_builds_example_body_is_the_generators_own():
    assert EXAMPLE.read_text() == _example_text(), \
        "the generator changed: rewrite the example with `python -m tests.test_sparse_unrolled`"


def _weights(rng, shape, density):
    w = (rng.standard_normal(shape) * (rng.random(shape) < density)).astype(np.float32)
    w[1] = 0                                                # a row with no nonzero
    return w


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run it on")


@needs_gxx
@pytest.mark.parametrize("k,c,hw,n,r,density,threads,vec,stride", [
    (40, 6, (9, 12), 3, 3, 0.3, 128, 4, 1),   # rows past a group, images and rows past a tile
    (33, 20, (8, 8), 5, 3, 0.15, 64, 4, 1),   # channels past a stage (ck 16)
    (16, 3, (7, 7), 2, 5, 0.5, 128, 1, 1),    # a 5x5 filter, an odd width (word copies)
    (20, 8, (4, 4), 17, 3, 0.2, 128, 4, 1),   # 4x4 maps, many images a block
    (8, 5, (13, 6), 1, 1, 0.6, 128, 1, 1),    # a 1x1 filter, one image
    (24, 4, (5, 10), 2, 3, 1.0, 64, 1, 1),    # every weight kept
    (12, 40, (16, 8), 13, 3, 0.1, 64, 4, 1),  # 14 blocks a group: each of 3 chunks first
    (40, 6, (16, 12), 3, 3, 0.3, 128, 1, 2),  # stride 2: even sizes, the last column staged
    (20, 9, (9, 7), 5, 3, 0.3, 64, 1, 2),     # stride 2, odd sizes: a zero column at the right
    (16, 3, (11, 10), 2, 5, 0.5, 128, 1, 2),  # a 5x5 filter at stride 2 (two halo columns)
    (12, 7, (10, 13), 2, 3, 0.4, 64, 1, 3),   # stride 3: three phases
    (8, 5, (13, 6), 2, 1, 0.6, 128, 1, 2),    # a 1x1 filter at stride 2 (no halo)
])
def test_the_generated_code_computes_the_convolution(tmp_path, rng, k, c, hw, n, r, density,
                                                       threads, vec, stride):
    w = _weights(rng, (k, c, r, r), density)
    x = rng.standard_normal((n, c) + hw).astype(np.float32)
    g = conv_geometry(x.shape, w.shape, stride, (r - 1) // 2)
    tiles = [su._tile(g, rb, 2, threads) for rb in (32, 16)] + [su._tile(g, 8, 1, threads)]
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride,
                            (r - 1) // 2)
    for tile in tiles:
        got = _host_run(tmp_path, w, x, tile, vec=vec, stride=stride)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=str(tile))


@needs_gxx
def test_the_epilogue_adds_bias_residual_what_blocks_wrote_and_relu(tmp_path, rng):
    w = _weights(rng, (20, 7, 3, 3), 0.25)
    x = rng.standard_normal((3, 7, 6, 8)).astype(np.float32)
    g = conv_geometry(x.shape, w.shape, 1, 1)
    bias = rng.standard_normal(20).astype(np.float32)
    res = rng.standard_normal(g.output_shape).astype(np.float32)
    y0 = rng.standard_normal(g.output_shape).astype(np.float32)
    got = _host_run(tmp_path, w, x, su._tile(g, 16, 2, 128), bias=bias, residual=res,
                    relu=True, y0=y0, vec=4)
    want = np.maximum(reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                       bias.astype(np.float64), 1, 1)
                      + res + y0, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("stride", [1, 2])
def test_the_kernel_file_builds_with_a_generated_body(tmp_path, rng, stride):
    w = _weights(rng, (48, 10, 3, 3), 0.12)
    g = conv_geometry((4, 10, 12, 12), w.shape, stride, 1)
    tile = su.default_tile(su.Problem(g), None)
    body = tmp_path / "body.inc"
    body.write_text(su.body(g, tile, *csr_of(w)))
    subprocess.run(["nvcc", "-std=c++17", "-cubin", "-arch=sm_90", f"-I{KERNELS}",
                    f'-DSPARSE_UNROLLED_BODY="{body}"', "-o", str(tmp_path / "k.cubin"),
                    str(KERNELS / su.FILE)], check=True, capture_output=True)


def test_tiles_fill_a_block_and_fit_their_stages():
    for x_shape, w_shape, stride in [((32, 64, 32, 32), (64, 64, 3, 3), 1),
                                     ((32, 128, 16, 16), (128, 128, 3, 3), 1),
                                     ((32, 256, 8, 8), (256, 256, 3, 3), 1),
                                     ((32, 512, 4, 4), (512, 512, 3, 3), 1),
                                     ((1, 64, 56, 56), (64, 64, 3, 3), 1),
                                     ((8, 3, 7, 7), (16, 3, 5, 5), 1),
                                     ((32, 64, 32, 32), (128, 64, 3, 3), 2),
                                     ((32, 256, 8, 8), (512, 256, 3, 3), 2),
                                     ((1, 64, 56, 56), (128, 64, 3, 3), 2)]:
        p = su.Problem(conv_geometry(x_shape, w_shape, stride, (w_shape[2] - 1) // 2))
        tiles = su.candidates(p, None)
        assert tiles and tiles[0].rb == 32
        for t in tiles:
            assert t.th % t.px == 0 and 32 <= t.threads(p) <= 256
            assert t.smem_bytes(p) <= 2 * su.STAGE_BYTES
            b = su.box(p.geom, t)
            assert b.pitch % 4 == 0 and b.img % 4 == 0 and b.pitch >= b.cols + b.shift


@pytest.mark.parametrize("stride,padding,why", [((2, 1), 1, "square stride"), (1, 0, "same"),
                                                (1, 2, "same"), (2, 0, "same")])
def test_unsupported_layers_are_refused_and_not_offered(stride, padding, why):
    g = conv_geometry((2, 8, 16, 16), (8, 8, 3, 3), stride, padding)
    assert why in su.supported(su.Problem(g))
    assert su.candidates(su.Problem(g), None) == []
    assert not any(isinstance(t, su.Tile) for t, _ in sc.remainder_choices(g))
    with pytest.raises(ValueError, match="unrolled"):
        sc.remainder_kind(g, "unrolled")


def test_a_tuned_plan_times_the_unrolled_tiles_where_they_fit(rng):
    g = conv_geometry((32, 64, 32, 32), (64, 64, 3, 3), 1, 1)
    tiles = [t for t, _ in sc.remainder_choices(g) if isinstance(t, su.Tile)]
    assert tiles == su.candidates(su.Problem(g), None)
    assert sc.remainder_kind(g, "auto", tiles[0]) == "unrolled"
    assert sc.choice_name(tiles[0]).startswith("sparse_unrolled")
    assert sc.fits(g, tiles[0], su.MAX_FMAS // tiles[0].px)
    assert not sc.fits(g, tiles[0], su.MAX_FMAS // tiles[0].px + 1)
    assert sc.fits(g, sc.default_remainder_tile(g), 10 ** 9)
    # the code's length, by which a tuned plan weighs a layer again in the whole plan; the
    # rules' first choice, a layer's fallback there, never depends on the weights
    assert sc.body_fmas(tiles[0], 1000) == 1000 * tiles[0].px
    assert sc.body_fmas(sc.default_remainder_tile(g), 10 ** 9) == 0
    for geom in (g, conv_geometry((8, 64, 16, 16), (128, 64, 3, 3), 2, 1),
                 conv_geometry((8, 64, 16, 16), (128, 64, 1, 1), 2, 0),
                 conv_geometry((8, 64, 16, 16), (128, 64, 1, 1), 1, 0)):
        rule, _ = sc.remainder_choices(geom)[0]
        assert sc.body_fmas(rule, 10 ** 9) == 0
        assert any(sc.body_fmas(t, 10) == 10 * getattr(t, "px", 1)
                   for t, _ in sc.remainder_choices(geom)[1:])


def test_a_remainder_too_large_to_unroll_is_refused_before_any_launch(rng):
    shape = (128, 64, 3, 3)
    w = (rng.standard_normal(shape) * (rng.random(shape) < 0.9)).astype(np.float32)
    packed = bs.pack(w, bs.layout_from_pattern(bs.kernel_matrix(w) != 0, w.shape))
    g = conv_geometry((2, 64, 8, 8), w.shape, 1, 1)
    weights = sc.pack_weights(packed, (8, 8), np)
    with pytest.raises(ValueError, match="at most"):
        su.kernels(su.Problem(g), su.default_tile(su.Problem(g), None), weights)


def test_a_tile_of_another_layer_is_refused_by_name():
    g = conv_geometry((2, 8, 16, 16), (8, 8, 3, 3), 1, 1)
    other = su.default_tile(su.Problem(conv_geometry((2, 8, 4, 4), (8, 8, 3, 3), 1, 1)), None)
    with pytest.raises(ValueError, match="remainder_tile"):
        sc.check_remainder_choice(g, "unrolled", other)


if __name__ == "__main__":
    EXAMPLE.write_text(_example_text())
