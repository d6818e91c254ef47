"""Table T of TDC's Algorithm 1, measured on this GPU: the latency of every layer of a model,
dense and in Tucker format over a grid of ranks, as the tuned inference engine runs it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tensorconv import backend, graph, timing, tunecache
from tensorconv.compress.ranks import LayerSpec, candidate_ranks
from tensorconv.engine import InferenceEngine
from tensorconv.files import atomic_write
from tensorconv.nn.layers import Conv2d, Sequential
from tensorconv.nn.tucker import TuckerConv2d

log = logging.getLogger(__name__)


def layer_latency(spec: LayerSpec, ranks=None, *, repeat: int = 20, chained: bool = False) -> float:
    """GPU latency (µs, CUDA-graph replay median) of one layer as the tuned inference
    engine runs it: the dense layer when ``ranks`` is None, else its Tucker form with
    ranks (D1, D2).

    The layer alone (random weights, batch 1, no BN or ReLU) is planned with
    ``tune=True``, so each of its convolutions runs on the path the engine times
    fastest (batch-1 1x1 kernel or implicit GEMM; tuned core kernels; the core
    with its last 1x1 in one launch; the one-launch Tucker layer), the verdicts
    kept in the tune cache.  Fusions across layers (a last 1x1 chained with the
    next layer's first) are left out: an entry of T is one layer's cost.

    With ``chained`` a Tucker form is timed as a run of Tucker layers pays for it:
    in a network the engine chains a layer's first 1x1 into the launch before (the
    previous layer's last 1x1, ``ops.pointwise_pair``, or its core and last 1x1,
    ``ops.tucker_tail``).  So the layer is followed by the next layer's first 1x1
    (taken of rank D1, N -> D1) and timed without its own first 1x1 where that is a
    launch of its own: its core, its last 1x1 and the chained 1x1 after them.

    The launches are replayed with programmatic edges where the device has them, as
    the engine's graph runs them (:mod:`tensorconv.graph`), at the current
    :mod:`tensorconv.precision` (a table's checkpoint says which).
    """
    backend.require_cuda("layer_latency")
    rng = np.random.default_rng(0)
    conv = (spec.c, spec.n, (spec.r, spec.s))
    layer = (Conv2d(*conv, spec.stride, spec.padding, bias=False, rng=rng) if ranks is None
             else TuckerConv2d(*conv, ranks, spec.stride, spec.padding, rng=rng))
    chain = chained and ranks is not None
    if chain:
        layer = Sequential(layer, Conv2d(spec.n, ranks[0], 1, bias=False, rng=rng))
    engine = InferenceEngine(layer.to("gpu").eval(), (1, spec.c, spec.h, spec.w), tune=True,
                             graph=False)
    steps = engine.plan.steps
    first = getattr(steps[0], "pointwise", None)
    if chain and len(steps) > 1 and first is not None and first.x is engine.input:
        steps = steps[1:]
    return timing.time_graph(lambda: [step() for step in steps], repeat=repeat,
                             programmatic=graph.supported()).median_us


def measure_table(spec: LayerSpec, ranks, *, repeat: int = 20,
                  chained: bool = False) -> tuple[float, dict]:
    """Latency (µs) of the dense layer and ``{(D1, D2): µs}`` of its Tucker forms
    (:func:`layer_latency`)."""
    return (layer_latency(spec, repeat=repeat),
            {tuple(r): layer_latency(spec, r, repeat=repeat, chained=chained) for r in ranks})


def _shape_key(spec: LayerSpec) -> str:
    return (f"{spec.c}->{spec.n} {spec.r}x{spec.s} on {spec.h}x{spec.w} "
            f"stride {spec.stride} pad {spec.padding}")


def performance_tables(specs, step: int = 32, *, thin: int = 1, repeat: int = 20,
                       checkpoint=None, chained: bool = False,
                       other_kernels: bool = False) -> tuple[dict, dict]:
    """Algorithm 1's input for a model: every layer's table T and dense latency.

    Parameters
    ----------
    specs : list of LayerSpec
    step : int
        Rank grid (:func:`candidate_ranks`).
    thin : int
        Keep every ``thin``-th rank pair only (quick runs).
    repeat : int
        Graph replays per timing.
    checkpoint : path, optional
        JSON file keeping every measurement as it is taken (written atomically); a
        later call continues from it and measures nothing already there, unless it was
        taken on another device, with other kernel sources or the other ``chained``
        (then it starts over).
    chained : bool
        Tucker entries without a first 1x1 the engine chains into the launch before
        (:func:`layer_latency`).
    other_kernels : bool
        Use a checkpoint measured on this device with other kernel sources as it is,
        for runs that re-time a model whose ranks an earlier table chose (its
        ``taken_with`` names those kernels).  It must hold every entry asked for:
        entries of two kernel versions are never mixed in one table.

    Returns
    -------
    (table, dense) : ``{name: {(D1, D2): µs}}`` and ``{name: µs}`` (:func:`layer_latency`).
    Layers of the same sizes are measured once and share their entries.
    """
    path = None if checkpoint is None else Path(checkpoint)
    taken_with = {"device": tunecache.device_name(), "kernels": tunecache.kernels_version()}
    if chained:
        taken_with["chained"] = "core, last 1x1, next first 1x1"
    saved = json.loads(path.read_text()) if path is not None and path.exists() else None
    if other_kernels:
        if saved is None:
            raise ValueError(f"other_kernels needs a checkpoint to reuse; {path} has none")
        taken_with["kernels"] = saved.get("taken_with", {}).get("kernels")
    if saved is not None and saved.get("taken_with") != taken_with:
        if other_kernels:
            raise ValueError(f"{path} was measured with {saved.get('taken_with')}, not "
                             f"{taken_with}: other_kernels reuses only another kernel version")
        log.warning("%s was measured with %s, not %s: measuring the table again", path,
                    saved.get("taken_with"), taken_with)
        saved = None
    if saved is None:
        saved = {"taken_with": taken_with, "dense": {}, "table": {}}
    shapes = {}
    for s in specs:
        shapes.setdefault(_shape_key(s), s)
    wanted = {k: [f"{a}x{b}" for a, b in candidate_ranks(s, step)[::thin]]
              for k, s in shapes.items()}
    todo = [(k, r) for k, rs in wanted.items()
            for r in ([None] if k not in saved["dense"] else []) + rs
            if r is None or r not in saved["table"].get(k, {})]
    if other_kernels and todo:
        raise ValueError(f"{path} lacks {len(todo)} of the entries asked for; with other_kernels "
                         f"it must hold them all (measured with kernels {taken_with['kernels']})")
    for key, r in tqdm(todo, desc="performance table", disable=not todo):
        spec = shapes[key]
        if r is None:
            saved["dense"][key] = layer_latency(spec, repeat=repeat)
        else:
            saved["table"].setdefault(key, {})[r] = layer_latency(
                spec, tuple(map(int, r.split("x"))), repeat=repeat, chained=chained)
        if path is not None:
            atomic_write(path, json.dumps(saved, indent=1))
    table = {s.name: {tuple(map(int, r.split("x"))): saved["table"][_shape_key(s)][r]
                      for r in wanted[_shape_key(s)]} for s in specs}
    dense = {s.name: saved["dense"][_shape_key(s)] for s in specs}
    return table, dense
