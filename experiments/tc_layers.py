"""Sun et al. Figs 2-3: the 33 distinct convolutions of ResNet-18 and SqueezeNet 1.0 at
224x224, batch 1, fp16 on the tensor cores: ours against cuDNN, NCHW and NHWC.

Ours: :func:`tensorconv.ops.tc_conv2d` (implicit-im2col GEMM on ``mma.sync`` or WMMA,
split-K in the launch) on the analytic rank's first tile, or with ``--tune`` the fastest of
the search (:mod:`tensorconv.tuning.tc_search`), in each layout.  cuDNN: PyTorch's
``conv2d`` in fp16 with ``cudnn.benchmark`` (NCHW, and ``channels_last`` for NHWC).  Both
are timed as CUDA-graph replays after their outputs are checked against the fp32 reference
on the same fp16 values (relative error <= 2e-3).  Reported per layer: times, our time over
cuDNN's, and over all layers the mean latency reduction, the best and the worst layer.
Paper (RTX 2070, NCHW, cuDNN 7): mean reduction 14 %, best 60 % (S20), worst -101 % (L2);
Jetson Xavier 49 %.

``--dtype bfloat16`` runs the same study in bf16 (ours and cuDNN's) and writes
``tc_layers_bf16.*``; the paper has no bf16 numbers.
"""

from __future__ import annotations

import numpy as np

from experiments._common import (
    geomean,
    grouped_bars,
    outputs,
    parser,
    preload,
    pyplot,
    save_figure,
)
from experiments._tc import LAYERS, cudnn_fp16, measure
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "tc_layers"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
PAPER = {"mean_reduction_pct": 14.0, "best_reduction_pct": 60.0, "worst_reduction_pct": -101.0}


def output_name(args) -> str:
    return NAME if args.dtype == "float16" else f"{NAME}_bf16"


def _args(argv):
    p = parser(NAME, __doc__)
    p.output_name = output_name
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    p.add_argument("--tune", action="store_true",
                   help="search each layer's schedule (tuning.tc_search) instead of the "
                        "analytic rank's first tile")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    preload("torch")
    torch = cudnn_fp16(NAME)
    env = bench.environment(with_torch=True)
    rs = ResultSet(output_name(args), env)
    layers = LAYERS[::8] if args.quick else LAYERS
    reps = dict(repeat=20 if args.quick else 100)
    rng = np.random.default_rng(0)
    from tqdm import tqdm

    ratios = {"nchw": [], "nhwc": []}
    for layer in tqdm(layers, desc="timing layers", unit="layer"):
        case = f"{layer.model}:{layer.name}"
        for layout, m in measure(cp, torch, layer, args.batch, rng, tune=args.tune,
                                 reps=reps, dtype=args.dtype).items():
            rs.add(case, f"ours-{layout}", "rel_err", m["ours_err"], "1")
            rs.add(case, f"cudnn-{layout}", "rel_err", m["cudnn_err"], "1")
            rs.add(case, f"ours-{layout}", "latency_us", m["ours_us"], "us", note=f"{m['tile']}")
            rs.add(case, f"cudnn-{layout}", "latency_us", m["cudnn_us"], "us")
            rs.add(case, f"ours/cudnn-{layout}", "ratio", m["ours_us"] / m["cudnn_us"], "x")
            ratios[layout].append(m["ours_us"] / m["cudnn_us"])
            if args.tune:
                rs.add(case, f"ours-{layout}", "tune_s", m["tune_s"], "s",
                       note="target <= 120 s per layer (compiles included)")
    for layout, rr in ratios.items():
        red = [100 * (1 - r) for r in rr]
        paper = layout == "nchw" and args.dtype == "float16"     # the paper ran fp16 NCHW
        rs.add("all layers", layout, "mean_reduction_pct", float(np.mean(red)), "%",
               paper_value=PAPER["mean_reduction_pct"] if paper else None,
               note="target >= 40 (NCHW)" if layout == "nchw" else "")
        rs.add("all layers", layout, "best_reduction_pct", max(red), "%",
               paper_value=PAPER["best_reduction_pct"] if paper else None)
        rs.add("all layers", layout, "worst_reduction_pct", min(red), "%",
               paper_value=PAPER["worst_reduction_pct"] if paper else None,
               note="target: no layer slower than 1.2x (NCHW), 1.3x (NHWC)")
        rs.add("all layers", layout, "geomean_ratio", geomean(rr), "x",
               note="target <= 0.9 (NHWC)" if layout == "nhwc" else "")
    paths = outputs(output_name(args), args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("latency_us", "ratio", "mean_reduction_pct",
                                      "best_reduction_pct", "worst_reduction_pct",
                                      "geomean_ratio", "tune_s", "rel_err"))
    kind = {"float16": "fp16", "bfloat16": "bf16"}[args.dtype]
    sections.append(("Notes", f"Batch {args.batch}, {kind} in and out, fp32 accumulation, "
                              f"224x224 inputs; CUDA-graph medians. Reduction = 1 - ours/cuDNN. "
                              f"Paper (RTX 2070, NCHW): mean 14 %, best 60 %, worst -101 %."))
    write_markdown(paths["md"], "Tensor-core convolution at batch 1: the 33 layers", env,
                   sections)
    lat = rs.values("latency_us")
    cases = [f"{layer.model}:{layer.name}" for layer in layers]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 4))
    grouped_bars(ax, cases, {v: [lat.get((c, v), np.nan) for c in cases]
                             for v in ("ours-nchw", "cudnn-nchw", "ours-nhwc", "cudnn-nhwc")})
    ax.set_yscale("log")
    ax.set_ylabel("latency (µs, log)")
    ax.tick_params(axis="x", labelrotation=90, labelsize=6)
    ax.legend()
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
