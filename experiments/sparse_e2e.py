"""Sparse Fig. 13: end-to-end inference of pruned networks at batch 32 (Rumi et al., PACT'20).

For each of ``--models`` (the CIFAR-style zoo models on 3 x 32 x 32 input, 10 classes;
``resnet18_imagenet`` and ``resnet50`` on 3 x 224 x 224, 1000 classes; random weights:
time depends on the pattern, not the values), pruned at the paper's ratio (ResNet-18 and
GoogLeNet 8x, VGG-16 4x; on ImageNet ResNet-18 4x, ResNet-50 8x) by magnitude from its
initial weights — or with a trained model's masks (``--masks MODEL[:LABEL]=PATH``, the
``pruned_masks.npz`` or ``repruned_masks.npz`` that ``sparse_table1`` writes, several sets
of one model told apart by their labels, e.g. ``resnet18:pruned=... resnet18:repruned=...``;
the stem is never pruned, so masks trained on one input channel fit the 3-channel model,
and the CIFAR-style ResNet-18's fit the ImageNet one layer by layer):

* ``ours-sparse``: the pruned model through our inference engine (BN folded, epilogues
  fused, one CUDA graph), every pruned convolution a ``SparseConv2d`` holding Algorithm 1's
  layout at each threshold of ``--t2``; with ``--tune`` (default) the engine times each
  layer's layouts against the dense kernel and keeps the fastest (the paper's "run all
  reorganisations"), and the plan says how many layers run sparse;
* ``ours-dense``: the unpruned model through the same engine;
* ``cudnn-fp32`` / ``cudnn-tf32``: the unpruned model in PyTorch (cuDNN autotuned), as a
  CUDA graph.

With ``--profile``, each launch of our two engines is also timed alone (``step_us``), which
says where a model's time goes.  The rows so far are kept in ``sparse_e2e.partial.csv``
after each model (a call cut short keeps its models: ``--merge`` it); ``--time-budget``
starts no model after that many seconds and the report names those left.  Each output is
checked against its own model's forward first (our engines' within 1e-4, or the run
stops; the baselines' errors are recorded); times are CUDA-graph replay medians, side by
side in one process.  Paper (P100):
1.75-4.03x over cuDNN (each model's beside ours), 1.39-3.52x over TVM.  Targets (issue
23, ResNet-18-8x): >= 2.5x over cuDNN fp32, >= 1.5x over our dense engine.
"""

from __future__ import annotations

import time

import numpy as np

from experiments._common import (
    check_report_only,
    checked_rel_norm,
    cudnn_baseline,
    grouped_bars,
    merge_arguments,
    merged_environment,
    merged_rows,
    outputs,
    parser,
    partial_csv,
    preload,
    pyplot,
    rel_norm,
    save_figure,
)
from tensorconv import backend, bench, timing
from tensorconv.autograd import Tensor, no_grad
from tensorconv.cli import guarded
from tensorconv.compress.prune import keep_count, load_masks, prune_candidates, top_magnitude
from tensorconv.compress.sparse import sparsify
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "sparse_e2e"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
RATIOS = {"resnet18": 8.0, "vgg16": 4.0, "googlenet": 8.0, "resnet18_imagenet": 4.0,
          "resnet50": 8.0}
# input size and classes: the CIFAR-style models on 32x32, the ImageNet ones on 224x224
INPUTS = {"resnet18_imagenet": (224, 1000), "resnet50": (224, 1000)}
# the paper's end-to-end speed-ups over cuDNN (P100, re-pruned, Fig. 13; CIFAR-10 and
# ImageNet)
PAPER_X = {"resnet18": 4.03, "vgg16": 1.85, "googlenet": 3.96, "resnet18_imagenet": 1.75,
           "resnet50": 3.11}
CIFAR = ("googlenet", "resnet18", "vgg16")
PAPER = "P100, batch 32: 1.75-4.03x over cuDNN, 1.39-3.52x over TVM (Fig. 13)"


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", choices=sorted(RATIOS), default=None,
                   help="the CIFAR-style models (default) and the paper's ImageNet ones "
                        "(resnet18_imagenet 4x, resnet50 8x, at 224x224)")
    p.add_argument("--masks", nargs="+", default=[], metavar="MODEL[:LABEL]=PATH",
                   help="trained masks of a model (.npz of sparse_table1); several sets of "
                        "one model need distinct labels")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--t2", type=int, nargs="+", default=[4, 8, 12, 16])
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds for this call: no model is started after them (the report "
                        "says which are left; run them with --merge)")
    p.add_argument("--profile", action="store_true",
                   help="also time each launch of our engines alone (metric step_us: what "
                        "each layer costs, not a breakdown of the graph's time)")
    p.add_argument("--no-tune", dest="tune", action="store_false",
                   help="run each layer's first layout untimed (default: time and keep the "
                        "fastest)")
    merge_arguments(p, keeps="their rows of models not timed now are kept (one table of "
                             "models timed in separate calls)", nothing="time nothing")
    args = p.parse_args(argv)
    check_report_only(p, args, [flag for flag, v in (("--models", args.models),
                                                     ("--masks", args.masks),
                                                     ("--time-budget", args.time_budget))
                                 if v is not None and v != []], "times nothing")
    if args.time_budget is not None and args.time_budget < 0:
        p.error(f"--time-budget must be >= 0 seconds, got {args.time_budget:g}")
    if args.models is None:
        args.models = list(CIFAR)
    masks: dict = {}
    for item in args.masks:
        key, sep, path = item.partition("=")
        model, _, label = key.partition(":")
        if not sep or model not in RATIOS:
            p.error(f"--masks takes MODEL[:LABEL]=PATH with MODEL one of {sorted(RATIOS)}, "
                    f"got {item!r}")
        if label in [lab for lab, _ in masks.get(model, [])]:
            p.error(f"--masks: several sets of {model} need distinct labels, got {item!r}")
        masks.setdefault(model, []).append((label, path))
    args.masks = masks
    return args


def pruned_copy(name: str, ratio: float, masks_path):
    """The model ``name`` (seed 0) with every prunable convolution pruned: ``masks_path``'s
    masks, else its ``ratio`` largest-magnitude weights.  Returns (model, source)."""
    model = get_model(name, in_channels=3, num_classes=INPUTS.get(name, (32, 10))[1], seed=0)
    masks = load_masks(masks_path) if masks_path else None
    for layer, conv in prune_candidates(model).items():
        w = backend.to_host(conv.weight.data)
        if masks is None:
            keep = top_magnitude(w, keep_count(w.size, ratio)).astype(bool)
        elif layer not in masks or masks[layer].shape != w.shape:
            raise ValueError(f"--masks {masks_path} has no mask of shape {w.shape} for {layer}")
        else:
            keep = masks[layer].astype(bool)
        conv.weight.data[...] = (w * keep).astype(np.float32)
    return model, (f"masks {masks_path}" if masks else f"magnitude {ratio:g}x")


def main(argv=None) -> int:
    args = _args(argv)
    batch = 2 if args.quick else args.batch
    if args.report_only:
        rs = ResultSet(NAME, bench.environment())
        rs.extend(merged_rows(args.merge, set()))
        rs.env = merged_environment(rs.env, args.merge, rs.rows)
        return write_report(args, rs, batch)
    cp = backend.require_cuda(NAME)
    preload("torch")
    torch, to_torch = cudnn_baseline()
    env = bench.environment(with_torch=torch is not None)
    rs = ResultSet(NAME, env)
    rs.extend(merged_rows(args.merge, {f"{m}-{RATIOS[m]:g}x" for m in args.models}))
    reps = dict(repeat=10 if args.quick else 50)
    from tqdm import tqdm

    partial = partial_csv(NAME, args.out)
    start, left = time.perf_counter(), []
    for name in tqdm(args.models, desc="timing pruned models end to end", unit="model"):
        if name != args.models[0] and args.time_budget is not None and \
                time.perf_counter() - start > args.time_budget:      # the first always runs
            left.append(name)
            continue
        ratio = RATIOS[name]
        size, classes = INPUTS.get(name, (32, 10))
        shape = (batch, 3, size, size)
        x = cp.asarray(np.random.default_rng(1).standard_normal(shape).astype(np.float32))
        dense = get_model(name, in_channels=3, num_classes=classes, seed=0).to("gpu").eval()
        cases = []
        for label, path in args.masks.get(name, [("", None)]):
            case = f"{name}-{ratio:g}x" + (f" {label}" if label else "")
            cases.append(case)
            pruned, source = pruned_copy(name, ratio, path)
            report = sparsify(pruned, t2=args.t2[:2] if args.quick else args.t2)
            pruned.to("gpu").eval()
            engine = InferenceEngine(pruned, shape, tune=args.tune)
            with no_grad():
                rs.add(case, "ours-sparse", "rel_err",
                       checked_rel_norm(engine(x), pruned(Tensor(x)).data, cp,
                                        f"{case}: the sparse engine"), "1")
            sparse = sum(s.label.startswith("sparse conv") for s in engine.plan.steps)
            rs.add(case, "ours-sparse", "sparse_layers", sparse, "count",
                   note=f"of {len(report)} pruned convolutions; {source}")
            rs.add(case, "ours-sparse", "batch_us", engine.time(**reps).median_us, "us",
                   note=f"one CUDA graph of {engine.launches} launches; {sparse} of "
                        f"{len(report)} pruned layers on the sparse kernels; "
                        f"{engine.sections} sections of module branches side by side")
            if args.profile:
                add_profile(rs, case, "ours-sparse", engine)
            del engine
            add_one_stream(rs, case, "ours-sparse", pruned, shape, reps)
        engine = InferenceEngine(dense, shape, tune=args.tune)
        with no_grad():
            err = checked_rel_norm(engine(x), dense(Tensor(x)).data, cp,
                                   f"{name}: the dense engine")
        us = engine.time(**reps).median_us
        for case in cases:       # the unpruned model, timed once, beside each pruned one
            rs.add(case, "ours-dense", "rel_err", err, "1")
            rs.add(case, "ours-dense", "batch_us", us, "us",
                   note=f"one CUDA graph of {engine.launches} launches; {engine.sections} "
                        f"sections of module branches side by side")
        if args.profile:
            add_profile(rs, f"{name}-{ratio:g}x", "ours-dense", engine)
        del engine
        if torch is not None:
            net = to_torch(dense).cuda().eval()
            xt = torch.from_dlpack(x)
            with no_grad():
                ref = dense(Tensor(x)).data
            for tf32 in (False, True):
                torch.backends.cudnn.allow_tf32 = tf32
                tag = f"cudnn-{'tf32' if tf32 else 'fp32'}"
                with torch.no_grad():
                    err = rel_norm(cp.from_dlpack(net(xt)), ref, cp)
                    # hold_us=0: the replay's launch is timed, as in our engine's time
                    us = timing.time_graph(lambda: net(xt), framework="torch",
                                           calls_per_graph=1, hold_us=0, **reps).median_us
                for case in cases:
                    rs.add(case, tag, "rel_err", err, "1")
                    rs.add(case, tag, "batch_us", us, "us",
                           note="the unpruned model, PyTorch CUDA graph, cudnn.benchmark")
        lat = rs.values("batch_us")
        for case, base in ((c, b) for c in cases for b in ("cudnn-fp32", "cudnn-tf32",
                                                           "ours-dense")):
            if (case, base) in lat:
                target = {"cudnn-fp32": "target >= 2.5 (ResNet-18-8x)",
                          "ours-dense": "target >= 1.5 (ResNet-18-8x)"}.get(base, "")
                rs.add(case, f"{base}/ours-sparse", "speedup",
                       lat[(case, base)] / lat[(case, "ours-sparse")], "x", note=target,
                       paper_value=PAPER_X[name] if base == "cudnn-fp32" else None)
        rs.write_csv(partial)        # a call cut short keeps its models (--merge it)
    code = write_report(args, rs, batch, left)
    partial.unlink(missing_ok=True)
    return code


def add_one_stream(rs: ResultSet, case: str, variant: str, model, shape, reps) -> None:
    """``model``'s engine with every launch on one stream (``concurrent=False``; the same
    choices, read from the tune cache the timed engine filled), timed as a ``batch_us``
    row ``"{variant}-one-stream"``: what running module branches side by side gave."""
    engine = InferenceEngine(model, shape, concurrent=False)
    rs.add(case, f"{variant}-one-stream", "batch_us", engine.time(**reps).median_us, "us",
           note=f"the same plan, its {engine.launches} launches in order on one stream")


def add_profile(rs: ResultSet, case: str, variant: str, engine) -> None:
    """Each launch of ``engine`` timed alone, as rows ``"{case} NN {label}"``."""
    for i, (label, us) in enumerate(engine.profile()):
        rs.add(f"{case} {i:02d} {label}", variant, "step_us", us, "us",
               note="this launch alone, from a CUDA graph of its own")


def write_report(args, rs: ResultSet, batch: int, left=()) -> int:
    """Write the CSV, the markdown (each case's pruning as its run recorded it, the
    ``left`` models a time budget left untimed) and the plot."""
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sources = [f"{r['case']}: {r['value']:g} {r['note']}" for r in rows
               if r["metric"] == "sparse_layers"]
    sections = metric_sections(rows, ("batch_us", "speedup", "sparse_layers", "rel_err",
                                      "step_us"))
    untimed = f"Partial: {', '.join(left)} not timed (run again with --merge). " if left else ""
    sections.append(("Notes", f"{untimed}Batch {batch}, 3 x 32 x 32 (ImageNet models "
                              f"3 x 224 x 224), fp32, random weights. "
                              f"Layers on the sparse kernels (as each run recorded them): "
                              f"{'; '.join(sources)}. Algorithm 1 at t2 in "
                              f"{args.t2}. Paper: {PAPER}."))
    write_markdown(paths["md"], "Pruned networks end to end (batch 32, fp32)", rs.env, sections)
    us = {(r["case"], r["variant"]): r["value"] for r in rows if r["metric"] == "batch_us"}
    cases = list(dict.fromkeys(c for c, _ in us))
    impls = sorted({v for _, v in us})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    grouped_bars(ax, cases, {i: [us.get((c, i), np.nan) for c in cases] for i in impls})
    ax.set_ylabel("µs per batch")
    ax.legend(fontsize=7)
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
