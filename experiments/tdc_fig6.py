"""TDC figure 6: core-convolution time per shape — our kernels vs cuDNN (batch 1, fp32, 3x3).

For each of the paper's 18 core-convolution shapes (C, N, H, W), every time a
CUDA-graph replay median after the output was checked against the float64 reference:

* the paper's kernel on the tile of its own rule (``tdc-paper-model``, sections
  5.3-5.5), of our calibrated form of it (``tdc-model``) and the best of all tiles
  (``tdc-oracle``);
* our cluster and tensor-core (3xTF32) kernels on their estimate's tile
  (``cluster-default``, ``tf32x3-default``) and the best of its 64 best candidates
  (``-oracle``); our Winograd F(2x2, 3x3) kernel on its best tile; our implicit GEMM;
  the fastest of ours within 1e-5 of the reference (``ours-best``);
* cuDNN through PyTorch, autotuned, TF32 off and on, and ``cudnn-fp32-best``: the
  fastest fp32 time of this run's pick, ``--cudnn-runs`` fresh processes that autotune
  anew and one on cuDNN's heuristic (the autotuned pick differs between processes).

The paper reports averages on an A100: oracle/model 8.95x/8.63x over cuDNN-GEMM,
3.12x/2.92x over cuDNN-Winograd, 5.38x/4.91x over cuDNN-FFT, 1.81x/1.72x over TVM.
"""

from __future__ import annotations

from experiments._common import geomean, outputs, parser, pyplot, save_figure
from experiments._cudnn_fresh import fresh_times
from experiments._tdc import measure_core_shape
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown

NAME = "tdc_fig6"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
SHAPES = [(32, 32, 7, 7), (32, 32, 14, 14), (32, 32, 28, 28), (32, 32, 56, 56), (64, 32, 7, 7),
          (64, 32, 14, 14), (64, 32, 28, 28), (64, 32, 56, 56), (64, 32, 112, 112),
          (64, 32, 224, 224), (64, 64, 56, 56), (96, 64, 7, 7), (96, 64, 28, 28),
          (128, 96, 14, 14), (160, 96, 28, 28), (192, 96, 14, 14), (192, 96, 28, 28),
          (192, 160, 7, 7)]
QUICK = [(32, 32, 14, 14), (64, 32, 56, 56), (192, 160, 7, 7)]
VARIANTS = ["tdc-paper-model", "tdc-model", "tdc-oracle", "cluster-default", "cluster-oracle",
            "tf32x3-default", "tf32x3-oracle", "winograd-oracle", "igemm", "ours-best",
            "cudnn-fp32", "cudnn-fp32-best", "cudnn-tf32"]


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--tiles", action="store_true",
                   help="also write every oracle tile time to tdc_fig6_tiles.csv in --out")
    p.add_argument("--cudnn-runs", type=int, default=3,
                   help="fresh autotuning processes behind cudnn-fp32-best (default 3; 0: none)")
    args = p.parse_args(argv)
    backend.require_cuda(NAME)
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    tile_rows = ResultSet(f"{NAME}_tiles", env) if args.tiles else None
    from tqdm import tqdm

    per_shape = {}
    for c, n, h, w in tqdm(QUICK if args.quick else SHAPES, desc=NAME):
        case = f"{c}_{n}_{h}_{w}"
        per_shape[case] = measure_core_shape(rs, case, c, n, h, w, quick=args.quick,
                                             tile_rows=tile_rows)
    have_cudnn = all("cudnn-fp32" in t for t in per_shape.values())
    summary = {}
    if have_cudnn:
        shapes = QUICK if args.quick else SHAPES
        fresh = fresh_times(shapes, args.cudnn_runs) if args.cudnn_runs > 0 else {}
        for case, t in per_shape.items():
            f = fresh.get(case, {"bench": [], "heuristic": float("inf")})
            t["cudnn-fp32-best"] = min([t["cudnn-fp32"], *f["bench"], f["heuristic"]])
            rs.add(case, "cudnn-fp32-best", "time_us", t["cudnn-fp32-best"], "us",
                   note=f"min of this run's autotuned {t['cudnn-fp32']:.2f}, fresh autotuned "
                        f"{' '.join(f'{v:.2f}' for v in f['bench']) or '-'}, heuristic "
                        f"{f['heuristic']:.2f}")
        for base in ("cudnn-fp32-best", "cudnn-fp32", "cudnn-tf32"):
            for ours in ("ours-best", "tdc-oracle", "tdc-model"):
                summary[f"{ours}/{base}"] = geomean(t[base] / t[ours] for t in per_shape.values())
            summary[f"cluster-oracle/{base}"] = geomean(t[base] / t["cluster-oracle"]
                                                        for t in per_shape.values())
            summary[f"cluster-default/{base}"] = geomean(t[base] / t["cluster-default"]
                                                         for t in per_shape.values())
            summary[f"tf32x3-oracle/{base}"] = geomean(t[base] / t["tf32x3-oracle"]
                                                       for t in per_shape.values())
        best_cudnn = {k: min(t["cudnn-fp32"], t["cudnn-tf32"]) for k, t in per_shape.items()}
        summary["ours-best/cudnn-best"] = geomean(best_cudnn[k] / t["ours-best"]
                                                  for k, t in per_shape.items())
        slower = [k for k, t in per_shape.items()
                  if int(k.split("_")[2]) <= 56 and t["ours-best"] > t["cudnn-fp32-best"]]
        rs.add("summary", "ours-best", "shapes_slower_than_cudnn_fp32_best_hw_le_56", len(slower),
               "count", note=" ".join(slower) or "none")
    summary["tdc-model/tdc-oracle time"] = geomean(t["tdc-model"] / t["tdc-oracle"]
                                                   for t in per_shape.values())
    summary["cluster-default/cluster-oracle time"] = geomean(
        t["cluster-default"] / t["cluster-oracle"] for t in per_shape.values())
    summary["tf32x3-default/tf32x3-oracle time"] = geomean(
        t["tf32x3-default"] / t["tf32x3-oracle"] for t in per_shape.values())
    summary["tdc-paper-model/tdc-oracle time"] = geomean(t["tdc-paper-model"] / t["tdc-oracle"]
                                                         for t in per_shape.values())
    paper = {"tdc-model/tdc-oracle time": 1.25, "tdc-paper-model/tdc-oracle time": 1.25}
    for k, v in summary.items():
        rs.add("summary", k, "geomean_speedup" if "/" in k and "time" not in k else "geomean_ratio",
               v, "x", paper_value=paper.get(k),
               note="paper: its model ~25% slower than its oracle" if "oracle time" in k else "")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    if tile_rows is not None:
        tile_rows.write_csv(paths["csv"].with_name(f"{NAME}_tiles.csv"))
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"],
                   "TDC figure 6: core-convolution time per shape (H100, batch 1, fp32)",
                   env, [("Time (µs, CUDA-graph replay)", pivot_markdown(rows, "time_us",
                                                                         VARIANTS)),
                         ("Summary", long_markdown([r for r in rows if r["case"] == "summary"])),
                         ("Correctness (rel. error vs float64 reference)",
                          pivot_markdown(rows, "rel_err")),
                         ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])

    plt = pyplot()
    import numpy as np

    cases = list(per_shape)
    fig, ax = plt.subplots(figsize=(14, 4.5))
    width = 0.8 / len(VARIANTS)
    for i, v in enumerate(VARIANTS):
        ax.bar(np.arange(len(cases)) + i * width, [per_shape[c].get(v, np.nan) for c in cases],
               width, label=v)
    ax.set_xticks(np.arange(len(cases)) + 0.4 - width / 2)
    ax.set_xticklabels(cases, rotation=40, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("µs (log)")
    ax.set_xlabel("core convolution (C, N, H, W), 3x3, pad 1, batch 1")
    ax.legend(fontsize=8, ncol=3)
    ax.set_title("TDC fig. 6 on an H100 (paper: A100, speedups only as averages)")
    save_figure(fig, paths["png"])
    print(pivot_markdown(rows, "time_us", VARIANTS))
    print(long_markdown([r for r in rows if r["case"] == "summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
