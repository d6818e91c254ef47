"""Every public op refuses a wrong argument with a ``ValueError`` or ``TypeError`` that
names it, before any work: each op's every argument against a fixed list of wrong values,
then random wrong values drawn by hypothesis (the GPU variant, with poisoned outputs
left untouched, is ``tests/gpu/test_bad_input_gpu.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bad_inputs import (
    ARG_CASES,
    CASES,
    all_wrong_args,
    all_wrong_calls,
    names_argument,
    wrong_choices,
)

CALLS = [(case, arg, what, value) for case in CASES for arg, what, value in all_wrong_calls(case)]


def _refused(case, kwargs, arg) -> None:
    with pytest.raises((ValueError, TypeError)) as exc:
        case.fn(**kwargs)
    assert names_argument(str(exc.value), arg), f"{case.name}({arg}=...): {exc.value}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_good_call_runs_or_says_it_needs_a_gpu(case):
    kwargs = case.good(np, np.random.default_rng(0))
    if case.gpu_only:
        with pytest.raises(TypeError, match="runs on the GPU"):
            case.fn(**kwargs)
    else:
        case.fn(**kwargs)


@pytest.mark.parametrize("case,arg,what,value", CALLS,
                         ids=[f"{c.name}-{a}-{w}" for c, a, w, _ in CALLS])
def test_a_wrong_argument_is_refused_by_name(case, arg, what, value):
    kwargs = case.good(np, np.random.default_rng(0))
    kwargs[arg] = value
    _refused(case, kwargs, arg)


def _random_wrong(draw, case, arg):
    """A random wrong value for ``arg`` of ``case``."""
    if arg in case.bools:
        return draw(st.one_of(st.integers(), st.text(max_size=4), st.floats(), st.none()))
    if arg in case.ints:
        low = case.ints[arg]
        return draw(st.one_of(
            st.integers(max_value=low - 1), st.floats(allow_nan=True),
            st.text(min_size=1, max_size=3), st.booleans(),
            st.tuples(st.floats(), st.floats()),
            st.lists(st.integers(min_value=low, max_value=4), min_size=3, max_size=5)))
    good = case.good(np, np.random.default_rng(0))[arg]
    kind = draw(st.sampled_from(["ndim", "dtype", "empty"]))
    if kind == "ndim":
        ndim = draw(st.integers(0, 6).filter(lambda n: n != good.ndim))
        return np.ones(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)), np.float32)
    if kind == "dtype":
        dtype = draw(st.sampled_from([np.float16, np.float64, np.int8, np.int64, np.uint8,
                                      np.complex128, np.bool_]))
        return good.astype(dtype)
    axis = draw(st.integers(0, good.ndim - 1))
    return np.zeros(good.shape[:axis] + (0,) + good.shape[axis + 1:], np.float32)


@st.composite
def _wrong_call(draw):
    case = draw(st.sampled_from(CASES))
    arg = draw(st.sampled_from(sorted([*case.shapes, *case.ints, *case.bools])))
    return case, arg, _random_wrong(draw, case, arg)


@settings(max_examples=300, deadline=None)
@given(_wrong_call())
def test_random_wrong_arguments_are_refused_by_name(call):
    case, arg, value = call
    kwargs = case.good(np, np.random.default_rng(0))
    kwargs[arg] = value
    _refused(case, kwargs, arg)


# ------------------------------------------------------- layers, transforms, loaders

ARG_CALLS = [(case, arg, what, value) for case in ARG_CASES
             for arg, what, value in all_wrong_args(case)]


@pytest.mark.parametrize("case", ARG_CASES, ids=[c.name for c in ARG_CASES])
def test_every_good_constructor_call_runs(case):
    case.fn(**case.good())


@pytest.mark.parametrize("case,arg,what,value", ARG_CALLS,
                         ids=[f"{c.name}-{a}-{w}" for c, a, w, _ in ARG_CALLS])
def test_a_wrong_layer_transform_or_loader_argument_is_refused_by_name(case, arg, what, value):
    _refused(case, {**case.good(), arg: value}, arg)


@st.composite
def _wrong_arg(draw):
    case = draw(st.sampled_from(ARG_CASES))
    arg = draw(st.sampled_from(sorted([*case.ints, *case.reals, *case.bools, *case.choices])))
    if arg in case.ints:
        value = draw(st.one_of(st.integers(max_value=case.ints[arg] - 1), st.floats(),
                               st.text(max_size=3), st.booleans(),
                               st.nothing() if arg in case.optional else st.none()))
    elif arg in case.reals:
        lo, hi = case.reals[arg]
        bad = [st.floats(allow_nan=True).filter(lambda v: not np.isfinite(v)),
               st.text(max_size=3), st.booleans(), st.none()]
        if lo is not None:
            bad.append(st.floats(max_value=lo, exclude_max=True, allow_infinity=False))
        if hi is not None:
            bad.append(st.floats(min_value=hi, exclude_min=True, allow_infinity=False))
        value = draw(st.one_of(*bad))
    elif arg in case.bools:
        value = draw(st.one_of(st.integers(), st.text(max_size=3), st.floats(), st.none()))
    else:
        value = draw(st.one_of(st.text(max_size=6).filter(
            lambda v: v not in case.choices[arg]), st.sampled_from(
            [v for _, v in wrong_choices(case.choices[arg])])))
    return case, arg, value


@settings(max_examples=200, deadline=None)
@given(_wrong_arg())
def test_random_wrong_layer_transform_or_loader_arguments_are_refused(call):
    case, arg, value = call
    _refused(case, {**case.good(), arg: value}, arg)
