"""The depthwise family's CPU side: what it takes, its routing, its NumPy path."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.checks import conv_geometry
from tensorconv.ops import depthwise_conv, direct_conv
from tests.helpers import device_facts


def _geom(shape, r=3, mult=1, **kw):
    return conv_geometry(shape, (shape[1] * mult, 1, r, r), groups=shape[1], **kw)


def test_supported_says_why_not():
    assert depthwise_conv.supported(_geom((8, 32, 16, 16), padding=1)) is None
    assert depthwise_conv.supported(_geom((8, 32, 16, 16), r=7, mult=3, stride=2)) is None
    grouped = conv_geometry((1, 32, 8, 8), (32, 2, 3, 3), groups=16)
    assert "not depthwise" in depthwise_conv.supported(grouped)
    rect = conv_geometry((1, 8, 8, 8), (8, 1, 3, 5), groups=8)
    assert "3x5 filters" in depthwise_conv.supported(rect)
    assert "planes" in depthwise_conv.supported(_geom((1, 2, 256, 256), padding=1))
    assert "2**31" in depthwise_conv.supported(_geom((520, 64, 256, 255), r=1))
    assert "output channels" in depthwise_conv.supported(_geom((1, 70000, 2, 2), r=1))


def test_every_pass_routes_to_depthwise_where_supported():
    facts = device_facts()
    dw = _geom((128, 64, 32, 32), padding=1)
    assert [direct_conv.choose_algorithm(dw, m, facts) for m in (0, 1, 2)] == ["depthwise"] * 3
    big = _geom((1, 2, 256, 256), padding=1)       # past the kernels' plane limit
    assert direct_conv.choose_algorithm(big, 0, facts) == "direct"
    assert direct_conv.choose_algorithm(big, 1, facts) in ("igemm", "igemm_tf32x3")
    assert direct_conv.kernels(dw, "depthwise", mode=2)[1].name == "conv2d_splitk_reduce"


def test_a_one_channel_weight_gradient_leaves_depthwise_where_the_tensor_cores_win():
    """A grey stem's weight gradient (C == groups == 1) runs on the tensor-core GEMM from
    32 filters on a large batch, on the depthwise kernel below; a 3-channel stem's too."""
    hopper = device_facts()
    stem = conv_geometry((128, 1, 32, 32), (64, 1, 3, 3), padding=1)
    assert direct_conv.choose_algorithm(stem, 2, hopper) == "igemm_tf32x3"
    assert direct_conv.choose_algorithm(stem, 0, hopper) != "depthwise"
    for xs, ws in [((128, 1, 32, 32), (16, 1, 3, 3)), ((8, 1, 32, 32), (64, 1, 3, 3))]:
        assert direct_conv.choose_algorithm(conv_geometry(xs, ws, padding=1), 2,
                                            hopper) == "depthwise"
    rgb = conv_geometry((128, 3, 32, 32), (64, 3, 3, 3), padding=1)
    assert direct_conv.choose_algorithm(rgb, 2, hopper) == "igemm_tf32x3"
    volta = device_facts(compute_capability=(7, 0))
    assert direct_conv.choose_algorithm(stem, 2, volta) == "depthwise"


def test_weight_splits_fill_the_gpu_and_keep_threads_busy():
    wide = _geom((128, 64, 32, 32), padding=1)
    assert depthwise_conv.weight_splits(wide, 132) == 9          # ~4 blocks per SM over 64
    deep = _geom((128, 512, 4, 4), padding=1)
    assert depthwise_conv.weight_splits(deep, 132) == 1
    tiny = _geom((1, 4, 8, 8), padding=1)
    assert depthwise_conv.weight_splits(tiny, 132) == 1           # 64 pixels: one share
    huge = _geom((256, 8, 112, 112), padding=1)
    assert depthwise_conv.weight_splits(huge, 132) == 66             # 4 x 132 over 8 filters


def test_numpy_path_is_the_reference(rng):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 1, 5, 5)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    y = ops.depthwise_conv2d(x, w, b, stride=2, padding=2, relu=True)
    want = np.maximum(reference.conv2d(x, w, b, stride=2, padding=2, groups=3), 0)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    with pytest.raises(ValueError, match="GPU path only"):
        ops.depthwise_conv2d(x, w, out=np.empty_like(want))
    with pytest.raises(ValueError, match=r"expected w.shape\[1\] == 1"):
        ops.depthwise_conv2d(x, rng.standard_normal((6, 3, 3, 3)).astype(np.float32))
    with pytest.raises(ValueError, match="w"):
        ops.depthwise_conv2d(x, w[:, :, :3])                       # 3x5: not built


def test_numpy_options_are_checked_like_the_gpu():
    x = np.ones((1, 4, 5, 5), np.float32)
    w = np.ones((4, 1, 3, 3), np.float32)
    y = direct_conv.conv2d(x, w, padding=1, groups=4, algorithm="depthwise")
    assert y[0, 0, 2, 2] == 9
    with pytest.raises(ValueError, match="algorithm='depthwise': not depthwise"):
        direct_conv.conv2d(x, np.ones((4, 4, 3, 3), np.float32), algorithm="depthwise")
    with pytest.raises(ValueError, match="splits the weight gradient only"):
        direct_conv.conv2d_backward_data(y, w, x.shape, padding=1, groups=4,
                                         algorithm="depthwise", splits=3)
