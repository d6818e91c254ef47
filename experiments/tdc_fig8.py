"""TDC figure 8: end-to-end batch-1 latency, original vs Tucker-format, five CNNs.

ResNet-18, ResNet-50, DenseNet-121 and DenseNet-201 (ImageNet-style, 224x224) and VGG-16-BN
(CIFAR-style, 32x32), fp32, batch 1, every variant timed by CUDA-graph replay in one run:

* ``cudnn-original`` — the network through PyTorch/cuDNN (the same weights; TF32 off;
  ``-tf32``: PyTorch's default TF32 convolutions);
* ``cudnn-tucker`` — the Tucker-format model (each 3x3 convolution as 1x1 -> core -> 1x1)
  through PyTorch/cuDNN;
* ``ours-original`` / ``ours-tucker`` — our inference engine built with ``tune=True``
  (:mod:`tensorconv.engine`: BN folded, fused epilogues, every "one launch or the parts"
  choice timed, one CUDA graph with programmatic edges); its tensor-core products are
  fp32-accurate (3xTF32);
* ``ours-original-tf32`` / ``ours-tucker-tf32`` (``--tf32``) — the same engines with one
  tf32 pass per product (``tensorconv.precision``), like for like with cuDNN's TF32 rows.

The Tucker models take uniform ranks for the paper's FLOPs budget of each network (ResNet-50
at its 40 % point: 60 % is out of reach decomposing the 3x3 convolutions alone), except
``resnet18-hw``: TDC's hardware-aware ranks (Algorithm 1, theta = 15 %, B = 65 % of the 3x3
block convolutions' MACs) chosen from a table T measured in the run through the tuned engine
(``layer_latency(chained=True)``: a Tucker entry is the core, its last 1x1 and the next
layer's first 1x1, as a run of Tucker layers pays for it), checkpointed beside the CSV
(``--reuse-table``: a T of other kernel sources, said in the row's note).  Latency does not
depend on the weights' values: the Tucker factors are random.  ``--resume`` keeps the
networks already in the CSV.  Paper (A100), speed-up of the Tucker model through TDC over
the original / over the Tucker model through cuDNN: ResNet-18 3.27x / 2.21x, ResNet-50
2.07x / 1.26x, VGG-16 2.37x / 1.45x, DenseNet-121 2.14x / 1.41x, DenseNet-201 1.70x / 1.42x.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from experiments._torch_mirror import to_torch
from tensorconv import backend, bench, timing, tunecache
from tensorconv.cli import guarded
from tensorconv.compress import tuckerize, uniform_ranks
from tensorconv.compress.performance import performance_tables
from tensorconv.compress.ranks import layer_specs, select_ranks
from tensorconv.engine import InferenceEngine
from tensorconv.nn import count_flops_params, get_model
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown

NAME = "tdc_fig8"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
# zoo name, input shape, MAC reduction (the paper's budget B for the network)
MODELS = {"resnet18": ("resnet18_imagenet", (1, 3, 224, 224), 0.65),
          "resnet50": ("resnet50", (1, 3, 224, 224), 0.40),
          "vgg16": ("vgg16", (1, 3, 32, 32), 0.65),
          "densenet121": ("densenet121", (1, 3, 224, 224), 0.10),
          "densenet201": ("densenet201", (1, 3, 224, 224), 0.10),
          "resnet18-hw": ("resnet18_imagenet", (1, 3, 224, 224), 0.65)}
# Algorithm 1's budget B (share of the 3x3 block convolutions' MACs), theta and whether
# T's Tucker entries leave out a chained first 1x1, by model
HARDWARE_AWARE = {"resnet18-hw": (0.65, 0.15, True)}
PAPER = {"resnet18": (3.27, 2.21), "resnet50": (2.07, 1.26), "vgg16": (2.37, 1.45),
         "densenet121": (2.14, 1.41), "densenet201": (1.70, 1.42), "resnet18-hw": (3.27, 2.21)}


def tucker_ranks(name: str, model, shape, table_path, reuse_table: bool = False
                 ) -> tuple[dict, str]:
    """The Tucker ranks network ``name`` is timed with, and how they were chosen
    (``reuse_table``: T from ``table_path`` even if measured with other kernels)."""
    reduction = MODELS[name][2]
    if name not in HARDWARE_AWARE:
        return uniform_ranks(model, reduction, shape), "uniform ranks for the paper's budget"
    budget, theta, chained = HARDWARE_AWARE[name]
    specs = layer_specs(model, shape)
    table, dense = performance_tables(specs, checkpoint=table_path, chained=chained,
                                      other_kernels=reuse_table)
    plan = select_ranks(specs, budget, table, dense, theta=theta)
    kernels = json.loads(table_path.read_text())["taken_with"]["kernels"]
    reused = ("" if kernels == tunecache.kernels_version() else
              f"; T reused from a table measured with kernel sources {kernels}, not these")
    return plan.ranks, (f"hardware-aware ranks (Algorithm 1, B {budget:.0%} of the 3x3 MACs, "
                        f"theta {theta:.0%}{', T chained' if chained else ''}: "
                        f"{100 * plan.reduction:.1f} % of them cut, "
                        f"{len(plan.dense)} layers kept dense{reused})")


def measure(rs: ResultSet, name: str, quick: bool, table_path, reuse_table: bool = False,
            tf32: bool = False) -> None:
    """Time one network every way; add its rows (``table_path``: the checkpoint of a
    hardware-aware model's performance table; ``reuse_table``: see :func:`tucker_ranks`;
    ``tf32``: our engines also with tf32 products, ``-tf32`` rows)."""
    cp = backend.require_cuda(NAME)
    zoo, shape, reduction = MODELS[name]
    case = f"{name}/b1"
    x = cp.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    original = get_model(zoo)
    tucker = get_model(zoo)
    ranks, chosen = tucker_ranks(name, tucker, shape, table_path, reuse_table)
    tuckerize(tucker, ranks, decompose=False)
    macs = {k: count_flops_params(m, shape)["macs"] for k, m in (("original", original),
                                                                 ("tucker", tucker))}
    rs.add(case, "tucker", "mac_reduction", 100 * (1 - macs["tucker"] / macs["original"]), "%",
           paper_value=100 * reduction,
           note=f"{chosen}; measured at commit {rs.env['commit']}")
    reps = dict(repeat=30 if quick else 100)
    times = {}
    for label, model in (("original", original), ("tucker", tucker)):
        model.to("gpu").eval()
        outs = {}
        for precision in ("fp32", "tf32") if tf32 else ("fp32",):
            variant = f"ours-{label}{'-tf32' if precision == 'tf32' else ''}"
            engine = InferenceEngine(model, shape, tune=True, precision=precision)
            outs[variant] = engine(x)
            times[variant] = engine.time(**reps).median_us
            rs.add(case, variant, "launches", engine.launches, "count")
            del engine
        if not bench.torch_cudnn_available():
            continue
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        net = to_torch(model).cuda()
        xt = torch.from_dlpack(x)
        for cudnn_tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = cudnn_tf32
            variant = f"cudnn-{label}{'-tf32' if cudnn_tf32 else ''}"
            with torch.no_grad():
                if not cudnn_tf32:
                    ref64 = net(xt).double()
                else:
                    outs[variant] = net(xt)
                # hold_us=0: the replay's launch is timed, as in our engine's time
                t = timing.time_graph(lambda: net(xt), framework="torch", calls_per_graph=1,
                                      hold_us=0, **reps)
            times[variant] = t.median_us
        # float64: the random-factor DenseNet-201 Tucker model reaches ~1e31, whose
        # squares overflow a float32 norm (a NaN error before this)
        for variant, out in outs.items():
            err = torch.linalg.norm(ref64 - torch.from_dlpack(out).double())
            rs.add(case, variant, "rel_err_vs_pytorch", float(err / torch.linalg.norm(ref64)), "1",
                   note="against PyTorch fp32 (TF32 off)")
    for v, us in times.items():
        rs.add(case, v, "latency_us", us, "us", note="CUDA-graph replay median")
    if "cudnn-original" in times:
        paper = dict(zip(("cudnn-original", "cudnn-tucker"), PAPER[name]))
        for base in ("cudnn-original", "cudnn-tucker", "cudnn-original-tf32", "cudnn-tucker-tf32"):
            rs.add(case, f"ours-tucker/{base}", "speedup", times[base] / times["ours-tucker"], "x",
                   paper_value=paper.get(base))
        if "ours-tucker-tf32" in times:  # like for like: tf32 products on both sides
            for base in ("cudnn-original-tf32", "cudnn-tucker-tf32"):
                rs.add(case, f"ours-tucker-tf32/{base}", "speedup",
                       times[base] / times["ours-tucker-tf32"], "x")
    for sfx in ("", "-tf32") if tf32 else ("",):
        rs.add(case, f"ours-tucker{sfx}/ours-original{sfx}", "speedup",
               times[f"ours-original{sfx}"] / times[f"ours-tucker{sfx}"], "x")


def measured_at(row: dict) -> str:
    """The commit a network was measured at, from its ``mac_reduction`` row's note."""
    return re.search(r"commit (\w+)", row["note"])[1]


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument("--resume", action="store_true",
                   help="keep the networks already in the output CSV; measure the others")
    p.add_argument("--tf32", action="store_true",
                   help="also time our engines with tf32 products (tensorconv.precision), "
                        "beside cuDNN's TF32 rows")
    p.add_argument("--reuse-table", action="store_true",
                   help="choose hardware-aware ranks from the checkpointed T even if it was "
                        "measured with other kernel sources (said in the results)")
    args = p.parse_args(argv)
    backend.require_cuda(NAME)
    from tqdm import tqdm

    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    paths = outputs(NAME, args.out)
    if args.resume and paths["csv"].exists():
        for r in read_csv(paths["csv"]):
            paper = None if math.isnan(r["paper_value"]) else r["paper_value"]
            rs.add(r["case"], r["variant"], r["metric"], r["value"], r["unit"], paper, r["note"])
    done = {r["case"].split("/")[0] for r in rs.rows}
    for name in tqdm(["resnet18"] if args.quick else args.models, desc=NAME):
        if name not in done:
            measure(rs, name, args.quick, paths["csv"].parent / f"{NAME}_table.json",
                    args.reuse_table, args.tf32)
            rs.write_csv(paths["csv"])  # the checkpoint --resume continues from
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "TDC figure 8: end-to-end batch-1 latency, original vs Tucker",
                   env, [("Latency (µs)", pivot_markdown(rows, "latency_us")),
                         ("Speed-ups", pivot_markdown(rows, "speedup")),
                         ("Checks", long_markdown([r for r in rows if r["metric"] not in
                                                   ("latency_us", "speedup")])),
                         ("Measured at", "\n".join(
                             f"- {r['case']}: commit `{measured_at(r)}`"
                             for r in rows if r["metric"] == "mac_reduction")),
                         ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])

    plt = pyplot()
    lat = [r for r in rows if r["metric"] == "latency_us"]
    cases = list(dict.fromkeys(r["case"] for r in lat))
    variants = list(dict.fromkeys(r["variant"] for r in lat))
    cell = {(r["case"], r["variant"]): r["value"] for r in lat}
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        ax.bar(np.arange(len(cases)) + i * width, [cell.get((c, v), np.nan) for c in cases],
               width, label=v)
    ax.set_xticks(np.arange(len(cases)) + 0.4 - width / 2)
    ax.set_xticklabels(cases)
    ax.set_yscale("log")
    ax.set_ylabel("batch-1 latency (µs, log), H100")
    ax.legend(fontsize=7, ncol=2)
    save_figure(fig, paths["png"])
    print(pivot_markdown(rows, "latency_us"))
    print(pivot_markdown(rows, "speedup"))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
