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
"""

from __future__ import annotations

import numpy as np

from experiments._common import outputs, parser, preload, pyplot, save_figure
from experiments._tc import Layer, measure
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
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    preload("torch")
    if not bench.torch_cudnn_available():
        raise SystemExit(f"{NAME} compares against cuDNN: install PyTorch (pip install -e "
                         f"'.[baselines]')")
    import torch

    torch.backends.cudnn.benchmark = True
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    batches = args.batches[:2] if args.quick else args.batches
    reps = {"repeat": 20 if args.quick else 100}
    rng = np.random.default_rng(0)
    from tqdm import tqdm

    ratio = {}
    for layer in LAYERS:
        for batch in tqdm(batches, desc=f"timing {layer.name}", unit="batch"):
            for layout, m in measure(cp, torch, layer, batch, rng, tune=args.tune,
                                     reps=reps).items():
                case = f"{layer.name} b{batch}"
                rs.add(case, f"ours-{layout}", "latency_us", m["ours_us"], "us",
                       note=f"{m['tile']}")
                rs.add(case, f"cudnn-{layout}", "latency_us", m["cudnn_us"], "us")
                rs.add(case, f"ours-{layout}", "rel_err", m["ours_err"], "1")
                ratio[(layer.name, layout, batch)] = m["ours_us"] / m["cudnn_us"]
                rs.add(case, f"ours/cudnn-{layout}", "ratio", ratio[(layer.name, layout, batch)],
                       "x")
    for layer in LAYERS:
        for layout in ("nchw", "nhwc"):
            over = [b for b in batches if ratio[(layer.name, layout, b)] > 1.0]
            rs.add(layer.name, layout, "crossover_batch", over[0] if over else np.nan, "images",
                   paper_value=PAPER_CROSSOVER.get(layer.name) if layout == "nchw" else None,
                   note="first batch where cuDNN is faster (NaN: none measured)")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("latency_us", "ratio", "crossover_batch", "rel_err"))
    sections.append(("Notes", "fp16 in and out, fp32 accumulation, CUDA-graph medians; "
                              "the paper's cuDNN was version 7 on a Jetson Xavier / RTX 2070."))
    write_markdown(paths["md"], "Tensor-core convolution against cuDNN by batch size", env,
                   sections)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(LAYERS), figsize=(10, 3.5))
    for ax, layer in zip(axes, LAYERS):
        for layout in ("nchw", "nhwc"):
            ax.plot(batches, [ratio[(layer.name, layout, b)] for b in batches], marker="o",
                    label=layout)
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(layer.name, fontsize=9)
        ax.set_xlabel("batch")
        ax.set_ylabel("ours / cuDNN")
        ax.legend()
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
