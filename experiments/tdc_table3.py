"""TDC table 3: ResNet-18 (CIFAR-style) on Fashion-MNIST at FLOPs budgets with co-design ranks.

On Fashion-MNIST (32x32, one channel) instead of the paper's ImageNet.  Phases,
each checkpointed per epoch in ``--work`` (a later call resumes):

* ``baseline`` — ResNet-18 trained from scratch (or ``--pretrained``);
* for each budget B: ranks from TDC's Algorithm 1 — the performance table T of
  every 3x3 layer's Tucker form measured on this GPU with our kernels (batch 1,
  steps of ``--step``), theta = 15% — then ``admm-phase`` (ADMM towards those
  ranks from the baseline) and ``admm`` (decomposed, fine-tuned).

Where the theta rule leaves a budget unreachable (a layer whose Tucker form is
not 15% faster stays dense, and the rest cannot cut enough), the ranks come
from theta = 0 (the fastest rank pair that fits), and failing that from
uniform ranks; the ``ranks`` row says which.  Without a GPU there is no
table: uniform ranks.  Budgets are fractions of the 3x3 block convolutions'
MACs (Algorithm 1's B); the whole model's reduction is reported beside them.
With a GPU, the dense model and each Tucker model are timed at batch 1 through the
tuned inference engine (CUDA graph).
Paper (ImageNet top-1): 69.70 / 67.86 / 66.59 / 64.81 % at 66 / 70 / 76 / 80 %
FLOPs reduction.
"""

from __future__ import annotations

from pathlib import Path

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.compress import tuckerize, uniform_ranks
from tensorconv.nn import count_flops_params, get_model
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown
from training import checkpoint as ckpt
from training.chunks import TimeBudget, train_within
from training.train import TrainConfig

NAME = "tdc_table3"
SHAPE = (1, 1, 32, 32)
PAPER = {0.65: (66, 69.70), 0.70: (70, 67.86), 0.75: (76, 66.59), 0.80: (80, 64.81)}
LATENCY_NOTE = "batch 1, our engine (tuned), CUDA graph"


def rank_table(model: str, work: Path, step: int, quick: bool) -> tuple[list, dict, dict] | None:
    """Layer specs, performance table T and dense times, measured into ``work`` (a later
    call continues there); None without a GPU and without a finished table."""
    from tensorconv.compress.performance import performance_tables
    from tensorconv.compress.ranks import layer_specs

    specs = layer_specs(get_model(model, in_channels=1), SHAPE)
    path = work / "rank_table.json"
    if not backend.gpu_available() and not path.exists():
        return None
    table, dense = performance_tables(specs, step, thin=4 if quick else 1,
                                      repeat=5 if quick else 20, checkpoint=path)
    return specs, table, dense


def choose_ranks(model: str, budget: float, tables) -> tuple[dict, str]:
    """Algorithm 1's ranks for ``budget`` and where they came from."""
    from tensorconv.compress.ranks import select_ranks

    if tables is not None:
        specs, table, dense = tables
        for theta, label in ((0.15, "hardware-aware, theta 15%"),
                             (0.0, "hardware-aware, theta 0 (the 15% rule cannot reach it)")):
            try:
                plan = select_ranks(specs, budget, table, dense, theta=theta)
                return plan.ranks, f"{label}; {len(plan.dense)} layers kept dense"
            except ValueError as exc:
                reason = str(exc)
        label = f"uniform (no table choice reaches it: {reason})"
    else:
        label = "uniform (no GPU: no performance table)"
    return uniform_ranks(get_model(model, in_channels=1), budget, SHAPE, multiple=8), label


def latency_us(net) -> float:
    """Batch-1 latency of ``net`` through the tuned inference engine (CUDA-graph median)."""
    from tensorconv.engine import InferenceEngine

    engine = InferenceEngine(net.to("gpu").eval(), SHAPE, tune=True)
    return engine.time(repeat=100).median_us


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--model", default="resnet18", help="zoo name (the paper's: resnet18)")
    p.add_argument("--pretrained", type=Path, default=None, help="a trained checkpoint of --model")
    p.add_argument("--work", type=Path, default=None,
                   help="checkpoints (default: OUT/tdc_table3_work)")
    p.add_argument("--budgets", default="0.65,0.70,0.75,0.80")
    p.add_argument("--baseline-epochs", type=int, default=4)
    p.add_argument("--admm-epochs", type=int, default=1)
    p.add_argument("--finetune-epochs", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=None, help="training images per epoch")
    p.add_argument("--rho", type=float, default=1e-2)
    p.add_argument("--rho-growth", type=float, default=1.5)
    p.add_argument("--step", type=int, default=32, help="rank step of the performance table")
    p.add_argument("--time-budget", type=float, default=None, help="seconds for this call")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    args = p.parse_args(argv)
    if args.quick:
        args.baseline_epochs, args.admm_epochs, args.finetune_epochs = 1, 1, 1
        args.train_limit = args.train_limit or 512
    budgets = [float(b) for b in args.budgets.split(",")]
    paths = outputs(NAME, args.out)
    work = args.work or paths["csv"].parent / f"{NAME}_work"
    work.mkdir(parents=True, exist_ok=True)
    model = args.model
    common = dict(model=model, batch_size=128, device=args.device,
                  train_limit=args.train_limit, test_limit=200 if args.quick else None)
    budget_clock = TimeBudget(args.time_budget)
    baseline = args.pretrained or work / "baseline.npz"
    done = {}
    if args.pretrained is None:
        meta, finished = train_within(TrainConfig(**common, epochs=args.baseline_epochs),
                                      baseline, budget_clock)
        done["baseline"] = (meta, args.baseline_epochs)
    else:
        done["baseline"] = (ckpt.load(baseline)[2], None)
        finished = True
    tables = rank_table(args.model, work, args.step, args.quick) if finished else None
    plans = {}
    for b in budgets if finished else []:
        ranks, source = choose_ranks(args.model, b, tables)
        plans[b] = (ranks, source)
        ft = dict(common, lr=0.01, warmup_epochs=0)
        phases = [(f"admm-phase-{round(100 * b)}",
                   TrainConfig(**ft, epochs=args.admm_epochs, init_from=str(baseline),
                               admm_ranks=ranks, admm_rho=args.rho,
                               admm_rho_growth=args.rho_growth)),
                  (f"admm-{round(100 * b)}",
                   TrainConfig(**ft, epochs=args.finetune_epochs,
                               init_from=str(work / f"admm-phase-{round(100 * b)}.npz"),
                               tucker_ranks=ranks))]
        for name, cfg in phases:
            meta, ok = train_within(cfg, work / f"{name}.npz", budget_clock)
            done[name] = (meta, cfg.epochs)
            if not ok:
                break
        else:
            continue
        break

    env = bench.environment()
    rs = ResultSet(NAME, env)
    for name, (meta, total) in done.items():
        if meta is None or not meta["history"]:
            continue
        hist = meta["history"]
        epochs = hist[-1]["epoch"]
        status = f"partial: {epochs}/{total} epochs" if total and epochs < total else ""
        case = "baseline" if name == "baseline" else f"budget{name.rsplit('-', 1)[1]}"
        variant = "dense" if name == "baseline" else name.rsplit("-", 1)[0]
        paper = PAPER.get(int(case[6:]) / 100 if case != "baseline" else None)
        rs.add(case, variant, "test_acc", 100 * hist[-1]["test_acc"], "%",
               paper_value=paper[1] if paper and variant == "admm" else None,
               note=status or (f"paper: ImageNet top-1 at {paper[0]}%" if paper and
                               variant == "admm" else ""))
        rs.add(case, variant, "epochs", epochs, "count")
    base = count_flops_params(get_model(model, in_channels=1), SHAPE)
    timed = backend.gpu_available() and not args.quick
    if timed and plans:
        rs.add("baseline", "dense", "latency_us", latency_us(get_model(model, in_channels=1)),
               "us", note=LATENCY_NOTE)
    for b, (ranks, source) in plans.items():
        case = f"budget{round(100 * b)}"
        tucker = get_model(model, in_channels=1)
        tuckerize(tucker, ranks, decompose=False)
        cost = count_flops_params(tucker, SHAPE)
        rs.add(case, "admm", "model_flops_reduction", 100 * (1 - cost["macs"] / base["macs"]), "%",
               paper_value=PAPER[b][0] if b in PAPER else None, note="whole model, MACs")
        rs.add(case, "admm", "param_reduction", 100 * (1 - cost["params"] / base["params"]), "%")
        rs.add(case, "admm", "ranks", len(ranks), "layers", note=source)
        if tables is not None:
            specs = tables[0]
            kept = sum(s.tucker_macs(*ranks[s.name]) if s.name in ranks else s.dense_macs
                       for s in specs)
            rs.add(case, "admm", "layer_flops_reduction",
                   100 * (1 - kept / sum(s.dense_macs for s in specs)), "%",
                   note="over the 3x3 block convolutions (Algorithm 1's B)")
        if timed:
            rs.add(case, "admm", "latency_us", latency_us(tucker), "us", note=LATENCY_NOTE)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    ranks_text = "; ".join(f"{round(100 * b)}%: " + ", ".join(
        f"{k.replace('stages.', '')}={v}" for k, v in r.items()) for b, (r, _) in plans.items())
    write_markdown(paths["md"], "TDC table 3 on Fashion-MNIST: ResNet-18 at FLOPs budgets",
                   env, [("Results", long_markdown(rows)),
                         ("Setup", f"baseline {args.baseline_epochs} epochs (lr 0.1 cosine); per "
                                   f"budget {args.admm_epochs} ADMM + {args.finetune_epochs} "
                                   f"fine-tuning epochs (lr 0.01 cosine, rho {args.rho} x "
                                   f"{args.rho_growth}/epoch); train limit "
                                   f"{args.train_limit or 'none'}. Ranks: {ranks_text}"),
                         ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])
    plt = pyplot()
    acc = [r for r in rows if r["metric"] == "test_acc" and r["variant"] in ("dense", "admm")]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([r["case"] for r in acc], [r["value"] for r in acc], label="ours (Fashion-MNIST)")
    paper = [(r["case"], r["paper_value"]) for r in acc if r["paper_value"] is not None]
    if paper:
        ax.scatter(*zip(*paper), color="k", zorder=3, label="paper (ImageNet top-1)")
    ax.set_ylim(min([r["value"] for r in acc] + [v for _, v in paper] + [90]) - 5, 100)
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8)
    save_figure(fig, paths["png"])
    print(long_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
