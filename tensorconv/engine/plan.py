"""A plan: buffers allocated once and the steps (launches) that fill them, in order.

A :class:`Step` is one launch (or a few CuPy element-wise calls) as data: what it runs,
its label for profiles, the kernels it compiles (for the ahead-of-time build) and, where
a rewrite pass may fuse it with its neighbours, a description of what it computes
(:class:`Pointwise`, :class:`Core`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tensorconv import precision as mma_precision

DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Pointwise:
    """A planned stride-1 1x1 convolution ``out = relu?(conv(x, w) + b + residual)`` (BN
    folded into ``w`` and ``b``); ``geom`` its :class:`~tensorconv.checks.ConvGeometry`."""

    x: object
    w: object
    b: object
    relu: bool
    residual: object
    out: object
    geom: object


@dataclass(frozen=True)
class Core:
    """A planned Tucker core convolution ``out = conv(u, w, stride, padding)``."""

    u: object
    w: object
    stride: tuple
    padding: tuple
    out: object


@dataclass(eq=False)
class Step:
    """One launch of a plan.

    Attributes
    ----------
    run : callable
        Launches the step's kernels on the plan's buffers (no allocation).
    label : str
        Names it in per-launch profiles.
    kernels : tuple of KernelRef
        What it compiles (:mod:`tensorconv.engine.build` compiles them ahead of time).
    pointwise : Pointwise, optional
        Set on a stride-1 1x1 convolution that ``fuse_pointwise_pairs`` may chain.
    core : Core, optional
        Set on a Tucker core that ``fuse_tucker_tails`` may join to the 1x1s after it.
    pair : (Pointwise, Pointwise), optional
        Set on a chained pair, for the passes after it.
    shortcut : Pointwise, optional
        Set on a residual block's 1x1 projection shortcut that
        ``fold_projection_shortcuts`` may compute inside the pair adding it.
    """

    run: Callable[[], object]
    label: str = ""
    kernels: tuple = ()
    pointwise: Pointwise | None = None
    core: Core | None = None
    pair: tuple | None = None
    shortcut: Pointwise | None = None

    def __call__(self):
        return self.run()


@dataclass
class Plan:
    """Buffers allocated once and the steps that fill them.

    Steps fetch their kernels when run, so they run at the :mod:`tensorconv.precision`
    current then; :meth:`run` and the engine run them at the plan's ``precision``.

    Attributes
    ----------
    xp : module
        ``cupy``.
    tune : bool
        Planners may time candidates (tune cache) instead of following stored choices.
    dry : bool
        A build plan: choices time nothing and take the parts, recording in ``kernels``
        every kernel a tuned plan might compile (:mod:`tensorconv.engine.build`).
    dtype : {"float32", "float16"}
        Of the buffers; "float16" plans through the fp16 NHWC planners
        (:mod:`tensorconv.engine.half`).
    """

    xp: object
    tune: bool = False
    precision: str | None = None
    dry: bool = False
    dtype: str = "float32"
    steps: list = field(default_factory=list)
    buffers: list = field(default_factory=list)   # alive as long as the plan (and its graph)
    kernels: set = field(default_factory=set)      # a dry plan's candidates' kernels
    root: "Plan | None" = None                     # a side plan's plan (choices count there)
    expected: int = 0                              # choices a tuned plan will time (dry count)
    decisions: int = 0                             # choices timed (dry: that would be timed)
    progress: object = None                        # the tuning progress bar, once one times

    def __post_init__(self):
        self.precision = mma_precision.check(self.precision or mma_precision.current())
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        self.root = self.root or self

    @property
    def half(self) -> bool:
        return self.dtype == "float16"

    def alloc(self, shape):
        buf = self.xp.empty(tuple(int(s) for s in shape), dtype=np.dtype(self.dtype))
        self.buffers.append(buf)
        return buf

    def keep(self, array):
        self.buffers.append(array)
        return array

    def add(self, run, label: str = "", kernels=(), *, pointwise: Pointwise | None = None,
            core: Core | None = None) -> Step:
        """Append a step; return it (a planner may describe it further)."""
        return self.append(Step(run, label, tuple(kernels), pointwise, core))

    def append(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def side(self) -> "Plan":
        """A plan for parts planned to be timed: its buffers live as long as this plan's."""
        return Plan(self.xp, tune=self.tune, precision=self.precision, dry=self.dry,
                    dtype=self.dtype, buffers=self.buffers, kernels=self.kernels,
                    root=self.root)

    def adopt(self, side: "Plan") -> None:
        """Take over the steps of a side plan (timed, then kept)."""
        self.steps += side.steps

    def run(self) -> None:
        with mma_precision.using(self.precision):
            for step in self.steps:
                step.run()
