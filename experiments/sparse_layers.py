"""Sparse layers: per-layer time of pruned convolutions (Rumi et al., PACT'20, Figs 8-12).

For each distinct prunable convolution of ``--model`` (a zoo model on ``--size`` x
``--size`` input with ``--in-channels`` channels: by default the CIFAR-style model on
32x32 Fashion-MNIST-shaped input; ``--model resnet18_imagenet --size 224 --in-channels 3``
or ``--model resnet50 ...`` for the paper's ImageNet layers), at ``--batch`` 32, its
kernel pruned ``--ratio`` times — by magnitude from its initial weights (an unstructured
pattern: the hardest case for dense blocks), or with a trained model's masks (``--masks``,
saved by ``sparse_table1``; matched by layer name and shape, so masks trained on the
CIFAR-style ResNet-18 transplant onto the ImageNet one, whose layers after the stem have
the same K x CRS shapes) — runs as:

* ``ours``: Algorithm 1 at each threshold of ``--t2`` (the paper's 4, 8, 12, 16) and no
  blocks at all (``no-blocks``: every nonzero in the remainder), the sparse kernels on
  each layout (the remainder's kernel chosen as the library chooses it,
  ``sparse_conv.choose_remainder``, on its rule's tile), the fastest kept, then the
  remainder's other tiles and stagings (``sparse_conv.remainder_choices``) timed on that
  layout (as the engine's tuned plan does), each choice's time in the table ``choice_us``
  (case "LAYER via KERNEL");
* ``csr-rows``: every nonzero in the one-thread-per-pixel remainder kernel: the row-wise
  direct sparse convolution (Escoin-style);
* ``cusparse``: cuSPARSE SpMM (``cupyx.scipy.sparse``) on an explicit im2col, with and
  without building the im2col (eager, CUDA events: cuSPARSE does not capture);
* ``ours-dense``: our dense convolution of the unpruned kernel, planned alone by the tuned
  engine (the kernel a dense model runs it on; its label in the note);
* ``cudnn-fp32`` / ``cudnn-tf32``: PyTorch's cuDNN on the unpruned kernel, the faster of
  ``cudnn.benchmark``'s algorithm and the heuristic's (the benchmark's pick on a layer of a
  few µs changes between processes);
* ``ours-tf32``: ``ours`` under ``precision.using("tf32")`` (the dense blocks' table in one
  tf32 pass on the tensor cores, the remainder as in fp32), the fastest of the same
  layouts and of the remainder on the tensor cores in one tf32 pass without blocks
  (``sparse_tc_remainder``) and on the sparse tensor cores (``sparse_pairs_tc``; the
  variant ``tc-remainder tf32`` holds both, its note names the kernel), against
  ``cudnn-tf32``.

Every output is checked first against the pruned kernel's convolution in float64 (one
GEMM on the explicit im2col): at most 1e-5 relative error, 3e-3 for tf32.  The rows so far
go to ``NAME.partial.csv`` after every layer.  Times
are CUDA-graph replay medians, side by side in one process.  Also recorded: Algorithm 1's
statistics per threshold (blocks, share of nonzeros in blocks, fill, seconds) and the
threshold kept.  Results go to ``sparse_layers.*`` for the default model and
``sparse_layers_MODEL.*`` for another.  ``--layers`` times only the layers named, in the
order named.  ``--time-budget`` stops between layers once that
many seconds have passed; a later call with ``--merge`` (the earlier CSVs) keeps their
layers and times the rest, one table in the end.  ``--retime`` (with ``--layers`` and
``--merge``) times the layers named again: each one's merged rows are replaced once it is
timed, and a layer the time budget does not reach keeps them.  The paper's ranges (P100,
ResNet18-8x: 1.66-7.58x over cuDNN, 1.04-1.45x over SpMM) stand in the notes.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np

from experiments._common import (
    conv_inputs,
    geomean,
    grouped_bars,
    outputs,
    parser,
    partial_csv,
    pyplot,
    save_figure,
)
from tensorconv import backend, bench, cuda, ops, precision, timing
from tensorconv.autograd.functions.windows import windows
from tensorconv.blocksparse import kernel_matrix, layout_from_pattern, pack
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.compress.prune import keep_count, load_masks, prune_candidates, top_magnitude
from tensorconv.decomp.blocks import extract_blocks
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model
from tensorconv.ops import sparse_conv
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "sparse_layers"
# the speed-ups recorded per layer (baseline / ours) and summarised over the layers
RATIOS = ("cudnn-fp32/ours", "cudnn-tf32/ours", "ours-dense/ours", "csr-rows/ours",
          "cusparse/ours", "cudnn-tf32/ours-tf32")
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
PAPER = {"resnet18": "P100, ResNet18-8x: ours 1.66-7.58x over cuDNN, 1.04-1.45x over SpMM",
         "vgg16": "P100, VGG16-4x: ours 1.03-5.40x over cuDNN, 1.18-1.54x over SpMM",
         "googlenet": "P100, GoogLeNet-8x: ours 1.49-4.13x over cuDNN",
         "resnet18_imagenet": "P100, ResNet18-4x (ImageNet), re-pruned: 1.20-1.61x over "
                              "unpruned TVM (Fig. 11)",
         "resnet50": "P100, ResNet50-8x (ImageNet), re-pruned: 2.1-4.05x over unpruned TVM "
                     "(Fig. 12)"}


def output_name(args) -> str:
    """The file stem: ``sparse_layers`` for the default model, ``sparse_layers_MODEL`` for
    another (so that the ImageNet layers do not replace the CIFAR-style ones)."""
    return NAME if args.model == "resnet18" else f"{NAME}_{args.model}"


def _args(argv):
    p = parser(NAME, __doc__)
    p.output_name = output_name
    p.add_argument("--model", default="resnet18", help="zoo model (CIFAR-style, 32x32)")
    p.add_argument("--ratio", type=float, default=8.0, help="pruning ratio (magnitude masks)")
    p.add_argument("--masks", nargs="+", default=[], metavar="[LABEL=]PATH",
                   help="trained masks (.npz of sparse_table1), each set timed in turn, its "
                        "cases prefixed by LABEL (e.g. pruned=... repruned=...)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=32, help="input height and width")
    p.add_argument("--in-channels", type=int, default=1,
                   help="input channels (1: Fashion-MNIST; 3 for the ImageNet models)")
    p.add_argument("--t2", type=int, nargs="+", default=[4, 8, 12, 16])
    p.add_argument("--min-gain", type=float, default=0.0,
                   help="Algorithm 1 stops after a round whose blocks take less than this "
                        "share of a layer's nonzeros (0: the paper's loop, until no block)")
    p.add_argument("--all-layers", action="store_true",
                   help="every prunable layer, not only the first of each shape")
    p.add_argument("--layers", nargs="+", default=[], metavar="NAME",
                   help="only these layers, timed in the order named (the model's module names, "
                        "e.g. stages.1.0.conv1)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds for this call: no layer is started after them")
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help="earlier calls' CSVs: their layers are kept, not timed again")
    p.add_argument("--retime", action="store_true",
                   help="time the --layers named again, replacing their rows in --merge's CSVs")
    args = p.parse_args(argv)
    if args.retime and not (args.layers and args.merge):
        p.error("--retime times the --layers named again in place of their rows in the "
                "--merge CSVs: give both")
    if not 0.0 <= args.min_gain < 1.0:
        p.error(f"--min-gain is a share of a layer's nonzeros in [0, 1), got {args.min_gain:g}")
    return args


def _mask_sets(args) -> list[tuple[str, str | None]]:
    """[(label, path)] of ``--masks`` (label "" for a single unlabelled set), or the one
    magnitude-pruned set (path None)."""
    sets = [(label, path) if sep else ("", label)
            for label, sep, path in (m.partition("=") for m in args.masks)]
    if len(sets) > 1 and len({label for label, _ in sets}) < len(sets):
        raise ValueError(f"--masks: several sets need distinct labels, got {args.masks}")
    return sets or [("", None)]


def _layers(args, masks_path):
    """[(name, conv, input shape, pruned kernel)] of the layers to time."""
    model = get_model(args.model, in_channels=args.in_channels, seed=0).eval()
    convs = prune_candidates(model)
    masks = load_masks(masks_path) if masks_path else None
    probe = (1, args.in_channels, args.size, args.size)
    shapes = {n: (args.batch,) + s[1:] for n, s in conv_inputs(model, list(convs), probe).items()}
    unknown = sorted(set(args.layers) - set(convs))
    if unknown:
        raise ValueError(f"--layers: {args.model} has no prunable layer {unknown}; it has "
                         f"{list(convs)}")
    repeated = sorted({n for n in args.layers if args.layers.count(n) > 1})
    if repeated:
        raise ValueError(f"--layers names {repeated} more than once")
    # in the order named, so that a --time-budget reaches the first layers named
    seen, out = set(), []
    for name in args.layers or list(convs):
        conv = convs[name]
        w = conv.weight.data
        key = (w.shape, conv.stride, conv.padding, shapes[name])
        if key in seen and not args.all_layers:
            continue
        seen.add(key)
        if masks is not None:
            if name not in masks or masks[name].shape != w.shape:
                raise ValueError(f"--masks {masks_path} has no mask of shape {w.shape} for "
                                 f"{name}")
            mask = masks[name].astype(bool)
        else:
            mask = top_magnitude(w, keep_count(w.size, args.ratio)).astype(bool)
        out.append((name, conv, shapes[name], (w * mask).astype(np.float32)))
    return out


def of_case(row_case: str, case: str) -> bool:
    """Whether a results row's case is the layer ``case`` or one of its per-choice rows
    (``case via ...``)."""
    return row_case == case or row_case.startswith(case + " via ")


def case_name(label, name, conv, x_shape, w) -> str:
    """The results' case of one layer: label, name, kernel shape, stride, input size."""
    geom = conv_geometry(x_shape, w.shape, conv.stride, conv.padding)
    return f"{label + ' ' if label else ''}{name} {w.shape[0]}x{w.shape[1]}x{w.shape[2]}x" \
           f"{w.shape[3]} s{geom.stride[0]} {geom.h}x{geom.w}"


def _im2col(x, geom):
    """(C·R·S, N·OH·OW): the strided windows of ``x``, copied into a matrix."""
    win = windows(x, (geom.r, geom.s), geom.stride, geom.padding)
    return win.transpose(1, 2, 3, 0, 4, 5).reshape(geom.c * geom.r * geom.s, -1)


def _from_columns(y, geom):
    """(K, N·OH·OW) -> (N, K, OH, OW), contiguous."""
    return y.reshape(geom.k, geom.n, geom.oh, geom.ow).transpose(1, 0, 2, 3).copy()


def _im2col_conv(x, w, geom):
    """The convolution as one GEMM on the explicit im2col, in ``x``'s dtype."""
    return _from_columns(w.reshape(geom.k, -1) @ _im2col(x, geom), geom)


def dense_layer(conv, x) -> tuple[str, float, float]:
    """The unpruned layer ``conv`` on ``x`` as the tuned engine plans it alone (the kernel
    a dense model would run it on): its launch's label, median µs (alone, from a CUDA
    graph) and relative error against :func:`tensorconv.ops.conv2d`."""
    import cupy as cp

    layer = copy.deepcopy(conv).to("gpu").eval()
    engine = InferenceEngine(layer, tuple(x.shape), tune=True)
    if engine.launches != 1:
        raise RuntimeError(f"a lone convolution planned as {engine.launches} launches")
    got = engine(x)
    want = ops.conv2d(x, layer.weight.data, None if layer.bias is None else layer.bias.data,
                      layer.stride, layer.padding)
    (label, us), = engine.profile()
    return label, us, float(cp.linalg.norm(got - want) / cp.linalg.norm(want))


def measure(rs, name, conv, x_shape, w, args, torch, label=""):
    import cupy as cp
    from cupyx.scipy import sparse as cps

    rng = np.random.default_rng(1)
    geom = conv_geometry(x_shape, w.shape, conv.stride, conv.padding)
    case = case_name(label, name, conv, x_shape, w)
    x = cp.asarray(rng.standard_normal(x_shape).astype(np.float32))
    wd = cp.asarray(w)
    # float64, so that a kernel's error is measured, not the sum of two fp32 roundings
    want = _im2col_conv(x.astype(cp.float64), wd.astype(cp.float64), geom)
    density = float(np.count_nonzero(w)) / w.size
    rs.add(case, "pruned", "density", density, "1")
    out = cp.empty(geom.output_shape, cp.float32)

    def check(variant, got, tol=1e-5):
        err = float(cp.linalg.norm(got - want) / cp.linalg.norm(want))
        rs.add(case, variant, "rel_err", err, "1")
        if not err <= tol:
            raise RuntimeError(f"{case} {variant}: rel_err {err:.2e} against the dense kernel")

    def run_layout(packed, remainder="auto", choice=(None, None)):
        weights = sparse_conv.pack_weights(packed, (geom.h, geom.w), cp)
        pieces = sparse_conv.default_pieces(packed, geom, backend.device_facts())
        fn = lambda: sparse_conv.run(x, weights, out, geom, pieces,  # noqa: E731
                                     remainder=remainder, remainder_tile=choice[0],
                                     remainder_staging=choice[1])
        fn()
        return fn

    pattern = kernel_matrix(w) != 0
    best, with_blocks, plain_us, layouts = None, [], [], {}
    for t2 in args.t2:
        found = extract_blocks(pattern, w.shape, t2=t2, min_gain=args.min_gain)
        tag = f"t2={t2}"
        rs.add(case, tag, "blocks", len(found.layout.blocks), "count")
        rs.add(case, tag, "in_blocks", found.in_blocks, "1")
        rs.add(case, tag, "fill", found.fill, "1")
        rs.add(case, tag, "alg1_s", found.seconds, "s", note="target <= 5 s per layer")
        packed = layouts[t2] = pack(w, found.layout)
        fn = run_layout(packed)
        check(f"ours {tag}", out)
        us = timing.time_graph(fn).median_us
        rs.add(case, tag, "latency_us", us, "us")
        if found.layout.blocks:
            with_blocks.append((t2, packed))
        else:
            plain_us.append((t2, us))
        if best is None or us < best[1]:
            best = (t2, us)
    plain = layouts[0] = pack(w, layout_from_pattern(pattern, w.shape))
    fn = run_layout(plain)
    check("ours no-blocks", out)
    plain_time = timing.time_graph(fn).median_us
    rs.add(case, "no-blocks", "latency_us", plain_time, "us")
    if plain_time < best[1]:
        best = (0, plain_time)
    # as the engine's tuned plan: the remainder's other tiles on the fastest layout
    choices = sparse_conv.remainder_choices(geom, backend.device_facts().sm_count)
    best_choice = choices[0]
    nnz = layouts[best[0]].layout.indices.size   # the unrolled kernel's code grows with it
    others = [c for c in choices[1:] if sparse_conv.fits(geom, c[0], nnz)]
    kept = sparse_conv.pack_weights(layouts[best[0]], (geom.h, geom.w), cp)
    kept_pieces = sparse_conv.default_pieces(layouts[best[0]], geom, backend.device_facts())
    cuda.compile_all([k for c in others for k in sparse_conv.layer_kernels(
        kept_pieces, geom, tile=c[0], weights=kept)],
        desc="compiling the remainder's other kernels")
    layout = f"t2={best[0]}" if best[0] else "no blocks"
    rs.add(f"{case} via {sparse_conv.choice_name(*best_choice)}", "ours", "choice_us", best[1],
           "us", note=layout)
    for choice in others:
        fn = run_layout(layouts[best[0]], choice=choice)
        check(f"ours {sparse_conv.choice_name(*choice)}", out)
        us = timing.time_graph(fn).median_us
        rs.add(f"{case} via {sparse_conv.choice_name(*choice)}", "ours", "choice_us", us, "us",
               note=layout)
        if us < best[1]:
            best, best_choice = (best[0], us), choice
    layout = f"t2={best[0]}" if best[0] else "no blocks"
    rs.add(case, "ours", "latency_us", best[1], "us",
           note=f"fastest: {layout}, remainder on {sparse_conv.choice_name(*best_choice)}")
    rs.add(case, "ours", "t2", best[0], "1", note="0: no blocks")

    # tf32: only the blocks' table changes (the remainder has no tf32 path), so layouts
    # without blocks keep their fp32 times.
    no_blocks = [] if layouts[best[0]].layout.blocks else [best]
    best_tf32 = min([(0, plain_time)] + plain_us + no_blocks, key=lambda p: p[1])
    for t2, packed in with_blocks:
        fn = run_layout(packed, choice=best_choice)

        def run(fn=fn):      # the kernel is fetched at each launch: tf32 must hold there
            with precision.using("tf32"):
                fn()

        run()
        check(f"ours-tf32 t2={t2}", out, tol=3e-3)
        t = timing.time_graph(run).median_us
        rs.add(case, f"t2={t2} tf32", "latency_us", t, "us")
        if t < best_tf32[1]:
            best_tf32 = (t2, t)
    # and the remainder on the tensor cores, which pays at one tf32 pass, without blocks
    plain_weights = sparse_conv.pack_weights(plain, (geom.h, geom.w), cp)
    with precision.using("tf32"):
        tc_choices = [c for c in sparse_conv.remainder_choices(geom) if c not in choices]
        cuda.compile_all([k for c in tc_choices for k in sparse_conv.layer_kernels(
            (), geom, tile=c[0], weights=plain_weights)],
            desc="compiling the tf32 remainders")
    tf32_note = f"t2={best_tf32[0]}" if best_tf32[0] else "no blocks"
    best_tc = None
    for choice in tc_choices:
        def run_tc(tile=choice[0]):
            with precision.using("tf32"):
                sparse_conv.run(x, plain_weights, out, geom, (), remainder_tile=tile)

        run_tc()
        name = sparse_conv.choice_name(*choice)
        check(f"ours-tf32 {name}", out, tol=3e-3)
        t = timing.time_graph(run_tc).median_us
        if best_tc is None or t < best_tc[1]:
            best_tc = (name, t)
    if best_tc is not None:
        rs.add(case, "tc-remainder tf32", "latency_us", best_tc[1], "us",
               note=f"no blocks, fastest tile: {best_tc[0]}")
        if best_tc[1] < best_tf32[1]:
            best_tf32 = (0, best_tc[1])
            tf32_note = f"no blocks, remainder on {best_tc[0]}"
    rs.add(case, "ours-tf32", "latency_us", best_tf32[1], "us", note=f"fastest: {tf32_note}")

    fn = run_layout(plain, "rows")
    check("csr-rows", out)
    rs.add(case, "csr-rows", "latency_us", timing.time_graph(fn).median_us, "us")

    a = cps.csr_matrix(cp.asarray(kernel_matrix(w)))

    cols = _im2col(x, geom)
    spmm = lambda: a @ cols  # noqa: E731
    both = lambda: a @ _im2col(x, geom)  # noqa: E731
    check("cusparse", _from_columns(spmm(), geom))
    rs.add(case, "cusparse", "latency_us", timing.time_events(spmm).median_us, "us",
           note="SpMM alone, eager")
    rs.add(case, "cusparse+im2col", "latency_us", timing.time_events(both).median_us, "us",
           note="im2col and SpMM, eager")

    full = cp.asarray(conv.weight.data)
    label, dense_us, err = dense_layer(conv, x)
    rs.add(case, "ours-dense", "rel_err_unpruned", err, "1")
    rs.add(case, "ours-dense", "latency_us", dense_us, "us",
           note=f"the unpruned kernel as the tuned engine plans it: {label}")

    if torch is not None:
        xt, wt = torch.from_dlpack(x), torch.from_dlpack(full)
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = tf32
            run = lambda: torch.nn.functional.conv2d(xt, wt, None, geom.stride,  # noqa: E731
                                                     geom.padding)
            # cudnn.benchmark's pick on a layer of a few µs changes from process to process
            # (ResNet-18's 256x128 shortcut: 9.4 or 12.6 µs), so cuDNN gets the faster of
            # that pick and its heuristic's, which is the same in every process
            times = {}
            for bench in (True, False):
                torch.backends.cudnn.benchmark = bench
                times[bench] = timing.time_graph(run, framework="torch",
                                                 calls_per_graph=10).median_us
            torch.backends.cudnn.benchmark = True
            rs.add(case, f"cudnn-{'tf32' if tf32 else 'fp32'}", "latency_us", min(times.values()),
                   "us", note=f"the unpruned kernel, the faster of cudnn.benchmark's algorithm "
                              f"({times[True]:.3g} us) and the heuristic's ({times[False]:.3g} us)")
    lat = rs.values("latency_us")
    for ratio in RATIOS:
        base, ours = ratio.split("/")
        if (case, base) in lat:
            rs.add(case, ratio, "speedup", lat[(case, base)] / lat[(case, ours)], "x")


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    del cp
    torch = None
    if bench.torch_cudnn_available():
        import torch

        torch.backends.cudnn.benchmark = True
    rs = ResultSet(NAME, bench.environment(with_torch=torch is not None))
    sets = _mask_sets(args)
    jobs = [(label, layer) for label, path in sets for layer in _layers(args, path)]
    if args.quick:  # three layers, two thresholds
        jobs, args.t2 = jobs[:3], args.t2[:2]
    merged = [r for path in args.merge for r in read_csv(path)
              if r["metric"] != "speedup_median"]
    rs.extend(merged)
    done = {r["case"] for r in merged if r["variant"] == "ours" and r["metric"] == "latency_us"}
    retime = {case_name(label, *layer) for label, layer in jobs} & done if args.retime else set()
    jobs = [(label, layer) for label, layer in jobs
            if case_name(label, *layer) not in done - retime]
    from tqdm import tqdm

    partial = partial_csv(output_name(args), args.out)
    start, timed = time.perf_counter(), 0
    for label, (name, conv, shape, w) in tqdm(jobs, desc="timing pruned layers", unit="layer"):
        if timed and args.time_budget is not None and \
                time.perf_counter() - start > args.time_budget:
            break
        case = case_name(label, name, conv, shape, w)
        if case in retime:       # its merged rows give way to this call's, now it is timed
            rs.rows = [r for r in rs.rows if not of_case(r["case"], case)]
            retime.discard(case)
        measure(rs, name, conv, shape, w, args, torch, label)
        rs.write_csv(partial)        # a call cut short keeps its layers (--merge it)
        timed += 1
    left = len(jobs) - timed
    speed = rs.values("speedup")
    for label, _ in sets:
        prefix = f"{label} " if label else ""
        for ratio in RATIOS:
            ratios = [v for (c, b), v in speed.items() if b == ratio and c.startswith(prefix)]
            if ratios:
                rs.add(f"{prefix}all layers", ratio, "speedup_median",
                       float(np.median(ratios)), "x",
                       note=f"min {min(ratios):.2f} max {max(ratios):.2f} "
                            f"geomean {geomean(ratios):.2f}")
    paths = outputs(output_name(args), args.out)
    rs.write_csv(paths["csv"])
    partial.unlink(missing_ok=True)
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("latency_us", "speedup", "speedup_median",
                                                         "blocks", "in_blocks", "fill", "alg1_s",
                                                         "density", "choice_us"))
    masks = f"masks from {', '.join(args.masks)}" if args.masks else \
        f"magnitude pruning {args.ratio:g}x of initial weights (unstructured: no trained masks)"
    partial = f"Partial: {left} layers not timed yet (run again with --merge). " if left else ""
    if retime:
        partial += (f"{len(retime)} of the layers to re-time keep their merged rows (not "
                    f"reached): {', '.join(sorted(retime))}. ")
    rounds = ("Algorithm 1 runs until a round finds no block (the paper)" if not args.min_gain
              else f"Algorithm 1 stops after a round whose blocks take under "
                   f"{args.min_gain:g} of the layer's nonzeros")
    sections.append(("Notes", f"{partial}{args.model}, batch {args.batch}, {args.in_channels} x "
                              f"{args.size} x {args.size} input, {masks}. {rounds}. Paper: "
                              f"{PAPER.get(args.model, 'see Figs 8-12')}. cuSPARSE is timed "
                              f"eagerly (it does not capture into a CUDA graph); the others "
                              f"by graph replay."))
    write_markdown(paths["md"], f"Pruned layers of {args.model} (batch {args.batch}, fp32)",
                   bench.environment(with_torch=torch is not None), sections)
    plot(speed, len(sets) > 1, paths["png"])
    print(sections[0][1])
    return 0


def plot(speed: dict, labelled: bool, path) -> None:
    """Each layer's speed-up of ours over each baseline (``speed``: {(case, "BASE/ours"):
    x}), as grouped bars saved to ``path``; ``labelled``: the cases carry a mask set's
    label (kept on the axis)."""
    plt = pyplot()
    cases = [c for (c, b) in speed if b == "cudnn-fp32/ours"]
    fig, ax = plt.subplots(figsize=(9, 4))
    bases = ("cudnn-fp32", "cudnn-tf32", "csr-rows", "cusparse")
    grouped_bars(ax, cases if labelled else [c.split(" ", 1)[1] for c in cases],
                 {f"ours vs {b}": [speed.get((c, f"{b}/ours"), np.nan) for c in cases]
                  for b in bases})
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("speed-up of ours (x)")
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
