"""First run: wall time of ``bench_inference --tune`` with empty caches, then warm.

A user's first run of the main inference benchmark compiles every kernel variant it
needs (NVRTC, into CuPy's kernel cache) and tunes every choice of the plan (into the tune
cache).  This runs ``python -m experiments.bench_inference --tune`` in fresh processes:
``cold`` with an empty CuPy kernel cache and an empty tune cache (both in a temporary
directory; the user's own caches are not touched), then ``warm`` with what the cold run
left.  It records each run's wall time, the kernels it compiled (from its progress
line) and the ResNet-18 batch-1 latency it measured.  Target: cold <= 60 s on the H100.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown

NAME = "first_run"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
TARGET_S = 60.0


def run_once(work: Path, env: dict) -> tuple[float, str, Path]:
    """Run bench_inference --tune with ``env``; return (wall s, its stderr, its CSV)."""
    out = work / f"run{len(list(work.glob('run*')))}"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "experiments.bench_inference", "--tune",
                           "--out", str(out)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"bench_inference failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc.stderr, out / "bench_inference.csv"


def main(argv=None) -> int:
    args = parser(NAME, __doc__).parse_args(argv)
    backend.require_cuda(NAME)
    env_info = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env_info)
    with tempfile.TemporaryDirectory(prefix="tensorconv-first-run-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, CUPY_CACHE_DIR=str(work / "cupy"),
                   TENSORCONV_TUNE_CACHE=str(work / "tune.json"),
                   TENSORCONV_RESULTS=str(work / "results"))
        for label in ("cold", "warm"):
            wall, stderr, csv = run_once(work, env)
            counts = [int(n) for n in re.findall(r"compiling kernels for \w+ \((\d+) kernels\)",
                                                 stderr)]
            rs.add("bench_inference --tune", label, "wall_s", wall, "s",
                   note=f"target <= {TARGET_S:.0f} s" if label == "cold" else "")
            rs.add("bench_inference --tune", label, "kernels_compiled",
                   max(counts) if counts else 0, "count",
                   note="the engine's ahead-of-time build (its progress line)")
            latency = next(r for r in read_csv(csv) if r["variant"] == "ours-graph"
                           and r["metric"] == "latency_us")
            rs.add("bench_inference --tune", label, "resnet18_latency_us", latency["value"], "us",
                   note="ResNet-18 batch 1 through the tuned engine's CUDA graph")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "First run of bench_inference --tune: cold and warm caches",
                   env_info, [("Wall time (s)", pivot_markdown(rows, "wall_s")),
                              ("All rows", long_markdown(rows)),
                              ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])
    plt = pyplot()
    walls = [r for r in rows if r["metric"] == "wall_s"]
    fig, ax = plt.subplots(figsize=(5, 2.5))
    ax.barh([r["variant"] for r in walls], [r["value"] for r in walls], color="tab:blue")
    ax.axvline(TARGET_S, color="tab:red", ls="--", label=f"target {TARGET_S:.0f} s (cold)")
    ax.set_xlabel("wall time of bench_inference --tune (s)")
    ax.legend(fontsize=7)
    save_figure(fig, paths["png"])
    print(pivot_markdown(rows, "wall_s"))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
