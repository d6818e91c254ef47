"""Data-parallel scaling (issue 27; DSXplore Fig. 14): training throughput of ResNet-18
(CIFAR-style) and the DW+SCC networks of DSXplore (cg 2, co 50 %: VGG-16, MobileNet,
ResNet-18) on 1, 2 and 4 GPUs, one process each through the launcher (:mod:`training.launch`).

Weak scaling keeps 128 images per GPU; strong scaling splits a global batch of 512.  Each
configuration trains ``--steps`` SGD steps (after warm-up) on synthetic 32x32 data resident
on the GPU, gradients averaged through NCCL in buckets during the backward pass; rank 0
reports images/s.  Speed-up is over one GPU through the launcher, efficiency speed-up / N.
One GPU is also timed as a plain process (no launcher) for the launcher's overhead.  A GPU
count the machine lacks is recorded as not run.  Paper (V100s): close to linear at 4 GPUs,
less at 2-3 (Fig. 14 gives no numbers in its text).

The rows measured so far go to ``NAME.partial.csv`` after every configuration, so a call
cut short keeps them; ``--merge`` (earlier calls' CSVs, partial ones too) keeps their
configurations that this call does not time again, and the speed-ups are computed over
all of them (a study split over calls on one machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments._common import grouped_bars, outputs, parser, partial_csv, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.cli import guarded
from tensorconv.compress.separable import separable
from tensorconv.nn import get_model
from tensorconv.nn.captured import CapturedStep
from tensorconv.nn.optim import SGD
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown
from training.launch import launch
from training.parallel import Parallel

NAME = "dp_scaling"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
MODELS = ("resnet18", "scc-vgg16", "scc-mobilenet_v1", "scc-resnet18")
MODES = {"weak": 128, "strong": 512}   # images per GPU (weak) or in all (strong)
TARGETS = {2: 1.85, 4: 3.6}            # weak scaling of ResNet-18 (issue 27)
STEP_KINDS = ("captured", "eager", "captured-syncbn")   # the last: on request


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--gpus", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--step-kinds", nargs="+", default=list(STEP_KINDS[:2]), choices=STEP_KINDS,
                   help="captured: the step replayed as CUDA graphs, all-reduces included "
                        "(what training runs); eager: one Python call per kernel; "
                        "captured-syncbn: captured, batch norm synchronised over the GPUs")
    p.add_argument("--step", default="captured", choices=STEP_KINDS, help="(internal)")
    p.add_argument("--worker", action="store_true", help="(internal) one rank's timing")
    p.add_argument("--model", default="resnet18", choices=MODELS)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--report", type=Path, default=None)
    p.add_argument("--launcher-repeats", type=int, default=3,
                   help="alternated plain/launched one-GPU runs timing the launcher (0: none)")
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help="this experiment's CSVs (or .partial.csv) from earlier calls on the "
                        "same machine: their configurations not timed now are kept and join "
                        "the speed-ups")
    return p.parse_args(argv)


def build_model(name: str):
    """A zoo model (10 classes, 3 input channels), DW+SCC for the ``scc-`` names."""
    model = get_model(name.removeprefix("scc-"), in_channels=3, num_classes=10)
    if name.startswith("scc-"):
        separable(model, "scc", cg=2, co=0.5)
    return model


def _worker(args) -> int:
    """One rank: time ``args.steps`` steps at ``args.global_batch``; rank 0 writes the
    report (images/s over the whole global batch)."""
    cp = backend.require_cuda(NAME)
    par = Parallel.from_env(sync_bn=args.step.endswith("-syncbn"))
    share = par.check_batch(args.global_batch) if par is not None else args.global_batch
    model = build_model(args.model).to("gpu")
    opt = SGD(model.parameters(), 0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    reducer = par.reducer(model) if par is not None and par.size > 1 else None
    if par is not None:
        par.broadcast_model(model)
        if par.sync_bn:
            par.sync_batch_norm(model)
    rng = np.random.default_rng(0 if par is None else par.rank)
    x = Tensor(cp.asarray(rng.standard_normal((share, 3, 32, 32)).astype(np.float32)))
    y = cp.asarray(rng.integers(0, 10, share))

    def eager_step():
        loss = F.softmax_cross_entropy(model(x), y, check=False)
        opt.zero_grad()
        loss.backward() if reducer is None else reducer.backward(loss)
        opt.step()

    step = (CapturedStep(model, opt, x.data, y, reducer=reducer, strict=True)
            if args.step.startswith("captured") else eager_step)

    for _ in range(3):
        step()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    cp.cuda.Device().synchronize()
    seconds = time.perf_counter() - start
    if isinstance(step, CapturedStep):
        step.close()           # its graphs hold NCCL's collectives: gone before the comm
    if par is not None:
        par.close()
    if par is None or par.main:
        args.report.write_text(json.dumps({"images_per_s": args.global_batch * args.steps
                                           / seconds, "step_ms": 1e3 * seconds / args.steps}))
    return 0


def _timed(model: str, gpus: int, batch: int, steps: int, step: str,
           plain: bool = False) -> dict:
    """Run one configuration (through the launcher, or a plain process) and read its
    report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", f"experiments.{NAME}", "--worker", "--model", model,
                   "--global-batch", str(batch), "--steps", str(steps), "--report", str(report),
                   "--step", step]
        code = subprocess.call(command) if plain else launch(command, gpus)
        if code != 0:
            raise RuntimeError(f"{model} on {gpus} GPU(s) failed with exit status {code}")
        return json.loads(report.read_text())


def main(argv=None) -> int:
    args = _args(argv)
    if args.worker:
        return _worker(args)
    cp = backend.require_cuda(NAME)
    available = cp.cuda.runtime.getDeviceCount()
    env = bench.environment()
    from cupy.cuda import nccl

    env.update(gpus=available, nccl=nccl.get_version())
    rs = ResultSet(NAME, env)
    steps = 5 if args.quick else args.steps
    gpus = sorted(set(args.gpus))
    models = args.models[:1] if args.quick else args.models
    kinds = list(dict.fromkeys(args.step_kinds))[:1 if args.quick else None]
    from tqdm import tqdm

    runs = [(m, mode, k, n) for m in models for mode in MODES for k in kinds for n in gpus]
    made = {(f"{m}/{mode}/{k}", f"{n} GPU") for m, mode, k, n in runs}
    repeats = 1 if args.quick else args.launcher_repeats
    time_launcher = 1 in gpus and bool(models) and repeats > 0
    kept = {}          # earlier calls' rows: later files win, a measurement beats "not run"
    for path in args.merge:
        for r in read_csv(path):
            key = (r["case"], r["variant"], r["metric"])
            if (r["metric"] == "images_per_s" and key[:2] not in made
                    and (key not in kept or np.isfinite(r["value"]))) or \
                    (r["metric"] == "launcher/plain" and not time_launcher):
                kept[key] = r
    rs.extend(list(kept.values()))
    speed = {(r["case"], int(r["variant"].split()[0])): r["value"] for r in kept.values()
             if r["metric"] == "images_per_s" and np.isfinite(r["value"])}
    partial = partial_csv(NAME, args.out)
    for model, mode, kind, n in tqdm(runs, desc="timing data-parallel training",
                                     unit="config"):
        batch = MODES[mode] * n if mode == "weak" else MODES[mode]
        case = f"{model}/{mode}/{kind}"
        why = (f"this machine has {available} GPU(s)" if n > available else
               f"a global batch of {batch} does not split over {n} GPUs" if batch % n else None)
        if why:
            rs.add(case, f"{n} GPU", "images_per_s", float("nan"), "img/s", note=f"not run: {why}")
            continue
        got = _timed(model, n, batch, steps, kind)
        speed[case, n] = got["images_per_s"]
        rs.add(case, f"{n} GPU", "images_per_s", got["images_per_s"], "img/s",
               note=f"global batch {batch}; {got['step_ms']:.2f} ms/step")
        rs.write_csv(partial)                  # a call cut short keeps what it measured
    gpus = sorted({n for _, n in speed} | set(gpus))
    for (case, n), v in sorted(speed.items()):
        if n > 1 and (case, 1) in speed:
            up = v / speed[case, 1]
            target = TARGETS.get(n) if case.startswith("resnet18/weak/") else None
            rs.add(case, f"{n} GPU", "speedup", up, "x",
                   note=f"target >= {target}" if target else
                   "paper (Fig. 14): near-linear at 4 GPUs, less at 2-3")
            rs.add(case, f"{n} GPU", "efficiency", up / n, "1")
    if time_launcher:
        # The launcher's cost: one rank through it against a plain process, alternated
        # three times each (a 1 % effect needs more than one sample of each).
        for kind in (k for k in kinds if not k.endswith("-syncbn")):   # the same launch
            pairs = [(_timed(models[0], 1, MODES["weak"], steps, kind,
                             plain=True)["images_per_s"],
                      _timed(models[0], 1, MODES["weak"], steps, kind)["images_per_s"])
                     for _ in range(repeats)]
            plain, launched = (float(np.median(v)) for v in zip(*pairs))
            rs.add(f"{models[0]}/weak/{kind}", "1 GPU", "launcher/plain", launched / plain, "x",
                   note=f"medians of {repeats}: {launched:.0f} vs {plain:.0f} img/s; "
                        "target >= 0.97")
        rs.write_csv(partial)
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    partial.unlink(missing_ok=True)
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("images_per_s", "speedup", "efficiency", "launcher/plain"))
    sections.append(("Notes", f"{steps} timed SGD steps per configuration after 3 warm-up "
                              "steps, synthetic 32x32 data on the GPU; weak: 128 images per "
                              "GPU, strong: 512 in all; speed-up over one GPU through the "
                              "launcher with the same kind of step. Paper (DSXplore Fig. 14, V100, "
                              "runtime normalised to 1 GPU, no numbers in its text): "
                              "near-linear at 4 GPUs, less at 2 and 3."))
    write_markdown(paths["md"], "Data-parallel training: scaling over GPUs", env, sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    cases = sorted({c for c, _ in speed})
    grouped_bars(ax, cases, {f"{n} GPU": [speed.get((c, n), np.nan) for c in cases]
                             for n in gpus})
    ax.set_ylabel("images / s")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
