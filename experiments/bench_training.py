"""Training-step throughput: our ResNet-20 vs the same network in PyTorch, same GPU, same run.

One step = forward, softmax cross-entropy, backward and an SGD update
(Nesterov momentum, weight decay), batch 128, fp32, 1x32x32 inputs (Fashion-MNIST
padded).  Images/s is the median over repeats of a timed run of ``--steps``
steps after warm-up, host-synchronised at both ends.  PyTorch is timed eagerly
with cuDNN autotuning on, with TF32 convolutions off (like-for-like fp32) and on
(PyTorch's default for cuDNN).
"""

from __future__ import annotations

import time

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.cli import guarded
from tensorconv.nn import get_model
from tensorconv.nn.optim import SGD
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "bench_training"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
TARGET = 0.5  # ours / PyTorch eager


def _time_steps(step, sync, steps: int, repeats: int) -> float:
    """Median seconds per step over ``repeats`` timed runs of ``steps`` steps."""
    for _ in range(5):
        step()
    sync()
    per_step = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        per_step.append((time.perf_counter() - t0) / steps)
    return float(np.median(per_step))


def ours_step_time(batch: int, steps: int, repeats: int, xp) -> float:
    model = get_model("resnet20", in_channels=1, num_classes=10)
    if xp is not np:
        model.to("gpu")
    opt = SGD(model.parameters(), 0.05, 0.9, True, 5e-4)
    rng = np.random.default_rng(0)
    x = Tensor(xp.asarray(rng.standard_normal((batch, 1, 32, 32)).astype(np.float32)))
    y = xp.asarray(rng.integers(0, 10, batch))

    def step():
        loss = F.softmax_cross_entropy(model(x), y, check=False)
        opt.zero_grad()
        loss.backward()
        opt.step()

    sync = xp.cuda.Device().synchronize if xp is not np else (lambda: None)
    return _time_steps(step, sync, steps, repeats)


def torch_resnet20():
    import torch.nn as tnn
    import torch.nn.functional as TF

    class Block(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = tnn.BatchNorm2d(cout)
            self.c2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = tnn.BatchNorm2d(cout)
            self.sc = (tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                      tnn.BatchNorm2d(cout))
                       if stride != 1 or cin != cout else tnn.Identity())

        def forward(self, x):
            y = TF.relu(self.b1(self.c1(x)))
            return TF.relu(self.b2(self.c2(y)) + self.sc(x))

    layers, cin = [tnn.Conv2d(1, 16, 3, 1, 1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU()], 16
    for i, w in enumerate((16, 32, 64)):
        for j in range(3):
            layers.append(Block(cin, w, 2 if (j == 0 and i > 0) else 1))
            cin = w
    layers += [tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(64, 10)]
    return tnn.Sequential(*layers)


def torch_step_time(batch: int, steps: int, repeats: int, tf32: bool) -> float:
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    model = torch_resnet20().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    x = torch.randn(batch, 1, 32, 32, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        loss = lossf(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return _time_steps(step, torch.cuda.synchronize, steps, repeats)


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--profile", action="store_true",
                   help="print the Python profile of our training steps (host overhead)")
    args = p.parse_args(argv)
    gpu = backend.gpu_available()
    xp = backend.require_cuda(NAME) if gpu else np
    steps = args.steps or (3 if not gpu else (10 if args.quick else 50))
    repeats = 2 if (args.quick or not gpu) else 5
    env = bench.environment(with_torch=gpu)
    rs = ResultSet(NAME, env)
    case = f"resnet20/b{args.batch}"
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(ours_step_time, args.batch, steps, 1, xp)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    t_ours = ours_step_time(args.batch, steps, repeats, xp)
    variant = "ours-cuda" if gpu else "ours-numpy"
    rs.add(case, variant, "images_per_s", args.batch / t_ours, "images/s")
    rs.add(case, variant, "step_time", 1e3 * t_ours, "ms")
    if gpu and bench.torch_cudnn_available():
        for tf32 in (False, True):
            v = f"pytorch-eager-{'tf32' if tf32 else 'fp32'}"
            t = torch_step_time(args.batch, steps, repeats, tf32)
            rs.add(case, v, "images_per_s", args.batch / t, "images/s")
            rs.add(case, v, "step_time", 1e3 * t, "ms")
            rs.add(case, f"ours/{v}", "throughput_ratio", t / t_ours, "x",
                   note=f"target >= {TARGET}")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("images_per_s", "step_time",
                                                       "throughput_ratio"))
    sections.append(("Notes", f"{steps} timed steps x {repeats} repeats after 5 warm-up steps; "
                              "median. Target: ours >= 0.5x PyTorch eager."))
    write_markdown(paths["md"], "ResNet-20 training-step throughput", env, sections)

    plt = pyplot()

    ips = [r for r in rows if r["metric"] == "images_per_s"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.barh([r["variant"] for r in ips], [r["value"] for r in ips])
    ax.set_xlabel("images/s (ResNet-20 training step, batch %d, fp32)" % args.batch)
    save_figure(fig, paths["png"])
    print(sections[0][1])
    if len(sections) > 3:
        print(sections[2][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
