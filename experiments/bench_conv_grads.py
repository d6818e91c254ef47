"""Where a training step's convolution time goes: forward, data gradient and weight gradient of
every convolution of ResNet-20 and ResNet-18 (CIFAR-style), ours against cuDNN, fp32 and TF32.

Ours: ``ops.conv2d``, ``ops.conv2d_backward_data`` and ``ops.conv2d_backward_weight`` (the
kernels the autograd runs on the GPU) on their default algorithm ("ours": the tensor-core 3xTF32
implicit GEMM where it is chosen), on the fp32 FMA implicit GEMM alone ("ours-igemm-fp32") and
under ``precision.using("tf32")`` ("ours-tf32"). cuDNN: ``torch.nn.functional.conv2d`` and
``torch.nn.grad.conv2d_input`` / ``conv2d_weight`` with autotuning on, TF32 off ("cudnn-fp32")
and on ("cudnn-tf32"). Each call timed with a CUDA-event pair, median of ``--repeat`` after
warm-up; the per-model totals weigh each layer shape by how often the network has it.
``bench_training`` gives the whole step; this says which kernels to rewrite
(``docs/notes/training_speed.md``).
"""

from __future__ import annotations

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench, ops, precision
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown
from tensorconv.timing import time_events

NAME = "bench_conv_grads"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
PASSES = ("forward", "data_grad", "weight_grad")
# (model, layer, C, K, H, filter, stride, padding, how many the network has)
LAYERS = [
    ("resnet20", "stem", 1, 16, 32, 3, 1, 1, 1), ("resnet20", "stage1", 16, 16, 32, 3, 1, 1, 6),
    ("resnet20", "stage2.down", 16, 32, 32, 3, 2, 1, 1),
    ("resnet20", "stage2", 32, 32, 16, 3, 1, 1, 5),
    ("resnet20", "stage3.down", 32, 64, 16, 3, 2, 1, 1),
    ("resnet20", "stage3", 64, 64, 8, 3, 1, 1, 5),
    ("resnet18", "stem", 1, 64, 32, 3, 1, 1, 1), ("resnet18", "layer1", 64, 64, 32, 3, 1, 1, 4),
    ("resnet18", "layer2.down", 64, 128, 32, 3, 2, 1, 1),
    ("resnet18", "layer2", 128, 128, 16, 3, 1, 1, 3),
    ("resnet18", "layer2.shortcut", 64, 128, 32, 1, 2, 0, 1),
    ("resnet18", "layer3.down", 128, 256, 16, 3, 2, 1, 1),
    ("resnet18", "layer3", 256, 256, 8, 3, 1, 1, 3),
    ("resnet18", "layer3.shortcut", 128, 256, 16, 1, 2, 0, 1),
    ("resnet18", "layer4.down", 256, 512, 8, 3, 2, 1, 1),
    ("resnet18", "layer4", 512, 512, 4, 3, 1, 1, 3),
    ("resnet18", "layer4.shortcut", 256, 512, 8, 1, 2, 0, 1),
]


VARIANTS = ("ours", "ours-igemm-fp32", "cudnn-fp32", "ours-tf32", "cudnn-tf32")
RATIOS = (("ours", "cudnn-fp32"), ("ours", "ours-igemm-fp32"), ("ours-tf32", "cudnn-tf32"))


def _ours(x, w, gy, stride, padding, **algo):
    return (lambda: ops.conv2d(x, w, None, stride, padding, **algo),
            lambda: ops.conv2d_backward_data(gy, w, x.shape, stride, padding, **algo),
            lambda: ops.conv2d_backward_weight(x, gy, w.shape, stride, padding, **algo))


def _in_precision(name, fn):
    def call():
        with precision.using(name):
            return fn()
    return call


def _cudnn(x, w, gy, stride, padding, tf32):
    import torch

    tx, tw, tg = (torch.as_tensor(a, device="cuda") for a in (x, w, gy))

    def flagged(fn):
        def call():
            torch.backends.cudnn.allow_tf32 = tf32
            return fn()
        return call
    return (flagged(lambda: torch.nn.functional.conv2d(tx, tw, None, stride, padding)),
            flagged(lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tg, stride, padding)),
            flagged(lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tg, stride, padding)))


def _variants(x, w, gy, stride, pad):
    ours = _ours(x, w, gy, stride, pad)
    return (("ours", ours), ("ours-igemm-fp32", _ours(x, w, gy, stride, pad, algorithm="igemm")),
            ("cudnn-fp32", _cudnn(x, w, gy, stride, pad, False)),
            ("ours-tf32", tuple(_in_precision("tf32", f) for f in ours)),
            ("cudnn-tf32", _cudnn(x, w, gy, stride, pad, True)))


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeat", type=int, default=None)
    args = p.parse_args(argv)
    if args.batch < 1:
        p.error(f"--batch must be positive, got {args.batch}")
    cp = backend.require_cuda(NAME)
    if not bench.torch_cudnn_available():
        raise SystemExit(f"{NAME} compares against cuDNN: install PyTorch (pip install -e "
                         "'.[baselines]')")
    import torch
    from tqdm import tqdm

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    repeat = args.repeat or (5 if args.quick else 30)
    layers = LAYERS[:2] if args.quick else LAYERS
    rs = ResultSet(NAME, bench.environment(with_torch=True))
    rng = np.random.default_rng(0)
    totals: dict = {}
    for model, layer, c, k, h, r, stride, pad, count in tqdm(layers, desc="layer gradients"):
        x = cp.asarray(rng.standard_normal((args.batch, c, h, h)), cp.float32)
        w = cp.asarray(0.1 * rng.standard_normal((k, c, r, r)), cp.float32)
        y = ops.conv2d(x, w, None, stride, pad)
        gy = cp.asarray(rng.standard_normal(y.shape), cp.float32)
        case = f"{model}/{layer}"
        for variant, calls in _variants(x, w, gy, stride, pad):
            framework = "torch" if variant.startswith("cudnn") else "cupy"
            for name, fn in zip(PASSES, calls):
                us = time_events(fn, warmup=3, repeat=repeat, framework=framework).median_us
                rs.add(case, variant, name, us, "us", note=f"x{count} in the network")
                key = (model, variant, name)
                totals[key] = totals.get(key, 0.0) + count * us
    for (model, variant, name), us in totals.items():
        rs.add(f"{model}/all convolutions", variant, f"{name}_total", us / 1e3, "ms")
    for model in dict.fromkeys(m for m, *_ in layers):
        for name in PASSES:
            for a, b in RATIOS:
                rs.add(f"{model}/all convolutions", f"{a}/{b}", f"{name}_ratio",
                       totals[(model, a, name)] / totals[(model, b, name)], "x",
                       note=f"time ratio: above 1 is slower than {b}")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, tuple(f"{n}_{t}" for t in ("total", "ratio")
                                           for n in PASSES) + PASSES)
    sections.append(("Notes", f"batch {args.batch}, CUDA events, median of {repeat}; "
                              "per-layer rows in microseconds, totals in milliseconds; fp32 "
                              "variants against fp32, tf32 against tf32."))
    write_markdown(paths["md"], "Convolution gradients: ours vs cuDNN", rs.env, sections)

    plt = pyplot()
    tot = [r for r in rows if r["metric"].endswith("_total")]
    labels = list(dict.fromkeys(f"{r['case'].split('/')[0]} {r['metric']}" for r in tot))
    cell = {(f"{r['case'].split('/')[0]} {r['metric']}", r["variant"]): r["value"] for r in tot}
    fig, ax = plt.subplots(figsize=(7, 1 + 0.9 * len(labels)))
    bar = 0.8 / len(VARIANTS)
    for j, v in enumerate(VARIANTS):
        ax.barh([i + bar * j for i in range(len(labels))],
                [cell.get((lab, v), 0.0) for lab in labels], bar, label=v)
    ax.set_yticks([i + 0.4 - bar / 2 for i in range(len(labels))], labels)
    ax.set_xlabel(f"ms per training step, batch {args.batch}")
    ax.legend()
    save_figure(fig, paths["png"])
    print("\n\n".join(f"{m}\n{t}" for m, t in sections[:6]))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
