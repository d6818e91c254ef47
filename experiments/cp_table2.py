"""CP convolution, Table 2 of Reustle et al.: the paper's Table 1 layers at batch 1, ranks 1-16.

Each layer (S, Y, X) -> (T, kh, kw), stride 1, "SAME" padding, random factors,
every way we can run it, side by side in one process:

* ``cudnn-fp32`` / ``cudnn-tf32`` — cuDNN on the reconstructed full kernel
  through PyTorch, autotuned (``cudnn.benchmark``), TF32 off / on;
* ``fused`` — our fused kernel (Algorithm 2) with the tuner's launch shape;
  ``fused-default`` the same kernel with the untuned default shape;
* ``naive`` — Algorithm 1, one thread per output;
* ``pairwise-*`` — the gnetcon optimal pairwise sequence (always U.S, *H, *W,
  .T here): ``pairwise-cublas`` through CuPy (cuBLAS GEMMs, our depthwise
  kernel; eager only, CuPy refuses cuBLAS in graph capture),
  ``pairwise-ours`` with our implicit-GEMM 1x1 kernel for the GEMMs,
  ``pairwise-torch`` PyTorch's cuDNN/cuBLAS calls; ``-graph`` variants are the
  same calls replayed from a CUDA graph.

Times are CUDA-graph replay medians (``*-eager``: event-timed eager calls, with
the Python launch cost a caller pays).  Memory is the paper's footprint: input
+ weights + output + intermediates + workspace, with the allocations measured
(CuPy memory hook / PyTorch allocator peak).  Outputs are checked against a
float64 NumPy reference before timing.  Paper: RTX 2080 Ti, cuDNN 7.4 with
PREFER_FASTEST, the pairwise sequence in TensorFlow 1.14.
"""

from __future__ import annotations

import math

import numpy as np

from experiments._common import checked_rel_norm, geomean, outputs, parser, pyplot, save_figure
from tensorconv import backend, bench, reference, timing
from tensorconv.cli import guarded
from tensorconv.decomp import cp as cpd
from tensorconv.decomp import gnetcon
from tensorconv.ops import cp_conv as cpops
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown
from tensorconv.tuning import cp_tuner

NAME = "cp_table2"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
LAYERS = {1: (3, 224, 224, 96, 11, 11), 2: (48, 55, 55, 256, 5, 5), 3: (256, 27, 27, 384, 3, 3),
          4: (192, 13, 13, 384, 3, 3), 5: (192, 13, 13, 256, 3, 3)}
RANKS = (1, 2, 4, 8, 16)
QUICK_LAYERS, QUICK_RANKS = (2, 4), (1, 8)
# Table 2 of the paper (µs); its fused row survives for layers 4 and 5 only, its pairwise
# row for ranks 1 and 16 of layers 1-3.
PAPER_CUDNN = {1: 499.4, 2: 270.7, 3: 177.4, 4: 71.3, 5: 52.1}
PAPER_FUSED = {4: (35.4, 37.3, 44.2, 84.7, 122.8), 5: (26.9, 27.9, 32.8, 62.6, 95.5)}
PAPER_PAIRWISE = {1: {1: 3069.5, 16: 3720.0}, 2: {1: 2079.7, 16: 2073.7},
                  3: {1: 2033.9, 16: 1936.4}, 4: dict(zip(RANKS, (1810.0, 1812.5, 1907.5, 1860.3,
                                                                  1759.7))),
                  5: dict(zip(RANKS, (1741.4, 1790.6, 1779.8, 2399.3, 1761.5)))}
TIME_VARIANTS = ["cudnn-fp32", "cudnn-tf32", "fused", "fused-default", "naive",
                 "pairwise-ours-graph", "pairwise-torch-graph", "pairwise-cublas-eager",
                 "pairwise-ours-eager", "pairwise-torch-eager", "fused-eager", "cudnn-fp32-eager"]


def _factors(rng, s, t, kh, kw, r):
    """Random factors whose kernel has the scale of a He-initialised layer."""
    scale = (2.0 / (s * kh * kw)) ** 0.5 / r ** 0.5
    f = [rng.standard_normal(shape) for shape in ((s, r), (kh, r), (kw, r), (t, r))]
    f[3] *= scale
    return [a.astype(np.float32) for a in f]


def measure_layer(rs: ResultSet, layer: int, rank: int, *, quick: bool,
                  tile_rows: ResultSet | None = None) -> tuple[dict, dict]:
    """Check and time one (layer, rank) every way; add rows; return µs and bytes by variant.

    ``tile_rows`` collects the time of every launch shape the tuner tried.
    """
    import cupy as cp

    s, y, x, t, kh, kw = LAYERS[layer]
    case = f"L{layer}_R{rank}"
    pad = ((kh - 1) // 2, (kw - 1) // 2)
    rng = np.random.default_rng(1000 * layer + rank)
    u_h = rng.standard_normal((1, s, y, x)).astype(np.float32)
    f_h = _factors(rng, s, t, kh, kw, rank)
    k_h = cpd.reconstruct(cpd.CPFactors(*(a.astype(np.float64) for a in f_h)))
    ref = reference.conv2d(u_h.astype(np.float64), k_h, padding=pad)
    u = cp.asarray(u_h)
    fs = tuple(cp.asarray(a) for a in f_h)
    kernel = cp.asarray(k_h.astype(np.float32))
    out = cp.empty((1, t, y, x), cp.float32)
    net = gnetcon.cp_conv_network(1, s, t, y, x, kh, kw, rank)
    plan = gnetcon.gnetcon(net)
    arrays = dict(zip("USHWT", (u,) + fs))
    tile, tile_times = cp_tuner.tune_tile(u, fs, 1, pad, repeat=5 if quick else 10,
                                          use_cache=False)
    default = cpops.default_tile(cpops.problem(u.shape, fs, 1, pad), backend.device_facts())
    if tile_rows is not None:
        for tl, us in tile_times.items():
            label = (f"separable_threads{tl.threads}" if tl.scheme == "separable" else
                     f"lanes{tl.lanes}_threads{tl.threads}_rows{tl.rows}")
            tile_rows.add(case, label, "time_us", us, "us")

    ours = {
        "fused": lambda: cpops.cp_conv2d(u, *fs, 1, pad, tile=tile, out=out),
        "fused-default": lambda: cpops.cp_conv2d(u, *fs, 1, pad, tile=default, out=out),
        "naive": lambda: cpops.cp_conv2d(u, *fs, 1, pad, variant="naive", out=out),
        "pairwise-ours": lambda: gnetcon.execute(net, plan, arrays, gemm="igemm"),
        "pairwise-cublas": lambda: gnetcon.execute(net, plan, arrays, gemm="cublas"),
    }
    for name, run in ours.items():
        out.fill(np.nan)
        got = run()
        rs.add(case, name, "rel_err", checked_rel_norm(got.get(), ref, np, f"{case} {name}"),
               "1")
    reps = dict(repeat=10 if quick else 30)
    times = {
        "fused": timing.time_graph(ours["fused"], **reps).median_us,
        "fused-default": timing.time_graph(ours["fused-default"], **reps).median_us,
        "naive": timing.time_graph(ours["naive"], warmup=1, repeat=5, calls_per_graph=3).median_us,
        "pairwise-ours-graph": timing.time_graph(ours["pairwise-ours"], **reps).median_us,
        "pairwise-ours-eager": timing.time_events(ours["pairwise-ours"], **reps).median_us,
        "pairwise-cublas-eager": timing.time_events(ours["pairwise-cublas"], **reps).median_us,
        "fused-eager": timing.time_events(ours["fused"], **reps).median_us,
    }
    weights = {"dense": kernel.nbytes, "cp": sum(a.nbytes for a in fs)}
    io_bytes = u.nbytes + out.nbytes
    mem = {
        "fused": u.nbytes + weights["cp"] + bench.peak_device_bytes(
            lambda: cpops.cp_conv2d(u, *fs, 1, pad, tile=tile)),
        "pairwise-ours": u.nbytes + weights["cp"] + bench.peak_device_bytes(ours["pairwise-ours"]),
        "pairwise-cublas": (u.nbytes + weights["cp"]
                            + bench.peak_device_bytes(ours["pairwise-cublas"])),
        "pairwise-cumulative": (io_bytes + weights["cp"]
                                + sum(gnetcon.intermediate_bytes(net, plan)[:-1])),
    }
    if bench.torch_cudnn_available():
        for tf32 in (False, True):
            run = bench.cudnn_conv2d(u, kernel, None, 1, pad, allow_tf32=tf32)
            v = "cudnn-tf32" if tf32 else "cudnn-fp32"
            got = run()
            rs.add(case, v, "rel_err", float(np.linalg.norm(got.cpu().numpy() - ref)
                                             / np.linalg.norm(ref)), "1")
            times[v] = timing.time_graph(run, framework="torch", **reps).median_us
            if not tf32:
                times["cudnn-fp32-eager"] = timing.time_events(run, framework="torch",
                                                               **reps).median_us
                mem["cudnn-fp32"] = u.nbytes + weights["dense"] + bench.peak_device_bytes(
                    run, framework="torch")
        seq = bench.torch_cp_sequence(u, *fs, pad)
        got = seq()
        rs.add(case, "pairwise-torch", "rel_err", float(np.linalg.norm(got.cpu().numpy() - ref)
                                                        / np.linalg.norm(ref)), "1")
        times["pairwise-torch-graph"] = timing.time_graph(seq, framework="torch", **reps).median_us
        times["pairwise-torch-eager"] = timing.time_events(seq, framework="torch", **reps).median_us
        mem["pairwise-torch"] = u.nbytes + weights["cp"] + bench.peak_device_bytes(
            seq, framework="torch")

    paper = {"cudnn-fp32": PAPER_CUDNN[layer] if rank == RANKS[0] else None,
             "fused": (dict(zip(RANKS, PAPER_FUSED[layer])).get(rank)
                       if layer in PAPER_FUSED else None),
             "pairwise-torch-eager": PAPER_PAIRWISE[layer].get(rank)}
    notes = {"fused": f"tuned tile {tile} (of {len(tile_times)} timed)",
             "fused-default": f"default tile {default}",
             "pairwise-torch-eager": "paper value: its TensorFlow pairwise sequence",
             "cudnn-fp32": "paper value: cuDNN 7.4 PREFER_FASTEST (rank-independent)"}
    for name, us in times.items():
        rs.add(case, name, "time_us", us, "us", paper_value=paper.get(name),
               note=notes.get(name, "graph replay median" if "eager" not in name else "events"))
    for name, nbytes in mem.items():
        rs.add(case, name, "memory_bytes", nbytes, "B",
               note="input+weights+output+intermediates (paper's cumulative count)"
               if name == "pairwise-cumulative" else "input+weights+measured peak allocations")
    return times, mem


def summarize(rs: ResultSet, times: dict, mem: dict) -> None:
    """The issue's targets and the rank scaling, as summary rows."""
    if not all("cudnn-fp32" in v for v in times.values()):
        return
    fast = {k: v["cudnn-fp32"] / v["fused"] for k, v in times.items()}
    best = max(fast, key=fast.get)
    rs.add("summary", "fused/cudnn-fp32", "best_speedup", fast[best], "x", paper_value=4.85,
           note=f"at {best}; paper: layer 2, rank 1")
    rs.add("summary", "fused/cudnn-tf32", "best_speedup",
           max(v["cudnn-tf32"] / v["fused"] for v in times.values()), "x")
    need = [k for k in times if (int(k.split("_R")[1]) <= 4) or
            (int(k.split("_R")[1]) == 8 and k.split("_")[0] != "L1")]
    slow = [k for k in need if fast[k] <= 1]
    rs.add("summary", "fused vs cudnn-fp32", "target_cases_slower", len(slow), "count",
           note=f"of {len(need)} (ranks <= 4, and rank 8 on layers 2-5): "
                + (" ".join(slow) or "none"))
    slow_tf32 = [k for k in need if times[k]["cudnn-tf32"] <= times[k]["fused"]]
    rs.add("summary", "fused vs cudnn-tf32", "target_cases_slower", len(slow_tf32), "count",
           note=" ".join(slow_tf32) or "none")
    low = [k for k in times if int(k.split("_R")[1]) <= 8]
    pw = {k: min(times[k]["pairwise-ours-graph"], times[k]["pairwise-torch-graph"]) for k in low}
    lose = [k for k in low if times[k]["fused"] >= pw[k]]
    rs.add("summary", "fused vs best pairwise graph", "cases_slower", len(lose), "count",
           note=f"of {len(low)} (ranks <= 8): " + (" ".join(lose) or "none"))
    rs.add("summary", "best pairwise graph/fused", "geomean_speedup",
           geomean(pw[k] / times[k]["fused"] for k in low), "x")
    bigger = [k for k in mem if mem[k]["fused"] > mem[k].get("cudnn-fp32", math.inf)]
    rs.add("summary", "fused vs cudnn-fp32 memory", "cases_larger", len(bigger), "count",
           note=" ".join(bigger) or "none")
    for layer in sorted({k.split("_")[0] for k in times}):
        ks = sorted((k for k in times if k.startswith(layer + "_")),
                    key=lambda k: int(k.split("_R")[1]))
        if len(ks) > 1:
            r0, r1 = int(ks[0].split("_R")[1]), int(ks[-1].split("_R")[1])
            rs.add("summary", f"fused {layer}", f"time_R{r1}/time_R{r0}",
                   times[ks[-1]]["fused"] / times[ks[0]]["fused"], "x",
                   note=f"rank grows {r1 // r0}x")


def plot(rows: list[dict], path) -> None:
    """Time vs rank per layer (top) and memory footprint vs rank (bottom), paper beside ours."""
    plt = pyplot()
    layers = sorted({int(r["case"][1]) for r in rows if r["case"].startswith("L")})
    fig, axes = plt.subplots(2, len(layers), figsize=(3.4 * len(layers), 6.5), squeeze=False)
    styles = {"cudnn-fp32": "k-", "cudnn-tf32": "k:", "fused": "C0-o", "naive": "C3-x",
              "pairwise-ours-graph": "C2-s", "pairwise-torch-graph": "C1-^"}
    for col, layer in enumerate(layers):
        lr = [r for r in rows if r["case"].startswith(f"L{layer}_")]
        ranks = sorted({int(r["case"].split("_R")[1]) for r in lr})

        def series(variant, metric, key="value"):
            cell = {int(r["case"].split("_R")[1]): r[key] for r in lr
                    if r["variant"] == variant and r["metric"] == metric}
            return [cell.get(k, math.nan) for k in ranks]

        ax = axes[0][col]
        for v, st in styles.items():
            ax.plot(ranks, series(v, "time_us"), st, label=v, ms=4)
        if layer in PAPER_FUSED:
            ax.plot(RANKS, PAPER_FUSED[layer], "C0--", alpha=0.5, label="paper fused (2080 Ti)")
        ax.axhline(PAPER_CUDNN[layer], color="gray", ls="--", lw=1, label="paper cuDNN (2080 Ti)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"layer {layer}: {LAYERS[layer][:3]}->{LAYERS[layer][3:]}", fontsize=9)
        ax.set_xlabel("rank")
        if col == 0:
            ax.set_ylabel("µs (graph replay, log)")
        ax = axes[1][col]
        for v, st in (("cudnn-fp32", "k-"), ("fused", "C0-o"), ("pairwise-torch", "C1-^"),
                      ("pairwise-cumulative", "C2--")):
            ax.plot(ranks, series(v, "memory_bytes"), st, label=v, ms=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("rank")
        if col == 0:
            ax.set_ylabel("memory footprint (bytes, log)")
    axes[0][0].legend(fontsize=6)
    if len(layers) > 1:  # the last layer has the paper's fused times
        marks = [h for h in axes[0][-1].get_lines() if "paper" in h.get_label()]
        axes[0][-1].legend(marks, [h.get_label() for h in marks], fontsize=6)
    axes[1][0].legend(fontsize=6)
    fig.suptitle("CP convolution (Reustle et al. Table 2 / Fig. 6) on an H100, batch 1, fp32",
                 fontsize=10)
    save_figure(fig, path)


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--tiles", action="store_true",
                   help="also write every tuner timing to cp_table2_tiles.csv")
    args = p.parse_args(argv)
    backend.require_cuda(NAME)
    from tqdm import tqdm

    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    tile_rows = ResultSet(f"{NAME}_tiles", env) if args.tiles else None
    cases = [(layer, r) for layer in (QUICK_LAYERS if args.quick else LAYERS)
             for r in (QUICK_RANKS if args.quick else RANKS)]
    times, mem = {}, {}
    for layer, r in tqdm(cases, desc=NAME):
        times[f"L{layer}_R{r}"], mem[f"L{layer}_R{r}"] = measure_layer(rs, layer, r,
                                                                       quick=args.quick,
                                                                     tile_rows=tile_rows)
    summarize(rs, times, mem)
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    if tile_rows is not None:
        tile_rows.write_csv(paths["csv"].with_name(f"{NAME}_tiles.csv"))
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "CP convolution, Table 2: Table 1 layers at batch 1 (fp32)", env, [
        ("Time (µs)", pivot_markdown(rows, "time_us", TIME_VARIANTS)),
        ("Memory footprint (bytes)", pivot_markdown(rows, "memory_bytes")),
        ("Summary", long_markdown([r for r in rows if r["case"] == "summary"])),
        ("Correctness (rel. error vs float64 reference)", pivot_markdown(rows, "rel_err")),
        ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])
    plot(rows, paths["png"])
    print(pivot_markdown(rows, "time_us", TIME_VARIANTS[:7]))
    print(long_markdown([r for r in rows if r["case"] == "summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
