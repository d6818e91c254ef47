"""The one results format: tidy CSV rows, a markdown table, made from the CSV.

Every experiment writes ``results/NAME.csv`` with one row per measured number
(columns :data:`COLUMNS`), ``results/NAME.md`` (the table a person reads, with
the command, device and versions) and ``results/NAME.png``.  Tables and plots
are built from the rows, never typed by hand.
"""

from __future__ import annotations

import csv
import io
import math
import os
import tempfile
from pathlib import Path

COLUMNS = ("experiment", "case", "variant", "metric", "value", "unit", "paper_value",
           "device", "note")


def results_dir() -> Path:
    """Where experiments write (``TENSORCONV_RESULTS`` or ``./results``)."""
    return Path(os.environ.get("TENSORCONV_RESULTS", "results"))


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader (or a run
    killed mid-write) sees the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


class ResultSet:
    """Rows of one experiment plus the environment they were measured in.

    Parameters
    ----------
    experiment : str
        Experiment name (the file stem under ``results/``).
    env : dict
        From :func:`tensorconv.bench.environment`; must hold ``device``.
    """

    def __init__(self, experiment: str, env: dict):
        self.experiment, self.env, self.rows = experiment, env, []

    def add(self, case: str, variant: str, metric: str, value: float, unit: str,
            paper_value: float | None = None, note: str = "") -> None:
        """Record one measured number."""
        self.rows.append({
            "experiment": self.experiment, "case": case, "variant": variant,
            "metric": metric, "value": float(value), "unit": unit,
            "paper_value": "" if paper_value is None else float(paper_value),
            "device": self.env["device"], "note": note,
        })

    def values(self, metric: str) -> dict:
        """``{(case, variant): value}`` for one metric."""
        return {(r["case"], r["variant"]): r["value"] for r in self.rows if r["metric"] == metric}

    def write_csv(self, path: Path) -> Path:
        """Write the rows as a tidy CSV (atomically); return the path."""
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write(path, buf.getvalue())
        return path


def read_csv(path) -> list[dict]:
    """Rows of a results CSV with ``value``/``paper_value`` as floats (NaN when empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["value"] = float(r["value"])
        r["paper_value"] = float(r["paper_value"]) if r["paper_value"] else math.nan
    return rows


def _fmt(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "–"
    if v != 0 and abs(v) < 0.01:
        return f"{v:.2e}"  # relative errors and the like
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def pivot_markdown(rows: list[dict], metric: str, variants: list[str] | None = None) -> str:
    """A markdown table of ``metric``: one line per case, one column per variant."""
    rows = [r for r in rows if r["metric"] == metric]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    variants = variants or list(dict.fromkeys(r["variant"] for r in rows))
    cell = {(r["case"], r["variant"]): r["value"] for r in rows}
    paper = {(r["case"], r["variant"]): r["paper_value"] for r in rows}
    unit = rows[0]["unit"] if rows else ""
    head = "| case | " + " | ".join(f"{v} ({unit})" for v in variants) + " |"
    out = [head, "|" + "---|" * (len(variants) + 1)]
    for c in cases:
        cells = []
        for v in variants:
            value = cell.get((c, v), math.nan)
            p = paper.get((c, v), math.nan)
            text = _fmt(value)
            if isinstance(p, float) and not math.isnan(p):
                text += f" (paper {_fmt(p)})"
            cells.append(text)
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def write_markdown(path: Path, title: str, env: dict, sections: list[tuple[str, str]]) -> Path:
    """Write the human-readable report: title, environment, then ``(heading, body)`` sections."""
    lines = [f"# {title}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in env.items()]
    for heading, body in sections:
        lines += ["", f"## {heading}", "", body]
    atomic_write(path, "\n".join(lines) + "\n")
    return path


def long_markdown(rows: list[dict]) -> str:
    """All rows as one markdown table, one measured number per line."""
    out = ["| case | variant | metric | value | unit | paper |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['variant']} | {r['metric']} | {_fmt(r['value'])} | "
                   f"{r['unit']} | {_fmt(r['paper_value'])} |")
    return "\n".join(out)
