"""A grouped filter bank's channel axes swapped on the GPU: the kernel against the NumPy
reference exactly (a copy: same bits) on random shapes, groups and filter sizes, both
layouts, tiles cut short at every edge, outputs poisoned; bad input before any launch."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("taps_last", [False, True])
@pytest.mark.parametrize("trial", range(8))
def test_kernel_matches_the_reference_exactly(rng, trial, taps_last):
    import cupy as cp

    from tensorconv import ops
    from tensorconv.reference import conv as ref

    groups = int(rng.choice([1, 1, 2, 3, 8]))
    kg, cg = (int(v) for v in rng.integers(1, 90, 2))
    r, s = ((1, 1), (3, 3), (5, 5), (7, 7), (1, 3), (2, 5), (11, 11))[trial % 7]
    if trial == 7:
        groups, kg, cg, r, s = 1, 512, 512, 3, 3        # ResNet-18's largest, many tiles
    w = rng.standard_normal((groups * kg, cg, r, s)).astype(np.float32)
    want = ref.transpose_filters(w, groups, taps_last)
    out = cp.full(want.shape, cp.nan, cp.float32)
    got = ops.transpose_filters(cp.asarray(w), groups, taps_last=taps_last, out=out)
    assert got is out
    np.testing.assert_array_equal(cp.asnumpy(got), want)


def test_huge_filter_stages_one_channel_pair(rng):
    import cupy as cp

    from tensorconv import ops
    from tensorconv.reference import conv as ref

    w = rng.standard_normal((3, 2, 90, 91)).astype(np.float32)   # 8,190 taps
    for taps_last in (False, True):
        got = ops.transpose_filters(cp.asarray(w), 1, taps_last=taps_last)
        np.testing.assert_array_equal(cp.asnumpy(got), ref.transpose_filters(w, 1, taps_last))


def test_bad_input_raises_before_any_launch():
    import cupy as cp

    from tensorconv import ops

    w = cp.zeros((8, 4, 3, 3), cp.float32)
    with pytest.raises(ValueError, match="groups=3"):
        ops.transpose_filters(w, 3)
    with pytest.raises(ValueError, match="out has shape"):
        ops.transpose_filters(w, 2, out=cp.zeros((2, 4, 3, 3, 4), cp.float32))
    with pytest.raises(TypeError, match="w"):
        ops.transpose_filters(w.astype(cp.float64))
    with pytest.raises(ValueError, match="taps"):
        ops.transpose_filters(cp.zeros((1, 1, 91, 91), cp.float32))
