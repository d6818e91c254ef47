"""The naive and fused CP convolution kernels against the dense reference."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.decomp import cp as cpd
from tensorconv.ops import cp as cpops
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


def _case(rng, n, c, k, ih, iw, kh, kw, r):
    x = rng.standard_normal((n, c, ih, iw)).astype(np.float32)
    f = [rng.standard_normal(shape).astype(np.float32) for shape in ((c, r), (kh, r), (kw, r), (k, r))]
    return x, f


@pytest.mark.parametrize("variant", cpops.VARIANTS)
@pytest.mark.parametrize("trial", range(20))
def test_random_shapes(rng, variant, trial):
    import cupy as cp

    n = int(rng.integers(1, 4))
    c, k = (int(v) for v in rng.integers(1, 70, size=2))
    ih, iw = (int(v) for v in rng.integers(3, 30, size=2))
    kh, kw = (int(v) for v in rng.choice([1, 3, 5], size=2))
    r = int(rng.integers(1, 33))
    stride = int(rng.choice([1, 2]))
    padding = ((kh - 1) // 2, (kw - 1) // 2)  # "SAME" for stride 1
    x, f = _case(rng, n, c, k, ih, iw, kh, kw, r)
    ref = reference.conv2d(x.astype(np.float64),
                           cpd.reconstruct(cpd.CPFactors(*(a.astype(np.float64) for a in f))),
                           stride=stride, padding=padding)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    s_tile = [None, 1, 8, 32][trial % 4]
    cpops.cp_conv2d(cp.asarray(x), *(cp.asarray(a) for a in f), stride, padding,
                    variant=variant, out=out, **({"s_tile": s_tile} if variant == "fused" else {}))
    assert not cp.isnan(out).any()
    assert rel_err(out.get(), ref) <= 1e-5, (n, c, k, ih, iw, kh, kw, r, stride, s_tile)


def test_bad_input():
    import cupy as cp

    x = cp.ones((1, 4, 8, 8), cp.float32)
    good = [cp.ones(s, cp.float32) for s in ((4, 3), (3, 3), (3, 3), (5, 3))]
    with pytest.raises(ValueError, match="share their rank"):
        cpops.cp_conv2d(x, good[0], good[1], good[2], cp.ones((5, 2), cp.float32))
    with pytest.raises(ValueError, match="s has 5 rows"):
        cpops.cp_conv2d(x, cp.ones((5, 3), cp.float32), *good[1:])
    with pytest.raises(ValueError, match="template limit 32"):
        big = [cp.ones((s[0], 33), cp.float32) for s in ((4,), (3,), (3,), (5,))]
        cpops.cp_conv2d(x, *big)
    with pytest.raises(ValueError, match="s_tile"):
        cpops.cp_conv2d(x, *good, s_tile=3)
    with pytest.raises(TypeError, match="float32"):
        cpops.cp_conv2d(x.astype(cp.float64), *good)
