"""Quickstart: train a small CNN on a Fashion-MNIST subset, end to end, on any backend.

Runs the whole stack — data loading, the autograd, our convolution (CUDA
kernels on a GPU, NumPy on a CPU-only machine), SGD with a cosine schedule —
in a couple of minutes on a CPU, then prints a table (accuracy, parameters,
FLOPs, time) and writes ``results/quickstart.{csv,md,png}``.
"""

from __future__ import annotations

import time

from experiments._common import outputs, parser
from tensorconv import bench
from tensorconv.nn import count_flops_params
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown
from training.train import TrainConfig, train

NAME = "quickstart"


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
    t0 = time.perf_counter()
    result = train(cfg)
    seconds = time.perf_counter() - t0
    cost = count_flops_params(result.model, (1, 1, 28, 28))
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
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    table = long_markdown([r for r in rows if r["metric"] != "test_accuracy_curve"])
    write_markdown(paths["md"], "Quickstart: a small CNN trained on Fashion-MNIST", env,
                   [("Results", table),
                    ("Setup", f"`{cfg}`\n\nNo paper figure: a check that the stack trains "
                              "end to end. ResNet-20 results are in `train_resnet20.md`.")])

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    steps, losses = zip(*result.step_losses)
    a1.plot(steps, losses)
    a1.set_xlabel("step")
    a1.set_ylabel("training loss")
    a2.plot([h["epoch"] for h in result.history], [100 * h["test_acc"] for h in result.history], "o-")
    a2.set_xlabel("epoch")
    a2.set_ylabel("test accuracy (%)")
    fig.suptitle(f"small CNN on Fashion-MNIST ({variant}): {100 * last['test_acc']:.1f}%")
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=120)
    plt.close(fig)

    print(f"device: {env['device']}")
    print(table)
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
