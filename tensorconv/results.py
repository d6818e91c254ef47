"""The one results format: tidy CSV rows, a markdown table, made from the CSV.

Every experiment writes ``NAME.csv`` with one row per measured number (columns
:data:`COLUMNS`), ``NAME.md`` (the table a person reads, with the command, device and
versions) and ``NAME.png``, into :func:`results_dir` (``./tensorconv-results`` unless
told).  The reference results committed with the code live in :data:`REFERENCE`
(``results/``) and change only when a run is pointed there (``--out results``); a run
on another device than the one that measured a file does not replace it unless forced
(:func:`check_replace`).  Tables and plots are built from the rows, never typed by hand.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from tensorconv.files import atomic_write

COLUMNS = ("experiment", "case", "variant", "metric", "value", "unit", "paper_value",
           "device", "note")


REFERENCE = Path("results")  # the committed reference results (relative to a checkout)


class ResultsOverwriteError(RuntimeError):
    """A run would replace results measured on another device."""


def results_dir() -> Path:
    """Where experiments write by default: ``TENSORCONV_RESULTS``, else
    ``./tensorconv-results`` (never the committed :data:`REFERENCE`)."""
    return Path(os.environ.get("TENSORCONV_RESULTS") or "tensorconv-results")


def measured_on(csv_path) -> set[str]:
    """The devices named in a results CSV's ``device`` column (empty when there is no
    such file, or it has no such column)."""
    try:
        with open(csv_path, newline="") as f:
            return {r.get("device") or "" for r in csv.DictReader(f)} - {""}
    except FileNotFoundError:
        return set()


def check_replace(csv_path, device: str, *, force: bool = False) -> None:
    """Raise :class:`ResultsOverwriteError` when ``csv_path`` holds results measured on
    another device than ``device`` and ``force`` is not set: said before a run, not after."""
    other = measured_on(csv_path) - {device}
    if other and not force:
        raise ResultsOverwriteError(
            f"{csv_path} was measured on {', '.join(sorted(other))}; this run is on {device}. "
            f"Write elsewhere (--out DIR) or pass --force to replace it")


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

    def extend(self, rows: list[dict]) -> None:
        """Add rows another call recorded (as :func:`read_csv` returns them), kept as they
        are: their device and notes stay theirs."""
        for r in rows:
            row = {k: r[k] for k in COLUMNS}
            pv = row["paper_value"]
            row["paper_value"] = "" if pv == "" or math.isnan(float(pv)) else float(pv)
            row["value"] = float(row["value"])
            self.rows.append(row)

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


def metric_sections(rows: list[dict], metrics) -> list[tuple[str, str]]:
    """``(metric, pivot_markdown(rows, metric))`` for each of ``metrics`` that ``rows`` hold,
    in that order: the sections of a results markdown file."""
    present = {r["metric"] for r in rows}
    return [(m, pivot_markdown(rows, m)) for m in metrics if m in present]


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
