"""Train a zoo model on Fashion-MNIST (padded to 32x32) with SGD; accuracy curve and timing.

``tensorconv run train --model resnet20`` trains ResNet-20 for 30 epochs
(cosine schedule, Nesterov momentum, weight decay 5e-4, random crop + flip),
checkpointing after every epoch to ``--checkpoint``.  ``--stop-after N`` ends
the call after N epochs; the next call with the same checkpoint resumes
exactly, so a long run fits machines with a time limit per command.  Writes
``train_MODEL.{csv,md,png}`` (and the checkpoint) into ``--out``.

``--gpus N`` trains data-parallel on N GPUs, one process each (:mod:`training.launch`):
the same global batch and shuffling as one GPU, gradients averaged through NCCL while the
backward pass runs, rank 0 evaluating and writing the checkpoint and the results.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.nn import MODELS, count_flops_params
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown
from training.launch import launch
from training.parallel import ENV_RANK, Parallel
from training.train import TrainConfig, train

TARGETS = {"resnet20": 92.5}  # issue target (test accuracy, %) on Fashion-MNIST


def main(argv=None) -> int:
    p = parser("train", __doc__)
    d = TrainConfig()
    p.add_argument("--model", default=d.model, choices=sorted(MODELS))
    p.add_argument("--dataset", default=d.dataset, choices=("fashion_mnist", "synthetic"),
                   help="synthetic: a small generated set (smoke tests; no download)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--schedule", default=d.schedule, choices=("cosine", "step"))
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--train-limit", type=int, default=None)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    p.add_argument("--precision", default=d.precision, choices=("fp32", "tf32"),
                   help="the tensor-core convolutions' products: fp32 (3xTF32) or tf32")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="checkpoint file (default: train_MODEL.ckpt.npz in --out)")
    p.add_argument("--stop-after", type=int, default=None, help="epochs to run in this call")
    p.add_argument("--gpus", type=int, default=None,
                   help="train data-parallel on this many GPUs, one process each")
    p.add_argument("--sync-bn", action="store_true",
                   help="with --gpus: batch norm over the whole global batch (every GPU's "
                        "images, as PyTorch's SyncBatchNorm): the same training as one GPU")
    p.output_name = lambda ns: (f"train_{ns.model}" + ("_tf32" if ns.precision == "tf32" else "")
                                + ("_synthetic" if ns.dataset == "synthetic" else ""))
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.gpus is not None and ENV_RANK not in os.environ:
        if args.gpus < 1:
            p.error(f"--gpus must be >= 1, got {args.gpus}")
        if args.device == "cpu":
            p.error("--gpus trains on GPUs: drop --device cpu")
        _check_gpus(p, args.gpus, args.batch_size)
        return launch([sys.executable, "-m", "experiments.train", *_without_gpus(argv)],
                      args.gpus)
    parallel = Parallel.from_env(sync_bn=args.sync_bn)
    if args.quick:
        args.epochs, args.train_limit = min(args.epochs, 2), args.train_limit or 2000
    cfg = TrainConfig(model=args.model, dataset=args.dataset, epochs=args.epochs,
                      batch_size=args.batch_size, lr=args.lr,
                      weight_decay=args.weight_decay, schedule=args.schedule,
                      augment=not args.no_augment, train_limit=args.train_limit,
                      test_limit=1000 if args.quick else None, seed=args.seed, device=args.device,
                      precision=args.precision)
    name = p.output_name(args)
    paths = outputs(name, args.out)
    ckpt = args.checkpoint or paths["csv"].with_suffix(".ckpt.npz")
    try:
        result = train(cfg, ckpt, stop_after=args.stop_after, parallel=parallel)
    finally:
        if parallel is not None:
            parallel.close()   # train()'s captured step, and its graphs, are gone
    if parallel is not None and not parallel.main:
        return 0                                  # rank 0 writes the results

    env = bench.environment()
    cost = count_flops_params(result.model, (1, 1, 32, 32))
    rs = ResultSet(name, env)
    on_gpu = result.model.xp.__name__ == "cupy"
    variant = ("cuda" if on_gpu else "numpy") + ("-tf32" if on_gpu and cfg.precision == "tf32"
                                                 else "")
    for h in result.history:
        for metric in ("train_loss", "test_loss"):
            rs.add(f"epoch{h['epoch']}", variant, metric, h[metric], "1")
        for metric in ("train_acc", "test_acc"):
            rs.add(f"epoch{h['epoch']}", variant, metric, 100 * h[metric], "%")
        rs.add(f"epoch{h['epoch']}", variant, "epoch_time", h["seconds"], "s")
    final = result.history[-1]
    target = TARGETS.get(args.model) if cfg.dataset == "fashion_mnist" else None
    rs.add("final", variant, "test_acc", 100 * final["test_acc"], "%",
           note=f"target >= {target}%" if target else "")
    rs.add("final", variant, "epochs", final["epoch"], "count")
    rs.add("final", variant, "train_time", sum(h["seconds"] for h in result.history), "s")
    rs.add("final", variant, "params", cost["params"], "count")
    rs.add("final", variant, "macs_per_image", cost["macs"], "MAC")
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    status = "finished" if result.finished else f"partial: {final['epoch']}/{cfg.epochs} epochs"
    on = "Fashion-MNIST (32x32)" if cfg.dataset == "fashion_mnist" else "synthetic data"
    write_markdown(paths["md"], f"Training {args.model} on {on} — {status}", env,
                   [("Final", long_markdown([r for r in rows if r["case"] == "final"])),
                    ("Per epoch", long_markdown([r for r in rows if r["case"] != "final"])),
                    ("Setup", f"`{cfg}`; checkpoint `{ckpt}`. Each epoch's time includes the "
                              "evaluation on the 10,000 test images.")])

    plt = pyplot()

    epochs = [h["epoch"] for h in result.history]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    a1.plot(epochs, [h["train_loss"] for h in result.history], label="train")
    a1.plot(epochs, [h["test_loss"] for h in result.history], label="test")
    a1.set_xlabel("epoch")
    a1.set_ylabel("loss")
    a1.legend()
    a2.plot(epochs, [100 * h["train_acc"] for h in result.history], label="train")
    a2.plot(epochs, [100 * h["test_acc"] for h in result.history], label="test")
    if target:
        a2.axhline(target, color="gray", ls="--", label="target")
    a2.set_xlabel("epoch")
    a2.set_ylabel("accuracy (%)")
    a2.legend()
    fig.suptitle(f"{args.model} on {on} ({variant}): {100 * final['test_acc']:.2f}% "
                 f"after {final['epoch']} epochs")
    save_figure(fig, paths["png"])
    print(f"{status}; test accuracy {100 * final['test_acc']:.2f}%; wrote {paths['csv']}")
    return 0


def _gpu_count() -> int:
    """The GPUs this process may use (those ``CUDA_VISIBLE_DEVICES`` leaves); 0 without."""
    if not backend.gpu_available():
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def _check_gpus(p, gpus: int, batch_size: int) -> None:
    """Refuse, before any rank starts, a GPU count this machine lacks or a global batch
    that does not split over it."""
    have = _gpu_count()
    if have == 0:
        p.error(f"--gpus {gpus} trains on GPUs, and CuPy sees none here")
    if gpus > have:
        p.error(f"--gpus {gpus}, but this machine has {have} GPU(s)")
    if batch_size % gpus:
        p.error(f"--batch-size {batch_size} does not split over {gpus} GPUs")


def _without_gpus(argv: list) -> list:
    """``argv`` less its ``--gpus N`` (or ``--gpus=N``): what each rank runs."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--gpus":
            skip = True
        elif not a.startswith("--gpus="):
            out.append(a)
    return out


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog="python -m experiments.train"))
