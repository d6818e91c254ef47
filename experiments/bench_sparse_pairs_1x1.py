"""The sparse-tensor-core 1x1 kernel's tiles on a pruned model's 1x1 layers, against cuDNN.

``ops.sparse_pairs_tc`` runs a pruned 1x1 convolution (stride 1, no padding) on ``mma.sp``
at one tf32 pass: the input channels paired per block of output rows so that the rows
rarely have a nonzero in both channels of a pair, the tensor cores then doing half a dense
TF32 GEMM's products.  This bench times every tile of ``sparse_pairs_tc.candidates`` on
every such layer of a model, beside cuDNN fp32 and TF32 on the same kernel as a dense one:

* ``mtM ntN wmW wnV sS``: one tile (warps' m16 and n8 tiles, the warp grid, the cluster's
  splits of the channels);
* ``default``: the static rule's tile (``sparse_pairs_tc.default_tile``);
* ``ours``: the fastest tile;
* ``cudnn-tf32/ours``: the ratio issue 23's tf32 target counts on a layer.

The layers are those ``sparse_layers`` times (the first of each shape), built the same way:
``--masks`` (trained, from ``sparse_table1``) or magnitude pruning ``--ratio`` of the zoo
model's initial weights; its 1x1 layers at stride 1 without padding, or with ``--filters
all`` every layer the kernel runs (wider filters, strides and padding through its
implicit im2col; results then go to ``bench_sparse_pairs_1x1_all.*``).  Every output is
checked against cuDNN fp32 on the tf32-rounded input and kernel (the products are then
exact: relative error at most 1e-5).  CUDA-graph replay medians, side by side in one
process.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from experiments._common import (
    checked_rel_norm,
    cudnn_fp32,
    grouped_bars,
    outputs,
    parser,
    pyplot,
    save_figure,
)
from experiments.bench_sparse_unrolled_1x1 import _cudnn_us, layer_arguments
from tensorconv import backend, bench, cuda, precision, timing
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.ops import sparse_pairs_tc as sp
from tensorconv.ops._launch import round_tf32
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "bench_sparse_pairs_1x1"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def label(tile: sp.Tile) -> str:
    return f"mt{tile.mt} nt{tile.nt} wm{tile.wm} wn{tile.wn} s{tile.splits}"


def pairs_layers(args) -> list:
    """``[(name, geometry, pruned kernel)]``: the layers of ``sparse_layers``' list that
    ``sparse_pairs_tc`` runs: 1x1 at stride 1 without padding, or every one where
    ``args.filters`` is "all"."""
    from experiments import sparse_layers

    spec = SimpleNamespace(model=args.model, in_channels=args.in_channels, size=args.size,
                           batch=args.batch, layers=[], all_layers=False, ratio=args.ratio)
    out = []
    for name, conv, x_shape, w in sparse_layers._layers(spec, args.masks):
        geom = conv_geometry(x_shape, w.shape, conv.stride, conv.padding)
        pointwise = (geom.r, geom.s, geom.stride, geom.padding) == (1, 1, (1, 1), (0, 0))
        if (pointwise or getattr(args, "filters", "1x1") == "all") and \
                sp.supported(sp.Problem(geom)) is None:
            out.append((name, geom, w))
    return out


def case_name(name: str, g) -> str:
    """A layer's row: ``NAME KxC HxW`` for a 1x1 filter at stride 1 (as the committed runs
    name them), else with the filter, stride and padding."""
    if (g.r, g.s, g.stride, g.padding) == (1, 1, (1, 1), (0, 0)):
        return f"{name} {g.k}x{g.c} {g.h}x{g.w}"
    return (f"{name} {g.k}x{g.c}x{g.r}x{g.s} s{g.stride[0]} p{g.padding[0]} "
            f"{g.h}x{g.w}")


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    layer_arguments(p)
    p.add_argument("--filters", choices=("1x1", "all"), default="1x1",
                   help="1x1 layers at stride 1 (default) or every layer the kernel runs")
    args = p.parse_args(argv)
    name_out = NAME if args.filters == "1x1" else f"{NAME}_all"
    if args.quick:
        args.model, args.masks, args.batch, args.max_layers = "googlenet", None, 4, 1
    cp = backend.require_cuda(NAME)
    torch = cudnn_fp32()
    if torch is None:
        raise SystemExit(f"{NAME}: needs PyTorch with cuDNN for its baselines")
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    layers = pairs_layers(args)[:args.max_layers]
    if not layers:
        raise SystemExit(f"{NAME}: {args.model} has no layer the kernel runs "
                         f"(--filters {args.filters})")
    facts = backend.device_facts()
    rng = np.random.default_rng(0)
    from tqdm import tqdm

    with precision.using("tf32"):
        prepared = []
        for name, geom, w in layers:
            prob = sp.Problem(geom)
            prepared.append((name, prob, w, sp.candidates(prob, facts)))
        cuda.compile_all(sorted({k for _, prob, _, tiles in prepared for t in tiles
                                 for k in sp.kernels(prob, t)}, key=lambda r: r.name),
                         desc="compiling the sparse-tensor-core tiles")
        for name, prob, w, tiles in tqdm(prepared, desc="timing the tiles", unit="layer"):
            g = prob.geom
            case = case_name(name, g)
            x = cp.asarray(rng.standard_normal((g.n, g.c, g.h, g.w)).astype(np.float32))
            wd = cp.asarray(w)
            want = cp.from_dlpack(torch.nn.functional.conv2d(
                torch.from_dlpack(round_tf32(x, cp)), torch.from_dlpack(round_tf32(wd, cp)),
                None, g.stride, g.padding)).copy()
            out = cp.empty(g.output_shape, cp.float32)
            by_rows, times = {}, {}
            for tile in tiles:
                if tile.rows not in by_rows:
                    by_rows[tile.rows] = sp.pair_records(*sp.dense_csr(w), g.k, prob.columns,
                                                         tile.rows, cp)
                rec = by_rows[tile.rows]

                def run(tile=tile, rec=rec):
                    sp.run(x, rec, out, prob, tile)
                out.fill(np.nan)
                run()
                checked_rel_norm(out, want, cp, f"{case} {label(tile)}", tol=1e-5)
                times[tile] = timing.time_graph(run).median_us
                rs.add(case, label(tile), "latency_us", times[tile], "us")
            rec = by_rows[tiles[0].rows]
            rs.add(case, "pairs", "count", rec.pairs, "pairs",
                   note=f"{rec.steps} k steps of 16 columns over the row blocks of "
                        f"{rec.rows}; {rec.moved} nonzeros placed after a first round")
            best = min(times, key=times.get)
            default = sp.default_tile(prob, facts)
            rs.add(case, "default", "latency_us", times[default], "us",
                   note=f"the rule's tile: {label(default)}")
            rs.add(case, "ours", "latency_us", times[best], "us", note=f"fastest: {label(best)}")
            for tf32 in (False, True):
                base = f"cudnn-{'tf32' if tf32 else 'fp32'}"
                us = _cudnn_us(torch, x, wd, g, tf32)
                rs.add(case, base, "latency_us", us, "us", note="the kernel as a dense one")
                for ours in ("default", "ours"):
                    rs.add(case, f"{base}/{ours}", "speedup",
                           us / (times[default] if ours == "default" else times[best]), "x")
    speed = rs.values("speedup")
    for ratio in ("cudnn-tf32/default", "cudnn-tf32/ours", "cudnn-fp32/ours"):
        vals = [v for (_, var), v in speed.items() if var == ratio]
        rs.add(f"all {len(vals)} layers", ratio, "median", float(np.median(vals)), "x",
               note=f"{sum(v >= 1 for v in vals)} of {len(vals)} at or above 1; "
                    f"min {min(vals):.2f}, max {max(vals):.2f}")
    paths = outputs(name_out, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("median", "speedup", "latency_us", "count"))
    masks = args.masks or f"magnitude pruning {args.ratio:g}x of the initial weights"
    sections.append(("Notes", f"{args.model}, {masks}; batch {args.batch}, "
                              f"{args.size}x{args.size} inputs; one tf32 pass. Kernel time: "
                              "CUDA-graph replay, median; cuDNN on the pruned kernel as a "
                              "dense one, the faster of cudnn.benchmark's algorithm and the "
                              "heuristic's."))
    what = "1x1 layers" if args.filters == "1x1" else "layers"
    write_markdown(paths["md"], f"The sparse-tensor-core kernel on {args.model}'s {what}", env,
                   sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(prepared)), 4))
    cases = [c for (c, v) in speed if v == "cudnn-tf32/ours"]
    grouped_bars(ax, cases, {ratio: [speed[(c, ratio)] for c in cases]
                             for ratio in ("cudnn-tf32/default", "cudnn-tf32/ours")})
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("cuDNN TF32 time over ours (x)")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
