"""The public ops, each with one good call and what each argument must be, and the wrong
values a careless caller passes: shared by the CPU and GPU bad-input suites.

An :class:`OpCase` builds the keyword arguments of a call that works (:meth:`OpCase.good`);
:func:`wrong_values` gives, for one argument, values that must be refused with a
``ValueError`` or ``TypeError`` whose message names the argument.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tensorconv import ops, reference

F32 = np.float32


@dataclass(frozen=True)
class OpCase:
    """One public op: ``fn(**good(xp))`` runs; ``arrays`` are the array arguments checked
    (``contiguous``: they must be C-contiguous), ``ints`` maps integer arguments to their
    minimum, ``bools`` are flags, ``outs`` maps output buffers to their shape."""

    name: str
    fn: Callable
    shapes: dict                      # array argument -> shape of a good value
    extra: dict = field(default_factory=dict)   # other good keyword arguments
    ints: dict = field(default_factory=dict)
    bools: tuple = ()
    outs: dict = field(default_factory=dict)
    contiguous: bool = True
    gpu_only: bool = False

    def good(self, xp, rng) -> dict:
        kw = {k: xp.asarray(rng.standard_normal(s).astype(F32)) for k, s in self.shapes.items()}
        return {**kw, **self.extra}


def _c(name, fn, shapes, **kw) -> OpCase:
    return OpCase(name, fn, shapes, **kw)


CONV_INTS = {"stride": 1, "padding": 0}
CASES = [
    _c("conv2d", ops.conv2d, {"x": (2, 4, 8, 8), "w": (6, 2, 3, 3), "bias": (6,),
                              "residual": (2, 6, 8, 8)},
       extra={"stride": 1, "padding": 1, "dilation": 1, "groups": 2},
       ints={**CONV_INTS, "dilation": 1, "groups": 1}, bools=("relu",),
       outs={"out": (2, 6, 8, 8)}),
    _c("reference.conv2d", reference.conv2d, {"x": (2, 4, 8, 8), "w": (6, 4, 3, 3),
                                              "bias": (6,)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, contiguous=False),
    _c("pool2d", ops.pool2d, {"x": (2, 3, 8, 8)}, extra={"kernel_size": 3, "stride": 2,
                                                         "padding": 1},
       ints={"kernel_size": 1, "stride": 1, "padding": 0}, outs={"out": (2, 3, 4, 4)}),
    _c("conv1x1", ops.conv1x1, {"x": (1, 8, 6, 6), "w": (12, 8, 1, 1), "bias": (12,),
                                "residual": (1, 12, 6, 6)},
       bools=("relu",), outs={"out": (1, 12, 6, 6)}, ),
    _c("conv1x1_pair", ops.conv1x1_pair, {"x": (1, 8, 6, 6), "w1": (12, 8, 1, 1),
                                          "w2": (4, 12, 1, 1), "b1": (12,), "b2": (4,)},
       bools=("relu1", "relu2"), outs={"y_out": (1, 12, 6, 6), "z_out": (1, 4, 6, 6)},
       ),
    *[_c(f.__name__, f, {"x": (1, 8, 10, 10), "w": (16, 8, 3, 3), "bias": (16,),
                         "residual": (1, 16, 10, 10)},
         extra={"stride": 1, "padding": 1}, ints=CONV_INTS, bools=("relu",),
         outs={"out": (1, 16, 10, 10)}, gpu_only=True)
      for f in (ops.core_conv2d, ops.cluster_conv2d, ops.tf32x3_conv2d)],
    _c("winograd_conv2d", ops.winograd_conv2d, {"x": (1, 8, 10, 10), "w": (16, 8, 3, 3),
                                                "bias": (16,), "residual": (1, 16, 10, 10)},
       extra={"padding": 1}, ints={"padding": 0}, bools=("relu",),
       outs={"out": (1, 16, 10, 10)}, gpu_only=True),
    _c("tdc_conv2d", ops.tdc_conv2d, {"x": (1, 8, 10, 10), "w": (16, 8, 3, 3)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, outs={"out": (1, 16, 10, 10)},
       gpu_only=True),
    _c("cp_conv2d", ops.cp_conv2d, {"x": (1, 8, 10, 10), "s": (8, 3), "h": (3, 3), "w": (3, 3),
                                    "t": (16, 3), "bias": (16,), "residual": (1, 16, 10, 10)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, bools=("relu",),
       outs={"out": (1, 16, 10, 10)}, ),
    _c("conv2d_maxpool", ops.conv2d_maxpool, {"x": (1, 3, 32, 32), "w": (16, 3, 7, 7),
                                              "bias": (16,)},
       extra={"stride": 2, "padding": 3, "pool_kernel": 3, "pool_stride": 2,
              "pool_padding": 1},
       ints={**CONV_INTS, "pool_kernel": 1, "pool_stride": 1, "pool_padding": 0},
       bools=("relu",), outs={"out": (1, 16, 8, 8)}, ),
    _c("gap_linear", ops.gap_linear, {"x": (2, 16, 4, 4), "w": (10, 16), "bias": (10,)},
       outs={"out": (2, 10)}, ),
    _c("tucker_tail_conv2d", ops.tucker_tail_conv2d,
       {"u": (1, 8, 6, 6), "w_core": (8, 8, 3, 3), "w_last": (12, 8, 1, 1),
        "w_next": (4, 12, 1, 1), "b_last": (12,), "b_next": (4,)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, bools=("relu1", "relu2"),
       outs={"y_out": (1, 12, 6, 6), "z_out": (1, 4, 6, 6)}, ),
    _c("batch_norm_forward", ops.batch_norm_forward,
       {"x": (2, 4, 5, 5), "gamma": (4,), "beta": (4,), "running_mean": (4,),
        "running_var": (4,)}, extra={"training": True}, bools=("training", "relu"),
       contiguous=False),
]


def wrong_arrays(good, contiguous: bool) -> list[tuple[str, object]]:
    """``(what, value)`` pairs: ``good`` (an array) made wrong in one way each."""
    xp = np if isinstance(good, np.ndarray) else __import__("cupy")
    shape = good.shape
    out = [("one more axis", good[None]),
           ("one axis fewer", good[0] if good.ndim > 1 else good[0, ...]),
           ("float64", good.astype(np.float64)), ("int32", good.astype(np.int32)),
           ("bool", good > 0), ("complex64", good.astype(np.complex64)),
           ("a nested list", good.tolist()), ("a string", "abc"), ("a number", 1.0),
           ("empty", xp.zeros((0,) + shape[1:], F32))]
    if contiguous and len(shape) >= 1 and shape[-1] > 1:
        wide = xp.zeros(shape[:-1] + (2 * shape[-1],), F32)
        out.append(("non-contiguous", wide[..., ::2]))
    return out


WRONG_INTS = [("a float", 1.5), ("an integral float", 2.0), ("a string", "2"),
              ("a bool", True), ("a triple", (1, 1, 1)), ("a float pair", (1.0, 1.0)),
              ("numpy float", np.float32(1))]
WRONG_BOOLS = [("a string", "no"), ("an int", 1), ("None", None), ("an array", np.array([1]))]


def wrong_ints(minimum: int) -> list[tuple[str, object]]:
    """Wrong values for an integer argument of ``minimum``: wrong types, and one below."""
    return WRONG_INTS + [("below the minimum", minimum - 1), ("far below", -7)]


def names_argument(message: str, name: str) -> bool:
    """Whether an error ``message`` names the argument ``name`` (as a word)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def all_wrong_calls(case: OpCase) -> list[tuple[str, str, object]]:
    """Every ``(argument, what, wrong value)`` of ``case`` (arrays on NumPy)."""
    rng = np.random.default_rng(0)
    good = case.good(np, rng)
    calls = [(a, what, v) for a in case.shapes for what, v in wrong_arrays(good[a],
                                                                           case.contiguous)]
    calls += [(a, what, v) for a, m in case.ints.items() for what, v in wrong_ints(m)]
    calls += [(a, what, v) for a in case.bools for what, v in WRONG_BOOLS]
    return calls
