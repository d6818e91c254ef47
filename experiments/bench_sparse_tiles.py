"""The sparse remainder's tiles, each timed on pruned layers against the rule that picks one.

The row kernel and the dense baselines stand beside them.

``sparse_conv.default_remainder_tile`` and ``choose_remainder`` are a measured rule (rows a
block x pixels a thread by the output's width and the stride; the row kernel for strided
1x1 layers).  This bench is the measurement: on ResNet-18's distinct 3x3 and 1x1 layers
(CIFAR-style at 32x32 and ImageNet-style at 224x224, batch ``--batch``), each kernel
pruned to ``1 / --ratio`` of its weights at random (an unstructured pattern, no dense
blocks), it times

* ``tiled RBxPX`` (``ckCK`` where a stage holds other than 8 channels): the tiled remainder
  (``sparse_csr_tiled``) on each tile of ``sparse_conv.REMAINDER_TILES``;
* ``pointwise WARPSxRWxPX`` (1x1 layers): the unstaged 1x1 remainder (``sparse_csr_pointwise``)
  on each tile of ``sparse_conv.POINTWISE_TILES``;
* ``rule``: what the library runs (``remainder="auto"``), ``rule by phase`` (even strides):
  its tile with the input's lines staged by column phase (``sparse_conv.column_phases``)
  rather than in order, ``rows``: the one-thread-per-pixel row kernel;
* ``ours-dense``: our dense convolution of the pruned kernel, ``cudnn-fp32``: PyTorch's
  (``cudnn.benchmark``, TF32 off).

Every output is checked against the dense convolution first.  CUDA-graph replay medians,
side by side in one process.  ``best/rule`` (at most 1) says how much time the rule leaves
against the fastest tiled or row kernel on each layer (the rule's own run counted).
"""

from __future__ import annotations

import numpy as np

from experiments._common import (
    cudnn_fp32,
    geomean,
    grouped_bars,
    outputs,
    parser,
    pyplot,
    save_figure,
)
from tensorconv import backend, bench, ops, timing
from tensorconv.blocksparse import layout_from_pattern, pack
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.ops import sparse_conv
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "bench_sparse_tiles"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
# (K, C, filter, stride, input size): ResNet-18's distinct layers, CIFAR then ImageNet
LAYERS = [(64, 64, 3, 1, 32), (128, 64, 3, 2, 32), (128, 128, 3, 1, 16), (128, 64, 1, 2, 32),
          (256, 128, 3, 2, 16), (256, 256, 3, 1, 8), (256, 128, 1, 2, 16),
          (512, 256, 3, 2, 8), (512, 512, 3, 1, 4), (512, 256, 1, 2, 8),
          (64, 64, 3, 1, 56), (128, 64, 3, 2, 56), (128, 128, 3, 1, 28),
          (256, 128, 3, 2, 28), (256, 256, 3, 1, 14), (512, 256, 3, 2, 14),
          (512, 512, 3, 1, 7),
          # ResNet-50's (ImageNet) and GoogLeNet's (CIFAR) 1x1 layers: deep, narrow, strided
          (256, 64, 1, 1, 56), (64, 256, 1, 1, 56), (512, 256, 1, 2, 56), (128, 512, 1, 1, 28),
          (256, 1024, 1, 1, 14), (2048, 1024, 1, 2, 14), (512, 2048, 1, 1, 7),
          (192, 480, 1, 1, 16), (48, 832, 1, 1, 4), (384, 832, 1, 1, 4)]
QUICK = [(16, 8, 3, 1, 12), (24, 16, 3, 2, 14), (20, 8, 1, 1, 16)]


def label(tile) -> str:
    """``tiled RBxPX``, with ``ckCK`` where a stage holds other than 8 channels and
    ``wWARPS`` where a block has other than 4 warps."""
    return f"tiled {tile.rb}x{tile.px}" + (f" ck{tile.ck}" if tile.ck != 8 else "") + \
        (f" w{tile.warps}" if tile.warps != 4 else "")


def rule_label(geom) -> str:
    """The kernel and tile ``remainder="auto"`` runs on ``geom``, as the variants name it."""
    kind = sparse_conv.choose_remainder(geom)
    if kind == "tiled":
        return label(sparse_conv.default_remainder_tile(geom))
    if kind == "pointwise":
        return pointwise_label(sparse_conv.default_pointwise_tile(
            geom, backend.device_facts().sm_count))
    return "rows"


def pointwise_label(tile) -> str:
    """``pointwise WARPSxRWxPX``, with ``bBATCH`` where tap pairs come in batches."""
    return f"pointwise {tile.warps}x{tile.rw}x{tile.px}" + \
        (f" b{tile.batch}" if tile.batch > 1 else "")


def _case(k, c, r, stride, size) -> str:
    return f"{k}x{c}x{r}x{r} s{stride} {size}x{size}"


def _variants(cp, x, w, geom, torch) -> dict:
    """{variant: callable} writing one preallocated output."""
    pattern = w.reshape(w.shape[0], -1) != 0
    weights = sparse_conv.pack_weights(pack(w, layout_from_pattern(pattern, w.shape)),
                                       (geom.h, geom.w), cp)
    out = cp.empty(geom.output_shape, cp.float32)
    wd = cp.asarray(w)

    def sparse(remainder, tile=None):
        return lambda: sparse_conv.run(x, weights, out, geom, (), remainder=remainder,  # noqa: E731
                                       remainder_tile=tile) or out

    runs = {"rule": sparse("auto"), "rows": sparse("rows")}
    phases = sparse_conv.column_phases(geom)
    if phases > 1 and sparse_conv.choose_remainder(geom) == "tiled":
        rule_tile = sparse_conv.default_remainder_tile(geom)   # its lines by column phase
        runs["rule by phase"] = lambda: sparse_conv.run(  # noqa: E731
            x, weights, out, geom, (), remainder="tiled", remainder_tile=rule_tile,
            remainder_staging=sparse_conv.Staging(phases, True)) or out
    for tile in sparse_conv.REMAINDER_TILES:
        runs[label(tile)] = sparse("tiled", tile)
    if geom.r * geom.s == 1:
        for tile in sparse_conv.POINTWISE_TILES:
            runs[pointwise_label(tile)] = sparse("pointwise", tile)
    runs["ours-dense"] = lambda: ops.conv2d(x, wd, None, geom.stride, geom.padding, out=out)
    if torch is not None:
        xt, wt = torch.from_dlpack(x), torch.from_dlpack(wd)
        runs["cudnn-fp32"] = lambda: torch.nn.functional.conv2d(xt, wt, None, geom.stride,
                                                                geom.padding)
    return runs


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--ratio", type=float, default=8.0, help="1 / density of the kernels")
    p.add_argument("--filter", type=int, default=None, metavar="R",
                   help="only the layers of R x R filters (default: every layer)")
    args = p.parse_args(argv)
    cp = backend.require_cuda(NAME)
    torch = cudnn_fp32()
    env = bench.environment(with_torch=torch is not None)
    rs = ResultSet(NAME, env)
    rng = np.random.default_rng(0)
    layers, batch = (QUICK, 2) if args.quick else (LAYERS, args.batch)
    if args.filter is not None:
        layers = [layer for layer in layers if layer[2] == args.filter]
        if not layers:
            raise SystemExit(f"--filter {args.filter}: no layer has {args.filter} x "
                             f"{args.filter} filters")
    reps = dict(repeat=5 if args.quick else 10, calls_per_graph=5)
    from tqdm import tqdm

    for k, c, r, stride, size in tqdm(layers, desc="timing the remainder's tiles",
                                      unit="layer"):
        case = _case(k, c, r, stride, size)
        x = cp.asarray(rng.standard_normal((batch, c, size, size)).astype(np.float32))
        w = rng.standard_normal((k, c, r, r)).astype(np.float32)
        w *= rng.random(w.shape) < 1.0 / args.ratio
        geom = conv_geometry(x.shape, w.shape, stride, r // 2)
        want = ops.conv2d(x, cp.asarray(w), None, stride, r // 2)
        rule = rule_label(geom)
        for variant, fn in _variants(cp, x, w, geom, torch).items():
            try:
                got = fn()
            except ValueError:          # a forced tile whose taps do not fit shared memory
                rs.add(case, variant, "skipped", 1, "1", note="taps exceed shared memory")
                continue
            if variant != "cudnn-fp32":
                err = float(cp.linalg.norm(got - want) / cp.linalg.norm(want))
                if not err <= 1e-5:
                    raise RuntimeError(f"{case} {variant}: rel_err {err:.2e}")
            us = timing.time_graph(fn, framework="torch" if variant == "cudnn-fp32" else "cupy",
                                   **reps).median_us
            rs.add(case, variant, "latency_us", us, "us", note=f"rule: {rule}"
                   if variant == "rule" else "")
        lat = rs.values("latency_us")
        ours = [v for (cs, var), v in lat.items() if cs == case and
                (var.startswith(("tiled", "rule", "pointwise")) or var == "rows")]
        rs.add(case, "best/rule", "ratio", min(ours) / lat[(case, "rule")], "x")
        for base in ("cudnn-fp32", "ours-dense"):
            if (case, base) in lat:
                rs.add(case, f"{base}/rule", "ratio", lat[(case, base)] / lat[(case, "rule")],
                       "x")
    ratios = rs.values("ratio")
    for name in ("best/rule", "cudnn-fp32/rule", "ours-dense/rule"):
        vals = [v for (_, var), v in ratios.items() if var == name]
        if vals:
            rs.add(f"all {len(vals)} layers", name, "ratio_geomean", geomean(vals), "x",
                   note=f"min {min(vals):.2f}, max {max(vals):.2f}")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("ratio_geomean", "ratio", "latency_us"))
    sections.append(("Notes", f"Batch {batch}, fp32, kernels pruned at random to "
                              f"1/{args.ratio:g} of their weights, no dense blocks. "
                              f"Kernel time: CUDA-graph replay, median; cuDNN on the pruned "
                              f"kernel as a dense one, TF32 off."))
    write_markdown(paths["md"], "The sparse remainder's tiles against the rule", env, sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    cases = [cs for (cs, var) in ratios if var == "best/rule"]
    grouped_bars(ax, cases, {name: [ratios.get((cs, name), np.nan) for cs in cases]
                             for name in ("best/rule", "cudnn-fp32/rule", "ours-dense/rule")})
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("time over the rule's (x)")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
