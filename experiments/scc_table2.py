"""DSXplore table II: accuracy, multiply-adds and parameters of five CNNs, original and DW+SCC.

Wang et al. (IPDPS'21), Table II, on Fashion-MNIST padded to 32x32 instead of CIFAR-10: VGG-16,
VGG-19, MobileNet, ResNet-18 and ResNet-50 (CIFAR stems), each trained from scratch as it is,
made depthwise-separable with a full pointwise stage (DW+PW, the yardstick SCC is held to) and
with a sliding-channel one (SCC-cg2-co50; :mod:`tensorconv.compress.separable`).  Reports final
and best test accuracy (the mean over ``--seeds``), multiply-adds ("MFLOPs" in the paper) and
parameters beside the paper's.  Every run checkpoints after each epoch in ``--work``;
``--time-budget`` stops between epochs and a later call resumes; ``--merge`` keeps an earlier
call's rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from experiments._common import (
    check_report_only,
    merge_arguments,
    merged_environment,
    outputs,
    parser,
    plot_accuracy,
    training_args,
    work_dir,
)
from tensorconv import bench
from tensorconv.cli import guarded
from tensorconv.compress.separable import separable
from tensorconv.nn import count_flops_params, get_model
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown
from training.chunks import TimeBudget, train_within
from training.train import TrainConfig

NAME = "scc_table2"
MODELS = ("vgg16", "vgg19", "mobilenet_v1", "resnet18", "resnet50_cifar")
VARIANTS = ("original", "dw+pw", "dw+scc")
# model -> {variant: (MFLOPs, parameters in M, accuracy %)}, the paper's CIFAR-10 numbers
PAPER = {"vgg16": {"original": (314.16, 14.73, 92.64), "dw+scc": (21.85, 0.87, 92.60)},
         "vgg19": {"original": (399.17, 20.04, 93.88), "dw+scc": (26.92, 1.19, 92.71)},
         "mobilenet_v1": {"original": (50.00, 6.17, 92.05), "dw+scc": (30.00, 0.59, 92.56)},
         "resnet18": {"original": (255.89, 11.17, 95.75), "dw+scc": (43.99, 0.84, 94.44)},
         "resnet50_cifar": {"original": (1297.80, 23.52, 95.82),
                            "dw+scc": (735.79, 12.87, 95.12)}}


def costs(model: str, cfg: TrainConfig) -> dict:
    """Multiply-adds (M) and parameters (M) of ``cfg``'s network at 1 x 1 x 32 x 32."""
    net = get_model(model, in_channels=1, num_classes=10)
    if cfg.pointwise:
        separable(net, cfg.pointwise, cg=cfg.cg, co=cfg.co)
    c = count_flops_params(net, (1, 1, 32, 32))
    return {"mmacs": c["macs"] / 1e6, "params_m": c["params"] / 1e6}


def run_variants(args, variants: list, rs: ResultSet, work: Path, paper: dict) -> None:
    """Train every ``(case, variant, cfg)`` within the budget; add its rows to ``rs``: costs
    once per ``(case, variant)``, each run's accuracy as ``test_acc_seed{S}`` /
    ``best_test_acc_seed{S}``, and per variant the mean over every seed in ``rs`` (an
    earlier call's seeds merged in count too; :func:`add_accuracy`)."""
    budget = TimeBudget(args.time_budget)
    costed: set = set()
    for case, variant, cfg in variants:
        meta, finished = train_within(cfg, work / f"{case}-{variant}-seed{cfg.seed}.npz", budget)
        ref = paper.get(case, {}).get(variant.split("/")[0], (None, None, None))
        if (case, variant) not in costed:
            costed.add((case, variant))
            for metric, value in costs(cfg.model, cfg).items():
                rs.add(case, variant, metric, value, "M",
                       paper_value=ref[0] if metric == "mmacs" else ref[1])
        if meta is not None and meta["history"]:
            hist = meta["history"]
            reached = hist[-1]["epoch"]
            note = (f"{cfg.epochs} epochs" if finished
                    else f"partial: {reached}/{cfg.epochs} epochs")
            rs.add(case, variant, f"test_acc_seed{cfg.seed}", 100 * hist[-1]["test_acc"], "%",
                   note=note)
            rs.add(case, variant, f"best_test_acc_seed{cfg.seed}",
                   100 * max(h["test_acc"] for h in hist), "%", note=note)
    _latest_per_seed(rs)
    add_accuracy(rs, paper)


def _latest_per_seed(rs: ResultSet) -> None:
    """Drop a merged seed's rows where this call trained that seed again (the later row
    of each ``(case, variant, metric)`` stays)."""
    last = {(r["case"], r["variant"], r["metric"]): i for i, r in enumerate(rs.rows)
            if _SEED.match(r["metric"])}
    rs.rows = [r for i, r in enumerate(rs.rows)
               if last.get((r["case"], r["variant"], r["metric"]), i) == i]


_SEED = re.compile(r"^(best_)?test_acc_seed(\d+)$")


def add_accuracy(rs: ResultSet, paper: dict) -> None:
    """Add ``test_acc`` and ``best_test_acc`` per ``(case, variant)`` of the per-seed rows in
    ``rs``: one run's value, or the mean of several with each seed's number and the spread in
    the note; a partial run is named there.  Their device is the runs' devices.
    ``paper``: case -> {variant: (.., .., acc)}."""
    runs: dict = {}
    for r in rs.rows:
        m = _SEED.match(r["metric"])
        if m:
            run = runs.setdefault((r["case"], r["variant"]), {}).setdefault(int(m[2]), {})
            run["best" if m[1] else "final"] = r["value"]
            run["note"] = r["note"]
            run["device"] = r["device"]
    for (case, variant), seeds in runs.items():
        order = sorted(s for s, run in seeds.items() if "final" in run)
        if not order:
            continue
        finals = [seeds[s]["final"] for s in order]
        partial = [f"seed {s} {seeds[s]['note'].removeprefix('partial: ')}" for s in order
                   if seeds[s]["note"].startswith("partial")]
        if len(order) == 1:
            note = f"seed {order[0]}; paper: CIFAR-10"
        else:
            note = (f"mean of seeds {', '.join(f'{s}: {f:.2f}' for s, f in zip(order, finals))}"
                    f"; sd {np.std(finals, ddof=1):.2f}; paper: CIFAR-10")
        if partial:
            note = f"partial ({', '.join(partial)}); {note}"
        ref = paper.get(case, {}).get(variant.split("/")[0], (None, None, None))
        rs.add(case, variant, "test_acc", float(np.mean(finals)), "%", paper_value=ref[2],
               note=note)
        rs.add(case, variant, "best_test_acc",
               float(np.mean([seeds[s].get("best", seeds[s]["final"]) for s in order])), "%")
        # a mean is measured where its runs were (seeds merged from other machines)
        devices = " + ".join(sorted({seeds[s]["device"] for s in order}))
        rs.rows[-1]["device"] = rs.rows[-2]["device"] = devices


def merge_earlier(rs: ResultSet, paths: list, runs: list) -> None:
    """Keep the rows of earlier calls' CSVs (``paths``, oldest first) that this call does not
    make again: every ``(case, variant)`` made now gets its costs anew, and the means are
    computed again from all seeds; a seed trained again now replaces that seed's rows
    (:func:`_latest_per_seed`); of several files, later ones win."""
    made = {(case, v) for case, v, _ in runs}
    kept: dict = {}
    for path in paths:
        for r in read_csv(path):
            key = (r["case"], r["variant"])
            if not _SEED.match(r["metric"]) and (
                    key in made or r["metric"] in ("test_acc", "best_test_acc")):
                continue          # costs of runs made now, means: computed again
            kept[key + (r["metric"],)] = r
    rs.extend(list(kept.values()))


def merge_arg(p) -> None:
    merge_arguments(p, keeps="their rows of runs not made now are kept and their seeds join "
                             "the means (a long study split over calls)",
                    nothing="train nothing")


def check_merge(p, args, defaults: dict) -> None:
    """Refuse ``--report-only`` without ``--merge``, or with a choice of what to train (it
    trains nothing: such an option would be ignored), before anything is made; else give
    the training options left unset their ``defaults``."""
    check_report_only(p, args, [f"--{k}" for k in defaults if getattr(args, k) is not None],
                      "trains nothing")
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)


def runs_or_report(args, runs: list, rs: ResultSet, work, paper: dict) -> None:
    """Train ``runs`` into ``rs`` after the ``--merge`` CSVs' rows; with ``--report-only``
    train nothing and compute the seed means of the merged rows alone."""
    if args.report_only:
        merge_earlier(rs, args.merge, [])
        # the numbers were measured where the merged runs trained, not on this machine
        rs.env = merged_environment(rs.env, args.merge, rs.rows)
        _latest_per_seed(rs)
        add_accuracy(rs, paper)
        return
    merge_earlier(rs, args.merge, runs)
    run_variants(args, runs, rs, work, paper)


def common(args, model: str) -> dict:
    return dict(model=model, batch_size=128, device=args.device, epochs=args.epochs,
                train_limit=2000 if args.quick else None, test_limit=1000 if args.quick else None)


def epochs_of(args, rows: list) -> str:
    """How long the runs in ``rows`` trained, as their seeds' notes say ("15 epochs"; runs
    merged from calls of other lengths: each length named); ``--epochs`` without runs."""
    found = sorted({int(m[1]) for r in rows if _SEED.match(r["metric"])
                    for m in [re.search(r"(\d+) epochs", r["note"])] if m})
    return " / ".join(map(str, found)) + " epochs" if found else f"{args.epochs} epochs"


def report(args, rs: ResultSet, env: dict, title: str, paths: dict) -> None:
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], title, env,
                   [("Test accuracy (%)", pivot_markdown(rows, "test_acc")),
                    ("Multiply-adds (M)", pivot_markdown(rows, "mmacs")),
                    ("Parameters (M)", pivot_markdown(rows, "params_m")),
                    ("All rows", long_markdown(rows)),
                    ("Setup", f"Fashion-MNIST padded to 32x32, {epochs_of(args, rows)}, SGD "
                              f"(cosine), batch 128; the paper's numbers are CIFAR-10.")])
    plot_accuracy(rows, paths["png"])
    print(pivot_markdown(rows, "test_acc"))


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", choices=MODELS, help="default: all five")
    p.add_argument("--epochs", type=int, help="default: 30")
    p.add_argument("--seeds", type=int, nargs="+",
                   help="train each run with these seeds; accuracy is their mean (default: 0)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS,
                   help="default: all; dw+pw: the same depthwise-separable network with a "
                        "full 1x1 (the issue's accuracy yardstick; MobileNet's original is "
                        "that already)")
    merge_arg(p)
    training_args(p)
    args = p.parse_args(argv)
    check_merge(p, args, dict(models=list(MODELS), epochs=30, seeds=[0],
                              variants=list(VARIANTS)))
    if args.quick:
        args.epochs = 1
    paths = outputs(NAME, args.out)
    work = None if args.report_only else work_dir(NAME, args, paths)   # a report trains nothing
    forms = {"original": {}, "dw+pw": dict(pointwise="pw"),
             "dw+scc": dict(pointwise="scc", cg=2, co=0.5)}
    variants = [(model, v, TrainConfig(**common(args, model), **forms[v], seed=seed))
                for model in args.models for v in VARIANTS if v in args.variants
                and not (v == "dw+pw" and model == "mobilenet_v1")   # its original is DW+PW
                for seed in args.seeds]
    env = bench.environment()
    rs = ResultSet(NAME, env)
    runs_or_report(args, variants, rs, work, PAPER)
    report(args, rs, rs.env, "DSXplore table II on Fashion-MNIST: original, DW+PW and "
           "DW+SCC-cg2-co50", paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
