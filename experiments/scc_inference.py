"""DSXplore Table V: inference of VGG-16 (CIFAR-10 shapes) made depthwise-separable, DW + SCC
(cg 2, co 50 %) through our engine against DW + GPW (cg 2) through cuDNN, by batch size.

Ours: the inference engine on the DW + SCC network (BN folded, each SCC layer on our
forward kernel or its dense-masked 1x1, whichever the tune cache says, bias and ReLU
fused; one CUDA graph), timed by graph replay.  PyTorch: the DW + GPW network (grouped
1x1, ``groups = cg``: the same multiply-adds as SCC) with the same depthwise weights,
cuDNN autotuned, as a CUDA graph, TF32 off (like for like) and on.  Each output is checked
against its own model first (our engine's within 1e-4, or the run stops).  Paper (V100):
16-512 images, DW + GPW 6-90 ms, DSXplore 8-79 ms per batch (comparable; DSXplore faster
from batch 256).
"""

from __future__ import annotations

import numpy as np

from experiments._common import (
    checked_rel_norm,
    cudnn_baseline,
    grouped_bars,
    outputs,
    parser,
    preload,
    pyplot,
    rel_norm,
    save_figure,
)
from tensorconv import backend, bench, timing
from tensorconv.autograd import Tensor, no_grad
from tensorconv.cli import guarded
from tensorconv.compress.separable import separable
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "scc_inference"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
PAPER_MS = {16: (6, 8), 32: (10, 11), 64: (10, 16), 128: (17, 28), 256: (79, 75),
            512: (90, 79)}                      # batch -> (DW+GPW, DSXplore), V100, Table V


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--batches", nargs="+", type=int, default=sorted(PAPER_MS))
    p.add_argument("--cg", type=int, default=2)
    p.add_argument("--co", type=float, default=0.5)
    p.add_argument("--tune", action="store_true",
                   help="time each SCC layer's kernel against its dense-masked 1x1 (default: "
                        "the tune cache's choice, else the kernel)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    preload("torch")
    torch, to_torch = cudnn_baseline()
    env = bench.environment(with_torch=torch is not None)
    rs = ResultSet(NAME, env)
    batches = args.batches[:2] if args.quick else args.batches
    reps = dict(repeat=20 if args.quick else 50)
    scc = separable(get_model("vgg16"), "scc", cg=args.cg, co=args.co).to("gpu").eval()
    gpw = separable(get_model("vgg16"), "gpw", cg=args.cg).to("gpu").eval()
    net = to_torch(gpw).cuda().eval() if torch is not None else None
    rng = np.random.default_rng(0)
    from tqdm import tqdm

    for batch in tqdm(batches, desc="timing batches", unit="batch"):
        shape = (batch, 3, 32, 32)
        case = f"batch {batch}"
        paper_gpw, paper_ours = PAPER_MS.get(batch, (None, None))
        x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
        engine = InferenceEngine(scc, shape, tune=args.tune)
        out = engine(x)
        with no_grad():
            rs.add(case, "ours-dw-scc", "rel_err",
                   checked_rel_norm(out, scc(Tensor(x)).data, cp, f"{case}: our engine"), "1")
        t = engine.time(**reps).median_us / 1e3
        rs.add(case, "ours-dw-scc", "batch_ms", t, "ms", paper_value=paper_ours,
               note=f"our engine, one CUDA graph of {engine.launches} launches")
        del engine
        if net is None:
            continue
        xt = torch.from_dlpack(x)
        with no_grad():
            ref = gpw(Tensor(x)).data
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = tf32
            tag = "tf32" if tf32 else "fp32"
            with torch.no_grad():
                rs.add(case, f"cudnn-dw-gpw-{tag}", "rel_err",
                       rel_norm(cp.from_dlpack(net(xt)), ref, cp), "1")
                # hold_us=0: the replay's launch is timed, as in our engine's time
                tg = timing.time_graph(lambda: net(xt), framework="torch", calls_per_graph=1,
                                       hold_us=0, **reps).median_us / 1e3
            rs.add(case, f"cudnn-dw-gpw-{tag}", "batch_ms", tg, "ms",
                   paper_value=paper_gpw if not tf32 else None,
                   note="PyTorch CUDA graph, cuDNN autotuned")
            rs.add(case, f"ours/cudnn-{tag}", "ratio", t / tg, "x",
                   note="target <= 1.0 (fp32)" if not tf32 else "")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("batch_ms", "ratio", "rel_err"))
    sections.append(("Notes", f"VGG-16 (CIFAR-10: 3x32x32, 10 classes), every 3x3 but the "
                              f"first made depthwise + pointwise; ours DW + SCC cg{args.cg} "
                              f"co{args.co:g}, PyTorch DW + GPW cg{args.cg}; fp32 unless "
                              f"tagged; random weights and data. Paper (V100, Table V): "
                              f"per-batch time over 100 batches, DW+GPW / DSXplore."))
    write_markdown(paths["md"], "DW + SCC inference (our engine) against DW + GPW (cuDNN)",
                   env, sections)
    ms = rs.values("batch_ms")
    cases = [f"batch {b}" for b in batches]
    impls = sorted({v for _, v in ms})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    grouped_bars(ax, cases, {i: [ms.get((c, i), np.nan) for c in cases] for i in impls})
    ax.set_yscale("log")
    ax.set_ylabel("ms per batch (log)")
    ax.legend()
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
