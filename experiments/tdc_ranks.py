"""TDC's hardware-aware rank selection (Algorithm 1) for ResNet-18 on the H100.

Measures the performance table T — the latency of each 3x3 layer's Tucker form
for (D1, D2) in steps of 32, and of the dense layer, each as the tuned inference
engine runs the layer alone (``tensorconv.compress.performance.layer_latency``: batch-1
1x1 kernel or implicit GEMM, tuned core kernels, the core fused with its last
1x1, the one-launch layer, whichever it timed fastest; layers of the same sizes
measured once) — then selects ranks at FLOPs budgets B of 40-80% (the paper's
ResNet-18 points are 65/70/75/80%; B counts the 16 3x3 block convolutions' MACs)
with the theta = 15% rule (and without it, theta = 0; and with ties widened from
2 % to 10 %, so that larger ranks win more often; and, ``-chained``, with T's
Tucker entries timed as a run of Tucker layers pays for them: the core, the last
1x1 and the next layer's first 1x1 chained after them, without the layer's own
first 1x1, ``layer_latency(chained=True)``, a second table), and times the resulting
Tucker models end to end through the tuned engine (where a layer's last 1x1 may
also be chained with the next layer's first, which T does not count) against
uniform ranks (multiples of 8) cutting the same share of the same MACs, and the
dense model.  Where the layers kept dense by the theta rule hold more MACs than
the budget leaves, Algorithm 1 has no answer: the row says ``infeasible``.
ImageNet-style ResNet-18 at 224x224, batch 1, fp32, random weights (latency does
not depend on their values).  The paper's Table 3 trend (69.70/67.86/66.59/64.81%
top-1 at 66/70/76/80%) needs the training runs of tdc_table3, not done here.
The full tables are in the CSV (metrics ``table_us``, ``table_chained_us``);
``--resume`` continues a run from the table checkpoints (``tdc_ranks_table.json``,
``tdc_ranks_table_chained.json`` beside the CSV) and the CSV.
"""

from __future__ import annotations

import math

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.compress import tuckerize, uniform_ranks
from tensorconv.compress.performance import performance_tables
from tensorconv.compress.ranks import layer_specs, select_ranks
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown

NAME = "tdc_ranks"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
MODEL, SHAPE = "resnet18_imagenet", (1, 3, 224, 224)
# Algorithm 1's variants: (label, theta, tie, chained): latencies within ``tie`` of the fastest
# count as equal, the largest ranks among them winning (2 %: timing noise; 10 %: trading speed
# for ranks); ``chained``: the table of Tucker layers timed as a run of them pays
VARIANTS = (("hardware-aware", 0.15, 0.02, False), ("hardware-aware-theta0", 0.0, 0.02, False),
            ("hardware-aware-tie10", 0.15, 0.10, False),
            ("hardware-aware-chained", 0.15, 0.02, True))


def model_latency(ranks, repeat: int) -> tuple[float, int]:
    """Median latency (µs) and launch count of ResNet-18 with ``ranks`` (None: dense)
    through the tuned engine."""
    cp = backend.require_cuda(NAME)
    model = get_model(MODEL)
    if ranks is not None:
        tuckerize(model, ranks, decompose=False)
    engine = InferenceEngine(model.to("gpu").eval(), SHAPE, tune=True)
    engine(cp.asarray(np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)))
    return engine.time(repeat=repeat).median_us, engine.launches


def choices(specs, tables, budget: float) -> dict:
    """``{variant: (ranks or None, rows to add)}`` for one budget (``tables``: ``{chained:
    (table, dense)}``)."""
    out = {}
    for label, theta, tie, chained in VARIANTS:
        table, dense = tables[chained]
        try:
            plan = select_ranks(specs, budget, table, dense, theta=theta, tie=tie)
        except ValueError as exc:
            out[label] = (None, [("infeasible", 1, "flag", str(exc))])
            continue
        out[label] = (plan.ranks, [
            ("dense_layers_kept", len(plan.dense), "count", ", ".join(plan.dense) or "none"),
            ("table_latency_sum", plan.latency, "us",
             f"dense layers sum {plan.dense_latency:.0f} us")])
    out["uniform"] = (uniform_ranks(get_model(MODEL), budget, SHAPE, multiple=8,
                                    scope="layers"), [])
    return out


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--budgets", default="0.40,0.50,0.60,0.65,0.70,0.75,0.80")
    p.add_argument("--step", type=int, default=32)
    p.add_argument("--resume", action="store_true",
                   help="continue from the table checkpoint and the rows already in the CSV")
    args = p.parse_args(argv)
    backend.require_cuda(NAME)
    from tqdm import tqdm

    paths = outputs(NAME, args.out)
    checkpoints = {c: paths["csv"].parent / f"{NAME}_table{'_chained' if c else ''}.json"
                   for c in (False, True)}
    env = bench.environment()
    rs = ResultSet(NAME, env)
    if args.resume:
        for r in read_csv(paths["csv"]) if paths["csv"].exists() else []:
            if r["metric"] not in ("layer_us", "table_us", "table_chained_us"):  # from the tables
                paper = None if math.isnan(r["paper_value"]) else r["paper_value"]
                rs.add(r["case"], r["variant"], r["metric"], r["value"], r["unit"], paper,
                       r["note"])
    else:
        for path in checkpoints.values():  # a fresh run: an old table may predate today's kernels
            path.unlink(missing_ok=True)
    specs = layer_specs(get_model(MODEL), SHAPE)
    tables = {c: performance_tables(specs, args.step, thin=4 if args.quick else 1,
                                    repeat=5 if args.quick else 20, checkpoint=checkpoints[c],
                                    chained=c) for c in (False, True)}
    for chained, (table, dense) in tables.items():
        for s in specs:
            best = min(table[s.name], key=table[s.name].get)
            if not chained:
                rs.add(s.name, "dense", "layer_us", dense[s.name], "us")
            rs.add(s.name, "tucker-fastest" + ("-chained" if chained else ""), "layer_us",
                   table[s.name][best], "us",
                   note=f"at ranks {best}; {len(table[s.name])} rank pairs timed")
            for (d1, d2), us in table[s.name].items():
                rs.add(s.name, f"{d1}x{d2}", "table_chained_us" if chained else "table_us", us,
                       "us")
    # a variant's rows reach the CSV together, after its model was timed
    done = {(r["case"], r["variant"]) for r in rs.rows
            if r["metric"] in ("model_latency_us", "infeasible")}
    repeat = 20 if args.quick else 100
    todo = [(f"budget{round(100 * float(b))}", float(b)) for b in args.budgets.split(",")]
    if ("original", "dense") not in done:
        us, launches = model_latency(None, repeat)
        rs.add("original", "dense", "model_latency_us", us, "us",
               note=f"engine, CUDA graph, {launches} launches")
        rs.write_csv(paths["csv"])  # the checkpoint --resume continues from
    for case, budget in tqdm(todo, desc="models"):
        for label, (ranks, rows) in choices(specs, tables, budget).items():
            if (case, label) in done:
                continue
            for metric, value, unit, note in rows:
                rs.add(case, label, metric, value, unit, note=note)
            if ranks is None:
                rs.write_csv(paths["csv"])
                continue
            kept = sum(s.tucker_macs(*ranks[s.name]) if s.name in ranks else s.dense_macs
                       for s in specs)
            rs.add(case, label, "layer_mac_reduction",
                   100 * (1 - kept / sum(s.dense_macs for s in specs)), "%",
                   note="over the 16 3x3 block convolutions")
            us, launches = model_latency(ranks, repeat)
            rs.add(case, label, "model_latency_us", us, "us",
                   note=f"engine, CUDA graph, {launches} launches; " + "; ".join(
                       f"{k.replace('stages.', '')}={v}" for k, v in ranks.items()))
            rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "TDC hardware-aware ranks for ResNet-18 (H100, batch 1)", env,
                   [("Models", long_markdown([r for r in rows if r["metric"] not in
                                              ("layer_us", "table_us", "table_chained_us")])),
                    ("Reading", reading(rows)),
                    ("Layers", long_markdown([r for r in rows if r["metric"] == "layer_us"])),
                    ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])
    plot(rows, paths["png"])
    print(long_markdown([r for r in rows if r["metric"] not in
                         ("layer_us", "table_us", "table_chained_us")]))
    return 0


def reading(rows) -> str:
    """What the rows say, computed from them: where T is fastest, and each hardware-aware
    model beside the uniform one of the nearest MAC reduction."""
    t = [r for r in rows if r["metric"] == "table_us"]
    layers = list(dict.fromkeys(r["case"] for r in t))
    at_min = 0
    for name in layers:
        cells = {tuple(map(int, r["variant"].split("x"))): r["value"] for r in t
                 if r["case"] == name}
        at_min += min(cells, key=cells.get) == min(cells)
    lines = [f"- The fastest entry of T is at the smallest ranks (D1, D2) in {at_min} of "
             f"{len(layers)} layers: where T rises with the ranks instead of keeping the "
             "paper's staircase of equal times, Algorithm 1's argmin takes the smallest "
             "ranks that fit, and so may cut more MACs than the budget asks."]
    cell = {(r["case"], r["variant"], r["metric"]): r["value"] for r in rows}
    uniform = [(cell[(c, "uniform", "layer_mac_reduction")], cell[(c, "uniform",
                                                                  "model_latency_us")], c)
               for c, v, m in cell if v == "uniform" and m == "model_latency_us"]
    for c, v, m in cell:
        if v.startswith("hardware-aware") and m == "model_latency_us" and uniform:
            red = cell[(c, v, "layer_mac_reduction")]
            u_red, u_us, u_case = min(uniform, key=lambda u: abs(u[0] - red))
            us = cell[(c, v, m)]
            lines.append(f"- {c} {v}: {us:.0f} µs at {red:.1f} % of the 3x3 MACs cut; "
                         f"uniform ranks cutting {u_red:.1f} % ({u_case}): {u_us:.0f} µs "
                         f"({u_us / us:.2f}x).")
    return "\n".join(lines)


def plot(rows, path) -> None:
    """Model latency against the MAC reduction reached; table T of the last layer as a
    heat map."""
    plt = pyplot()
    fig, (ax, hm) = plt.subplots(1, 2, figsize=(11, 4))
    cell = {(r["case"], r["variant"], r["metric"]): r["value"] for r in rows}
    for label, style in zip([v[0] for v in VARIANTS] + ["uniform"], ("o", "s", "^", "D", "o-")):
        pts = sorted((cell[(c, v, "layer_mac_reduction")], us) for (c, v, m), us in cell.items()
                     if v == label and m == "model_latency_us")
        if pts:
            ax.plot(*zip(*pts), style, label=label, alpha=0.8)
    orig = [r["value"] for r in rows if r["case"] == "original"]
    if orig:
        ax.axhline(orig[0], color="gray", ls="--", label="dense (our engine)")
    ax.set_xlabel("3x3-layer MACs removed (%), reached at budgets 40-80 %")
    ax.set_ylabel("ResNet-18 latency (µs)")
    ax.legend(fontsize=8)
    t = [r for r in rows if r["metric"] == "table_us"]
    if t:
        layer = t[-1]["case"]
        cells = {tuple(map(int, r["variant"].split("x"))): r["value"] for r in t
                 if r["case"] == layer}
        d1s, d2s = sorted({a for a, _ in cells}), sorted({b for _, b in cells})
        grid = np.array([[cells.get((a, b), np.nan) for b in d2s] for a in d1s])
        im = hm.imshow(grid, origin="lower", aspect="auto",
                       extent=(d2s[0], d2s[-1], d1s[0], d1s[-1]))
        fig.colorbar(im, ax=hm, label="µs")
        hm.set_xlabel("D2")
        hm.set_ylabel("D1")
        hm.set_title(f"table T, {layer}", fontsize=9)
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
