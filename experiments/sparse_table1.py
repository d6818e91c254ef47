"""Sparse table 1: accuracy of the full, the ADMM-pruned and the re-pruned-and-retrained model.

Rumi et al. (PACT'20), Table 1, on Fashion-MNIST padded to 32x32 instead of CIFAR-10.  For
each model (``--models``, each with its pruning ratio: ResNet-18 8x, VGG-16 4x, GoogLeNet
8x) four training phases run, each checkpointed after every epoch in ``--work``:

* ``full`` — the dense model, trained from scratch;
* ``admm`` — ADMM pruning from it: every convolution but the stem moves towards its
  ``ceil(size / ratio)`` largest weights (rho grows each epoch);
* ``pruned`` — the hard prune to those weights, then fine-tuning under the masks;
* ``repruned`` — Algorithm 1 and performance-aware re-pruning (budget ``--b3`` of each
  layer's squared norm) on the pruned model, then retraining (10 epochs) under the masks
  that keep every dense-block cell trainable.  Beyond the paper, ``--min-fill`` (default
  0.5; 0 is the paper's): blocks whose nonzeros fill less of their cells are dissolved
  into the remainder before re-pruning, so that retraining does not turn a mostly empty
  block's zeros into weights (``compress.reprune.dissolve_blocks``); and where the
  paper's integer costs ``ceil(1000 w^2)`` cannot weigh a layer's small weights, the
  knapsack is solved greedily on the true costs (``reprune(solver="auto")``).

Reports each phase's test accuracy beside the paper's, each layer's density before and
after re-pruning and the share of its nonzeros in dense blocks, and the ablation (before
any retraining): the share of the benefit model's work (output rows written, input rows
read) that the knapsack and removal by magnitude alone free at each budget of
``--b3-sweep``.  ``--merge`` keeps earlier calls' rows of other models in one table;
``--time-budget`` stops between epochs and a later call resumes; ``--slim`` keeps a
finished phase's checkpoint as its weights alone (``training.checkpoint.slim``), so that
a model's phases can run in separate calls on separate machines (a later call needs only
the last finished phase's checkpoint and the others' ``PHASE.meta.json``), and
``--stop-after`` ends a call after a phase.  ``--retrain-sweep`` then re-prunes at every
other budget of ``--b3-sweep`` and retrains each model as the re-pruned phase (variants
``repruned b3=B``: the paper's B3 sweep with retraining).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from experiments._common import (
    merged_rows,
    outputs,
    parser,
    plot_accuracy,
    training_args,
    work_dir,
)
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.compress.prune import prune_candidates, save_masks
from tensorconv.compress.reprune import METHODS, layout_work
from tensorconv.compress.sparse import reprune_layers, reprune_masks
from tensorconv.files import atomic_write
from tensorconv.nn import get_model
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown
from training import checkpoint as ckpt
from training.chunks import TimeBudget, train_within
from training.train import TrainConfig

NAME = "sparse_table1"
# model -> (pruning ratio, paper's full / ADMM-pruned / re-pruned accuracy on CIFAR-10)
MODELS = {"resnet18": (8.0, (94.14, 94.13, 94.34)), "vgg16": (4.0, (93.54, 93.13, 93.43)),
          "googlenet": (8.0, (95.48, 95.32, 95.42)), "small_cnn": (4.0, (None, None, None))}
PHASES = ("full", "admm", "pruned", "repruned")


def configs(args, model: str, work: Path) -> dict:
    """The four phases' training configurations for ``model``."""
    ratio = MODELS[model][0]
    pad = None if model == "small_cnn" else 32
    common = dict(model=model, batch_size=128, device=args.device, pad_to=pad,
                  train_limit=2000 if args.quick else None, test_limit=1000 if args.quick else None)
    tune = dict(common, lr=0.01, warmup_epochs=0)
    return {
        "full": TrainConfig(**common, epochs=args.full_epochs),
        "admm": TrainConfig(**tune, epochs=args.admm_epochs, init_from=str(work / "full.npz"),
                            admm_prune_ratio=ratio, admm_rho=args.rho,
                            admm_rho_growth=args.rho_growth),
        "pruned": TrainConfig(**tune, epochs=args.finetune_epochs,
                              init_from=str(work / "admm.npz"), prune_ratio=ratio),
        "repruned": TrainConfig(**tune, epochs=args.retrain_epochs,
                                init_from=str(work / "pruned.npz"),
                                prune_masks=str(work / "repruned_masks.npz")),
    }


def write_pruned_masks(model: str, work: Path) -> Path:
    """The fine-tuned pruned model's nonzero pattern, {layer: bool kernel}, in
    ``pruned_masks.npz`` (small, unlike the checkpoint: what ``sparse_layers`` and
    ``sparse_e2e`` time before re-pruning)."""
    path = work / "pruned_masks.npz"
    if not path.exists():
        net = get_model(model, in_channels=1, num_classes=10)
        net.load_state_dict(ckpt.load(work / "pruned.npz")[0])
        save_masks(path, {name: backend.to_host(conv.weight.data) != 0
                          for name, conv in prune_candidates(net).items()})
    return path


def write_reprune_masks(args, model: str, work: Path) -> tuple[dict, dict]:
    """Re-prune the fine-tuned pruned model; write its masks (once).  Returns the report at
    ``--b3`` and the ablation: {layer: (Algorithm 1's layer, {(method, b3): Repruned})} at
    every budget of ``--b3-sweep`` by the knapsack and by magnitude alone."""
    net = get_model(model, in_channels=1, num_classes=10)
    net.load_state_dict(ckpt.load(work / "pruned.npz")[0])
    layers = reprune_layers(net, sorted(set(args.b3_sweep) | {args.b3}), METHODS, t2=args.t2,
                            seed=0, min_fill=args.min_fill)
    masks, report = reprune_masks(net, args.b3, layers=layers)
    path = work / "repruned_masks.npz"
    if not path.exists():
        save_masks(path, masks)
    return report, layers


def add_ablation(rs: ResultSet, case: str, layers: dict) -> None:
    """Per layer and over all layers: the share of the benefit model's work
    (:func:`layout_work`) that each method frees at each budget, and the norm it removes."""
    totals: dict = {}
    for layer, (packed, runs) in layers.items():
        work = layout_work(packed.layout)
        for (method, b3), r in sorted(runs.items()):
            freed = work - layout_work(r.packed.layout)
            key = f"{method} b3={b3:g}"
            rs.add(f"{case}/{layer}", key, "work_freed", freed / work if work else 0.0, "1")
            rs.add(f"{case}/{layer}", key, "removed_l2", r.removed_l2, "1")
            done, whole = totals.get(key, (0, 0))
            totals[key] = (done + freed, whole + work)
    for key, (freed, work) in totals.items():
        rs.add(f"{case} all layers", key, "work_freed", freed / work if work else 0.0, "1",
               note="C1 per output row written + C2 per input row read, C1 = C2 = 1")


def retrain_sweep(args, rs: ResultSet, case: str, cfg: TrainConfig, work: Path, layers: dict,
                  budget: TimeBudget) -> None:
    """Re-prune at every other budget of ``--b3-sweep`` and retrain each as the re-pruned
    phase (from the fine-tuned pruned model, ``--retrain-epochs``): a ``test_acc`` row of
    variant ``repruned b3=B`` each, and each layer's trainable density."""
    for b3 in sorted(set(args.b3_sweep) - {args.b3}):
        masks_path = work / f"repruned_b3_{b3:g}_masks.npz"
        if not masks_path.exists():
            save_masks(masks_path, reprune_masks(None, b3, layers=layers)[0])
        variant = f"repruned b3={b3:g}"
        for layer, (_, runs) in layers.items():
            rs.add(f"{case}/{layer}", variant, "density",
                   float(runs[("knapsack", b3)].packed.layout.mask().mean()), "1")
        phase_cfg = dataclasses.replace(cfg, prune_masks=str(masks_path))
        meta, finished = run_phase(args, phase_cfg, work, f"repruned_b3_{b3:g}", budget)
        if not add_accuracy(rs, case, variant, meta, finished, cfg.epochs) or not finished:
            return


def add_accuracy(rs: ResultSet, case: str, variant: str, meta, finished: bool, epochs: int,
                 paper_value=None, note: str = "") -> bool:
    """A phase's last test accuracy as a row (a partial run says so in the note); False
    when it has not finished an epoch yet."""
    if meta is None or not meta["history"]:
        return False
    done = meta["history"][-1]["epoch"]
    rs.add(case, variant, "test_acc", 100 * meta["history"][-1]["test_acc"], "%",
           paper_value=paper_value, note=note if finished else f"partial: {done}/{epochs} epochs")
    return True


def run_phase(args, cfg: TrainConfig, work: Path, phase: str, budget: TimeBudget):
    """Train ``phase`` into ``work/{phase}.npz`` within ``budget``: its metadata and whether
    it finished.  With ``--slim`` a finished phase's checkpoint is slimmed and its metadata
    also kept as ``{phase}.meta.json``; a later call that has the record but not the
    checkpoint (left behind to carry less: only the next phase reads its weights) takes the
    phase as finished."""
    path, record = work / f"{phase}.npz", work / f"{phase}.meta.json"
    if not path.exists() and record.exists():
        meta = json.loads(record.read_text())
        if meta["epoch"] != cfg.epochs:
            raise ValueError(f"{record} records {meta['epoch']} epochs of {phase!r}, this call "
                             f"asks for {cfg.epochs}: bring {path.name} or remove the record")
        return meta, True
    meta, finished = train_within(cfg, path, budget)
    if finished and args.slim:
        ckpt.slim(path)
        atomic_write(record, json.dumps(ckpt.load(path)[2]).encode())
    return meta, finished


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", choices=sorted(MODELS),
                   default=["resnet18", "vgg16", "googlenet"])
    p.add_argument("--full-epochs", type=int, default=30)
    p.add_argument("--admm-epochs", type=int, default=10)
    p.add_argument("--finetune-epochs", type=int, default=10)
    p.add_argument("--retrain-epochs", type=int, default=10)
    p.add_argument("--rho", type=float, default=1e-3)
    p.add_argument("--rho-growth", type=float, default=1.5)
    p.add_argument("--b3", type=float, default=0.2, help="re-pruning budget (paper: 0.2)")
    p.add_argument("--b3-sweep", type=float, nargs="+", default=[0.3, 0.2, 0.1],
                   help="budgets of the re-pruning ablation (knapsack vs magnitude alone; "
                        "no retraining)")
    p.add_argument("--t2", type=int, default=8, help="Algorithm 1's column threshold")
    p.add_argument("--min-fill", type=float, default=0.5,
                   help="blocks filled less are dissolved into the remainder before "
                        "re-pruning (0: the paper, every block kept)")
    p.add_argument("--slim", action="store_true",
                   help="rewrite each finished phase's checkpoint as its weights alone "
                        "(compressed): small enough to carry a model's phases across machines")
    p.add_argument("--retrain-sweep", action="store_true",
                   help="after the four phases, re-prune at every other budget of --b3-sweep "
                        "and retrain each (the paper's B3 sweep; 10 more epochs a budget)")
    p.add_argument("--stop-after", choices=PHASES, default=None,
                   help="the last phase this call runs (a model's phases split over calls, "
                        "each ending where its slim checkpoint can travel; the sweep of "
                        "--retrain-sweep comes after 'repruned')")
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help="this experiment's CSVs from earlier calls: their rows of models not "
                        "run now are kept (models trained in separate calls, one table)")
    training_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.full_epochs = args.admm_epochs = args.finetune_epochs = args.retrain_epochs = 1
    paths = outputs(NAME, args.out)
    budget = TimeBudget(args.time_budget)
    env = bench.environment()
    rs = ResultSet(NAME, env)
    rs.extend(merged_rows(args.merge, {f"{m}-{MODELS[m][0]:g}x" for m in args.models}))
    for model in args.models:
        work = work_dir(NAME, args, paths, model)
        ratio, paper = MODELS[model]
        case = f"{model}-{ratio:g}x"
        cfgs = configs(args, model, work)
        for phase, paper_acc in zip(PHASES, (paper[0], None, paper[1], paper[2])):
            if phase == "repruned":
                write_pruned_masks(model, work)
                report, layers = write_reprune_masks(args, model, work)
                add_ablation(rs, case, layers)
                for layer, r in report.items():
                    lay, before = r.packed.layout, layers[layer][0]
                    size = before.layout.rows * before.layout.cols
                    rs.add(f"{case}/{layer}", "pruned", "density", before.nonzeros() / size,
                           "1")
                    rs.add(f"{case}/{layer}", "repruned", "density",
                           float(lay.mask().mean()), "1",
                           note="trainable: the remainder's weights and every block cell")
                    rs.add(f"{case}/{layer}", "repruned", "removed_l2", r.removed_l2, "1")
                    rs.add(f"{case}/{layer}", "repruned", "blocks", len(lay.blocks), "count")
                    rs.add(f"{case}/{layer}", "repruned", "benefit", r.benefit, "count",
                           note=f"{r.rows} block rows, {r.cols} block columns, {r.weights} "
                                f"remainder weights removed")
            meta, finished = run_phase(args, cfgs[phase], work, phase, budget)
            if not add_accuracy(rs, case, phase, meta, finished, cfgs[phase].epochs,
                                paper_acc, "paper: CIFAR-10"):
                break
            if not finished or phase == args.stop_after:
                break
        else:   # every phase finished: the other budgets of the sweep, retrained too
            if args.retrain_sweep:
                retrain_sweep(args, rs, case, cfgs["repruned"], work, layers, budget)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    columns = list(PHASES) + sorted({r["variant"] for r in rows if r["metric"] == "test_acc"
                                     and r["variant"].startswith("repruned b3=")})
    write_markdown(paths["md"], "Sparse table 1 on Fashion-MNIST: full, pruned, re-pruned",
                   env, [("Test accuracy (%)", pivot_markdown(rows, "test_acc", columns)),
                         ("Re-pruning per layer", long_markdown(
                             [r for r in rows if "/" in r["case"] and r["variant"] in
                              ("pruned", "repruned") and r["metric"] != "test_acc"])),
                         ("Ablation: share of the work freed (no retraining)",
                          pivot_markdown(rows, "work_freed")),
                         ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])
    plot_accuracy(rows, paths["png"])
    print(pivot_markdown(rows, "test_acc", columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
