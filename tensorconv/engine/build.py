"""Compiling ahead of time what an engine will need, in parallel.

A *dry* plan of the model walks the same planners as the real one, but its choices time
nothing: they record the kernels of every candidate they would time and take the parts
(:func:`tensorconv.engine.choice.one_launch_or_parts`), so the kernels it collects cover
whatever the tuned plan then picks.  :func:`tensorconv.cuda.compile_all` compiles them on
a pool of threads; with an empty CuPy kernel cache that is most of a first run.
"""

from __future__ import annotations

from tensorconv import backend, cuda
from tensorconv import precision as mma_precision
from tensorconv.engine import planners
from tensorconv.engine.half import plan_input
from tensorconv.engine.plan import Plan
from tensorconv.engine.registry import plan_module


def model_input(plan: Plan, x):
    """What the model's planners read: the (N, C, H, W) float32 input ``x`` itself, or in
    an fp16 plan its float16 NHWC copy (:func:`tensorconv.engine.half.plan_input`)."""
    return plan_input(plan, x) if plan.half else x


def engine_kernels(model, input_shape, *, tune: bool = False, precision: str | None = None,
                   dtype: str = "float32"):
    """``(kernels, choices)``: every kernel an engine of ``model`` at ``input_shape`` may
    compile (with ``tune``: every candidate its choices would time) and how many choices
    a tuned plan would time."""
    cp = backend.require_cuda("engine_kernels")
    plan = Plan(cp, tune=tune, precision=precision, dry=True, dtype=dtype)
    with mma_precision.using(plan.precision):
        x = plan.keep(cp.zeros(tuple(int(s) for s in input_shape), cp.float32))
        plan_module(model, plan, model_input(plan, x))
        for rewrite in planners.PASSES:
            rewrite(plan)
        kernels = plan.kernels | {k for s in plan.steps for k in s.kernels}
    return kernels, plan.decisions


def build(model, input_shape, *, tune: bool = False, precision: str | None = None,
          dtype: str = "float32") -> int:
    """Compile every kernel an engine of ``model`` may need (:func:`engine_kernels`), in
    parallel with a progress bar; return how many were compiled (not loaded already)."""
    kernels, _ = engine_kernels(model, input_shape, tune=tune, precision=precision,
                                dtype=dtype)
    return cuda.compile_all(kernels, desc=f"compiling kernels for {type(model).__name__}")
