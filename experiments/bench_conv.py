"""Our fp32 conv2d (implicit GEMM / direct) vs cuDNN and cuBLAS on ResNet-18 layers.

On a GPU: our conv2d (``tensorconv.ops.conv2d``) and cuDNN through
PyTorch (``cudnn.benchmark=True``; TF32 off and on), each timed eagerly with
CUDA events and by CUDA-graph replay, side by side in one run, after a
correctness check against the NumPy reference.  Also the roofline floor of each
layer over the measured copy bandwidth and fp32 GEMM rate, the launch floor,
and the sync floor (one step in which every SM waits on another, as a dependent
launch in a CUDA graph and as a grid barrier in a persistent kernel).  On a
CPU-only machine the NumPy backend is timed instead.
"""

from __future__ import annotations

import math

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench, ops, reference, timing
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.ops import direct_conv
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown

NAME = "bench_conv"
# (case, C, K, H=W, R=S, stride, padding): the distinct conv layers of ResNet-18 at 224x224,
# plus one stride-1 1x1 layer of ResNet-50 where cuBLAS is the natural baseline.
LAYERS = [
    ("conv1", 3, 64, 224, 7, 2, 3),
    ("l1.3x3", 64, 64, 56, 3, 1, 1),
    ("l2.3x3s2", 64, 128, 56, 3, 2, 1),
    ("l2.3x3", 128, 128, 28, 3, 1, 1),
    ("l2.down1x1s2", 64, 128, 56, 1, 2, 0),
    ("l3.3x3s2", 128, 256, 28, 3, 2, 1),
    ("l3.3x3", 256, 256, 14, 3, 1, 1),
    ("l3.down1x1s2", 128, 256, 28, 1, 2, 0),
    ("l4.3x3s2", 256, 512, 14, 3, 2, 1),
    ("l4.3x3", 512, 512, 7, 3, 1, 1),
    ("l4.down1x1s2", 256, 512, 14, 1, 2, 0),
    ("r50.1x1", 256, 1024, 14, 1, 1, 0),
]
QUICK_LAYERS = ("l1.3x3", "l3.3x3", "l4.3x3", "r50.1x1")


def _rel_err(out, ref) -> float:
    out, ref = backend.to_host(out).astype(np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _gpu_case(rs: ResultSet, case: str, layer, batch: int, ceilings, quick: bool):
    import cupy as cp

    _, c, k, hw, r, stride, pad = layer
    rng = np.random.default_rng(0)
    x_h = rng.standard_normal((batch, c, hw, hw)).astype(np.float32)
    w_h = (rng.standard_normal((k, c, r, r)) / math.sqrt(c * r * r)).astype(np.float32)
    x, w = cp.asarray(x_h), cp.asarray(w_h)
    geom = conv_geometry(x.shape, w.shape, stride, pad)
    out = cp.full(geom.output_shape, cp.nan, dtype=cp.float32)
    ops.conv2d(x, w, stride=stride, padding=pad, out=out)
    ref = reference.conv2d(x_h.astype(np.float64), w_h.astype(np.float64), stride=stride,
                           padding=pad)
    facts = backend.device_facts()
    algo = direct_conv.choose_algorithm(geom, 0, facts)
    detail = (f"{algo}, {direct_conv.igemm_splits(geom, facts.sm_count)} splits"
              if algo.startswith("igemm") else
              f"direct, {direct_conv.default_tile(geom, facts)}" if algo == "direct" else algo)
    rs.add(case, "ours", "rel_err", _rel_err(out, ref), "1", note=detail)

    reps = dict(repeat=30 if quick else 100)
    greps = dict(repeat=10 if quick else 30)
    times = {}
    ours = lambda: ops.conv2d(x, w, stride=stride, padding=pad, out=out)  # noqa: E731
    times["ours"] = (timing.time_events(ours, **reps), timing.time_graph(ours, **greps))
    if bench.torch_cudnn_available():
        for tf32 in (False, True):
            run = bench.cudnn_conv2d(x, w, stride=stride, padding=pad, allow_tf32=tf32)
            rs.add(case, f"cudnn-{'tf32' if tf32 else 'fp32'}", "rel_err",
                   _rel_err(cp.from_dlpack(run()), ref), "1")
            times[f"cudnn-{'tf32' if tf32 else 'fp32'}"] = (
                timing.time_events(run, framework="torch", **reps),
                timing.time_graph(run, framework="torch", **greps))
    if r == 1 and stride == 1:
        gemm = bench.cublas_conv1x1(x, w)
        rs.add(case, "cublas-1x1", "rel_err", _rel_err(gemm().reshape(geom.output_shape), ref), "1")
        times["cublas-1x1"] = (timing.time_events(gemm, **reps), None)
    for variant, (eager, graph) in times.items():
        rs.add(case, variant, "time_us", eager.median_us, "us",
               note=f"events p10={eager.p10_us:.1f} p90={eager.p90_us:.1f}")
        if graph is not None:
            rs.add(case, variant, "time_graph_us", graph.median_us, "us",
                   note=f"graph p10={graph.p10_us:.1f} p90={graph.p90_us:.1f}")
    min_bytes = 4 * (x.size + w.size + out.size)
    floor = bench.roofline_floor_us(geom.flops, min_bytes, ceilings)
    rs.add(case, "roofline", "time_graph_us", floor, "us", note="max(FLOPs/SGEMM, bytes/copy)")
    ours_t = times["ours"][1].median_us
    rs.add(case, "ours", "tflops", geom.flops / ours_t / 1e6, "TFLOP/s")
    for base in ("cudnn-fp32", "cudnn-tf32"):
        if base in times:
            rs.add(case, f"ours/{base}", "speedup_graph", times[base][1].median_us / ours_t, "x",
                   note=">1: ours faster")


def _cpu_case(rs: ResultSet, case: str, layer, batch: int):
    _, c, k, hw, r, stride, pad = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((k, c, r, r)) / math.sqrt(c * r * r)).astype(np.float32)
    t = timing.time_host(lambda: ops.conv2d(x, w, stride=stride, padding=pad), repeat=3)
    geom = conv_geometry(x.shape, w.shape, stride, pad)
    rs.add(case, "numpy", "time_us", t.median_us, "us", note="host wall time")
    rs.add(case, "numpy", "tflops", geom.flops / t.median_us / 1e6, "TFLOP/s")


def _plot(rows, path, batches):
    plt = pyplot()

    metric = "time_graph_us" if any(r["metric"] == "time_graph_us" for r in rows) else "time_us"
    variants = [v for v in ("ours", "cudnn-fp32", "cudnn-tf32", "roofline", "numpy")
                if any(r["variant"] == v and r["metric"] == metric for r in rows)]
    fig, axes = plt.subplots(len(batches), 1, figsize=(12, 4 * len(batches)), squeeze=False)
    for ax, batch in zip(axes[:, 0], batches):
        sel = [r for r in rows if r["metric"] == metric and r["case"].endswith(f"/n{batch}")]
        cases = list(dict.fromkeys(r["case"] for r in sel))
        width = 0.8 / max(1, len(variants))
        for i, v in enumerate(variants):
            vals = {r["case"]: r["value"] for r in sel if r["variant"] == v}
            ax.bar(np.arange(len(cases)) + i * width, [vals.get(c, np.nan) for c in cases],
                   width, label=v)
        ax.set_xticks(np.arange(len(cases)) + width * (len(variants) - 1) / 2)
        ax.set_xticklabels([c.rsplit("/", 1)[0] for c in cases], rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel(f"{metric} (µs, log)")
        ax.set_title(f"ResNet-18 conv layers, batch {batch}, fp32")
        ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--batch", default=None,
                   help="comma-separated batch sizes (default: 1,16 on a GPU; 1 on the CPU)")
    args = p.parse_args(argv)
    gpu = backend.gpu_available()
    batch_arg = args.batch or ("1,16" if gpu and not args.quick else "1")
    batches = [int(b) for b in batch_arg.split(",")]
    layers = [layer for layer in LAYERS if not args.quick or layer[0] in QUICK_LAYERS]
    if not gpu:
        layers = [layer for layer in layers if layer[0] in QUICK_LAYERS]  # NumPy is slow
    env = bench.environment(with_torch=gpu)
    rs = ResultSet(NAME, env)
    sections = []
    if gpu:
        ceil = bench.measure_ceilings(quick=args.quick)
        env.update(copy_TBps=f"{ceil.copy_bytes_per_s / 1e12:.2f}",
                   sgemm_TFLOPs=f"{ceil.fp32_flops_per_s / 1e12:.1f}",
                   launch_eager_us=f"{ceil.launch_eager_us:.2f}",
                   launch_graph_us=f"{ceil.launch_graph_us:.2f}")
        for name, value, unit in (("copy_bandwidth", ceil.copy_bytes_per_s / 1e12, "TB/s"),
                                  ("sgemm_rate", ceil.fp32_flops_per_s / 1e12, "TFLOP/s"),
                                  ("launch_floor_eager", ceil.launch_eager_us, "us"),
                                  ("launch_floor_graph", ceil.launch_graph_us, "us")):
            rs.add("device", "ceiling", name, value, unit)
        for name, us in bench.sync_floor(quick=args.quick).items():
            rs.add("device", "ceiling", f"sync_step_{name}", us, "us",
                   note="all SMs wait on each other once per step")
    from tqdm import tqdm

    for batch in batches:
        for layer in tqdm(layers, desc=f"{NAME} batch {batch}"):
            case = f"{layer[0]}/n{batch}"
            if gpu:
                _gpu_case(rs, case, layer, batch, ceil, args.quick)
            else:
                _cpu_case(rs, case, layer, batch)
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    _plot(rows, paths["png"], batches)
    for metric, title in (("time_graph_us", "Kernel time, CUDA-graph replay (µs, median)"),
                          ("time_us", "Eager time, CUDA events (µs, median)" if gpu
                           else "Host wall time, NumPy backend (µs, median)"),
                          ("speedup_graph",
                           "Speed-up of ours over cuDNN (graph; >1 = ours faster)"),
                          ("rel_err", "Relative error vs the float64 NumPy reference"),
                          ("tflops", "Achieved TFLOP/s")):
        if any(r["metric"] == metric for r in rows):
            sections.append((title, pivot_markdown(rows, metric)))
    ceilings = [r for r in rows if r["variant"] == "ceiling"]
    if ceilings:
        sections.append(("Device ceilings", long_markdown(ceilings)))
    sections.append(("Notes", (
        "Baseline: cuDNN via PyTorch `conv2d`, `cudnn.benchmark=True`, timed with TF32 off "
        "(`cudnn-fp32`, the like-for-like fp32 baseline) and on (`cudnn-tf32`). cuBLAS via "
        "CuPy `matmul` for the stride-1 1x1 layer (eager only: CuPy 14 refuses cuBLAS during "
        "graph capture). `roofline` is max(FLOPs / measured SGEMM rate, minimum bytes / "
        "measured copy bandwidth). No paper figure exists for this benchmark: it measures "
        "the dense kernels (`ours` = the algorithm `choose_algorithm` picks; see the `note` "
        "column of rel_err rows), which the structured kernels build on.")))
    write_markdown(paths["md"], "Dense fp32 convolution: ours vs cuDNN on ResNet-18 layers", env,
                   sections)
    print(pivot_markdown(rows, "time_graph_us" if gpu else "time_us"))
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
