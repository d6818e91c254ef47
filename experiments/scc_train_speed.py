"""DSXplore Figs 7-8: the training step of DW + SCC networks, by SCC implementation.

For each network of ``--models`` made DW + SCC (:func:`tensorconv.compress.separable`), at
each setting — cg in {2, 4, 8} at co 50 % and co in {25, 50, 75} % at cg 2 (the paper's) —
one training step (forward, softmax cross-entropy, backward, SGD with Nesterov momentum)
at ``--batch`` 128 on random 1x32x32 data (Fashion-MNIST's shape) is timed with every
SCC layer on:

* ``ours``: the SCC kernels (forward per window group, input-centric backward, the
  deterministic weight gradient);
* ``dense``: the dense-masked 1x1 form as batched GEMMs (cuBLAS);
* ``opt``: the paper's convolution stack with channel-cyclic reuse ("Pytorch-Opt");
* ``base``: the paper's channel stack ("Pytorch-Base").

The rest of the network (depthwise convolutions, batch norm, the head) is the same in all
four.  Times are medians of host-timed runs of ``--steps`` steps after warm-up; a run that
exhausts GPU memory is recorded as such (the paper's Base did on ImageNet).  Paper (V100):
ours 5.68x faster than Base and 2.34x than Opt on average.  ``--imagenet`` times the
networks at 3x224x224, batch ``--batch`` (the paper: 32-64), Fig. 8, into its own files
(``scc_train_speed_imagenet``); paper: 1.95-3.88x over Opt, Base out of memory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments._common import (
    geomean,
    grouped_bars,
    outputs,
    parser,
    partial_csv,
    pyplot,
    save_figure,
)
from experiments._scc import dw_scc, step_time
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "scc_train_speed"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
IMPLS = {"ours": "kernels", "dense": "dense", "opt": "conv_stack", "base": "channel_stack"}
SETTINGS = ((2, 0.5), (4, 0.5), (8, 0.5), (2, 0.25), (2, 0.75))
MODELS = ("vgg16", "vgg19", "resnet18", "resnet50_cifar", "mobilenet_v1")
IMAGENET_MODELS = ("vgg16_imagenet", "vgg19_imagenet", "resnet18_imagenet", "resnet50",
                   "mobilenet_v1_imagenet")
PAPER = {"base/ours": 5.68, "opt/ours": 2.34}     # V100 averages, Fig. 7


def output_name(args) -> str:
    """The file stem: Fig. 8 (``--imagenet``) apart from Fig. 7, so neither replaces the
    other."""
    return f"{NAME}_imagenet" if args.imagenet else NAME


def _setting(text: str) -> tuple[int, float]:
    """``"cg:co"`` -> (cg, co)."""
    try:
        cg, co = text.split(":")
        return int(cg), float(co)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a setting is CG:CO (e.g. 2:0.5), got {text!r}")


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", default=None,
                   help=f"default: {' '.join(MODELS)} ({' '.join(IMAGENET_MODELS)} with "
                        f"--imagenet: ImageNet stems, VGG pooled globally before its "
                        f"classifier)")
    p.add_argument("--settings", nargs="+", type=_setting, default=list(SETTINGS),
                   metavar="CG:CO", help="(cg, co) pairs, e.g. 2:0.5 4:0.5 (the paper's five)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--imagenet", action="store_true", help="3x224x224 inputs (Fig. 8)")
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help="this experiment's CSVs (or .partial.csv) from earlier calls: their "
                        "runs not made now are kept and join the averages")
    p.output_name = output_name
    args = p.parse_args(argv)
    if args.models is None:
        args.models = list(IMAGENET_MODELS if args.imagenet else MODELS)
    return args


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    env = bench.environment()
    name = output_name(args)
    rs = ResultSet(name, env)
    settings = args.settings[:1] if args.quick else args.settings
    models = args.models[:1] if args.quick else args.models
    shape = (args.batch, 3, 224, 224) if args.imagenet else (args.batch, 1, 32, 32)
    from tqdm import tqdm

    paths, partial = outputs(name, args.out), partial_csv(name, args.out)
    runs = [(m, cg, co, impl) for m in models for cg, co in settings for impl in IMPLS]
    made = {(f"{m} cg{cg} co{round(100 * co)}", impl) for m, cg, co, impl in runs}
    for path in args.merge:
        rs.extend([r for r in read_csv(path) if r["metric"] in ("step_ms", "out_of_memory")
                   and (r["case"], r["variant"]) not in made])
    for name, cg, co, impl in tqdm(runs, desc="timing training steps", unit="run"):
        case = f"{name} cg{cg} co{round(100 * co)}"
        model = dw_scc(name, cg, co, shape[1], 1000 if args.imagenet else 10, IMPLS[impl])
        try:
            ms = 1e3 * step_time(model, shape, args.steps, cp)
            rs.add(case, impl, "step_ms", ms, "ms",
                   note=f"batch {args.batch}, {shape[1]}x{shape[2]}x{shape[3]}")
        except cp.cuda.memory.OutOfMemoryError:
            rs.add(case, impl, "out_of_memory", 1, "1", note="the step exhausted GPU memory")
        rs.write_csv(partial)                  # a run cut short keeps what it measured
        del model
        cp.get_default_memory_pool().free_all_blocks()
    ms = rs.values("step_ms")
    cases = sorted({c for c, _ in ms})
    for other in ("base", "opt", "dense"):
        ratios = [ms[(c, other)] / ms[(c, "ours")] for c in cases
                  if (c, other) in ms and (c, "ours") in ms]
        if ratios:
            rs.add("all", f"{other}/ours", "speedup", geomean(ratios), "x",
                   paper_value=None if args.imagenet else PAPER.get(f"{other}/ours"),
                   note=f"geomean over {len(ratios)} runs; min {min(ratios):.2f}")
    rs.write_csv(paths["csv"])
    partial.unlink(missing_ok=True)
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("step_ms", "speedup", "out_of_memory"))
    sections.append(("Notes", f"Training step (forward, loss, backward, SGD) of each DW + SCC "
                              f"network with every SCC layer on one implementation; batch "
                              f"{args.batch}, input {shape[1:]}, random data, fp32. Paper "
                              f"(V100): " + ("ours 1.95-3.88x over Opt on ImageNet, Base out "
                                             "of memory (Fig. 8)." if args.imagenet else
                                             "ours 5.68x over Base, 2.34x over Opt on "
                                             "average (Fig. 7).")))
    title = "DW + SCC training step by SCC implementation"
    write_markdown(paths["md"], title + (", ImageNet shapes" if args.imagenet else ""), env,
                   sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.5))
    grouped_bars(ax, cases, {i: [ms.get((c, i), np.nan) for c in cases] for i in IMPLS})
    ax.set_yscale("log")
    ax.set_ylabel("training step (ms, log)")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
