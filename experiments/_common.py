"""Argument parsing and output paths shared by the experiment scripts."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tensorconv.results import results_dir


def parser(name: str, doc: str) -> argparse.ArgumentParser:
    """An argument parser with the flags every experiment takes."""
    p = argparse.ArgumentParser(prog=f"python -m experiments.{name}", description=doc)
    p.add_argument("--quick", action="store_true", help="a smaller, faster run")
    p.add_argument("--out", type=Path, default=None,
                   help="results directory (default: $TENSORCONV_RESULTS or ./results)")
    return p


def outputs(name: str, out: Path | None) -> dict:
    """Paths of the CSV, markdown and PNG an experiment writes."""
    d = out or results_dir()
    d.mkdir(parents=True, exist_ok=True)
    return {ext: d / f"{name}.{ext}" for ext in ("csv", "md", "png")}


def pyplot():
    """matplotlib.pyplot on the Agg backend (experiments run on machines without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    """Lay out, write at 120 dpi and close ``fig``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def geomean(values) -> float:
    """Geometric mean of the positive finite values (NaN when there are none)."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan
