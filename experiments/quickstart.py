"""Quickstart: classify Fashion-MNIST with random convolutional features (any backend).

A fixed bank of random 5x5 filters (our ``conv2d``: the CUDA direct kernel on
a GPU, NumPy on a CPU), ReLU and 4x4 average pooling turn each image into
features; a ridge-regression read-out is fitted in closed form.  It exercises
the data loader, the conv op and the results format end to end in about a
minute on a CPU, and prints a table of accuracy, sizes and times.
"""

from __future__ import annotations

import time

import numpy as np

from experiments._common import outputs, parser
from tensorconv import backend, bench, data, ops
from tensorconv.results import ResultSet, long_markdown, read_csv, write_markdown

NAME = "quickstart"


def conv_features(images, filters, xp, batch: int = 500):
    """ReLU(conv(images, filters)) average-pooled 4x4 and flattened: (N, F * 7 * 7)."""
    out = []
    for start in range(0, len(images), batch):
        x = xp.asarray(images[start:start + batch])
        y = ops.conv2d(x, filters, padding=2, relu=True)           # (B, F, 28, 28)
        n, f, h, w = y.shape
        pooled = y.reshape(n, f, h // 4, 4, w // 4, 4).mean(axis=(3, 5))
        out.append(pooled.reshape(n, -1))
    return xp.concatenate(out)


def ridge_fit(features, labels, classes: int, lam: float, xp):
    """Closed-form ridge regression onto one-hot targets; returns (weights, bias)."""
    mean = features.mean(axis=0)
    f = features - mean
    onehot = xp.eye(classes, dtype=features.dtype)[labels]
    gram = f.T @ f + lam * xp.eye(f.shape[1], dtype=f.dtype)
    weights = xp.linalg.solve(gram, f.T @ (onehot - onehot.mean(axis=0)))
    bias = onehot.mean(axis=0) - mean @ weights
    return weights, bias


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--train", type=int, default=None, help="training images (default 12000)")
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    n_train = args.train or (3000 if args.quick else 12000)
    n_test = 1000 if args.quick else 10000

    xp = backend.require_cuda("quickstart") if backend.gpu_available() else np
    train = data.load_fashion_mnist("train").subset(n_train, seed=args.seed)
    test = data.load_fashion_mnist("test", limit=n_test)
    rng = np.random.default_rng(args.seed)
    filt = rng.standard_normal((args.filters, 1, 5, 5)).astype(np.float32)
    filt -= filt.mean(axis=(2, 3), keepdims=True)  # zero-mean filters respond to edges, not light
    filt /= np.linalg.norm(filt.reshape(args.filters, -1), axis=1)[:, None, None, None]
    filters = xp.asarray(filt)

    t0 = time.perf_counter()
    f_train = conv_features(train.images, filters, xp)
    f_test = conv_features(test.images, filters, xp)
    if xp is not np:
        xp.cuda.Device().synchronize()
    t_feat = time.perf_counter() - t0
    t0 = time.perf_counter()
    weights, bias = ridge_fit(f_train.astype(xp.float64), xp.asarray(train.labels), 10, 1.0, xp)
    pred = backend.to_host(xp.argmax(f_test.astype(xp.float64) @ weights + bias, axis=1))
    t_fit = time.perf_counter() - t0
    acc = float((pred == test.labels).mean())
    confusion = np.zeros((10, 10), dtype=np.int64)
    np.add.at(confusion, (test.labels, pred), 1)

    env = bench.environment()
    rs = ResultSet(NAME, env)
    variant = "cuda-direct" if xp is not np else "numpy"
    case = f"fmnist-{n_train}train-{n_test}test"
    rs.add(case, variant, "test_accuracy", 100 * acc, "%")
    rs.add(case, variant, "features", f_train.shape[1], "count")
    rs.add(case, variant, "conv_features_time", t_feat, "s")
    rs.add(case, variant, "ridge_fit_time", t_fit, "s")
    rs.add(case, variant, "conv_throughput", (n_train + n_test) / t_feat, "images/s")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    table = long_markdown(rows)
    write_markdown(paths["md"], "Quickstart: random conv features on Fashion-MNIST", env,
                   [("Results", table),
                    ("Notes", "Random 5x5 zero-mean filters, ReLU, 4x4 average pooling, ridge "
                              "read-out (lambda = 1). No training of the filters: a check that "
                              "the pipeline works end to end, not a paper result.")])

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    im = ax.imshow(confusion / confusion.sum(axis=1, keepdims=True), cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(10), data.FASHION_MNIST_CLASSES, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(10), data.FASHION_MNIST_CLASSES, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"Fashion-MNIST, random conv features: {100 * acc:.1f}% ({variant})")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=120)
    plt.close(fig)

    print(f"device: {env['device']}")
    print(table)
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
