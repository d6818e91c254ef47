"""Quickstart: train a small CNN on a Fashion-MNIST subset, then Tucker-compress it with ADMM.

Runs the whole stack — data loading, the autograd, our convolution (CUDA
kernels on a GPU, NumPy on a CPU-only machine), SGD with a cosine schedule,
then TDC's ADMM training towards Tucker ranks that remove about half of the
3x3 layers' MACs, decomposition and fine-tuning — in a couple of minutes on a
CPU.  Prints a table (accuracy, parameters, FLOPs, time, and on a GPU the
per-layer latency of the Tucker form against the dense layer) and writes
``quickstart.{csv,md,png}`` into ``--out`` (default ``./tensorconv-results``).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import bench
from tensorconv.cli import guarded
from tensorconv.nn import count_flops_params
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown
from training.train import TrainConfig, train

NAME = "quickstart"


def compress(cfg: TrainConfig, model, work: Path) -> dict:
    """ADMM towards Tucker ranks (about half the 3x3 MACs), decompose, fine-tune; measure."""
    from tensorconv import backend
    from tensorconv.compress import tucker_candidates
    from tensorconv.compress.performance import measure_table
    from tensorconv.compress.ranks import layer_specs

    specs = {s.name: s for s in layer_specs(model, (1, 1, 28, 28))}
    ranks = {name: (max(1, conv.in_channels // 2), max(1, conv.out_channels // 2))
             for name, conv in tucker_candidates(model).items()}
    epochs = 1
    admm = replace(cfg, epochs=epochs, lr=0.02, init_from=str(work / "dense.npz"),
                   admm_ranks=ranks, admm_rho=0.05, admm_rho_growth=2.0)
    train(admm, work / "admm.npz")
    ft = replace(cfg, epochs=epochs, lr=0.02, init_from=str(work / "admm.npz"), tucker_ranks=ranks)
    tuned = train(ft, work / "tucker.npz")
    dense_cost = count_flops_params(model, (1, 1, 28, 28))
    tucker_cost = count_flops_params(tuned.model, (1, 1, 28, 28))
    latency = {}
    if backend.gpu_available() and tuned.model.xp is not np:
        for name, r in ranks.items():
            dense_us, table = measure_table(specs[name], [r], repeat=10)
            latency[name] = (dense_us, table[r])
    return {"acc": tuned.history[-1]["test_acc"], "ranks": ranks, "admm_epochs": epochs,
            "ft_epochs": epochs, "reduction": 1 - tucker_cost["macs"] / dense_cost["macs"],
            "params_reduction": 1 - tucker_cost["params"] / dense_cost["params"],
            "latency": latency}


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--train", type=int, default=None, help="training images (default 20000)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default 3)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    args = p.parse_args(argv)
    cfg = TrainConfig(model="small_cnn", epochs=args.epochs or (2 if args.quick else 3),
                      batch_size=64, lr=0.1, warmup_epochs=0, augment=False, pad_to=None,
                      train_limit=args.train or (5000 if args.quick else 20000),
                      test_limit=2000 if args.quick else 10000, device=args.device)
    with tempfile.TemporaryDirectory(prefix="tensorconv-quickstart-") as tmp:
        work = Path(tmp)  # the checkpoints of this run only: removed when it ends
        t0 = time.perf_counter()
        result = train(cfg, work / "dense.npz")
        seconds = time.perf_counter() - t0
        cost = count_flops_params(result.model, (1, 1, 28, 28))
        tucker = compress(cfg, result.model, work)
    last = result.history[-1]
    env = bench.environment()
    variant = "cuda" if result.model.xp.__name__ == "cupy" else "numpy"
    rs = ResultSet(NAME, env)
    case = f"small_cnn-{cfg.train_limit}img-{cfg.epochs}ep"
    rs.add(case, variant, "test_accuracy", 100 * last["test_acc"], "%")
    rs.add(case, variant, "params", cost["params"], "count")
    rs.add(case, variant, "flops_per_image", cost["flops"], "FLOP", note="2 x MACs, conv+linear")
    rs.add(case, variant, "train_time", seconds, "s", note="data loading and evaluation included")
    rs.add(case, variant, "train_throughput",
           cfg.epochs * cfg.train_limit / sum(h["seconds"] for h in result.history), "images/s")
    for h in result.history:
        rs.add(f"epoch{h['epoch']}", variant, "test_accuracy_curve", 100 * h["test_acc"], "%")
    tcase = f"small_cnn-tucker-{round(100 * tucker['reduction'])}%"
    rs.add(tcase, variant, "test_accuracy", 100 * tucker["acc"], "%",
           note=f"ADMM {tucker['admm_epochs']} + fine-tune {tucker['ft_epochs']} epochs; ranks "
                f"{tucker['ranks']}")
    rs.add(tcase, variant, "flops_reduction", 100 * tucker["reduction"], "%", note="whole model")
    rs.add(tcase, variant, "params_reduction", 100 * tucker["params_reduction"], "%")
    for name, (dense_us, tucker_us) in tucker["latency"].items():
        rs.add(name, "dense", "layer_latency", dense_us, "us", note="CUDA-graph replay, batch 1")
        rs.add(name, "tucker", "layer_latency", tucker_us, "us",
               note="1x1 -> TDC core -> 1x1, CUDA-graph replay, batch 1")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    table = long_markdown([r for r in rows if r["metric"] != "test_accuracy_curve"])
    write_markdown(paths["md"],
                   "Quickstart: a small CNN trained on Fashion-MNIST, then Tucker-compressed", env,
                   [("Results", table),
                    ("Setup", f"`{cfg}`\n\nNo paper figure: a check that the stack trains "
                              "end to end. ResNet-20 results are in `train_resnet20.md`.")])

    plt = pyplot()

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    steps, losses = zip(*result.step_losses)
    a1.plot(steps, losses)
    a1.set_xlabel("step")
    a1.set_ylabel("training loss")
    a2.plot([h["epoch"] for h in result.history], [100 * h["test_acc"] for h in result.history],
            "o-")
    a2.set_xlabel("epoch")
    a2.set_ylabel("test accuracy (%)")
    fig.suptitle(f"small CNN on Fashion-MNIST ({variant}): {100 * last['test_acc']:.1f}%")
    save_figure(fig, paths["png"])

    print(f"device: {env['device']}")
    print(table)
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
