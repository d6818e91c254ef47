"""The one place a plan decides between one launch and the launches it would replace.

Every such choice of the engine goes through :func:`one_launch_or_parts`: a stride-1 1x1
convolution on the batch-1 kernel or the implicit GEMM (:mod:`~tensorconv.engine.dense`),
a dense convolution on a core kernel or the implicit GEMM, the classifier head and the
ImageNet stem as one launch or two (:mod:`~tensorconv.engine.layers`), a Tucker layer as
one launch or three and a Tucker core with the 1x1s after it
(:mod:`~tensorconv.engine.tucker`), two chained 1x1s and a projection shortcut folded
into them, a section of module branches side by side or on one stream, and the whole
plan with its sections or all in order (:mod:`~tensorconv.engine.passes`).

A verdict is keyed (:func:`tensorconv.tunecache.make_key`) by the kind of choice, the
problem and the sources of every kernel either side runs, and stored in one schema:
``{"fused": bool, "tile": the one launch's tile, "fused_us": µs, "parts_us": µs}``.
A tuned plan times both sides (CUDA-graph replay medians, the one launch on every
candidate tile, their kernels compiled first in parallel) and stores the verdict; an
untuned plan follows a stored verdict, else the choice's default.  A dry plan (the
ahead-of-time build) records every candidate's kernels and takes the parts.
:func:`plan_one_launch_or_parts` wraps the choice for a planner whose parts are modules
still to plan: it plans them on a side plan only when the choice times them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tqdm import tqdm

from tensorconv import cuda, timing, tunecache


@dataclass(frozen=True)
class Choice:
    """The outcome: ``fused`` (run the one launch on ``tile``) or the parts."""

    fused: bool
    tile: object = None


def encode_tile(tile) -> list:
    """A flat tile dataclass as stored: its fields' values, in order."""
    return list(dataclasses.astuple(tile))


def tick(plan, what: str) -> None:
    """Count one timed choice on the plan's progress bar (shown once tuning passes two
    seconds, with the number of choices the dry run expected)."""
    root = plan.root
    root.decisions += 1
    if plan.dry:
        return
    if root.progress is None:
        root.progress = tqdm(total=root.expected or None, desc="tuning the plan",
                             unit="choice", delay=2, leave=False)
    root.progress.set_postfix_str(what, refresh=False)
    root.progress.update()


def _verdict(stored, decode, allowed) -> Choice:
    """A stored verdict as a :class:`Choice`; raises on one this version cannot use (the
    tune cache then treats it as a miss)."""
    if not isinstance(stored["fused"], bool):
        raise TypeError(f"'fused' must be true or false, got {stored['fused']!r}")
    if not stored["fused"]:
        return Choice(False)
    tile = decode(stored["tile"])
    if allowed is not None and tile not in allowed:
        raise ValueError(f"{tile} is not a candidate here")
    return Choice(True, tile)


def one_launch_or_parts(plan, kind: str, files, problem, *, tiles, launch, parts,
                        decode, encode=encode_tile, default=None, allowed=None,
                        candidate_kernels=None, programmatic: bool = False) -> Choice:
    """Whether one launch replaces the steps it covers, and on which tile.

    Parameters
    ----------
    plan : Plan
    kind : str
        The kind of choice (part of the key, e.g. ``"pointwise_pair"``).
    files : iterable of str
        Every ``.cu`` either side may run: an edit to any re-times the choice.
    problem : object
        What the choice is about (its ``str`` goes into the key).
    tiles : callable () -> list
        Candidate tiles of the one launch (called only when timing: may tune).
    launch : callable (tile) -> Step
        The one launch on ``tile`` (not added to the plan).
    parts : callable () -> list of Step
        The steps it would replace (called only when timing: may plan them on a side plan).
    decode, encode : callables
        A tile from / to its stored form.
    default : tile, optional
        Fuse on it when nothing is stored and the plan is not tuned (None: the parts).
    allowed : collection of tiles, optional
        The tiles a stored verdict may name (others are a miss, re-timed when tuning).
    candidate_kernels : callable () -> iterable of KernelRef, optional
        For a dry plan: every kernel the candidates may compile (default: those of
        ``launch(t)`` for every ``t`` of ``tiles()``).
    programmatic : bool
        Time both sides in graphs with programmatic edges (:mod:`tensorconv.graph`), as
        the engine's graph has them: for choices about how launches follow each other.

    Returns
    -------
    Choice
    """
    key = tunecache.make_key(kind, files, problem)
    stored = tunecache.known(key, lambda v: _verdict(v, decode, allowed))
    if stored is not None:
        return stored
    if not plan.tune:
        return Choice(default is not None, default)
    tick(plan, kind)
    if plan.dry:
        plan.kernels.update(candidate_kernels() if candidate_kernels is not None else
                            (k for t in tiles() for k in launch(t).kernels))
        return Choice(False)
    candidates = {t: launch(t) for t in tiles()}
    replaced = parts()
    cuda.compile_all([k for s in (*candidates.values(), *replaced) for k in s.kernels],
                     desc=f"compiling kernels for a {kind} choice")
    times = {t: timing.time_graph(step.run, repeat=10, programmatic=programmatic).median_us
             for t, step in candidates.items()}
    best = min(times, key=times.get)
    parts_us = timing.time_graph(lambda: [s.run() for s in replaced], repeat=10,
                                 programmatic=programmatic).median_us
    verdict = {"fused": times[best] < parts_us, "tile": encode(best), "fused_us": times[best],
               "parts_us": parts_us}
    tunecache.store(key, verdict)
    return Choice(True, best) if verdict["fused"] else Choice(False)


def plan_one_launch_or_parts(plan, kind: str, files, problem, *, launch, out, plan_parts,
                             **choice):
    """Plan a module (or run of modules) as one launch or as its parts, by
    :func:`one_launch_or_parts`; returns the planned output.

    Parameters
    ----------
    plan : Plan
    kind, files, problem :
        As :func:`one_launch_or_parts`.
    launch : callable (tile) -> Step
        The one launch on ``tile``, writing ``out``.
    out : array
        The one launch's output buffer.
    plan_parts : callable (Plan) -> array
        Plans the parts on the given plan and returns their output.  When the choice times
        them they are planned once on a side plan, which the plan then takes over.
    **choice :
        ``tiles``, ``decode`` and the optional arguments of :func:`one_launch_or_parts`.
    """
    side, planned = plan.side(), []

    def parts():
        planned.append(plan_parts(side))
        return side.steps

    verdict = one_launch_or_parts(plan, kind, files, problem, launch=launch, parts=parts,
                                  **choice)
    if verdict.fused:
        plan.append(launch(verdict.tile))
        return out
    if planned:  # already planned (and timed) on the side: take it over
        plan.adopt(side)
        return planned[0]
    return plan_parts(plan)
