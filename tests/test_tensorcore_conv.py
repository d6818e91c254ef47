"""Tensor-core convolution (issue 24) on the CPU: the kernel's implicit-im2col indexing and
weight packing emulated in NumPy, the tile ranking, the fp16 reference path, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.backend import DeviceFacts
from tensorconv.checks import conv_geometry
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.reference import conv as reference

H100 = DeviceFacts("H100", 0, (9, 0), 132, 1024, 48 * 1024, 227 * 1024, 228 * 1024, 65536,
                   65536, 2048, 50 * 2**20, 80 * 2**30, 1_980_000, 13000, 13000)


def _im2col(x, p):
    """A (M x K) as the kernel reads it, element by element from x (either layout)."""
    g = p.geom
    a = np.zeros((p.m, p.k))
    for m in range(p.m):
        n, q = divmod(m, g.oh * g.ow)
        oh, ow = divmod(q, g.ow)
        for k in range(p.k):
            if p.layout == "nchw":
                c, rs = divmod(k, g.r * g.s)
                r, s = divmod(rs, g.s)
            else:
                rs, c = divmod(k, g.c)
                r, s = divmod(rs, g.s)
            ih, iw = oh * g.stride[0] - g.padding[0] + r, ow * g.stride[1] - g.padding[1] + s
            if 0 <= ih < g.h and 0 <= iw < g.w:
                a[m, k] = x[n, c, ih, iw] if p.layout == "nchw" else x[n, ih, iw, c]
    return a


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("n,c,h,w,k,r,stride,padding", [(1, 3, 9, 7, 5, 3, 1, 1),
                                                        (2, 4, 8, 8, 6, 1, 2, 0),
                                                        (1, 2, 11, 11, 3, 7, 2, 3)])
def test_the_kernels_gemm_view_is_the_convolution(rng, layout, n, c, h, w, k, r, stride, padding):
    """im2col(x) · pack_weights(w)ᵀ, with the kernel's index formulas, is the convolution in
    the output layout."""
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((k, c, r, r)).astype(np.float16)
    p = tcc.Problem(conv_geometry(x.shape, wt.shape, stride, padding), layout)
    xl = x if layout == "nchw" else x.transpose(0, 2, 3, 1)
    y = _im2col(xl, p) @ tcc.pack_weights(wt, layout).astype(np.float64).T   # (M, Cout)
    g = p.geom
    want = reference.conv2d(x, wt.astype(np.float64), None, stride, padding)
    got = y.reshape(g.n, g.oh, g.ow, g.k).transpose(0, 3, 1, 2)
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
    assert {t.path for t in every} == set(tcc.PATHS)
    assert all(tcc.path_fits(t.shape, t.path) for t in every)
    for lay in tcc.LAYOUTS:
        assert all(tcc.kernels(tcc.Problem(p.geom, lay), t)[0].name in names for t in every)


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
    with pytest.raises(TypeError, match="x must be float16"):
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
    assert tcc.Tile(64, 64, 32, 32).smem_bytes(p) == 4 * 64 * 68 + 4
