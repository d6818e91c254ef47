"""CP accuracy: a trained ResNet-20 (Fashion-MNIST) CP-decomposed at several ranks, fine-tuned.

From a trained checkpoint (``--pretrained``), every 3x3 convolution with at
least 16 input and output channels (18 of ResNet-20's 19; the 1-channel stem
stays dense) is replaced by a rank-R ``CPConv2d`` whose factors come from CP-ALS
(tensorly ``parafac``, each term's four factors balanced to equal norms) on the
trained kernel; the model is then fine-tuned
(SGD from each ``--lrs`` learning rate, cosine, checkpointed every epoch; ``--time-budget`` stops
between epochs and a later call resumes).  Reported per rank: the mean
reconstruction error, test accuracy right after decomposition and after
fine-tuning, the MAC count, and batch-1 latency (32x32): our inference engine
(one CUDA graph; a CP layer is one fused-kernel launch with BN, residual and
ReLU in its epilogue) against the same network in PyTorch/cuDNN (autotuned,
TF32 off; a CP layer is its four convolutions), eager and as a CUDA graph.
The paper (Reustle et al.) reports kernel times only; it has no accuracy table.
The fine-tuning is short (5 epochs by default) and its gap to the dense model is
reported as measured, not tuned away; eager latencies include Python's launch
cost and vary with the host.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench, timing
from tensorconv.autograd import Tensor, no_grad
from tensorconv.cli import guarded
from tensorconv.compress import cpize
from tensorconv.nn import count_flops_params, get_model
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown
from training import checkpoint as ckpt
from training.chunks import TimeBudget, train_within
from training.train import TrainConfig, evaluate, load_data

NAME = "cp_accuracy"
INPUT = (1, 1, 32, 32)


def config(args, rank: int, lr: float) -> TrainConfig:
    return TrainConfig(model="resnet20", batch_size=128, lr=lr, warmup_epochs=0,
                       epochs=args.finetune_epochs, init_from=str(args.pretrained), cp_rank=rank,
                       device=args.device, train_limit=2000 if args.quick else None,
                       test_limit=1000 if args.quick else None)


def dense_model(pretrained: Path):
    model = get_model("resnet20", in_channels=1)
    model.load_state_dict(ckpt.load(pretrained)[0])
    return model


def cp_model(pretrained: Path, rank: int, state: dict | None = None):
    """The pretrained model decomposed at ``rank`` (and its reconstruction errors), or,
    with ``state``, the fine-tuned CP model of that rank."""
    model = dense_model(pretrained)
    errors = cpize(model, rank, decompose=state is None)
    if state is not None:
        model.load_state_dict(state)
    return model, errors


def latency(rs: ResultSet, case: str, model, quick: bool) -> None:
    """Batch-1 latency of ``model``: our engine (graph, eager) vs PyTorch (eager, graph)."""
    import cupy as cp

    from experiments._torch_mirror import to_torch
    from tensorconv.engine import InferenceEngine

    model.to("gpu").eval()
    x = cp.asarray(np.random.default_rng(0).standard_normal(INPUT).astype(np.float32))
    with no_grad():
        ref = model(Tensor(x)).data
    reps = dict(repeat=20 if quick else 100)
    for graph in (True, False):
        engine = InferenceEngine(model, INPUT, graph=graph)
        err = float(cp.linalg.norm(engine(x) - ref) / cp.linalg.norm(ref))
        v = f"ours-{'graph' if graph else 'eager'}"
        rs.add(case, v, "rel_err", err, "1", note="vs our autograd forward")
        t = engine.time(**reps)
        rs.add(case, v, "latency_us", t.median_us, "us", note=f"{engine.launches} launches")
    if not bench.torch_cudnn_available():
        return
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    net = to_torch(model).cuda()
    xt = torch.from_dlpack(x)

    def run():
        with torch.no_grad():
            return net(xt)

    got = run()
    rs.add(case, "cudnn-eager", "rel_err",
           float(np.linalg.norm(got.cpu().numpy() - ref.get()) / np.linalg.norm(ref.get())), "1",
           note="PyTorch mirror vs our autograd forward")
    rs.add(case, "cudnn-eager", "latency_us",
           timing.time_events(run, framework="torch", **reps).median_us, "us")
    rs.add(case, "cudnn-graph", "latency_us",
           # hold_us=0: the replay's launch is timed, as in our engine's time
           timing.time_graph(run, framework="torch", calls_per_graph=1, hold_us=0,
                             **reps).median_us, "us")


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--pretrained", type=Path, required=True, help="trained ResNet-20 checkpoint")
    p.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16, 32])
    p.add_argument("--finetune-epochs", type=int, default=5)
    p.add_argument("--lrs", type=float, nargs="+", default=[0.001],
                   help="fine-tune once from each of these learning rates")
    p.add_argument("--work", type=Path, default=None,
                   help="checkpoints (default: OUT/cp_accuracy_work)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds for this call")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    args = p.parse_args(argv)
    if args.quick:
        args.finetune_epochs = 1
    paths = outputs(NAME, args.out)
    work = args.work or paths["csv"].parent / f"{NAME}_work"
    work.mkdir(parents=True, exist_ok=True)
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    budget = TimeBudget(args.time_budget)
    _, test_set = load_data(config(args, args.ranks[0], args.lrs[0]))
    base = dense_model(args.pretrained)
    base_macs = count_flops_params(base, INPUT)["macs"]
    pre_acc = ckpt.load(args.pretrained)[2]["history"][-1]["test_acc"]
    rs.add("dense", "trained", "test_acc", 100 * pre_acc, "%", note="the pretrained checkpoint")
    rs.add("dense", "trained", "macs", base_macs, "MAC")
    gpu = backend.gpu_available() and args.device != "cpu"
    finished_all = True
    for rank in args.ranks:
        case = f"rank{rank}"
        model, errors = cp_model(args.pretrained, rank)
        rs.add(case, "decomposed", "reconstruction_error", float(np.mean(list(errors.values()))),
               "1", note=f"mean over {len(errors)} layers, max {max(errors.values()):.3f}")
        if gpu:
            model.to("gpu")
        rs.add(case, "decomposed", "test_acc", 100 * evaluate(model, test_set, model.xp)[1], "%",
               note="before fine-tuning")
        rs.add(case, "decomposed", "macs", count_flops_params(model, INPUT)["macs"], "MAC",
               note=f"{100 * (1 - count_flops_params(model, INPUT)['macs'] / base_macs):.1f}% "
                    "fewer")
        for lr in args.lrs:
            path = work / f"{case}_lr{lr:g}.npz"
            meta, finished = train_within(config(args, rank, lr), path, budget)
            finished_all &= finished
            if meta is not None:
                epochs = meta["history"][-1]["epoch"]
                rs.add(case, f"fine-tuned lr={lr:g}", "test_acc",
                       100 * meta["history"][-1]["test_acc"], "%",
                       note=f"{epochs}/{args.finetune_epochs} epochs"
                            + ("" if finished else ", partial"))
            if gpu and finished and lr == args.lrs[0]:  # latency does not depend on the weights
                tuned, _ = cp_model(args.pretrained, rank, ckpt.load(path)[0])
                latency(rs, case, tuned, args.quick)
    if gpu:
        latency(rs, "dense", base, args.quick)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "CP-decomposed ResNet-20 on Fashion-MNIST: accuracy and batch-1 "
                   "latency", env, [
                       ("Accuracy (%)", pivot_markdown(rows, "test_acc")),
                       ("Batch-1 latency (µs)", pivot_markdown(rows, "latency_us")),
                       ("All rows", long_markdown(rows)),
                       ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " ")
                        + ("" if finished_all else " Some fine-tuning runs are partial."))])
    _plot(rows, args.ranks, args.lrs, paths["png"])
    print(pivot_markdown(rows, "test_acc"))
    print(pivot_markdown(rows, "latency_us"))
    return 0


def _plot(rows, ranks, lrs, path) -> None:
    plt = pyplot()
    cell = {(r["case"], r["variant"], r["metric"]): r["value"] for r in rows}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for v in ["decomposed"] + [f"fine-tuned lr={lr:g}" for lr in lrs]:
        a1.plot(ranks, [cell.get((f"rank{r}", v, "test_acc"), np.nan) for r in ranks], "-o",
                label=v)
    a1.axhline(cell[("dense", "trained", "test_acc")], color="k", ls="--", label="dense")
    a1.set_xscale("log", base=2)
    a1.set_xlabel("CP rank")
    a1.set_ylabel("test accuracy (%)")
    a1.legend(fontsize=8)
    cases = ["dense"] + [f"rank{r}" for r in ranks]
    variants = ["ours-graph", "ours-eager", "cudnn-graph", "cudnn-eager"]
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        a2.bar(np.arange(len(cases)) + i * width,
               [cell.get((c, v, "latency_us"), np.nan) for c in cases], width, label=v)
    a2.set_xticks(np.arange(len(cases)) + 0.4 - width / 2)
    a2.set_xticklabels(cases)
    if any(r["metric"] == "latency_us" for r in rows):  # none on a machine without a GPU
        a2.set_yscale("log")
    a2.set_ylabel("batch-1 latency (µs, log)")
    a2.legend(fontsize=8)
    fig.suptitle("CP ResNet-20 (Fashion-MNIST): accuracy vs rank, latency on an H100", fontsize=10)
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
