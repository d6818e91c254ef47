"""Ablation of the tensor-core schedule search (issue 24): what each knob beyond the paper's
is worth on the 33 batch-1 layers of ResNet-18 and SqueezeNet 1.0, in both layouts.

Each layer is tuned (:func:`tensorconv.tuning.tc_search.tune_tc_tile`, nothing stored) in
three spaces, and the best time of each kept:

- ``paper``: the paper's knobs only: WMMA with its three fragment shapes (16x16x16,
  32x8x16, 8x32x16), block and warp tiles, vector width, two-stage buffering, no split-K;
- ``mma``: the same on ``mma.sync`` m16n8k16 with ``ldmatrix`` (2-8 stages), no split-K;
- ``full``: every knob: both instruction paths, pipeline depth, split-K through a global
  workspace or a thread-block cluster.

Reported per layer: the three times; over the layers, the geometric mean of paper/full and
mma/full.  Times are CUDA-graph medians of the search (the best of its candidates).
"""

from __future__ import annotations

import numpy as np

from experiments._common import geomean, grouped_bars, outputs, parser, pyplot, save_figure
from experiments._tc import LAYERS
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "tc_ablation"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
SPACES = {"paper": {"paths": (1, 2, 3), "max_splits": 1},
          "mma": {"paths": (0,), "max_splits": 1},
          "full": {}}


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--budget", type=int, default=32, help="candidates timed per space")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    from tensorconv.tuning.tc_search import tune_tc_tile

    env = bench.environment()
    rs = ResultSet(NAME, env)
    layers = LAYERS[::8] if args.quick else LAYERS
    rng = np.random.default_rng(0)
    from tqdm import tqdm

    best = {}
    for layer in tqdm(layers, desc="tuning layers in three spaces", unit="layer"):
        x = rng.standard_normal((1, layer.c, layer.h, layer.h)).astype(np.float16)
        w = (rng.standard_normal((layer.k, layer.c, layer.r, layer.r)) / 30).astype(np.float16)
        case = f"{layer.model}:{layer.name}"
        for layout in tcc.LAYOUTS:
            xl = x if layout == "nchw" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
            xd, wd = cp.asarray(xl), cp.asarray(w)
            for space, knobs in SPACES.items():
                tile, times = tune_tc_tile(xd, wd, layer.stride, layer.padding, layout=layout,
                                           budget=args.budget, store=False, use_cache=False,
                                           **knobs)
                best[case, layout, space] = times[tile]
                rs.add(case, f"{space}-{layout}", "latency_us", times[tile], "us",
                       note=str(tile))
    cases = [f"{layer.model}:{layer.name}" for layer in layers]
    for layout in tcc.LAYOUTS:
        for space in ("paper", "mma"):
            ratio = geomean([best[c, layout, space] / best[c, layout, "full"] for c in cases])
            rs.add("all layers", f"{space}/full-{layout}", "geomean_ratio", ratio, "x",
                   note="> 1: the full space is faster")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    sections = metric_sections(read_csv(paths["csv"]), ("latency_us", "geomean_ratio"))
    sections.append(("Notes", "Batch 1, fp16, 224x224 inputs; each time is the best of a "
                              f"search of {args.budget} candidates in its space (CUDA-graph "
                              "medians). paper: WMMA with the paper's fragment shapes, no "
                              "split-K; mma: mma.sync + ldmatrix, deeper pipelines, no "
                              "split-K; full: everything, split-K in a workspace or a "
                              "cluster."))
    write_markdown(paths["md"], "Tensor-core schedule search: ablation", env, sections)
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    for ax, layout in zip(axes, tcc.LAYOUTS):
        grouped_bars(ax, cases, {s: [best[c, layout, s] for c in cases] for s in SPACES})
        ax.set_yscale("log")
        ax.set_ylabel(f"{layout} latency (µs, log)")
        ax.legend()
    axes[-1].tick_params(axis="x", labelrotation=90, labelsize=6)
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
