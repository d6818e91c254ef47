"""The dispatch tables of planning: module type -> planner.

``PLANNERS`` plan a module applied to a buffer; ``CONV_PLANNERS`` plan a convolution-like
layer with the batch norm to fold into it, a residual to add and whether to apply ReLU,
so that a structured convolution added later only brings its own planner.  The tables
are filled in one place, :mod:`tensorconv.engine.planners`; a user's own layer type joins
through :func:`register_planner` / :func:`register_conv_planner`.
"""

from __future__ import annotations

PLANNERS: dict = {}
CONV_PLANNERS: dict = {}
HALF_PLANNERS: dict = {}        # the fp16 NHWC path's (tensorconv.engine.half)
HALF_CONV_PLANNERS: dict = {}


def register_planner(module_type, fn) -> None:
    """``fn(module, plan, x) -> output buffer`` plans modules of ``module_type``."""
    PLANNERS[module_type] = fn


def register_conv_planner(module_type, fn) -> None:
    """``fn(module, plan, x, *, bn, relu, residual) -> output`` plans a conv-like layer; met
    on its own (a model that is one layer, a layer in a ``Sequential``) it is planned
    through ``fn`` with nothing folded."""
    CONV_PLANNERS[module_type] = fn
    PLANNERS.setdefault(module_type, _plan_conv_alone)


def register_half_planner(module_type, fn, *, conv: bool = False) -> None:
    """``fn`` plans modules of ``module_type`` in an fp16 plan (conv-like with ``conv``)."""
    if conv:
        HALF_CONV_PLANNERS[module_type] = fn
        HALF_PLANNERS.setdefault(module_type, _plan_conv_alone)
    else:
        HALF_PLANNERS[module_type] = fn


def _plan_conv_alone(m, plan, x):
    return plan_conv(m, plan, x)


def _lookup(table, module, what, half: bool = False):
    for cls in type(module).__mro__:
        if cls in table:
            return table[cls]
    if half:
        raise NotImplementedError(f"the fp16 inference engine has no planner for "
                                  f"{type(module).__name__}; register one with "
                                  f"tensorconv.engine.registry.register_half_planner")
    raise NotImplementedError(f"the inference engine has no {what} for {type(module).__name__}; "
                              f"register one with tensorconv.engine.register_{what}")


def _half(plan) -> bool:
    return getattr(plan, "dtype", "float32") == "float16"


def plan_module(module, plan, x):
    """Plan ``module`` applied to buffer ``x``; return its output buffer."""
    if _half(plan):
        return _lookup(HALF_PLANNERS, module, "planner", half=True)(module, plan, x)
    return _lookup(PLANNERS, module, "planner")(module, plan, x)


def plan_conv(module, plan, x, *, bn=None, relu=False, residual=None):
    """Plan a conv-like layer with a folded BN, an added residual and a ReLU."""
    table = HALF_CONV_PLANNERS if _half(plan) else CONV_PLANNERS
    return _lookup(table, module, "conv_planner", half=_half(plan))(
        module, plan, x, bn=bn, relu=relu, residual=residual)


def conv_planner(module):
    """The conv planner of ``module``'s type."""
    return _lookup(CONV_PLANNERS, module, "conv_planner")


def is_conv(module) -> bool:
    return any(cls in CONV_PLANNERS or cls in HALF_CONV_PLANNERS for cls in type(module).__mro__)
