"""Where a training step's convolution time goes: forward, data gradient and weight gradient of
every convolution of ResNet-20 and ResNet-18 (CIFAR-style), ours against cuDNN, fp32 and TF32.

Ours: ``ops.conv2d``, ``ops.conv2d_backward_data`` and ``ops.conv2d_backward_weight`` (the
kernels the autograd runs on the GPU) on their default algorithm ("ours": the tensor-core 3xTF32
implicit GEMM where it is chosen, wgmma on sm_90; Winograd for thin 3x3 forwards and data
gradients and for deep weight gradients, the direct FMA kernel for the thinnest weight
gradients, at a training batch),
on the fp32 FMA implicit GEMM alone ("ours-igemm-fp32"), under ``precision.using("tf32")``
("ours-tf32"), and on sm_90 the same two on ``mma.sync`` tiles instead of wgmma
("ours-mma-sync", "ours-mma-sync-tf32"; a pass whose default is not the implicit GEMM keeps
its default there).  cuDNN:
``torch.nn.functional.conv2d`` and ``torch.nn.grad.conv2d_input`` / ``conv2d_weight`` with
autotuning on, TF32 off ("cudnn-fp32") and on ("cudnn-tf32").  Each pass is timed as a CUDA
graph of ten calls (kernel time, no host launch cost: eager calls of small layers measured
the host), median of ``--repeat`` replays after warm-up; the per-model totals weigh each layer
shape by how often the network has it.  ``bench_training`` gives the whole step; this says
which kernels to rewrite (``docs/notes/training_speed.md``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench, ops, precision
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.ops import direct_conv, igemm_tf32x3
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown
from tensorconv.timing import time_graph

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
MMA_SYNC = ("ours-mma-sync", "ours-mma-sync-tf32")   # sm_90 only: wgmma's counterpart
RATIOS = (("ours", "cudnn-fp32"), ("ours", "ours-igemm-fp32"), ("ours-tf32", "cudnn-tf32"))
MMA_SYNC_RATIOS = (("ours", "ours-mma-sync"), ("ours-tf32", "ours-mma-sync-tf32"))


def _ours(x, w, gy, stride, padding, tiles=(None, None, None), **algo):
    """The three passes writing into buffers of their own (a graph replays them)."""
    import cupy as cp

    y, gx, gw = (cp.empty(shape, cp.float32) for shape in (gy.shape, x.shape, w.shape))
    return (lambda: ops.conv2d(x, w, None, stride, padding, tile=tiles[0], out=y, **algo),
            lambda: ops.conv2d_backward_data(gy, w, x.shape, stride, padding, tile=tiles[1],
                                             out=gx, **algo),
            lambda: ops.conv2d_backward_weight(x, gy, w.shape, stride, padding, tile=tiles[2],
                                               out=gw, **algo))



def _mma_sync_tiles(x, w, stride, pad):
    """Each pass's default tile on mma.sync instead of wgmma (None where the pass does not
    run the tensor-core implicit GEMM)."""
    geom = conv_geometry(x.shape, w.shape, stride=stride, padding=pad)
    facts = backend.device_facts()
    tiles = []
    for mode in range(3):
        p = igemm_tf32x3.problem(geom, mode)
        chosen = direct_conv.choose_algorithm(geom, mode, facts) == "igemm_tf32x3"
        tiles.append(dataclasses.replace(igemm_tf32x3.default_tile(p, facts), wgmma=False)
                     if chosen else None)
    return tuple(tiles)


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


def _variants(x, w, gy, stride, pad, mma_sync: bool):
    ours = _ours(x, w, gy, stride, pad)
    out = [("ours", ours), ("ours-igemm-fp32", _ours(x, w, gy, stride, pad, algorithm="igemm")),
           ("cudnn-fp32", _cudnn(x, w, gy, stride, pad, False)),
           ("ours-tf32", tuple(_in_precision("tf32", f) for f in ours)),
           ("cudnn-tf32", _cudnn(x, w, gy, stride, pad, True))]
    if mma_sync:
        sync = _ours(x, w, gy, stride, pad, _mma_sync_tiles(x, w, stride, pad))
        out += [("ours-mma-sync", sync),
                ("ours-mma-sync-tf32", tuple(_in_precision("tf32", f) for f in sync))]
    return out


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
    mma_sync = igemm_tf32x3.has_wgmma(backend.device_facts())
    ratios = RATIOS + (MMA_SYNC_RATIOS if mma_sync else ())
    for model, layer, c, k, h, r, stride, pad, count in tqdm(layers, desc="layer gradients"):
        x = cp.asarray(rng.standard_normal((args.batch, c, h, h)), cp.float32)
        w = cp.asarray(0.1 * rng.standard_normal((k, c, r, r)), cp.float32)
        y = ops.conv2d(x, w, None, stride, pad)
        gy = cp.asarray(rng.standard_normal(y.shape), cp.float32)
        case = f"{model}/{layer}"
        for variant, calls in _variants(x, w, gy, stride, pad, mma_sync):
            framework = "torch" if variant.startswith("cudnn") else "cupy"
            for name, fn in zip(PASSES, calls):
                us = time_graph(fn, warmup=3, repeat=repeat, calls_per_graph=10,
                                framework=framework).median_us
                rs.add(case, variant, name, us, "us", note=f"x{count} in the network")
                key = (model, variant, name)
                totals[key] = totals.get(key, 0.0) + count * us
    for (model, variant, name), us in totals.items():
        rs.add(f"{model}/all convolutions", variant, f"{name}_total", us / 1e3, "ms")
    for model in dict.fromkeys(m for m, *_ in layers):
        for name in PASSES:
            for a, b in ratios:
                rs.add(f"{model}/all convolutions", f"{a}/{b}", f"{name}_ratio",
                       totals[(model, a, name)] / totals[(model, b, name)], "x",
                       note=f"time ratio: above 1 is slower than {b}")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, tuple(f"{n}_{t}" for t in ("total", "ratio")
                                           for n in PASSES) + PASSES)
    sections.append(("Notes", f"batch {args.batch}, CUDA-graph replays of ten calls, median "
                              f"of {repeat}; "
                              "per-layer rows in microseconds, totals in milliseconds; fp32 "
                              "variants against fp32, tf32 against tf32."))
    write_markdown(paths["md"], "Convolution gradients: ours vs cuDNN", rs.env, sections)

    plt = pyplot()
    tot = [r for r in rows if r["metric"].endswith("_total")]
    labels = list(dict.fromkeys(f"{r['case'].split('/')[0]} {r['metric']}" for r in tot))
    cell = {(f"{r['case'].split('/')[0]} {r['metric']}", r["variant"]): r["value"] for r in tot}
    fig, ax = plt.subplots(figsize=(7, 1 + 0.9 * len(labels)))
    shown = VARIANTS + (MMA_SYNC if mma_sync else ())
    bar = 0.8 / len(shown)
    for j, v in enumerate(shown):
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
