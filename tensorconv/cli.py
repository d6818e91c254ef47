"""The ``tensorconv`` command: ``info``, ``list``, ``build TARGET`` and ``run NAME [--quick]``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import sys

from tensorconv import __version__, backend, bench, engine, precision
from tensorconv.nn import MODELS, MaxPool2d, get_model

_PACKAGES = ("numpy", "scipy", "numba", "tensorly", "matplotlib", "tqdm", "cupy-cuda13x",
             "cupy-cuda12x", "cupy", "torch")


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


def experiment_names() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every runnable experiment."""
    import experiments

    out = []
    for mod in sorted(pkgutil.iter_modules(experiments.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        doc = importlib.import_module(f"experiments.{mod.name}").__doc__ or ""
        out.append((mod.name, doc.strip().splitlines()[0] if doc.strip() else ""))
    return out


def build_model(name: str, argv: list[str]) -> int:
    """``tensorconv build MODEL``: compile what an inference engine of a zoo model needs."""
    p = argparse.ArgumentParser(prog=f"tensorconv build {name}",
                                description="Compile, in parallel and ahead of time, every kernel "
                                            "an inference engine of the model may need.")
    p.add_argument("--shape", default=None,
                   help="input N,C,H,W (default: batch 1 at 224x224 behind an ImageNet stem, "
                        "else 32x32)")
    p.add_argument("--tune", action="store_true",
                   help="also every candidate a tuned engine (tune=True) times")
    p.add_argument("--precision", choices=precision.PRECISIONS, default=precision.DEFAULT)
    args = p.parse_args(argv)
    backend.require_cuda(f"tensorconv build {name}")
    model = get_model(name).to("gpu").eval()
    if args.shape:
        shape = tuple(int(v) for v in args.shape.split(","))
    else:
        side = 224 if isinstance(getattr(model, "pool", None), MaxPool2d) else 32
        shape = (1, model.in_channels, side, side)
    compiled = engine.build(model, shape, tune=args.tune, precision=args.precision)
    print(f"{name} {shape}: {compiled} kernels compiled (the rest were in CuPy's cache)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorconv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, GPU facts, available baselines")
    sub.add_parser("list", help="list the experiments")
    build = sub.add_parser("build", help="compile ahead of time what a model or an experiment "
                                         "needs: tensorconv build TARGET [...]")
    build.add_argument("target", help="a zoo model (e.g. resnet18_imagenet) or an experiment")
    build.add_argument("args", nargs=argparse.REMAINDER,
                       help="a model's --shape/--tune/--precision, or the experiment's own")
    run = sub.add_parser("run", help="run an experiment: tensorconv run NAME [--quick] [...]")
    run.add_argument("name")
    run.add_argument("args", nargs=argparse.REMAINDER,
                     help="passed to the experiment (e.g. --quick)")
    ns = parser.parse_args(argv)

    if ns.command == "info":
        print("\n".join(info_lines()))
        return 0
    names = dict(experiment_names())
    if ns.command == "build":
        try:
            if ns.target in MODELS:
                return build_model(ns.target, ns.args)
            module = importlib.import_module(f"experiments.{ns.target}") \
                if ns.target in names else None
            if module is None or not hasattr(module, "build"):
                with_build = [n for n in names
                              if hasattr(importlib.import_module(f"experiments.{n}"), "build")]
                parser.error(f"cannot build {ns.target!r}: name a model ({', '.join(MODELS)}) "
                             f"or an experiment with a build step ({', '.join(with_build)})")
            compiled = module.build(ns.args)
            print(f"{ns.target}: {compiled} kernels compiled (the rest were in CuPy's cache)")
            return 0
        except backend.CudaUnavailableError as exc:
            print(f"tensorconv build {ns.target}: {exc}", file=sys.stderr)
            return 2
    if ns.command == "list":
        for name, doc in names.items():
            print(f"{name:<20} {doc}")
        return 0
    if ns.name not in names:
        parser.error(f"unknown experiment {ns.name!r}; choose from: {', '.join(names)}")
    module = importlib.import_module(f"experiments.{ns.name}")
    try:
        return int(module.main(ns.args) or 0)
    except backend.CudaUnavailableError as exc:  # a GPU experiment here: say so, no traceback
        print(f"tensorconv run {ns.name}: {exc}", file=sys.stderr)
        return 2
