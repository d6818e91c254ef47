"""TDC's hardware-aware rank selection (Algorithm 1) for ResNet-18 on the H100.

Measures the performance table T (latency of each 3x3 layer's Tucker form with
our kernels — the faster of 1x1 -> cluster core -> 1x1 and the fused one-launch
layer — for (D1, D2) in steps of 32) and the dense layers, then selects ranks at FLOPs budgets of 65/70/75/80% (of the 3x3 block convolutions' MACs for the
hardware-aware choice, of the whole model's for the uniform one) with the
theta = 15% rule (and without it, theta = 0), and times the resulting Tucker
models end to end through
our inference engine against the same budgets with uniform ranks.  ImageNet-
style ResNet-18 at 224x224, batch 1, fp32 (the paper's Table 3 trend:
69.70/67.86/66.59/64.81% top-1 at 66/70/76/80% — accuracy needs the training
runs of tdc_table3, not done here).
"""

from __future__ import annotations

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.nn import get_model
from tensorconv.nn.engine import InferenceEngine
from tensorconv.nn.tucker import tuckerize, uniform_ranks
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown
from tensorconv.tuning.ranks import candidate_ranks, layer_specs, measure_table, select_ranks

NAME = "tdc_ranks"


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--budgets", default="0.65,0.70,0.75,0.80")
    p.add_argument("--step", type=int, default=32)
    args = p.parse_args(argv)
    cp = backend.require_cuda(NAME)
    shape = (1, 3, 224, 224)
    specs = layer_specs(get_model("resnet18_imagenet"), shape)
    from tqdm import tqdm

    table, dense = {}, {}
    for s in tqdm(specs, desc="performance table"):
        cands = candidate_ranks(s, args.step)
        if args.quick:
            cands = cands[::4]
        dense[s.name], table[s.name] = measure_table(s, cands, repeat=5 if args.quick else 20)
    env = bench.environment()
    rs = ResultSet(NAME, env)
    for s in specs:
        best = min(table[s.name].values())
        rs.add(s.name, "dense", "layer_us", dense[s.name], "us")
        rs.add(s.name, "tucker-fastest", "layer_us", best, "us",
               note=f"{len(table[s.name])} rank pairs timed")
    x = cp.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    reps = dict(repeat=20 if args.quick else 100)
    for budget in (float(b) for b in args.budgets.split(",")):
        case = f"budget{round(100 * budget)}"
        plans = {"hardware-aware": None, "hardware-aware-theta0": None, "uniform": None}
        for label, theta in (("hardware-aware", 0.15), ("hardware-aware-theta0", 0.0)):
            try:
                plan = select_ranks(specs, budget, table, dense, theta=theta)
                plans[label] = plan.ranks
                rs.add(case, label, "dense_layers_kept", len(plan.dense), "count",
                       note=", ".join(plan.dense) or "none")
                rs.add(case, label, "table_latency_sum", plan.latency, "us",
                       note=f"dense layers sum {plan.dense_latency:.0f} us")
            except ValueError as exc:
                rs.add(case, label, "infeasible", 1, "flag", note=str(exc))
        plans["uniform"] = uniform_ranks(get_model("resnet18_imagenet"), budget, shape,
                                         multiple=8)
        for label, ranks in plans.items():
            if ranks is None:
                continue
            kept = sum(s.tucker_macs(*ranks[s.name]) if s.name in ranks else s.dense_macs
                       for s in specs)
            rs.add(case, label, "layer_mac_reduction", 100 * (1 - kept / sum(s.dense_macs
                                                                           for s in specs)),
                   "%", note="over the 16 3x3 block convolutions")
            model = get_model("resnet18_imagenet")
            tuckerize(model, ranks, decompose=False)
            model.to("gpu").eval()
            engine = InferenceEngine(model, shape, tune=True)
            engine(x)
            t = engine.time(**reps)
            rs.add(case, label, "model_latency_us", t.median_us, "us",
                   note="engine, CUDA graph; " + "; ".join(f"{k.replace('stages.', '')}={v}"
                                                            for k, v in list(ranks.items())[:4]) + " ...")
    dense_model = get_model("resnet18_imagenet").to("gpu").eval()
    engine = InferenceEngine(dense_model, shape)
    rs.add("original", "dense", "model_latency_us", engine.time(**reps).median_us, "us")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "TDC hardware-aware ranks for ResNet-18 (H100, batch 1)", env,
                   [("Models", long_markdown([r for r in rows if r["metric"] != "layer_us"])),
                    ("Layers", long_markdown([r for r in rows if r["metric"] == "layer_us"])),
                    ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label in ("hardware-aware", "hardware-aware-theta0", "uniform"):
        pts = [(int(r["case"][6:]), r["value"]) for r in rows
               if r["variant"] == label and r["metric"] == "model_latency_us"]
        if pts:
            ax.plot(*zip(*pts), "o-", label=label)
    orig = [r["value"] for r in rows if r["case"] == "original"]
    if orig:
        ax.axhline(orig[0], color="gray", ls="--", label="dense (our engine)")
    ax.set_xlabel("FLOPs budget (% of 3x3-layer MACs removed)")
    ax.set_ylabel("ResNet-18 latency (µs)")
    ax.legend(fontsize=8)
    save_figure(fig, paths["png"])
    print(long_markdown([r for r in rows if r["metric"] != "layer_us"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
