"""The Winograd weight gradient's NumPy walk (the transforms the kernels make, the 16 GEMMs,
the filters' transform) against the direct reference, its geometry and checks, and the
rule that makes it a default."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import precision, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import conv_algorithm
from tensorconv.ops import winograd_wgrad as ww
from tests.helpers import device_facts, fp32_tol, rel_err, sweep


@pytest.mark.parametrize("trial", sweep(20, 8))
def test_walk_matches_the_reference(rng, trial):
    """Odd planes (a last tile past the edge), padding 0-2, odd channels, one image."""
    n, c, k = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
    pad = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    h = max(int(rng.integers(1, 14)), 3 - 2 * pad[0])
    w = max(int(rng.integers(1, 14)), 3 - 2 * pad[1])
    geom = conv_geometry((n, c, h, w), (k, c, 3, 3), 1, pad)
    x = rng.standard_normal((n, c, h, w))
    gy = rng.standard_normal(geom.output_shape)
    want = reference.conv2d_backward_weight(x, gy, (k, c, 3, 3), (1, 1), pad)
    assert rel_err(ww.weight_grad(x, gy, geom), want) <= fp32_tol(n * h * w), geom


def test_transforms_shapes_and_the_gemm_view():
    geom = conv_geometry((3, 5, 9, 7), (6, 5, 3, 3), 1, 1)
    th, tw = ww.tiles(geom)
    assert (th, tw) == (5, 4)
    x = np.ones((3, 5, 9, 7))
    assert ww.transform_inputs(x, geom).shape == (16, 5, 3, th, tw)
    assert ww.transform_grads(np.ones(geom.output_shape), geom).shape == (16, 6, 3, th, tw)
    assert ww.transform_filters(np.ones((16, 6, 5))).shape == (6, 5, 3, 3)
    g = ww.gemm_problem(geom).geom
    assert (g.n, g.c, g.h, g.w, g.k, g.groups, g.r) == (1, 80, 15, 4, 96, 16, 1)


def test_supported_says_why_not():
    def why(xs, ws, **kw):
        return ww.supported(conv_geometry(xs, ws, **kw))

    assert why((2, 8, 9, 9), (8, 8, 3, 3), padding=1) is None
    assert why((2, 8, 9, 9), (8, 8, 3, 3), padding=0) is None
    assert "3x3 filters at stride 1" in why((2, 8, 9, 9), (8, 8, 3, 3), stride=2, padding=1)
    assert "3x3 filters" in why((2, 8, 9, 9), (8, 8, 5, 5), padding=2)
    assert "dilation nor groups" in why((2, 8, 9, 9), (8, 8, 3, 3), dilation=2, padding=2)
    assert "dilation nor groups" in why((2, 8, 9, 9), (8, 4, 3, 3), groups=2, padding=1)
    assert "32 bits" in why((4096, 512, 32, 32), (512, 512, 3, 3), padding=1)


def test_rule_takes_deep_layers_by_precision():
    """fp32: 128 channels and more, tf32: 256, over 128 tiles and more (ResNet-18's last
    stages at batch 32 and 128; timed on the H200).  Not 64 channels, short reductions
    (few tiles or multiply-adds), strided layers, pre-sm_80 devices, nor transforms past
    the scratch cap."""
    hopper, turing = device_facts(), device_facts(compute_capability=(7, 5))
    choose = conv_algorithm.choose_algorithm

    def algo(n, c, k, hw, stride=1):
        return choose(conv_geometry((n, c, hw, hw), (k, c, 3, 3), stride, 1), 2, hopper)

    for n, c, hw in ((128, 128, 16), (128, 256, 8), (128, 512, 4), (32, 256, 14), (32, 128, 16),
                     (32, 512, 4)):
        assert algo(n, c, c, hw) == "winograd", (n, c, hw)
    for n, c, k, hw in ((128, 64, 64, 32), (128, 64, 128, 16), (4, 512, 512, 8),
                        (8, 512, 512, 7), (128, 32, 32, 16)):
        assert algo(n, c, k, hw) != "winograd", (n, c, k, hw)
    assert algo(128, 128, 256, 16, stride=2) != "winograd"
    assert choose(conv_geometry((128, 256, 8, 8), (256, 256, 3, 3), 1, 1), 2, turing) != "winograd"
    big = conv_geometry((1024, 256, 16, 16), (256, 256, 3, 3), 1, 1)   # 2 GiB of transforms
    assert ww.supported(big) is None and choose(big, 2, hopper) != "winograd"
    with precision.using("tf32"):
        assert algo(128, 256, 256, 8) == algo(32, 256, 256, 14) == "winograd"
        assert algo(128, 512, 512, 4) == algo(32, 512, 512, 8) == "winograd"
        assert algo(128, 128, 128, 16) != "winograd" and algo(32, 128, 128, 32) != "winograd"
