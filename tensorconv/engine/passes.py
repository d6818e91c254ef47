"""Rewrite passes over a finished plan that join neighbouring 1x1 convolutions.

* :func:`fuse_pointwise_pairs` — a 1x1 convolution that reads another's output runs in the
  same launch as that one (``ops.conv1x1_pair``: a Tucker layer's last 1x1 and the next
  layer's first; a bottleneck's last and the next one's first);
* :func:`fold_projection_shortcuts` — a residual block's 1x1 projection shortcut is
  computed inside the pair that adds it (its input channels as more rows of the pair's
  first product);
* :func:`choose_fallbacks` — a step chosen by timing it alone gives way to its fallback
  where the whole plan runs faster so;
* :func:`choose_sections` — each section of module branches runs side by side or in plan
  order on one stream, then the whole plan with its sections or all in order.

Each is a choice (:func:`tensorconv.engine.choice.one_launch_or_parts`): tuned
plans time every tile against the two launches; untuned plans follow a stored verdict
only.  The passes run in the order :data:`tensorconv.engine.planners.PASSES` lists.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tensorconv import backend
from tensorconv.engine.choice import one_launch_or_parts
from tensorconv.engine.plan import Plan, Step, inherit, sections
from tensorconv.ops import direct_conv, pointwise_conv, pointwise_pair

# every kernel a pair and the launches it replaces may run
PAIR_FILES = (pointwise_pair.FILE, pointwise_conv.FILE) + direct_conv.FILES


def _problem(a, b, extra_channels: int = 0) -> pointwise_pair.Problem:
    return pointwise_pair.Problem(a.geom.n, a.geom.h * a.geom.w, a.geom.c + extra_channels,
                                  a.geom.k, b.geom.k)


def fuse_pointwise_pairs(plan: Plan) -> None:
    """Run each 1x1 convolution that reads another's output in the same launch as that
    one where the choice found that faster than the two launches.

    The pair takes the first one's place in the plan: the second reads nothing else
    and every buffer is written once per run, so running it earlier is safe.  A step
    joins at most one pair.
    """
    steps, taken = plan.steps, set()
    facts = backend.device_facts()
    for i, first in enumerate(steps):
        a = first.pointwise
        if a is None or i in taken:
            continue
        k = next((k for k in range(i + 1, len(steps))
                  if k not in taken and steps[k].pointwise is not None
                  and steps[k].pointwise.x is a.out and steps[k].pointwise.residual is None), None)
        if k is None:
            continue
        second, b = steps[k], steps[k].pointwise
        p = _problem(a, b)
        tiles = pointwise_pair.candidates(p, facts)
        if not tiles:
            continue

        def launch(tile, a=a, b=b, p=p):
            packed = pointwise_pair.pack_weights(a.w, b.w, tile)
            return Step(lambda: pointwise_pair.conv1x1_pair(
                a.x, a.w, b.w, a.b, b.b, residual=a.residual, relu1=a.relu, relu2=b.relu,
                tile=tile, packed=packed, y_out=a.out, z_out=b.out),
                f"pointwise pair {p.c}->{p.m}->{p.j} on {tuple(a.x.shape)} {tile}",
                pointwise_pair.kernels(p, tile))

        choice = one_launch_or_parts(
            plan, "pointwise_pair", PAIR_FILES,
            f"{a.geom}|{b.geom}|res{a.residual is not None}", tiles=lambda t=tiles: t,
            launch=launch, parts=lambda f=first, s=second: [f, s],
            decode=lambda v: pointwise_pair.Tile(*v), allowed=tiles)
        if not choice.fused:
            continue
        fused = inherit(launch(choice.tile), first, second)
        fused.pair = (a, b)
        steps[i] = fused
        taken.update((i, k))
    plan.steps = [s for k, s in enumerate(steps) if not (k in taken and s.pointwise is not None)]


def fold_projection_shortcuts(plan: Plan) -> None:
    """Compute each 1x1 projection shortcut inside the chained pair that adds it as a
    residual (``ops.conv1x1_pair``'s ``skip``: the shortcut's input channels become more
    rows of the pair's first product) where the choice found that faster than the two
    launches.  Runs after :func:`fuse_pointwise_pairs`, before the Tucker tails, which then
    leave a folded pair alone.
    """
    made = {id(s.shortcut.out): s for s in plan.steps if s.shortcut is not None}
    folded = set()
    facts = backend.device_facts()
    for i, step in enumerate(plan.steps):
        if step.pair is None or id(step.pair[0].residual) not in made:
            continue
        (a, b), short = step.pair, made[id(step.pair[0].residual)]
        sc = short.shortcut
        p = _problem(a, b, sc.geom.c)
        tiles = pointwise_pair.candidates(p, facts)
        if not tiles:
            continue
        b1 = sc.b if a.b is None else (a.b if sc.b is None else plan.keep(a.b + sc.b))

        def launch(tile, a=a, b=b, sc=sc, b1=b1, p=p, label=step.label):
            packed = pointwise_pair.pack_weights(a.w, b.w, tile, sc.w)
            return Step(lambda: pointwise_pair.conv1x1_pair(
                a.x, a.w, b.w, b1, b.b, skip_x=sc.x, skip_w=sc.w, skip_stride=sc.geom.stride[0],
                relu1=a.relu, relu2=b.relu, tile=tile, packed=packed, y_out=a.out, z_out=b.out),
                f"{label} + shortcut {tuple(sc.w.shape)} {tile}", pointwise_pair.kernels(p, tile))

        choice = one_launch_or_parts(
            plan, "shortcut_fold", PAIR_FILES, f"{a.geom}|{b.geom}|{sc.geom}",
            tiles=lambda t=tiles: t, launch=launch, parts=lambda s=short, f=step: [s, f],
            decode=lambda v: pointwise_pair.Tile(*v), allowed=tiles)
        if not choice.fused:
            continue
        plan.steps[i] = inherit(launch(choice.tile), step, short)
        folded.add(id(short))
    plan.steps = [s for s in plan.steps if id(s) not in folded]


@dataclass(frozen=True)
class AsPlanned:
    """The one "tile" of a step kept as planned (nothing to choose within it)."""


def choose_fallbacks(plan: Plan) -> None:
    """Run a step's :attr:`~tensorconv.engine.plan.Step.fallbacks` in its place where the
    whole plan runs faster so.  A planner gives a step fallbacks where it chose the step by
    timing it alone and the plan around it may slow it: code written for a layer's weights
    (:mod:`tensorconv.ops.sparse_unrolled`), replayed alone, stays in the L2 between its
    launches, while in a plan the layers between evict it and the launch fetches it again
    (ResNet-18-8x at batch 32: bodies of about 36,000 multiply-adds took 11-19 µs longer in
    the plan than alone, while the tiled kernel they had beaten alone lost nothing;
    ``docs/notes/sparse_conv.md``).  Steps are weighed in plan order, each fallback in turn
    against the plan as decided so far (the step, or the fallback that won), timed as the
    engine's graph runs; a verdict is keyed by the two steps and every step's label.
    Untuned plans follow stored verdicts, else keep the step.  Runs before
    :func:`choose_sections`."""
    for i, step in enumerate(plan.steps):
        for fallback in step.fallbacks:
            order = list(plan.steps)
            other = order[:i] + [inherit(fallback, step)] + order[i + 1:]
            digest = hashlib.sha1("\n".join(s.label for s in order).encode()).hexdigest()[:16]
            kernels = tuple(k for s in order for k in s.kernels)
            every = kernels + fallback.kernels
            choice = one_launch_or_parts(
                plan, "fallback", sorted({k.file for k in every}),
                f"step {i}: {order[i].label} or {fallback.label} | {len(order)} steps, {digest}",
                tiles=lambda: [AsPlanned()],
                launch=lambda _t, o=order: Step(lambda: plan.run(o), "the plan", kernels),
                parts=lambda o=other, e=every: [Step(lambda: plan.run(o), "the plan, fallback",
                                                     e)],
                decode=lambda _v: AsPlanned(), default=AsPlanned(),
                programmatic=plan.programmatic, candidate_kernels=lambda e=every: e)
            if not choice.fused:
                plan.steps[i] = other[i]


@dataclass(frozen=True)
class SideBySide:
    """The one "tile" of a section run side by side (nothing to choose within it)."""


def choose_sections(plan: Plan) -> None:
    """Run each section of module branches (:func:`tensorconv.engine.plan.sections`) side
    by side, or its steps in plan order on the plan's stream where the choice found that
    faster: two large launches at once may slow each other more than the fork saves.
    Then the whole plan, with the sections left side by side, against every step in
    order (:func:`_whole_plan_streams`).  Both are timed as the engine's graph runs
    (programmatic edges where it has them).  Untuned plans follow stored verdicts, else
    run side by side.  Runs last."""
    if not plan.concurrent:
        return
    had = False
    for section in [item for item in sections(plan.steps) if isinstance(item, list)]:
        steps = [s for path in section for s in path]
        if not any(s.kernels for s in steps):
            continue                  # CuPy calls alone: nothing of ours to key a verdict on
        had = True
        together = Step(lambda sec=section: plan.run_section(sec),
                        f"{len(section)} branches side by side",
                        tuple(k for s in steps for k in s.kernels))
        problem = " || ".join(" ; ".join(s.label for s in path) for path in section)
        choice = one_launch_or_parts(
            plan, "branches", sorted({k.file for k in together.kernels}), problem,
            tiles=lambda: [SideBySide()], launch=lambda _t, t=together: t,
            parts=lambda st=steps: st, decode=lambda _v: SideBySide(), default=SideBySide(),
            programmatic=plan.programmatic)
        if not choice.fused:
            for step in steps:
                step.branch = None
    if had and (plan.dry or any(isinstance(item, list) for item in sections(plan.steps))):
        _whole_plan_streams(plan)


def _whole_plan_streams(plan: Plan) -> None:
    """Keep the sections side by side only if the whole plan runs faster so than with
    every step in order on one stream.  Each section was timed alone, repeated; in the
    plan its fork waits for the launch before it and its join holds the launch after it,
    which a chain of launches on one stream overlaps instead (each starting as the one
    before drains), so sections that each won may still lose together.  The verdict is
    keyed by every step's label and the sections' shape."""
    order = list(plan.steps)
    shape = "\n".join(
        " || ".join(" ; ".join(s.label for s in path) for path in item)
        if isinstance(item, list) else item.label for item in sections(order))
    digest = hashlib.sha1(shape.encode()).hexdigest()[:16]
    kernels = tuple(k for s in order for k in s.kernels)
    problem = (f"{len(order)} steps, "
               f"{sum(isinstance(i, list) for i in sections(order))} sections, {digest}")
    choice = one_launch_or_parts(
        plan, "plan_streams", sorted({k.file for k in kernels}), problem,
        tiles=lambda: [SideBySide()],
        launch=lambda _t: Step(plan.run, "the plan, sections side by side", kernels),
        parts=lambda: [Step(lambda: [s.run() for s in order], "the plan in order", kernels)],
        decode=lambda _v: SideBySide(), default=SideBySide(), programmatic=plan.programmatic)
    if not choice.fused:
        for step in order:
            step.branch = None
