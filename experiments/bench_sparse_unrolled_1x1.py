"""The unstaged unrolled 1x1 remainder's tiles on a pruned model's 1x1 layers, against cuDNN.

On a 1x1 layer a tuned plan times every tile of ``sparse_unrolled_direct.candidates``:
groups of 8 to 64 output rows on 64-thread blocks, four groups a block of a warp each, and,
on a layer of at least ``WIDE_PIXELS`` output pixels, 256-thread blocks (``WIDE_BLOCK``) of
32 or 64 rows with the grid's pixel blocks first or its groups first, each also with its
loads made cp.async copies into a ring of ``RING`` shared-memory slots a thread (where every
pixel's tap lies inside the image), and with a group's columns split among ``SPLITS``
shares of the block's threads.  This bench times
each tile on every 1x1 layer of a model whose remainder the kernel may unroll
(``sparse_unrolled.MAX_FMAS``), the whole pruned matrix as the remainder (no dense blocks),
beside cuDNN fp32 and TF32 on the same kernel as a dense one:

* ``rRB tT gGB`` (`` groups first``, `` ringD``, `` splitS`` where so): one tile;
* ``64-thread``: the fastest of the tiles without the wide blocks (what a tuned plan chose
  among before them), ``no-ring``: the fastest without the rings, ``no-split``: the
  fastest without the splits, ``ours``: the fastest of every tile;
* ``cudnn-tf32/ours``: the ratio issue 23's tf32 target counts on a 1x1 layer, whose tf32
  path is this fp32 kernel (the tensor-core remainder is slower there).

The layers are those ``sparse_layers`` times (the first of each shape), built the same way:
``--masks`` (trained, from ``sparse_table1``) or magnitude pruning ``--ratio`` of the zoo
model's initial weights.  Every output is checked against cuDNN fp32 (relative error at
most 1e-5).  CUDA-graph replay medians, side by side in one process.
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
from tensorconv import backend, bench, cuda, timing
from tensorconv.blocksparse import kernel_matrix, layout_from_pattern, pack
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.ops import sparse_conv
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct as sud
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "bench_sparse_unrolled_1x1"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def label(tile: sud.Tile) -> str:
    """``rRB tT gGB``, with `` groups first`` where the grid counts the groups first,
    `` ringD`` where the loads go through a ring of D slots and `` splitS`` where a group's
    columns are split S ways."""
    return (f"r{tile.rb} t{tile.threads} g{tile.gb}"
            + (" groups first" if tile.groups_first else "")
            + (f" ring{tile.ring}" if tile.ring else "")
            + (f" split{tile.ks}" if tile.ks > 1 else ""))


def one_by_one_layers(args) -> list:
    """``[(name, stride, padding, input shape, pruned kernel)]``: the 1x1 layers of
    ``sparse_layers``' list whose remainder fits :data:`sparse_unrolled.MAX_FMAS`."""
    from experiments import sparse_layers

    spec = SimpleNamespace(model=args.model, in_channels=args.in_channels, size=args.size,
                           batch=args.batch, layers=[], all_layers=False, ratio=args.ratio)
    out = []
    for name, conv, x_shape, w in sparse_layers._layers(spec, args.masks):
        if w.shape[2:] == (1, 1) and np.count_nonzero(w) <= su.MAX_FMAS:
            out.append((name, conv.stride, conv.padding, x_shape, w))
    return out


def _cudnn_us(torch, x, w, geom, tf32: bool) -> float:
    """cuDNN on ``w`` as a dense kernel: the faster of ``cudnn.benchmark``'s algorithm and
    the heuristic's (as ``sparse_layers`` times it)."""
    xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
    torch.backends.cudnn.allow_tf32 = tf32
    run = lambda: torch.nn.functional.conv2d(xt, wt, None, geom.stride, geom.padding)  # noqa
    times = []
    for pick in (True, False):
        torch.backends.cudnn.benchmark = pick
        times.append(timing.time_graph(run, framework="torch", calls_per_graph=10).median_us)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, False
    return min(times)


def layer_arguments(p) -> None:
    """The options that pick a pruned model's layers as ``sparse_layers`` builds them
    (shared by the per-kernel 1x1 benches)."""
    p.add_argument("--model", default="googlenet", help="zoo model")
    p.add_argument("--masks", default=None, metavar="PATH",
                   help="trained masks (.npz of sparse_table1); default: magnitude pruning")
    p.add_argument("--ratio", type=float, default=8.0, help="pruning ratio (magnitude masks)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=32, help="input height and width")
    p.add_argument("--in-channels", type=int, default=1,
                   help="input channels (1: Fashion-MNIST; 3 for the ImageNet models)")
    p.add_argument("--max-layers", type=int, default=None, metavar="N",
                   help="only the first N such layers")


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    layer_arguments(p)
    args = p.parse_args(argv)
    if args.quick:
        args.model, args.masks, args.batch, args.max_layers = "resnet18", None, 8, 1
    cp = backend.require_cuda(NAME)
    torch = cudnn_fp32()
    if torch is None:
        raise SystemExit(f"{NAME}: needs PyTorch with cuDNN for its baselines")
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    layers = one_by_one_layers(args)[:args.max_layers]
    if not layers:
        raise SystemExit(f"{NAME}: {args.model} has no 1x1 layer the unrolled kernel takes")
    rng = np.random.default_rng(0)
    prepared = []
    for name, stride, padding, x_shape, w in layers:
        geom = conv_geometry(x_shape, w.shape, stride, padding)
        packed = pack(w, layout_from_pattern(kernel_matrix(w) != 0, w.shape))
        weights = sparse_conv.pack_weights(packed, x_shape[2:], cp)
        tiles = sud.candidates(sud.Problem(geom), backend.device_facts())
        prepared.append((name, geom, packed, weights, tiles, w))
    cuda.compile_all([k for _, geom, _, weights, tiles, _ in prepared for t in tiles
                      for k in sparse_conv.remainder_kernels(geom, "unrolled", t, weights)],
                     desc="compiling the unrolled 1x1 kernels")
    from tqdm import tqdm

    for name, geom, packed, weights, tiles, w in tqdm(prepared, desc="timing the 1x1 tiles",
                                                       unit="layer"):
        case = f"{name} {geom.k}x{geom.c} s{geom.stride[0]} {geom.h}x{geom.w}"
        x = cp.asarray(rng.standard_normal((geom.n, geom.c, geom.h, geom.w)).astype(np.float32))
        wd = cp.asarray(w)
        want = cp.from_dlpack(torch.nn.functional.conv2d(
            torch.from_dlpack(x), torch.from_dlpack(wd), None, geom.stride, geom.padding)).copy()
        out = cp.empty(geom.output_shape, cp.float32)
        times = {}
        for tile in tiles:
            def run(tile=tile):
                sparse_conv.sparse_conv2d(x, packed, stride=geom.stride, padding=geom.padding,
                                          weights=weights, remainder="unrolled",
                                          remainder_tile=tile, out=out)
            out.fill(np.nan)
            run()
            checked_rel_norm(out, want, cp, f"{case} {label(tile)}", tol=1e-5)
            times[tile] = timing.time_graph(run).median_us
            rs.add(case, label(tile), "latency_us", times[tile], "us")
        narrow = min(v for t, v in times.items() if t.threads != sud.WIDE_BLOCK)
        ringless = min(v for t, v in times.items() if not t.ring)
        unsplit = min(v for t, v in times.items() if t.ks == 1)
        best = min(times, key=times.get)
        rs.add(case, "64-thread", "latency_us", narrow, "us",
               note="the fastest tile without the 256-thread blocks")
        rs.add(case, "no-ring", "latency_us", ringless, "us",
               note="the fastest tile without the rings")
        rs.add(case, "no-split", "latency_us", unsplit, "us",
               note="the fastest tile without the splits")
        rs.add(case, "ours", "latency_us", times[best], "us", note=f"fastest: {label(best)}")
        for tf32 in (False, True):
            base = f"cudnn-{'tf32' if tf32 else 'fp32'}"
            us = _cudnn_us(torch, x, wd, geom, tf32)
            rs.add(case, base, "latency_us", us, "us", note="the kernel as a dense one")
            for ours, ours_us in (("64-thread", narrow), ("no-ring", ringless),
                                  ("no-split", unsplit), ("ours", times[best])):
                rs.add(case, f"{base}/{ours}", "speedup", us / ours_us, "x")
    speed = rs.values("speedup")
    for ratio in ("cudnn-tf32/64-thread", "cudnn-tf32/no-ring", "cudnn-tf32/no-split",
                  "cudnn-tf32/ours", "cudnn-fp32/ours"):
        vals = [v for (_, var), v in speed.items() if var == ratio]
        rs.add(f"all {len(vals)} layers", ratio, "median", float(np.median(vals)), "x",
               note=f"{sum(v >= 1 for v in vals)} of {len(vals)} at or above 1; "
                    f"min {min(vals):.2f}, max {max(vals):.2f}")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("median", "speedup", "latency_us"))
    masks = args.masks or f"magnitude pruning {args.ratio:g}x of the initial weights"
    sections.append(("Notes", f"{args.model}, {masks}; batch {args.batch}, "
                              f"{args.size}x{args.size} inputs, fp32, no dense blocks. "
                              "Kernel time: CUDA-graph replay, median; cuDNN on the pruned "
                              "kernel as a dense one, the faster of cudnn.benchmark's "
                              "algorithm and the heuristic's."))
    write_markdown(paths["md"], f"The unrolled 1x1 remainder's tiles on {args.model}", env,
                   sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(prepared)), 4))
    cases = [c for (c, v) in speed if v == "cudnn-tf32/ours"]
    grouped_bars(ax, cases, {ratio: [speed[(c, ratio)] for c in cases]
                             for ratio in ("cudnn-tf32/64-thread", "cudnn-tf32/no-ring",
                                           "cudnn-tf32/no-split", "cudnn-tf32/ours")})
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("cuDNN TF32 time over ours (x)")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
