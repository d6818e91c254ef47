"""Sun et al. Figs 4-5: where cuDNN overtakes the batch-1 tensor-core kernel as the batch
grows, on two ResNet-18 layers: the 1x1 stride-2 downsample (64 -> 128 channels, 56x56 in;
the paper's L5) and the 3x3 layer with 512 channels on a 7x7 plane (its L10).

For each batch of ``--batches`` (1 to 64) and each layout: ours
(:func:`tensorconv.ops.tc_conv2d`, the analytic rank's tile or with ``--tune`` the search's)
against cuDNN (PyTorch fp16, ``cudnn.benchmark``; ``channels_last`` for NHWC), CUDA-graph
medians after both outputs are checked against the fp32 reference on the same fp16 values.
Reported: times, ours/cuDNN, and per layer and layout the first batch where cuDNN is
faster.  Paper (Jetson Xavier, NCHW): cuDNN overtakes at batch 4 on L10; on L5 (RTX 2070)
ours stays ahead at small batches.

With ``--tune`` a large batch's search takes up to half a minute a layout.  Every case
measured is written at once to ``tc_batch.partial.csv``; ``--time-budget`` stops between
cases once that many seconds have passed, and a later call with ``--merge`` (the earlier
CSVs) keeps their cases and measures the rest, one table in the end.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from experiments._common import outputs, parser, partial_csv, preload, pyplot, save_figure
from experiments._tc import Layer, cudnn_fp16, measure
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "tc_batch"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
LAYERS = (Layer("resnet18", "L5 layer2.0.downsample", 64, 128, 1, 2, 0, 56),
          Layer("resnet18", "L10 layer4.conv", 512, 512, 3, 1, 1, 7))
PAPER_CROSSOVER = {"L10 layer4.conv": 4}     # Jetson Xavier, Fig. 5


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--tune", action="store_true", help="search each case's schedule")
    p.add_argument("--time-budget", type=float, default=None,
                   help="stop between cases after this many seconds (then --merge)")
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help="earlier calls' CSVs: their cases are kept, not measured again")
    return p.parse_args(argv)


def _case(layer: Layer, batch: int) -> str:
    return f"{layer.name} b{batch}"


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    preload("torch")
    torch = cudnn_fp16(NAME)
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    batches = args.batches[:2] if args.quick else args.batches
    reps = {"repeat": 20 if args.quick else 100}
    rng = np.random.default_rng(0)
    from tqdm import tqdm

    merged = [r for path in args.merge for r in read_csv(path) if r["metric"] != "crossover_batch"]
    rs.extend(merged)
    done = {r["case"] for r in merged if r["metric"] == "ratio"}
    jobs = [(layer, b) for layer in LAYERS for b in batches if _case(layer, b) not in done]
    partial = partial_csv(NAME, args.out)
    start, timed = time.perf_counter(), 0
    for layer, batch in tqdm(jobs, desc="timing cases", unit="case"):
        if timed and args.time_budget is not None and \
                time.perf_counter() - start > args.time_budget:
            break
        case = _case(layer, batch)
        for layout, m in measure(cp, torch, layer, batch, rng, tune=args.tune,
                                 reps=reps).items():
            rs.add(case, f"ours-{layout}", "latency_us", m["ours_us"], "us",
                   note=f"{m['tile']}")
            rs.add(case, f"cudnn-{layout}", "latency_us", m["cudnn_us"], "us")
            rs.add(case, f"ours-{layout}", "rel_err", m["ours_err"], "1")
            rs.add(case, f"ours/cudnn-{layout}", "ratio", m["ours_us"] / m["cudnn_us"], "x")
        rs.write_csv(partial)        # a call cut short keeps its cases (--merge it)
        timed += 1
    left = len(jobs) - timed
    ratios = rs.values("ratio")
    ratio = {(layer.name, layout, b): ratios[(_case(layer, b), f"ours/cudnn-{layout}")]
             for layer in LAYERS for b in batches for layout in ("nchw", "nhwc")
             if (_case(layer, b), f"ours/cudnn-{layout}") in ratios}
    for layer in LAYERS:
        for layout in ("nchw", "nhwc"):
            over = [b for b in batches if ratio.get((layer.name, layout, b), 0.0) > 1.0]
            rs.add(layer.name, layout, "crossover_batch", over[0] if over else np.nan, "images",
                   paper_value=PAPER_CROSSOVER.get(layer.name) if layout == "nchw" else None,
                   note="first batch where cuDNN is faster (NaN: none measured)")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    partial.unlink(missing_ok=True)
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("latency_us", "ratio", "crossover_batch", "rel_err"))
    note = f"Partial: {left} cases not measured yet (run again with --merge). " if left else ""
    sections.append(("Notes", note + "fp16 in and out, fp32 accumulation, CUDA-graph medians; "
                              "the paper's cuDNN was version 7 on a Jetson Xavier / RTX 2070."))
    write_markdown(paths["md"], "Tensor-core convolution against cuDNN by batch size", env,
                   sections)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(LAYERS), figsize=(10, 3.5))
    for ax, layer in zip(axes, LAYERS):
        ax.set_title(layer.name, fontsize=9)
        if not any(k[0] == layer.name for k in ratio):     # a partial run: none measured
            ax.set_axis_off()
            continue
        for layout in ("nchw", "nhwc"):
            have = [b for b in batches if (layer.name, layout, b) in ratio]
            ax.plot(have, [ratio[(layer.name, layout, b)] for b in have], marker="o",
                    label=layout)
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("ours / cuDNN")
        ax.legend()
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
