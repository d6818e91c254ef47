"""A plan: buffers allocated once and the steps (launches) that fill them, in order.

A :class:`Step` is one launch (or a few CuPy element-wise calls) as data: what it runs,
its label for profiles, the kernels it compiles (for the ahead-of-time build) and, where
a rewrite pass may fuse it with its neighbours, a description of what it computes
(:class:`Pointwise`, :class:`Core`).

A module whose paths are independent (a residual block's shortcut and its first
convolutions, an inception module's four branches) plans each path inside a
:class:`Branches` branch.  A run of consecutive steps of one module's branches then
runs as a *section*: the last branch on the plan's stream, every other on a side stream
of its own, forked after everything before and joined before anything after, so that
small launches share the GPU.  Captured, the fork and the join are the graph's edges.
A step made by a rewrite pass keeps its steps' branch only where they all had the same
one (:func:`inherit`); else it splits the section, which stays correct: a section is
only ever a subsequence of steps that the module declared independent.
"""

from __future__ import annotations

import contextlib
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
    branch : (Branches, int), optional
        The module branch the step belongs to (set by :meth:`Plan.append`).
    fallbacks : tuple of Step
        The same result by other launches, each of which ``choose_fallbacks`` runs instead
        where the whole plan is faster so: set where the step was chosen by timing it alone
        and the plan around it may slow it (code written for a layer's weights, fetched
        cold).
    """

    run: Callable[[], object]
    label: str = ""
    kernels: tuple = ()
    pointwise: Pointwise | None = None
    core: Core | None = None
    pair: tuple | None = None
    shortcut: Pointwise | None = None
    branch: tuple | None = None
    fallbacks: tuple = ()

    def __call__(self):
        return self.run()


def inherit(step: Step, *replaced: Step) -> Step:
    """Give ``step``, made by a rewrite pass to replace ``replaced``, their branch where
    they all share one; else none (it then runs after all of a section, before the rest)."""
    keys = {None if s.branch is None else (id(s.branch[0]), s.branch[1]) for s in replaced}
    step.branch = replaced[0].branch if len(keys) == 1 else None
    return step


class Branches:
    """The independent paths of one module: each branch's steps read only buffers made
    before the module or by the same branch, and write buffers no other branch touches.

    ``with branches.branch(): ...`` plans the next branch; ``branch(i)`` re-enters branch
    ``i`` (an inception module's copy of branch ``i``'s output into the concat, planned
    after every branch).  Inside another module's branch, a module's branches are planned
    as part of that branch (one level of concurrency).
    """

    def __init__(self, plan: "Plan"):
        self.plan = plan
        self.count = 0

    @contextlib.contextmanager
    def branch(self, index: int | None = None):
        if index is None:
            index, self.count = self.count, self.count + 1
        elif not 0 <= index < self.count:
            raise ValueError(f"index must name a branch planned before (0..{self.count - 1}), "
                             f"got {index}")
        plan = self.plan
        outer = plan.branch_key
        if outer is None:
            plan.branch_key = (self, index)
        try:
            yield index
        finally:
            plan.branch_key = outer


def sections(steps: list) -> list:
    """``steps`` as the plan runs them: a step alone, or a section — a list of the
    branches (lists of steps, in plan order) of a run of consecutive steps of one
    :class:`Branches` with at least two branches in it."""
    out, i = [], 0
    while i < len(steps):
        if steps[i].branch is None:
            out.append(steps[i])
            i += 1
            continue
        group, paths, j = steps[i].branch[0], {}, i
        while j < len(steps) and steps[j].branch is not None and steps[j].branch[0] is group:
            paths.setdefault(steps[j].branch[1], []).append(steps[j])
            j += 1
        if len(paths) < 2:
            out.extend(steps[i:j])
        else:
            out.append([paths[k] for k in sorted(paths)])
        i = j
    return out


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
    concurrent : bool
        Run the sections of module branches on side streams (:func:`sections`); False
        runs every step on the plan's stream, in plan order.
    programmatic : bool
        The plan's graph will have programmatic edges (:mod:`tensorconv.graph`): choices
        about how its launches follow each other (side streams or one) are timed so.
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
    concurrent: bool = True
    programmatic: bool = False
    branch_key: tuple | None = None                # the branch being planned (Branches)
    side_streams: list = field(default_factory=list)  # a section's branch i > 0 runs on [i-1]

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
        """Append ``step``, in the branch being planned (if any)."""
        if step.branch is None:
            step.branch = self.branch_key
        self.steps.append(step)
        return step

    def branches(self) -> Branches:
        """A module's independent paths, each planned in ``with branches.branch():``."""
        return Branches(self)

    def side(self) -> "Plan":
        """A plan for parts planned to be timed: its buffers live as long as this plan's."""
        return Plan(self.xp, tune=self.tune, precision=self.precision, dry=self.dry,
                    dtype=self.dtype, buffers=self.buffers, kernels=self.kernels,
                    root=self.root, programmatic=self.programmatic)

    def adopt(self, side: "Plan") -> None:
        """Take over the steps of a side plan (timed, then kept), in the branch being
        planned."""
        for step in side.steps:
            self.append(step)

    def run(self, steps: list | None = None) -> None:
        """Every step once (or those of ``steps``, another list of the plan's steps), on the
        current stream (sections forked onto side streams and joined back unless
        ``concurrent`` is False); allocates nothing after the first run but the events of
        the forks and joins."""
        steps = self.steps if steps is None else steps
        with mma_precision.using(self.precision):
            if not self.concurrent:
                for step in steps:
                    step.run()
                return
            for item in sections(steps):
                if isinstance(item, Step):
                    item.run()
                else:
                    self.run_section(item)

    def run_section(self, paths: list) -> None:
        """A section's branches (lists of steps): each but the last on a side stream of
        the plan's, forked from the current stream, the last on it, then joined."""
        main = self.xp.cuda.get_current_stream()
        streams = self.root.side_streams
        while len(streams) < len(paths) - 1:
            streams.append(self.xp.cuda.Stream(non_blocking=True))
        fork = main.record()
        for stream, path in zip(streams, paths[:-1]):
            stream.wait_event(fork)
            with stream:
                for step in path:
                    step.run()
        for step in paths[-1]:
            step.run()
        for stream in streams[:len(paths) - 1]:
            main.wait_event(stream.record())
