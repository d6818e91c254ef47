"""Sparse Fig. 6: time against the number of kernels K of a dense 3x3x64 convolution.

Rumi et al. (PACT'20), Fig. 6: cuDNN and TVM run well only when K is a multiple of 32,
while their GEMM (a dense block split as ``32 * (K // 32)`` rows and the rest, §4.2) grows
linearly with K — what lets dense blocks of any height pay.  Here, for K in ``--ks``
(default 1..128), on a ``--batch`` x 64 x ``--size`` x ``--size`` input (the paper:
64 x 64 x 255 x 255; ``--quick``: 8 x 64 x 64 x 64):

* ``ours-block``: the kernel as one dense block through the library's default, the block
  table on the tensor cores at fp32 accuracy (3xTF32; :mod:`tensorconv.ops.sparse_conv`);
* ``ours-block-tf32``: the same under ``precision.using("tf32")`` (one tf32 pass, against
  cuDNN's TF32);
* ``ours-block-pieces``: the block on the SIMT block GEMM, ``32 * (K // 32)`` rows on
  32-row tiles and the rest as one piece on the shortest tile holding it;
* ``ours-block-paper``: the same with the paper's row split (``32 * (K // 32)`` rows on
  32-row tiles, the rest on 8- or 16-row tiles);
* ``ours-dense``: our dense convolution (``ops.conv2d``, the implicit GEMM);
* ``cudnn-fp32`` / ``cudnn-tf32``: PyTorch's cuDNN (``cudnn.benchmark``).

CUDA-graph replay medians, side by side in one process, each output checked first.
Reports time per kernel (µs / K) and its spread for K >= 8 (target: within +-15 %, no
32-step staircase) and ours against cuDNN at K = 64 (target: within 1.5x; the tf32 line
against cuDNN's TF32).
"""

from __future__ import annotations

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from tensorconv import backend, bench, ops, precision, timing
from tensorconv.blocksparse import layout_from_pattern, pack
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.ops import sparse_conv
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "sparse_fig6"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
C = 64


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=255)
    p.add_argument("--ks", type=int, nargs="+", default=list(range(1, 129)))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    if args.quick:
        args.batch, args.size, args.ks = 8, 64, [1, 8, 16, 31, 32, 33, 48, 63, 64, 65, 96, 128]
    torch = None
    if bench.torch_cudnn_available():
        import torch

        torch.backends.cudnn.benchmark = True
    env = bench.environment(with_torch=torch is not None)
    rs = ResultSet(NAME, env)
    rng = np.random.default_rng(0)
    x_shape = (args.batch, C, args.size, args.size)
    x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
    reps = dict(repeat=10, calls_per_graph=3)
    from tqdm import tqdm

    for k in tqdm(args.ks, desc="timing K", unit="K"):
        w = rng.standard_normal((k, C, 3, 3)).astype(np.float32)
        geom = conv_geometry(x_shape, w.shape, 1, 1)
        wd = cp.asarray(w)
        want = ops.conv2d(x, wd, None, 1, 1)
        out = cp.empty(geom.output_shape, cp.float32)
        packed = pack(w, layout_from_pattern(np.ones((k, C * 9), bool), w.shape,
                                             [(np.arange(k), np.arange(C * 9))]))
        weights = sparse_conv.pack_weights(packed, (geom.h, geom.w), cp)
        facts = backend.device_facts()
        table = sparse_conv.default_pieces(packed, geom, facts)
        merged = sparse_conv.default_pieces(packed, geom, facts, split="merged")
        paper = sparse_conv.default_pieces(packed, geom, facts, split="paper")
        with precision.using("tf32"):
            table_tf32 = sparse_conv.default_pieces(packed, geom, facts)

        def tf32(fn):   # the kernels are fetched at each call: the precision holds there
            def run():
                with precision.using("tf32"):
                    fn()
            return run

        runs = {"ours-block": lambda: sparse_conv.run(x, weights, out, geom, table),
                "ours-block-tf32": tf32(lambda: sparse_conv.run(x, weights, out, geom,
                                                                table_tf32)),
                "ours-block-pieces": lambda: sparse_conv.run(x, weights, out, geom, merged),
                "ours-block-paper": lambda: sparse_conv.run(x, weights, out, geom, paper),
                "ours-dense": lambda: ops.conv2d(x, wd, None, 1, 1, out=out)}
        for name, fn in runs.items():
            out.fill(np.nan)
            fn()
            err = float(cp.linalg.norm(out - want) / cp.linalg.norm(want))
            if not err <= (3e-3 if name.endswith("tf32") else 1e-5):
                raise RuntimeError(f"K={k} {name}: rel_err {err:.2e}")
            rs.add(f"K={k}", name, "latency_us", timing.time_graph(fn, **reps).median_us, "us")
        if torch is not None:
            xt, wt = torch.from_dlpack(x), torch.from_dlpack(wd)
            for tf32 in (False, True):
                torch.backends.cudnn.allow_tf32 = tf32
                us = timing.time_graph(lambda: torch.nn.functional.conv2d(xt, wt, padding=1),
                                       framework="torch", **reps).median_us
                rs.add(f"K={k}", f"cudnn-{'tf32' if tf32 else 'fp32'}", "latency_us", us, "us")
    lat = rs.values("latency_us")
    for name in sorted({v for _, v in lat}):
        per_k = [lat[(f"K={k}", name)] / k for k in args.ks if k >= 8 and (f"K={k}", name) in lat]
        if per_k:
            med = float(np.median(per_k))
            rs.add("K >= 8", name, "us_per_kernel_spread", max(abs(v / med - 1) for v in per_k),
                   "1", note=f"median {med:.2f} us per kernel; target <= 0.15 (ours-block)")
    if 64 in args.ks and ("K=64", "cudnn-fp32") in lat:
        for ours, base in (("ours-block", "cudnn-fp32"), ("ours-block", "cudnn-tf32"),
                           ("ours-block-tf32", "cudnn-tf32")):
            rs.add("K=64", f"{ours}/{base}", "ratio",
                   lat[("K=64", ours)] / lat[("K=64", base)], "x",
                   note="target <= 1.5 (fp32)" if base == "cudnn-fp32" else "")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("latency_us", "us_per_kernel_spread",
                                                         "ratio"))
    sections.append(("Notes", f"Input {args.batch} x {C} x {args.size} x {args.size}, 3x3, "
                              f"padding 1, fp32. Paper (P100): cuDNN 7.6.5 and TVM step at "
                              f"multiples of 32, their GEMM linear in K."))
    write_markdown(paths["md"], "Time against the number of 3x3x64 kernels", env, sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name in sorted({v for _, v in lat}):
        ks = [k for k in args.ks if (f"K={k}", name) in lat]
        ax.plot(ks, [lat[(f"K={k}", name)] for k in ks], label=name, lw=1)
    ax.set_xlabel("kernels K")
    ax.set_ylabel("time (µs)")
    ax.legend(fontsize=7)
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
