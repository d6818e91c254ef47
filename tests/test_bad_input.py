"""Every public conv entry point refuses bad input with an error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.checks import pair

F32 = np.float32


def _ok():
    return np.ones((2, 4, 8, 8), F32), np.ones((6, 2, 3, 3), F32)


BAD = [
    # (description, kwargs overrides, exception, message fragment)
    ("x wrong ndim", dict(x=np.ones((4, 8, 8), F32)), ValueError, "x must be 4-D"),
    ("w wrong ndim", dict(w=np.ones((6, 2, 3), F32)), ValueError, "w must be 4-D"),
    ("channels mismatch", dict(w=np.ones((6, 3, 3, 3), F32)), ValueError,
     "input channels per group"),
    ("groups not dividing C", dict(groups=3, w=np.ones((6, 1, 3, 3), F32)), ValueError,
     "does not divide the input"),
    ("groups not dividing K", dict(w=np.ones((5, 2, 3, 3), F32)), ValueError,
     "does not divide the output"),
    ("float64 x", dict(x=np.ones((2, 4, 8, 8))), TypeError, "x must be float32"),
    ("float64 w", dict(w=np.ones((6, 2, 3, 3))), TypeError, "w must be float32"),
    ("int x", dict(x=np.ones((2, 4, 8, 8), np.int32)), TypeError, "x must be float32"),
    ("non-contiguous x", dict(x=np.ones((2, 4, 8, 16), F32)[..., ::2]), ValueError,
     "x must be C-contiguous"),
    ("empty x", dict(x=np.ones((0, 4, 8, 8), F32)), ValueError, "x is empty"),
    ("empty w", dict(w=np.ones((0, 2, 3, 3), F32)), ValueError, "w is empty"),
    ("bias length", dict(bias=np.ones(5, F32)), ValueError, "bias has 5 entries"),
    ("bias dtype", dict(bias=np.ones(6)), TypeError, "bias must be float32"),
    ("stride zero", dict(stride=0), ValueError, "stride must be >= 1"),
    ("negative padding", dict(padding=-1), ValueError, "padding must be >= 0"),
    ("dilation tuple of 3", dict(dilation=(1, 2, 3)), TypeError,
     "dilation must be an int or a pair"),
    ("groups zero", dict(groups=0), ValueError, "groups must be >= 1"),
    ("groups float", dict(groups=2.0), TypeError, "groups must be an int"),
    ("padding float pair", dict(padding=(1.5, 1.5)), TypeError, "padding must be an int or a pair"),
    ("padding float", dict(padding=1.0), TypeError, "padding must be an int or a pair"),
    ("stride string", dict(stride="22"), TypeError, "stride must be an int or a pair"),
    ("stride bool", dict(stride=True), TypeError, "stride must be an int or a pair"),
    ("dilation numpy float", dict(dilation=np.float32(1)), TypeError,
     "dilation must be an int or a pair"),
    ("filter larger than input", dict(w=np.ones((6, 2, 11, 11), F32)), ValueError, "does not fit"),
    ("list instead of array", dict(x=[[1.0]]), TypeError, "x must be a NumPy/CuPy array"),
    ("unknown algorithm", dict(algorithm="fft"), ValueError, "algorithm must be one of"),
    ("splits out of range", dict(splits=99), ValueError, "splits must be an int"),
]


@pytest.mark.parametrize("desc,over,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_ops_conv2d_rejects(desc, over, exc, msg):
    x, w = _ok()
    kw = dict(x=x, w=w, bias=None, stride=1, padding=1, dilation=1, groups=2)
    kw.update(over)
    with pytest.raises(exc, match=msg):
        ops.conv2d(**kw)


def test_ops_conv2d_accepts_the_good_case():
    x, w = _ok()
    assert ops.conv2d(x, w, padding=1, groups=2).shape == (2, 6, 8, 8)


def test_reference_rejects_dtype_mismatch():
    with pytest.raises(TypeError, match="differs from x"):
        reference.conv2d(np.ones((1, 2, 4, 4), F32), np.ones((3, 2, 3, 3)))


def test_out_is_gpu_only():
    x, w = _ok()
    with pytest.raises(ValueError, match="out is supported on the GPU path only"):
        ops.conv2d(x, w, padding=1, groups=2, out=np.empty((2, 6, 8, 8), F32))


def test_pair():
    assert pair(3, "stride", minimum=1) == (3, 3)
    assert pair((1, 2), "stride", minimum=1) == (1, 2)
    with pytest.raises(TypeError, match="stride"):
        pair("ab", "stride", minimum=1)
