"""DSXplore Fig. 9 and the SCC layer target: one sliding-channel layer, forward and backward.

For each distinct SCC layer of ``--model`` made DW + SCC (``--cg``, ``--co``; the paper's
cg 2, co 50 %) at ``--batch`` (128) on 32x32 input, on random data:

* ``ours``: the SCC kernels — forward, input gradient and weight gradient as GEMMs over
  bands of window-sorted filters (input-centric: no atomics; deterministic), both
  gradients in one pass over gy and x where the library's automatic choice takes it
  (``ops.scc_conv2d_backward``); with ``--tune``, each GEMM on the FMA kernels or the
  tensor cores (3xTF32, ``ops.scc_tc``) and the backward in one pass or its two
  gradients apart as measured on
  this device first (:func:`tensorconv.tuning.scc_paths.tune`, its times kept as the
  ``*_fma_us`` / ``*_tc_us`` rows), else the FMA kernels' static choice;
* ``ours-parts``: the same with the two gradients' kernels apart (kernel time only);
* ``ours-uncarried``: ``ours`` with the weight gradient's pixel shares summed by a launch
  of their own, not by the input gradient's (``carry=False``; kernel time only);
* ``gather``: the same with the paper's input-centric input gradient, one thread per input
  value walking the channel map (the paper's DSXplore backward);
* ``var``: the same with the paper's output-centric, atomic input gradient
  ("DSXplore-Var"); ``var/gather`` is the paper's 1.55x, like for like;
* ``dense``: the dense-masked 1x1 form as batched GEMMs (cuBLAS through CuPy): the honest
  library baseline;
* ``base`` / ``opt``: the paper's channel stack and convolution stack (channel-cyclic),
  composed from our differentiable slices, concatenation and convolutions;
* ``torch-gpw``: PyTorch's grouped 1x1 convolution with ``groups = cg`` (GPW, the same
  multiply-adds as SCC at co 0), cuDNN, fp32;
* ``ours-pdl``: ``ours`` in a graph whose edges are programmatic (sm_90: each kernel
  launches as the one before drains, :mod:`tensorconv.graph`), as tensorconv's captured
  training step launches its kernels; kernel time only.

Each is timed as forward, backward (the input and weight gradients) and both, eagerly
(CUDA events around each call, medians after warm-up: what an eager training step pays,
Python's launch cost included), and forward + backward as kernel time (a CUDA graph's
replay; the dense GEMMs and PyTorch's convolution in PyTorch's graphs, since CuPy 14
refuses cuBLAS under capture; Base and Opt allocate as they go and are timed eagerly
only; ``--rounds`` alternating rounds over every implementation, each side's best
median kept, so a slow spell of the GPU lands on no single side), after checking its
output and gradients against the dense-masked form in float64.
The atomics each backward issues are counted.  Paper (V100, Fig. 9): the input-centric
backward 15.03x faster than Base, 4.55x than Opt, 1.55x than Var on average.
"""

from __future__ import annotations

import numpy as np

from experiments._common import (
    conv_inputs,
    geomean,
    grouped_bars,
    outputs,
    parser,
    pyplot,
    save_figure,
)
from tensorconv import backend, bench, ops, timing
from tensorconv import graph as captured_graph
from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.cli import guarded
from tensorconv.compress.separable import separable
from tensorconv.nn import get_model
from tensorconv.nn.scc import SCCConv2d
from tensorconv.reference import scc as reference
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown
from tensorconv.tuning import scc_paths

NAME = "scc_backward"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
PAPER = {"base/ours": 15.03, "opt/ours": 4.55, "var/ours": 1.55}   # backward, V100 means


def output_name(args) -> str:
    """The file stem: ``scc_backward`` for VGG-16 (the paper's figure), else
    ``scc_backward_MODEL`` (another network's layers do not replace VGG-16's)."""
    return NAME if args.model == "vgg16" else f"{NAME}_{args.model}"


def _args(argv):
    p = parser(NAME, __doc__)
    p.output_name = output_name
    p.add_argument("--model", default="vgg16")
    p.add_argument("--cg", type=int, default=2)
    p.add_argument("--co", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--tune", action="store_true",
                   help="time each layer's GEMMs on the FMA kernels and the tensor cores "
                        "first and let the automatic choice follow (tune cache)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating rounds of the graph (kernel-time) timings; each "
                        "implementation's best round is kept")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def layers(args) -> list:
    """[(geometry, input shape)] of the model's distinct SCC layers at ``args.batch``."""
    model = separable(get_model(args.model, in_channels=1), "scc", cg=args.cg, co=args.co)
    named = {n.rstrip("."): m for n, m in model.named_modules() if isinstance(m, SCCConv2d)}
    shapes = conv_inputs(model, list(named), (1, 1, 32, 32))
    seen, out = set(), []
    for name, m in named.items():
        key = (m.geom, shapes[name][1:])
        if key not in seen:
            seen.add(key)
            out.append((m.geom, (args.batch,) + shapes[name][1:]))
    return out


def _runners(cp, torch, g, x, w, gy):
    """{impl: (forward, backward)} callables on the prepared arrays."""
    n, _, h, wd = x.shape
    dense = cp.asarray(reference.dense_weights(w, g))
    x2, gy2 = x.reshape(n, g.cin, h * wd), gy.reshape(n, g.cout, h * wd)

    def dense_bwd():
        cp.matmul(dense.T, gy2)
        cp.matmul(gy2, x2.swapaxes(1, 2)).sum(axis=0)

    run = {
        "ours": (lambda: ops.scc_conv2d(x, w, g),
                 lambda: ops.scc_conv2d_backward(x, gy, w, g)),
        "gather": (lambda: ops.scc_conv2d(x, w, g),
                   lambda: (ops.scc_conv2d_backward_data(gy, w, g, variant="gather"),
                            ops.scc_conv2d_backward_weight(x, gy, g))),
        "var": (lambda: ops.scc_conv2d(x, w, g),
                lambda: (ops.scc_conv2d_backward_data(gy, w, g, variant="output"),
                         ops.scc_conv2d_backward_weight(x, gy, g))),
        "dense": (lambda: cp.matmul(dense, x2), dense_bwd),
    }
    for impl, fn in (("base", F.scc_channel_stack), ("opt", F.scc_conv_stack)):
        def fwd(fn=fn):
            return fn(Tensor(x), Tensor(w), g)

        def bwd(fn=fn):
            tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
            fn(tx, tw, g).backward(gy)
        run[impl] = (fwd, bwd)
    if torch is not None and g.cin % g.cg == 0 and g.cout % g.cg == 0:
        xt = torch.from_dlpack(x).requires_grad_(True)
        wt = torch.randn(g.cout, g.cin // g.cg, 1, 1, device="cuda", requires_grad=True)
        gyt = torch.from_dlpack(gy)

        def t_bwd():
            torch.nn.functional.conv2d(xt, wt, groups=g.cg).backward(gyt)
        run["torch-gpw"] = (lambda: torch.nn.functional.conv2d(xt, wt, groups=g.cg), t_bwd)
    return run


def _graph_runners(cp, torch, g, x, w, gy):
    """{impl: (forward + backward callable, framework)} for CUDA-graph (kernel) timing:
    our kernels on preallocated outputs; the dense-masked GEMMs (cuBLAS) and the grouped
    convolution through PyTorch, whose graphs capture cuBLAS and cuDNN."""
    y, gx, gw = cp.empty_like(gy), cp.empty_like(x), cp.empty_like(w)

    def ours(variant):
        def run():
            ops.scc_conv2d(x, w, g, out=y)
            if variant in ("auto", "parts", "uncarried"):
                ops.scc_conv2d_backward(x, gy, w, g, path="auto" if variant == "uncarried"
                                        else variant, carry=variant != "uncarried",
                                        out_x=gx, out_w=gw)
                return
            ops.scc_conv2d_backward_data(gy, w, g, variant=variant, out=gx)
            ops.scc_conv2d_backward_weight(x, gy, g, out=gw)
        return run, "cupy"

    run = {"ours": ours("auto"), "ours-parts": ours("parts"),
           "ours-uncarried": ours("uncarried"), "gather": ours("gather"),
           "var": ours("output")}
    if torch is None:
        return run
    n, _, h, wd = x.shape
    dense = torch.from_dlpack(reference.dense_weights(w, g))
    x2 = torch.from_dlpack(x).reshape(n, g.cin, h * wd)
    gy2 = torch.from_dlpack(gy).reshape(n, g.cout, h * wd)

    def dense_run():
        torch.matmul(dense, x2)
        torch.matmul(dense.T, gy2)
        torch.matmul(gy2, x2.transpose(1, 2)).sum(dim=0)
    run["dense"] = (dense_run, "torch")
    if g.cout % g.cg == 0:
        xt = torch.from_dlpack(x).clone().requires_grad_(True)
        wt = torch.randn(g.cout, g.cin // g.cg, 1, 1, device="cuda", requires_grad=True)
        gyt = torch.from_dlpack(gy)

        def gpw_run():
            out = torch.nn.functional.conv2d(xt, wt, groups=g.cg)
            torch.autograd.grad(out, (xt, wt), gyt)
        run["torch-gpw"] = (gpw_run, "torch")
    return run


def _check(cp, g, x, w, gy, rs, case):
    """Every implementation's output and gradients against the dense-masked form in float64
    on the GPU (the NumPy reference's per-window gather would hold N x Cout x U x H x W
    values; the tests show the two forms equal)."""
    n, _, h, wd = x.shape
    dense = reference.dense_weights(w.astype(cp.float64), g)
    x2 = x.astype(cp.float64).reshape(n, g.cin, h * wd)
    gy2 = gy.astype(cp.float64).reshape(n, g.cout, h * wd)
    want_y = cp.matmul(dense, x2).reshape(gy.shape)
    want_gx = cp.matmul(dense.T, gy2).reshape(x.shape)
    gw_dense = cp.matmul(gy2, x2.swapaxes(1, 2)).sum(axis=0)
    want_gw = gw_dense[cp.arange(g.cout)[:, None], cp.asarray(g.channels())]
    rel = lambda a, b: float(cp.linalg.norm(a - b) / cp.linalg.norm(b))  # noqa: E731
    both = {p: ops.scc_conv2d_backward(x, gy, w, g, path=p) for p in ("auto", "parts")}
    errs = {"ours": max(rel(ops.scc_conv2d(x, w, g), want_y), rel(both["auto"][0], want_gx),
                        rel(both["auto"][1], want_gw)),
            "ours-parts": max(rel(both["parts"][0], want_gx), rel(both["parts"][1], want_gw)),
            "gather": rel(ops.scc_conv2d_backward_data(gy, w, g, variant="gather"), want_gx),
            "var": rel(ops.scc_conv2d_backward_data(gy, w, g, variant="output"), want_gx)}
    for impl, fn in (("base", F.scc_channel_stack), ("opt", F.scc_conv_stack),
                     ("dense", F.scc_conv)):
        tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        kw = {"impl": "dense"} if impl == "dense" else {}
        y = fn(tx, tw, g, **kw)
        y.backward(gy)
        errs[impl] = max(rel(y.data, want_y), rel(tx.grad, want_gx), rel(tw.grad, want_gw))
    for impl, err in errs.items():
        rs.add(case, impl, "rel_err", err, "1")
        if not err <= 1e-5:
            raise RuntimeError(f"{case} {impl}: rel_err {err:.2e} against the reference")


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    torch = None
    if bench.torch_cudnn_available():
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    env = bench.environment(with_torch=torch is not None)
    rs = ResultSet(NAME, env)
    rng = np.random.default_rng(0)
    todo = layers(args)
    if args.quick:
        todo = todo[:2]
    reps = dict(warmup=3, repeat=10 if args.quick else 30)
    from tqdm import tqdm

    for g, shape in tqdm(todo, desc="checking and timing SCC layers", unit="layer"):
        case = f"{g.cin}->{g.cout} cg{g.cg} co{g.co:g} {shape[2]}x{shape[3]}"
        x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
        w = cp.asarray(rng.standard_normal((g.cout, g.u)).astype(np.float32))
        gy = cp.asarray(rng.standard_normal((shape[0], g.cout) + shape[2:]).astype(np.float32))
        if args.tune:
            t = scc_paths.tune(g, shape, repeat=10 if args.quick else 20)
            for side in ("forward", "data", "weight"):
                for fam in ("fma", "tc", "walk"):
                    if getattr(t, f"{side}_{fam}") is not None:
                        rs.add(case, "ours", f"{side}_{fam}_us", getattr(t, f"{side}_{fam}"),
                               "us", note="the tuner's graph-replay time of one GEMM")
            if t.onepass is not None:
                rs.add(case, "ours", "onepass_backward_us", t.onepass, "us")
            for name in ("carried", "both", "carried_layer", "both_layer"):
                if getattr(t, name) is not None:
                    rs.add(case, "ours", f"{name}_us", getattr(t, name), "us",
                           note="the tuner's graph-replay time: both gradients walking, "
                                "carried or in one walk; _layer: after the forward")
        _check(cp, g, x, w, gy, rs, case)
        for impl, (fwd, bwd) in _runners(cp, torch, g, x, w, gy).items():
            fw = "torch" if impl == "torch-gpw" else "cupy"
            t_f = timing.time_events(fwd, framework=fw, **reps).median_us
            t_b = timing.time_events(bwd, framework=fw, **reps).median_us
            rs.add(case, impl, "forward_us", t_f, "us")
            rs.add(case, impl, "backward_us", t_b, "us",
                   note="input and weight gradients (PyTorch: its autograd's backward)")
            rs.add(case, impl, "fwd_bwd_us", t_f + t_b, "us")
        graph_runners = _graph_runners(cp, torch, g, x, w, gy)
        runs = {impl: (fn, fw, False) for impl, (fn, fw) in graph_runners.items()}
        if captured_graph.supported():
            runs["ours-pdl"] = (graph_runners["ours"][0], "cupy", True)
        best = {}
        for _ in range(args.rounds):
            for impl, (fn, fw, pdl) in runs.items():
                t = timing.time_graph(fn, framework=fw, repeat=10 if args.quick else 30,
                                      calls_per_graph=5, programmatic=pdl).median_us
                best[impl] = min(best.get(impl, t), t)
        rounds = f"best of {args.rounds} alternating rounds"
        for impl, t in best.items():
            rs.add(case, impl, "fwd_bwd_graph_us", t, "us",
                   note=(f"our kernels in a graph with programmatic edges (each launches as "
                         f"the one before drains), as tensorconv's captured training step "
                         f"runs them; {rounds}") if impl == "ours-pdl" else
                   (f"kernel time: a CUDA graph's replay (PyTorch's graph for cuBLAS and "
                    f"cuDNN); {rounds}"))
        pixels = shape[0] * shape[2] * shape[3]
        rs.add(case, "var", "atomics", g.cout * g.u * pixels, "count")
        rs.add(case, "ours", "atomics", 0, "count")
        rs.add(case, "gather", "atomics", 0, "count")
    bwd, both = rs.values("backward_us"), rs.values("fwd_bwd_us")
    graph = rs.values("fwd_bwd_graph_us")
    cases = sorted({c for c, _ in bwd})
    ratios = [bwd[(c, "var")] / bwd[(c, "gather")] for c in cases]
    rs.add("all layers", "var/gather", "backward_speedup", geomean(ratios), "x",
           paper_value=PAPER["var/ours"],
           note=f"the paper's two per-thread forms, like for like; min {min(ratios):.2f}")
    for other in ("base", "opt", "var", "gather", "dense", "torch-gpw"):
        ratios = [bwd[(c, other)] / bwd[(c, "ours")] for c in cases if (c, other) in bwd]
        if ratios:
            rs.add("all layers", f"{other}/ours", "backward_speedup", geomean(ratios), "x",
                   paper_value=PAPER.get(f"{other}/ours"),
                   note=f"geomean over {len(ratios)} layers; min {min(ratios):.2f}")
        ratios = [both[(c, other)] / both[(c, "ours")] for c in cases if (c, other) in both]
        if ratios:
            rs.add("all layers", f"{other}/ours", "fwd_bwd_speedup", geomean(ratios), "x",
                   note=f"eager; min {min(ratios):.2f}")
        ratios = [graph[(c, other)] / graph[(c, "ours")] for c in cases if (c, other) in graph]
        if ratios:
            rs.add("all layers", f"{other}/ours", "fwd_bwd_graph_speedup", geomean(ratios), "x",
                   note=f"kernel time; min {min(ratios):.2f}")
    libs = [i for i in ("dense", "torch-gpw") if any((c, i) in graph for c in cases)]
    if libs:
        best = [min(graph[(c, i)] for i in libs if (c, i) in graph) / graph[(c, "ours")]
                for c in cases]
        rs.add("all layers", "best library/ours", "fwd_bwd_graph_speedup", geomean(best), "x",
               note=f"per layer the faster of {', '.join(libs)}; min {min(best):.2f} "
                    f"(target >= 1.5 on every layer)")
        if all((c, "ours-pdl") in graph for c in cases):
            best = [min(graph[(c, i)] for i in libs if (c, i) in graph) /
                    graph[(c, "ours-pdl")] for c in cases]
            rs.add("all layers", "best library/ours-pdl", "fwd_bwd_graph_speedup",
                   geomean(best), "x",
                   note=f"ours with programmatic edges (the captured training step's graph; "
                        f"PyTorch's graphs have none); min {min(best):.2f}")
    paths = outputs(output_name(args), args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("fwd_bwd_graph_us", "fwd_bwd_graph_speedup",
                                      "backward_us", "forward_us", "fwd_bwd_us",
                                      "backward_speedup", "fwd_bwd_speedup", "atomics",
                                      "rel_err", "forward_fma_us", "forward_tc_us",
                                      "forward_walk_us", "data_fma_us", "data_tc_us",
                                      "data_walk_us", "weight_fma_us", "weight_tc_us",
                                      "weight_walk_us", "onepass_backward_us"))
    sections.append(("Notes", f"{args.model} DW+SCC cg{args.cg} co{args.co:g}, batch "
                              f"{args.batch}, 32x32 input, fp32 (TF32 off everywhere). Kernel "
                              f"times (fwd_bwd_graph_us) replay CUDA graphs; the others are eager "
                              f"calls between CUDA events, Python's launch cost included. "
                              f"Paper (V100, Fig. 9): the input-centric backward 15.03x over "
                              f"Base, 4.55x over Opt, 1.55x over Var on average."))
    write_markdown(paths["md"], f"SCC layers of {args.model}: forward and backward", env,
                   sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    impls = [i for i in ("ours", "gather", "var", "dense", "opt", "base", "torch-gpw")
             if any((c, i) in bwd for c in cases)]
    grouped_bars(ax, cases, {i: [bwd.get((c, i), np.nan) for c in cases] for i in impls})
    ax.set_yscale("log")
    ax.set_ylabel("backward (µs, log)")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
