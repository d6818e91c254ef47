"""CP convolution, Figure 6 of Reustle et al.: time and memory footprint vs rank per layer.

Drawn from the measurements of ``python -m experiments.cp_table2`` (its CSV in
the same results directory; run that first, on a GPU), with the paper's
RTX 2080 Ti numbers beside ours.  Writes ``cp_fig6.png`` and ``cp_fig6.md``
(the memory table).
"""

from __future__ import annotations

from experiments._common import outputs, parser
from experiments.cp_table2 import NAME as TABLE
from experiments.cp_table2 import plot
from tensorconv.cli import guarded
from tensorconv.results import pivot_markdown, read_csv, write_markdown

NAME = "cp_fig6"


def main(argv=None) -> int:
    args = parser(NAME, __doc__).parse_args(argv)
    paths = outputs(NAME, args.out)
    source = outputs(TABLE, args.out)["csv"]
    if not source.exists():
        raise SystemExit(f"{source} is missing: run `python -m experiments.{TABLE}` first")
    rows = read_csv(source)
    plot(rows, paths["png"])
    env = {"source": str(source), "device": rows[0]["device"] if rows else "?"}
    write_markdown(paths["md"], "CP convolution, Figure 6: time and memory vs rank", env, [
        ("Time (µs, CUDA-graph replay)", pivot_markdown(
            rows, "time_us", ["cudnn-fp32", "fused", "naive", "pairwise-ours-graph",
                              "pairwise-torch-graph"])),
        ("Memory footprint (bytes)", pivot_markdown(rows, "memory_bytes"))])
    print(f"wrote {paths['png']} and {paths['md']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
