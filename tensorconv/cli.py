"""The ``tensorconv`` command: ``info``, ``list`` and ``run NAME [--quick]``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import sys

from tensorconv import backend

_PACKAGES = ("numpy", "scipy", "numba", "tensorly", "matplotlib", "tqdm", "cupy-cuda13x",
             "cupy-cuda12x", "cupy", "torch")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def info_lines() -> list[str]:
    """What ``tensorconv info`` prints: versions, the GPU and its facts, baselines."""
    import tensorconv

    lines = [f"tensorconv {tensorconv.__version__} (python {sys.version.split()[0]})"]
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
        from tensorconv.bench import torch_cudnn_available

        state = "available" if torch_cudnn_available() else "PyTorch present, no CUDA/cuDNN"
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorconv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, GPU facts, available baselines")
    sub.add_parser("list", help="list the experiments")
    run = sub.add_parser("run", help="run an experiment: tensorconv run NAME [--quick] [...]")
    run.add_argument("name")
    run.add_argument("args", nargs=argparse.REMAINDER,
                     help="passed to the experiment (e.g. --quick)")
    ns = parser.parse_args(argv)

    if ns.command == "info":
        print("\n".join(info_lines()))
        return 0
    names = dict(experiment_names())
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
