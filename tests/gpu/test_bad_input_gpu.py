"""On the GPU every public op refuses a wrong argument by name before any launch: output
buffers poisoned with NaN are left untouched (the CPU suite is
``tests/test_bad_input_properties.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bad_inputs import CASES, WRONG_BOOLS, names_argument, wrong_arrays, wrong_ints

pytestmark = pytest.mark.gpu
GPU_CASES = [c for c in CASES if not c.name.startswith("reference.")]


def _poisoned(cp, case) -> dict:
    return {k: cp.full(s, cp.nan, cp.float32) for k, s in case.outs.items()}


@pytest.mark.parametrize("case", GPU_CASES, ids=[c.name for c in GPU_CASES])
def test_good_calls_fill_their_poisoned_outputs(case):
    """The check below is not vacuous: the good call writes every output buffer."""
    import cupy as cp

    outs = _poisoned(cp, case)
    case.fn(**case.good(cp, np.random.default_rng(0)), **outs)
    assert all(not bool(cp.isnan(o).any()) for o in outs.values()), case.name


@pytest.mark.parametrize("case", GPU_CASES, ids=[c.name for c in GPU_CASES])
def test_wrong_arguments_are_refused_before_any_launch(case):
    import cupy as cp

    good = case.good(cp, np.random.default_rng(0))
    calls = [(a, w, v) for a in case.shapes for w, v in wrong_arrays(good[a], case.contiguous)]
    first = next(iter(case.shapes))  # the array the others' device is compared with
    calls += [(a, "a host array", cp.asnumpy(good[a])) for a in case.shapes if a != first]
    calls += [(a, w, v) for a, m in case.ints.items() for w, v in wrong_ints(m)]
    calls += [(a, w, v) for a in case.bools for w, v in WRONG_BOOLS]
    for arg, what, value in calls:
        outs = _poisoned(cp, case)
        with pytest.raises((ValueError, TypeError)) as exc:
            case.fn(**{**good, arg: value}, **outs)
        assert names_argument(str(exc.value), arg), f"{case.name}({arg}: {what}): {exc.value}"
        cp.cuda.Device().synchronize()
        for name, o in outs.items():
            assert bool(cp.isnan(o).all()), f"{case.name}({arg}: {what}) wrote {name}"
