"""The ``tensorconv`` command: ``info``, ``list``, ``build TARGET`` and ``run NAME [--quick]``.

A mistake the library can name (an unknown model, experiment or option, a damaged
checkpoint, missing data, no GPU, results it will not replace) prints one line and exits
with status 2; ``TENSORCONV_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import pkgutil
import sys

from tensorconv import __version__, backend, bench, engine, precision, results
from tensorconv.nn import MODELS, MaxPool2d, get_model

_PACKAGES = ("numpy", "scipy", "numba", "tensorly", "matplotlib", "tqdm", "cupy-cuda13x",
             "cupy-cuda12x", "cupy", "torch")


# What a user can cause and the message names: printed as one line, not a traceback.
USER_ERRORS = (backend.CudaUnavailableError, ValueError, OSError, results.ResultsOverwriteError)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``prog: message; see --help``) and
    whose help keeps the description's own line breaks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def guarded(fn, *args, prog: str = "tensorconv") -> int:
    """``fn(*args)`` as an exit status: the user's mistakes (:data:`USER_ERRORS`) become
    one line on stderr and status 2, an interrupt status 130."""
    try:
        return int(fn(*args) or 0)
    except USER_ERRORS as exc:
        if os.environ.get("TENSORCONV_DEBUG"):
            raise
        print(f"{prog}: {exc}".replace("\n", " "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def info_lines() -> list[str]:
    """What ``tensorconv info`` prints: versions, the GPU and its facts, baselines."""
    lines = [f"tensorconv {__version__} (python {sys.version.split()[0]})"]
    for dist in _PACKAGES:
        v = _version(dist)
        if v is not None:
            lines.append(f"  {dist:<14} {v}")
    if not backend.cupy_installed():
        lines.append("GPU: none usable (CuPy not installed; the NumPy backend runs everything)")
    elif not backend.gpu_available():
        lines.append("GPU: none usable (CuPy installed, but it sees no CUDA device)")
    else:
        f = backend.device_facts()
        lines += [
            f"GPU {f.index}: {f.name} ({f.arch}, compute capability "
            f"{f.compute_capability[0]}.{f.compute_capability[1]})",
            f"  SMs {f.sm_count}, shared memory/block {f.smem_per_block // 1024} KiB "
            f"(opt-in {f.smem_per_block_optin // 1024} KiB), per SM {f.smem_per_sm // 1024} KiB",
            f"  registers/SM {f.regs_per_sm}, L2 {f.l2_bytes // 2**20} MiB, "
            f"memory {f.total_memory / 2**30:.1f} GiB",
            f"  CUDA runtime {f.cuda_runtime}, driver {f.cuda_driver}",
        ]
    if _version("torch") is None:
        lines.append("cuDNN baseline (PyTorch): not installed (pip install -e '.[baselines]')")
    else:
        state = "available" if bench.torch_cudnn_available() else "PyTorch present, no CUDA/cuDNN"
        lines.append(f"cuDNN baseline (PyTorch): {state}")
    return lines


def experiment_names() -> dict[str, tuple[str, bool]]:
    """``{name: (one-line description, needs a GPU)}`` of every runnable experiment (a
    module's ``NEEDS_GPU``)."""
    import experiments

    out = {}
    for mod in sorted(pkgutil.iter_modules(experiments.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"experiments.{mod.name}")
        doc = (module.__doc__ or "").strip()
        out[mod.name] = (doc.splitlines()[0] if doc else "", getattr(module, "NEEDS_GPU", False))
    return out


def experiment_list(names: dict) -> str:
    """The experiments, one a line, those that need a GPU marked."""
    return "\n".join(f"  {n:<16} {'[GPU] ' if gpu else ''}{doc}"
                     for n, (doc, gpu) in names.items())


def build_model(name: str, argv: list[str]) -> int:
    """``tensorconv build MODEL``: compile what an inference engine of a zoo model needs."""
    p = OneLineParser(prog=f"tensorconv build {name}",
                                description="Compile, in parallel and ahead of time, every kernel "
                                            "an inference engine of the model may need.")
    p.add_argument("--shape", default=None,
                   help="input N,C,H,W (default: batch 1 at 224x224 behind an ImageNet stem "
                        "or for a *_imagenet model, else 32x32)")
    p.add_argument("--tune", action="store_true",
                   help="also every candidate a tuned engine (tune=True) times")
    p.add_argument("--precision", choices=precision.PRECISIONS, default=precision.DEFAULT)
    args = p.parse_args(argv)
    backend.require_cuda("compiling its kernels")
    model = get_model(name).to("gpu").eval()
    if args.shape:
        shape = tuple(int(v) for v in args.shape.split(","))
    else:
        imagenet = name.endswith("_imagenet") or isinstance(getattr(model, "pool", None),
                                                            MaxPool2d)
        side = 224 if imagenet else 32
        shape = (1, model.in_channels, side, side)
    compiled = engine.build(model, shape, tune=args.tune, precision=args.precision)
    print(f"{name} {shape}: {compiled} kernels compiled (the rest were in CuPy's cache)")
    return 0


def main(argv: list[str] | None = None) -> int:
    names = experiment_names()
    parser = OneLineParser(
        prog="tensorconv", description=__doc__,
        epilog="experiments (tensorconv run NAME [--quick]; [GPU]: needs an NVIDIA GPU):\n"
               + experiment_list(names))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser("info", help="versions, GPU facts, available baselines")
    sub.add_parser("list", help="list the experiments")
    build = sub.add_parser("build", help="compile ahead of time what a model or an experiment "
                                         "needs: tensorconv build TARGET [...]")
    build.add_argument("target", nargs="?",
                       help="a zoo model (e.g. resnet18_imagenet) or an experiment")
    build.add_argument("args", nargs=argparse.REMAINDER,
                       help="a model's --shape/--tune/--precision, or the experiment's own")
    run = sub.add_parser("run", help="run an experiment: tensorconv run NAME [--quick] [...]",
                         epilog="experiments:\n" + experiment_list(names))
    run.add_argument("name", nargs="?", help="the experiment (tensorconv list names them)")
    run.add_argument("args", nargs=argparse.REMAINDER,
                     help="passed to the experiment (e.g. --quick)")
    ns = parser.parse_args(argv)

    if ns.command == "info":
        print("\n".join(info_lines()))
        return 0
    if ns.command == "list":
        print(experiment_list(names))
        return 0
    if ns.command == "build":
        return guarded(_build, ns.target, ns.args, names,
                       prog=f"tensorconv build {ns.target or ''}".rstrip())
    if ns.name is None:
        run.error(f"name an experiment: {', '.join(names)}")
    if ns.name not in names:
        run.error(f"unknown experiment {ns.name!r}; choose from: {', '.join(names)}")
    module = importlib.import_module(f"experiments.{ns.name}")
    return guarded(module.main, ns.args, prog=f"tensorconv run {ns.name}")


def _build(target: str | None, args: list[str], names: dict) -> int:
    """``tensorconv build TARGET``: a zoo model, or an experiment with a ``build`` step."""
    with_build = [n for n in names if hasattr(importlib.import_module(f"experiments.{n}"),
                                              "build")]
    if target is None or (target not in MODELS and target not in with_build):
        what = "name" if target is None else f"cannot build {target!r}:"
        raise ValueError(f"{what} a model ({', '.join(MODELS)}) or an experiment with a build "
                         f"step ({', '.join(with_build)})")
    if target in MODELS:
        return build_model(target, args)
    compiled = importlib.import_module(f"experiments.{target}").build(args)
    print(f"{target}: {compiled} kernels compiled (the rest were in CuPy's cache)")
    return 0
