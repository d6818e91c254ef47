"""Argument parsing and output paths shared by the experiment scripts."""

from __future__ import annotations

import importlib
import math
import re
import threading
from pathlib import Path

import numpy as np

from tensorconv import bench, files
from tensorconv.autograd import Tensor, no_grad
from tensorconv.cli import OneLineParser
from tensorconv.results import ResultsOverwriteError, check_replace, read_csv, results_dir


class ExperimentParser(OneLineParser):
    """The arguments of one experiment; parsing them also checks, before any work, that
    the run may write its results where they go (:func:`tensorconv.results.check_replace`)."""

    def __init__(self, name: str, doc: str):
        super().__init__(prog=f"python -m experiments.{name}", description=doc)
        self.name = name
        self.output_name = lambda ns: name  # the file stem a run writes (train: per model)
        self.add_argument("--quick", action="store_true", help="a smaller, faster run")
        self.add_argument("--out", type=Path, default=None,
                          help="results directory (default: $TENSORCONV_RESULTS or "
                               "./tensorconv-results; --out results replaces the committed "
                               "reference results)")
        self.add_argument("--force", action="store_true",
                          help="replace results in --out that another device measured")

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        try:
            csv = outputs(self.output_name(ns), ns.out, make=False)["csv"]
            check_replace(csv, bench.device_label(), force=ns.force)
        except ResultsOverwriteError as exc:
            self.exit(2, f"{self.prog}: {exc}\n")
        preload("matplotlib.pyplot")
        return ns


def parser(name: str, doc: str) -> ExperimentParser:
    """An argument parser with the flags every experiment takes."""
    return ExperimentParser(name, doc)


def outputs(name: str, out: Path | None, *, make: bool = True) -> dict:
    """Paths of the CSV, markdown and PNG an experiment writes (``out``, else
    :func:`~tensorconv.results.results_dir`; made unless ``make`` is False)."""
    d = out or results_dir()
    if make:
        d.mkdir(parents=True, exist_ok=True)
    return {ext: d / f"{name}.{ext}" for ext in ("csv", "md", "png")}


def partial_csv(name: str, out: Path | None) -> Path:
    """Where an experiment keeps its rows while it runs (``NAME.partial.csv`` beside its
    results; removed once the results are written): a run cut short keeps what it measured
    without touching an earlier complete ``NAME.csv``."""
    return outputs(name, out)["csv"].with_name(f"{name}.partial.csv")


def pyplot():
    """matplotlib.pyplot on the Agg backend (experiments run on machines without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def preload(*modules: str) -> None:
    """Import ``modules`` on a daemon thread while the experiment starts.

    Where matplotlib never ran, building its font cache takes seconds; importing PyTorch
    takes seconds.  Begun here, that overlaps the kernel compiles (NVRTC releases the GIL)
    instead of adding to the run.  A failed import is left for the main thread's own
    import to report.
    """
    def work():
        for name in modules:
            try:
                pyplot() if name == "matplotlib.pyplot" else importlib.import_module(name)
            except Exception:  # noqa: BLE001 - reported where the experiment imports it
                pass

    thread = threading.Thread(target=work, name="preload", daemon=True)
    thread.start()
    _PRELOADS.append(thread)


_PRELOADS: list[threading.Thread] = []


def finish_preloads() -> None:
    """Wait for the imports :func:`preload` began.

    An experiment that stops early (bad input, a failure) may return while its preload
    thread still imports; a caller that goes on in the same process (a test session, a
    notebook) waits here rather than run beside imports that add loggers and modules.
    """
    while _PRELOADS:
        _PRELOADS.pop().join()


def save_figure(fig, path: Path) -> None:
    """Lay out, write at 120 dpi and close ``fig``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    files.atomic_write(path, None, write=lambda f: fig.savefig(f, dpi=120, format="png"))
    plt.close(fig)


def grouped_bars(ax, cases, series: dict, *, width: float = 0.8) -> None:
    """One group of bars per case, one bar per entry of ``series`` ({label: values, one per
    case}; NaN leaves a gap), case names under the groups."""
    bar = width / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        ax.bar(np.arange(len(cases)) + (i - (len(series) - 1) / 2) * bar, values, bar,
               label=label)
    ax.set_xticks(np.arange(len(cases)), cases, rotation=30, ha="right", fontsize=7)
    ax.legend(fontsize=7)


def geomean(values) -> float:
    """Geometric mean of the positive finite values (NaN when there are none)."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def training_args(p) -> None:
    """The arguments of an experiment that trains in resumable runs: ``--work`` (their
    checkpoints), ``--time-budget`` (seconds for this call: it stops between epochs and a
    later call resumes) and ``--device``."""
    p.add_argument("--work", type=Path, default=None,
                   help="checkpoints of the training runs (default: OUT/NAME_work)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds for this call")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))


def work_dir(name: str, args, paths: dict, *sub: str) -> Path:
    """The checkpoint directory of experiment ``name`` (``--work``, else beside its CSV),
    made."""
    d = (args.work or paths["csv"].parent / f"{name}_work").joinpath(*sub)
    d.mkdir(parents=True, exist_ok=True)
    return d


def plot_accuracy(rows: list, path: Path, ours: str = "ours (Fashion-MNIST)",
                  theirs: str = "paper (CIFAR-10)") -> None:
    """A bar per ``test_acc`` row (``case variant``) with the paper's value beside it."""
    plt = pyplot()
    acc = [r for r in rows if r["metric"] == "test_acc"]
    fig, ax = plt.subplots(figsize=(7, 0.4 * max(4, len(acc)) + 1))
    labels = [f"{r['case']} {r['variant']}" for r in acc]
    ax.barh(labels, [r["value"] for r in acc], label=ours)
    paper = [(r["paper_value"], lab) for r, lab in zip(acc, labels) if r["paper_value"] > 0]
    if paper:
        ax.scatter(*zip(*paper), color="k", zorder=3, label=theirs)
    ax.set_xlabel("test accuracy (%)")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def conv_inputs(model, names, input_shape) -> dict:
    """{name: input shape} of the named convolutions in one forward at ``input_shape``."""
    mods = {n.rstrip("."): m for n, m in model.named_modules()}
    shapes = {}
    for name in names:
        m, forward = mods[name], mods[name].forward
        m.forward = lambda x, f=forward, n=name: (shapes.__setitem__(n, tuple(x.shape)), f(x))[1]
    try:
        with no_grad():
            model(Tensor(np.zeros(input_shape, np.float32)))
    finally:
        for name in names:
            del mods[name].forward
    return shapes


def rel_norm(a, b, xp) -> float:
    """``|a - b| / |b|`` (Frobenius norms) on ``xp``'s device, as a float."""
    return float(xp.linalg.norm(a - b) / xp.linalg.norm(b))


FP32_TOLERANCE = 1e-4
"""The most an fp32 output of ours may differ from its reference (relative norm) before
its times are refused: the GPU tests of our engines hold them to the same bound."""


def checked_rel_norm(a, b, xp, what: str, tol: float = FP32_TOLERANCE) -> float:
    """:func:`rel_norm` of ``a`` against the reference ``b``, raising ``RuntimeError``
    (naming ``what``) above ``tol`` or at NaN: a wrong output's times must not reach a
    results file."""
    err = rel_norm(a, b, xp)
    if not err <= tol:
        raise RuntimeError(f"{what}: relative error {err:.2e} against its reference (at "
                           f"most {tol:g}); its times are not recorded")
    return err


def cudnn_fp32():
    """PyTorch set up as a per-layer cuDNN baseline (``cudnn.benchmark``, TF32 off), or
    None where PyTorch with cuDNN is missing."""
    from tensorconv import bench

    if not bench.torch_cudnn_available():
        return None
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    return torch


def cudnn_baseline():
    """PyTorch set up as the cuDNN baseline of an end-to-end timing (``cudnn.benchmark``,
    matmuls in fp32; each run sets ``cudnn.allow_tf32`` itself), with ``to_torch`` from
    :mod:`experiments._torch_mirror`; ``(None, None)`` where PyTorch with cuDNN is
    missing."""
    from tensorconv import bench

    if not bench.torch_cudnn_available():
        return None, None
    import torch

    from experiments._torch_mirror import to_torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch, to_torch


def merged_rows(paths: list, cases_now: set) -> list:
    """Rows of earlier calls' CSVs (``--merge``, oldest first) whose case is not made again
    now: a row's case is ``cases_now``'s member it starts with (``"resnet18-8x/layer"``,
    ``"resnet18-8x pruned"`` belong to ``"resnet18-8x"``)."""
    def made_now(case: str) -> bool:
        return case.split("/")[0].split(" ")[0] in cases_now
    return [r for path in paths for r in read_csv(path) if not made_now(r["case"])]


def merged_environment(env: dict, paths: list, rows: list) -> dict:
    """``env`` for a report built from ``--merge`` CSVs alone: the devices the rows were
    measured on (not this machine, kept as ``report_made_on``) and the commit each merged
    file's markdown names."""
    def commit_of(csv: Path) -> str:
        md = Path(csv).with_suffix(".md")
        found = re.search(r"^\| commit \| `([^`]*)` \|$", md.read_text(), re.MULTILINE) \
            if md.exists() else None
        return found[1] if found else "unknown"
    # this machine's versions say nothing of where the numbers were measured: each merged
    # file's markdown (at its commit) has those
    made = {k: env[k] for k in ("tensorconv", "commit", "command", "date") if k in env}
    return {**made, "report_made_on": env.get("device", ""),
            "device": " + ".join(sorted({r["device"] for r in rows})),
            "merged": "; ".join(f"{p} at {commit_of(p)}" for p in paths)}


def merge_arguments(p, *, keeps: str, nothing: str) -> None:
    """``--merge`` (earlier calls' CSVs, oldest first; ``keeps`` says which of their rows
    stay) and ``--report-only`` (``nothing``: the work it skips, e.g. "train nothing")."""
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help=f"this experiment's CSVs from earlier calls (oldest first): {keeps}")
    p.add_argument("--report-only", action="store_true",
                   help=f"{nothing}: rebuild the CSV, tables and plot from the --merge CSVs "
                        f"alone (calls made on other machines)")


def check_report_only(p, args, given: list, does: str) -> None:
    """Refuse ``--report-only`` without ``--merge``, or with the options in ``given`` (flags
    the user set that a report would ignore; ``does``: what it does instead, e.g. "trains
    nothing"), before anything is made."""
    if not args.report_only:
        return
    if not args.merge:
        p.error("--report-only needs the CSVs to report in --merge")
    if given:
        p.error(f"--report-only {does}: drop {', '.join(given)}")
