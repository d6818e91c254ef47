"""Which kernels a sliding-channel layer runs, measured on this device: the FMA kernels of
:mod:`~tensorconv.ops.scc_conv`, the tensor-core ones of :mod:`~tensorconv.ops.scc_tc` or
their walking ones (:mod:`~tensorconv.ops.scc_tc_walk`, where they apply) for each of its
three GEMMs, and the one-pass backward, the two gradients apart or both in one walk.

:func:`tune` times every side every way (CUDA-graph replay medians, random data of the
layer's shape) and stores one verdict a side in the tune cache
(:func:`tensorconv.ops.scc_tc.decision_key`), which the ops' ``path="auto"`` then
follows; an untuned layer runs the FMA kernels.  Nothing else writes these verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, timing, tunecache
from tensorconv.checks import check_int
from tensorconv.ops import scc_conv, scc_fused, scc_tc, scc_tc_walk
from tensorconv.reference.scc import SCCGeometry

__all__ = ["BOTH_MARGIN", "PathTimes", "tune"]

BOTH_MARGIN = 0.05
"""How much faster (a fraction) both gradients in one walk must time than the other
backward paths to be chosen."""


@dataclass(frozen=True)
class PathTimes:
    """One layer's measured times (µs, graph replays): each GEMM on the FMA kernels and on
    the tensor cores, and the one-pass backward (None where it cannot take the layer)."""

    forward_fma: float
    forward_tc: float
    data_fma: float
    data_tc: float
    weight_fma: float
    weight_tc: float
    onepass: float | None
    forward_walk: float | None = None   # the walking tensor-core kernels, where they apply
    data_walk: float | None = None
    weight_walk: float | None = None
    carried: float | None = None        # both walking gradients, the shares carried
    both: float | None = None           # both gradients in one walk (scc_tc.run_both)
    carried_layer: float | None = None  # those two after the fastest forward, in one graph
    both_layer: float | None = None
    data_rows: int | None = None        # the input gradient's walk: its fastest block rows

    def best(self, side: str) -> tuple[str, float]:
        """``side``'s fastest kernels ("fma", "tc" or "walk") and their time."""
        times = {k: getattr(self, f"{side}_{k}") for k in ("fma", "tc", "walk")}
        return min(((k, v) for k, v in times.items() if v is not None), key=lambda kv: kv[1])

    def verdicts(self) -> dict:
        """``{side: stored value}``: each GEMM on its fastest kernels (``tc``: the tensor
        cores, ``walk``: their walking kernels); the backward (``path``) by the fastest
        of the one-pass kernel, the two gradients apart (the fastest input gradient plus
        the fastest weight gradient, or, where both of those walk, their carried pair's
        time if it was less) and both in one walk."""
        out = {}
        for side in ("forward", "data", "weight"):
            best = self.best(side)[0]
            out[side] = {"tc": best != "fma", "walk": best == "walk",
                         **{f"{k}_us": getattr(self, f"{side}_{k}") for k in ("fma", "tc", "walk")}}
        if self.data_rows is not None:
            out["data"]["rows"] = self.data_rows
        parts = self.best("data")[1] + self.best("weight")[1]
        if self.carried is not None and self.best("data")[0] == self.best("weight")[0] == "walk":
            parts = min(parts, self.carried)
        ways = {"parts": parts, "onepass": self.onepass}
        path = min((k for k, v in ways.items() if v is not None), key=lambda k: ways[k])
        # Both gradients in one walk against the carried pair: as they run, after the
        # forward (alone one can win by 5 % and lose the layer by 8 %: docs/notes/
        # scc_conv.md); against anything else, only where it wins clearly alone.
        if self.both is not None:
            if (path == "parts" and parts == self.carried
                    and None not in (self.both_layer, self.carried_layer)):
                wins = self.both_layer < self.carried_layer
            else:
                wins = self.both * (1 + BOTH_MARGIN) < ways[path]
            if wins:
                path = "walk"
        ways["walk"] = self.both
        out["backward"] = {"path": path, **{f"{k}_us": v for k, v in ways.items()},
                           "carried_layer_us": self.carried_layer,
                           "both_layer_us": self.both_layer}
        return out


def _forward(times: dict, x, w, geom: SCCGeometry, y):
    """The forward on the kernels ``times`` found fastest, as a callable."""
    kind = min((k for k in ("fma", "tc", "walk") if times.get(f"forward_{k}") is not None),
               key=lambda k: times[f"forward_{k}"])
    if kind == "fma":
        return lambda: scc_conv.scc_conv2d(x, w, geom, path="fma", out=y)
    return lambda: scc_tc.run_forward(x, w, geom, None, False, y, walk=kind == "walk")


def tune(geom: SCCGeometry, shape, *, repeat: int = 20, seed: int = 0) -> PathTimes:
    """Time ``geom``'s forward pass and gradients on both kernel families over inputs of
    ``shape`` = (N, Cin, H, W), store the verdicts (:meth:`PathTimes.verdicts`) and
    return the times.  Needs a GPU with the tensor cores' ``mma.sync``
    (:func:`tensorconv.ops.scc_tc.check_runs_here`)."""
    if not isinstance(geom, SCCGeometry):
        raise TypeError(f"geom must be an SCCGeometry, got {type(geom).__name__}")
    shape = tuple(shape)
    if len(shape) != 4 or shape[1] != geom.cin:
        raise ValueError(f"shape must be (N, {geom.cin}, H, W), got {shape}")
    for i, name in enumerate(("N", "Cin", "H", "W")):
        check_int(shape[i], f"shape {name}", minimum=1)
    check_int(repeat, "repeat", minimum=1)
    cp = backend.require_cuda("tuning the SCC kernels' paths")
    scc_tc.check_runs_here()
    n, _, h, wd = shape
    rng = np.random.default_rng(seed)
    x = cp.asarray(rng.standard_normal(shape, dtype=np.float32))
    gy = cp.asarray(rng.standard_normal((n, geom.cout, h, wd), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((geom.cout, geom.u), dtype=np.float32))
    y, gx, gw = cp.empty_like(gy), cp.empty_like(x), cp.empty_like(w)

    def t(fn) -> float:
        return timing.time_graph(fn, repeat=repeat, calls_per_graph=5).median_us

    times = {"forward_fma": t(lambda: scc_conv.scc_conv2d(x, w, geom, path="fma", out=y)),
             "data_fma": t(lambda: scc_conv.scc_conv2d_backward_data(gy, w, geom, path="fma",
                                                                     out=gx)),
             "weight_fma": t(lambda: scc_conv.scc_conv2d_backward_weight(x, gy, geom,
                                                                         path="fma", out=gw))}
    q = n * h * wd
    walks = {"forward": scc_tc.walk_plan(geom, q, 0), "data": scc_tc.walk_plan(geom, q, 1),
             "weight": scc_tc_walk.wgrad_plan(geom, q, backend.device_facts().sm_count)}
    for walk, fam in ((False, "tc"), (True, "walk")):
        if fam == "tc" or walks["forward"] is not None:
            times[f"forward_{fam}"] = t(lambda: scc_tc.run_forward(x, w, geom, None, False, y,
                                                                   walk=walk))
        if fam == "tc":
            times["data_tc"] = t(lambda: scc_tc.run_backward_data(gy, w, geom, None, gx,
                                                                  walk=False))
        elif walks["data"] is not None:   # each block-row choice that has a plan
            rows = {r: t(lambda r=r: scc_tc.run_backward_data(gy, w, geom, None, gx,
                                                              walk=True, rows=r))
                    for r in scc_tc_walk.WALK_SHAPES
                    if scc_tc.walk_plan(geom, q, 1, force=True, rows=r) is not None}
            times["data_rows"] = min(rows, key=rows.get)
            times["data_walk"] = rows[times["data_rows"]]
        if fam == "tc" or walks["weight"] is not None:
            times[f"weight_{fam}"] = t(lambda: scc_tc.run_backward_weight(x, gy, geom, None,
                                                                          gw, walk=walk))
    onepass = None
    if scc_fused.onepass_plan(geom, n * h * wd) is not None:
        onepass = t(lambda: scc_fused.scc_conv2d_backward(x, gy, w, geom, path="onepass",
                                                          out_x=gx, out_w=gw))
    rows = times.get("data_rows")   # the rows just timed fastest, not yet stored
    carried = lambda: scc_tc.run_backward(x, gy, w, geom, gx, gw, rows=rows)  # noqa: E731
    both = lambda: scc_tc.run_both(x, gy, w, geom, gx, gw)                    # noqa: E731
    if carried():                   # where the pair carries
        times["carried"] = t(carried)
    if scc_tc.both_plan(geom, q) is not None:
        times["both"] = t(both)
    if "carried" in times and "both" in times:
        forward = _forward(times, x, w, geom, y)
        times["carried_layer"] = t(lambda: (forward(), carried()))
        times["both_layer"] = t(lambda: (forward(), both()))
    result = PathTimes(onepass=onepass, **times)
    for side, value in result.verdicts().items():
        tunecache.store(scc_tc.decision_key(geom, n * h * wd, h * wd, side), value)
    scc_tc.forget_verdicts()
    return result
