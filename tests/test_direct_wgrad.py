"""The direct weight gradient's host side: tiles, splits, checks, and a NumPy walk of the
kernel's chunks (the staged rows with their halo, zeros outside the image) against the
reference, so the index arithmetic is checked without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import direct_wgrad as dw
from tests.helpers import device_facts


def _walk(x, gy, p, tile):
    """The kernel's sums, chunk by chunk as the blocks stage them (float64)."""
    in_rows, in_w, _, _ = tile.staged(p)
    per, runs = tile.split(p)
    row_blocks = -(-p.oh // tile.rows)
    gw = np.zeros((p.k, p.c, p.r, p.s))
    for run in range(runs):
        for q in range(run * per, min(p.n * row_blocks, (run + 1) * per)):
            n, oy0 = divmod(q, row_blocks)
            oy0 *= tile.rows
            rows_here = min(tile.rows, p.oh - oy0)
            iy0 = oy0 * p.stride[0] - p.padding[0]
            xs = np.zeros((p.c, in_rows, in_w))
            for iy in range(in_rows):
                for ix in range(in_w):
                    yy, xx = iy0 + iy, ix - p.padding[1]
                    if 0 <= yy < p.h and 0 <= xx < p.w:
                        xs[:, iy, ix] = x[n, :, yy, xx]
            gs = gy[n, :, oy0:oy0 + rows_here, :]
            for r in range(p.r):
                for s in range(p.s):
                    y0, x0 = r * p.dilation[0], s * p.dilation[1]
                    win = xs[:, y0:y0 + (rows_here - 1) * p.stride[0] + 1:p.stride[0],
                             x0:x0 + (p.ow - 1) * p.stride[1] + 1:p.stride[1]]
                    gw[:, :, r, s] += np.einsum("kyx,cyx->kc", gs, win)
    return gw


@pytest.mark.parametrize("case", range(12))
def test_the_kernels_chunks_sum_to_the_reference(rng, case):
    r = [1, 3][case % 2]
    n, c, k = int(rng.integers(1, 4)), int(rng.integers(1, 20)), int(rng.integers(1, 20))
    h, w = int(rng.integers(5, 14)), int(rng.integers(5, 14))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    padding = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    dilation = int(rng.choice([1, 2])) if r == 3 else 1
    p = conv_geometry((n, c, h, w), (k, c, r, r), stride, padding, dilation)
    x = rng.standard_normal((n, c, h, w))
    gy = rng.standard_normal(p.output_shape)
    want = reference.conv2d_backward_weight(x, gy, (k, c, r, r), p.stride, p.padding,
                                            p.dilation)
    for tile in dw.candidates(p, device_facts())[:4]:
        np.testing.assert_allclose(_walk(x, gy, p, tile), want, rtol=1e-10, atol=1e-10)


def test_splits_are_equal_runs_none_empty():
    p = conv_geometry((5, 16, 9, 9), (16, 16, 3, 3), 1, 1)
    for rows in (1, 2, 4, 9):
        chunks = 5 * -(-9 // rows)
        for splits in (1, 2, 3, 7, chunks, chunks + 5, 1000):
            per, runs = dw.Tile(rows, splits).split(p)
            assert runs <= min(splits, chunks) and (runs - 1) * per < chunks <= runs * per


def test_default_tile_and_candidates_fit(monkeypatch):
    facts = device_facts()
    monkeypatch.setattr(backend, "device_facts", lambda *a: facts)
    for xs, ws in [((128, 16, 32, 32), (16, 16, 3, 3)), ((128, 64, 8, 8), (64, 64, 3, 3)),
                   ((2, 3, 224, 224), (64, 3, 3, 3)), ((128, 32, 16, 16), (64, 32, 1, 1))]:
        p = conv_geometry(xs, ws, 1, ws[2] // 2)
        base = dw.default_tile(p, facts)
        assert 1 <= base.rows <= p.oh and base.splits >= 1
        cands = dw.candidates(p, facts)
        assert cands[0] == base and len(set(cands)) == len(cands)
        for t in cands:
            dw.check_tile(t, p)
            in_rows, in_w, xplane, gplane = t.staged(p)
            assert xplane % 2 == gplane % 2 == 1 and xplane >= in_rows * in_w
            assert t.smem_bytes(p) >= 8 * (16 * xplane + 16 * gplane)
    # ResNet-20's first stage: about 256 pixels a chunk, 2 blocks an SM over one tile
    p = conv_geometry((128, 16, 32, 32), (16, 16, 3, 3), 1, 1)
    assert dw.default_tile(p, facts) == dw.Tile(8, 2 * 132)


def test_supported_and_options_name_what_is_wrong(monkeypatch):
    facts = device_facts()
    monkeypatch.setattr(backend, "device_facts", lambda *a: facts)
    grouped = conv_geometry((2, 8, 8, 8), (8, 4, 3, 3), 1, 1, 1, 2)
    assert "grouped" in dw.supported(grouped)
    five = conv_geometry((2, 8, 8, 8), (8, 8, 5, 5), 1, 2)
    assert "5x5" in dw.supported(five)
    p = conv_geometry((2, 8, 8, 8), (8, 8, 3, 3), 1, 1)
    assert dw.supported(p) is None
    with pytest.raises(ValueError, match="weight gradient only"):
        dw.check_options(p, 1)
    with pytest.raises(ValueError, match="5x5"):
        dw.check_options(five, 2)
    with pytest.raises(ValueError, match="direct_wgrad.Tile"):
        dw.check_options(p, 2, tile=object())
    with pytest.raises(ValueError, match="rows"):
        dw.check_tile(dw.Tile(9, 1), p)
    with pytest.raises(ValueError, match="rows"):
        dw.check_tile(dw.Tile(1, 0), p)
    assert dw.check_options(p, 2) is None and dw.check_options(p, 0, tile=object()) is None
    tile = dw.default_tile(p, facts)
    assert dw.check_options(p, 2, tile=tile, splits=3) == dw.Tile(tile.rows, 3)


def test_direct_conv_takes_direct_for_the_weight_gradient_only():
    from tensorconv import ops

    x = np.zeros((1, 4, 6, 6), np.float32)
    gy = np.zeros((1, 4, 6, 6), np.float32)
    w = np.zeros((4, 4, 3, 3), np.float32)
    with pytest.raises(ValueError, match="weight gradient only"):
        ops.conv2d_backward_data(gy, w, x.shape, padding=1, algorithm="direct")
    with pytest.raises(ValueError, match="5x5"):
        ops.conv2d_backward_weight(x, gy[:, :, 1:-1, 1:-1].copy(), (4, 4, 5, 5), padding=1,
                                   algorithm="direct")
    got = ops.conv2d_backward_weight(x, gy, w.shape, padding=1, algorithm="direct")
    assert got.shape == w.shape   # the CPU path: the reference


def test_the_default_takes_thin_3x3_weight_gradients_on_a_batch(monkeypatch):
    from tensorconv.ops.conv_algorithm import choose_algorithm

    hopper, volta = device_facts(), device_facts(compute_capability=(7, 0))
    thin = conv_geometry((128, 16, 32, 32), (16, 16, 3, 3), 1, 1)
    stem = conv_geometry((128, 3, 32, 32), (16, 3, 3, 3), 1, 1)
    assert choose_algorithm(thin, 2, hopper) == choose_algorithm(stem, 2, hopper) == "direct"
    assert choose_algorithm(thin, 2, volta) != "direct"
    assert choose_algorithm(thin, 0, hopper) != "direct"
    assert choose_algorithm(thin, 1, hopper) != "direct"
    for xs, ws in [((32, 16, 32, 32), (16, 16, 3, 3)), ((128, 16, 32, 32), (16, 16, 1, 1))]:
        assert choose_algorithm(conv_geometry(xs, ws, 1, ws[2] // 2), 2, hopper) == "direct"
    for xs, ws, stride in [((128, 16, 32, 32), (32, 16, 3, 3), 2),   # 32 filters
                           ((128, 32, 16, 16), (32, 32, 3, 3), 1),
                           ((128, 16, 32, 32), (16, 16, 3, 3), 2),   # strided: not measured
                           ((8, 16, 32, 32), (16, 16, 3, 3), 1)]:    # 8,192 pixels
        geom = conv_geometry(xs, ws, stride, ws[2] // 2)
        assert choose_algorithm(geom, 2, hopper) != "direct", geom
