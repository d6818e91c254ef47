"""The filter transposition's reference by its definition, its tile plan, and its CPU path
(CPU checks; the kernel's are in tests/gpu/test_filter_transpose_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops
from tensorconv.ops import filter_transpose as ft
from tensorconv.reference import conv as ref


@pytest.mark.parametrize("taps_last", [False, True])
def test_reference_by_definition(rng, taps_last):
    g, kg, cg, r, s = 3, 4, 5, 2, 3
    w = rng.standard_normal((g * kg, cg, r, s)).astype(np.float32)
    got = ref.transpose_filters(w, g, taps_last)
    assert got.flags.c_contiguous
    for gi, k, c, i, j in np.ndindex(g, kg, cg, r, s):
        at = (gi, c, i, j, k) if taps_last else (gi, c, k, i, j)
        assert got[at] == w[gi * kg + k, c, i, j]
    np.testing.assert_array_equal(ops.transpose_filters(w, g, taps_last=taps_last), got)


@pytest.mark.parametrize("taps", [1, 2, 9, 25, 49, 121, 1000, 4096, 4097, ft.MAX_TAPS])
@pytest.mark.parametrize("taps_last", [False, True])
def test_plan_fits_and_keeps_the_stores_off_one_bank(taps, taps_last):
    for p, q in ((1, 1), (3, 1000), (64, 64), (512, 512), (1000, 3)):
        tp, tq, pitch = ft.plan(p, q, taps, taps_last)
        assert 1 <= tp <= p and 1 <= tq <= q
        assert pitch >= tq * taps and pitch % 2 == 1
        assert 4 * tp * pitch <= 32 * 1024 + 4 * tp     # 32 KB, plus the odd pitch's pad


def test_cpu_path_refuses_out_and_checks_its_arguments():
    w = np.zeros((4, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="out"):
        ops.transpose_filters(w, out=np.zeros((1, 2, 4, 3, 3), np.float32))
    with pytest.raises(ValueError, match="groups"):
        ops.transpose_filters(w, 0)
    with pytest.raises(TypeError, match="taps_last"):
        ops.transpose_filters(w, taps_last=1)
