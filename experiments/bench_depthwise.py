"""Depthwise convolution, forward and both gradients: our kernels against cuDNN.

The depthwise layers our training runs meet (DW+SCC VGG-16 / MobileNet / ResNet-18 at batch
128 on 32x32 inputs, strided ones too) and ImageNet-shaped ones (MobileNet's 3x3 at batch
32, 5x5 and 7x7 layers of EfficientNet-like networks at batch 64), each pass timed as kernel
time (a CUDA graph's replay, medians) after checking it against the float64 reference:

* ``ours``: ``algorithm="depthwise"`` (:mod:`tensorconv.ops.depthwise_conv`), one value per
  thread, a deterministic weight gradient;
* ``general``: what these layers ran on before, the ``"direct"`` forward and the fp32
  implicit-GEMM gradients (one-row groups);
* ``cudnn``: PyTorch's ``conv2d`` and ``aten.convolution_backward`` (input or weight
  gradient alone), cuDNN autotuned, TF32 off (depthwise layers take no tensor cores).

``cudnn/ours`` above 1 means ours is faster; the geomean over the layers is the summary.
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
from tensorconv import backend, bench, ops, reference, timing
from tensorconv.checks import conv_geometry
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "bench_depthwise"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
PASSES = ("forward", "data_grad", "weight_grad")
# (N, C, H, W), filter, stride: where each comes from
CASES = [
    ((128, 64, 32, 32), 3, 1, "VGG-16 DW+SCC"), ((128, 128, 16, 16), 3, 1, "VGG-16 DW+SCC"),
    ((128, 256, 8, 8), 3, 1, "VGG-16 DW+SCC"), ((128, 512, 4, 4), 3, 1, "VGG-16 DW+SCC"),
    ((128, 512, 2, 2), 3, 1, "VGG-16 DW+SCC"), ((128, 64, 32, 32), 3, 2, "MobileNet"),
    ((128, 512, 4, 4), 3, 2, "MobileNet"), ((32, 32, 112, 112), 3, 1, "MobileNet 224"),
    ((32, 64, 112, 112), 3, 2, "MobileNet 224"), ((32, 512, 14, 14), 3, 1, "MobileNet 224"),
    ((32, 1024, 7, 7), 3, 1, "MobileNet 224"), ((64, 96, 56, 56), 5, 1, "5x5"),
    ((64, 240, 14, 14), 7, 1, "7x7"),
]


def _case(shape, r, stride) -> str:
    return f"{'x'.join(map(str, shape))} {r}x{r} s{stride}"


def _check(cp, rng, shape, r, stride, rs, case) -> None:
    """Each pass of ``ours`` against the float64 reference on two images of the layer."""
    n, c, h, w = (2,) + shape[1:]
    kw = dict(stride=stride, padding=r // 2, groups=c)
    geom = conv_geometry((n, c, h, w), (c, 1, r, r), **kw)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, r, r)).astype(np.float32)
    gy = rng.standard_normal(geom.output_shape).astype(np.float32)
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, wt, gy))
    d = dict(algorithm="depthwise", **kw)
    got = {"forward": ops.conv2d(cp.asarray(x), cp.asarray(wt), **d),
           "data_grad": ops.conv2d_backward_data(cp.asarray(gy), cp.asarray(wt), x.shape, **d),
           "weight_grad": ops.conv2d_backward_weight(cp.asarray(x), cp.asarray(gy), wt.shape,
                                                     **d)}
    want = {"forward": reference.conv2d(x64, w64, **kw),
            "data_grad": reference.conv2d_backward_data(gy64, w64, x.shape, **kw),
            "weight_grad": reference.conv2d_backward_weight(x64, gy64, wt.shape, **kw)}
    for name in PASSES:
        out, ref = got[name].get(), want[name]
        err = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))
        rs.add(case, name, "rel_err", err, "1", note="ours, two images, float64 reference")


def _runners(cp, torch, shape, r, stride) -> dict:
    """{(impl, pass): (callable, framework)} on preallocated outputs."""
    rng = np.random.default_rng(1)
    c = shape[1]
    kw = dict(stride=stride, padding=r // 2, groups=c)
    geom = conv_geometry(shape, (c, 1, r, r), **kw)
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    w = cp.asarray(rng.standard_normal((c, 1, r, r)).astype(np.float32))
    gy = cp.asarray(rng.standard_normal(geom.output_shape).astype(np.float32))
    y, gx, gw = cp.empty(geom.output_shape, cp.float32), cp.empty_like(x), cp.empty_like(w)
    out = {}
    for impl, fwd_algo, grad_algo in (("ours", "depthwise", "depthwise"),
                                      ("general", "direct", "igemm")):
        out[impl, "forward"] = (lambda a=fwd_algo: ops.conv2d(x, w, out=y, algorithm=a, **kw),
                                "cupy")
        out[impl, "data_grad"] = (lambda a=grad_algo: ops.conv2d_backward_data(
            gy, w, shape, out=gx, algorithm=a, **kw), "cupy")
        out[impl, "weight_grad"] = (lambda a=grad_algo: ops.conv2d_backward_weight(
            x, gy, w.shape, out=gw, algorithm=a, **kw), "cupy")
    if torch is not None:
        xt, wt, gyt = torch.from_dlpack(x), torch.from_dlpack(w), torch.from_dlpack(gy)
        conv = ([stride] * 2, [r // 2] * 2, [1, 1], False, [0, 0], c)
        back = torch.ops.aten.convolution_backward
        out["cudnn", "forward"] = (lambda: torch.nn.functional.conv2d(
            xt, wt, None, stride, r // 2, 1, c), "torch")
        out["cudnn", "data_grad"] = (lambda: back(gyt, xt, wt, None, *conv,
                                                  [True, False, False]), "torch")
        out["cudnn", "weight_grad"] = (lambda: back(gyt, xt, wt, None, *conv,
                                                    [False, True, False]), "torch")
    return out


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    args = p.parse_args(argv)
    cp = backend.require_cuda(NAME)
    torch = cudnn_fp32()
    env = bench.environment(with_torch=torch is not None)
    rs = ResultSet(NAME, env)
    rng = np.random.default_rng(0)
    cases = CASES[:3] if args.quick else CASES
    reps = dict(repeat=10 if args.quick else 30)
    from tqdm import tqdm

    for shape, r, stride, origin in tqdm(cases, desc="checking and timing depthwise layers",
                                         unit="layer"):
        shape = (min(shape[0], 8),) + shape[1:] if args.quick else shape
        case = _case(shape, r, stride)
        _check(cp, rng, shape, r, stride, rs, case)
        for (impl, name), (fn, fw) in _runners(cp, torch, shape, r, stride).items():
            fn()
            rs.add(case, impl, f"{name}_us", timing.time_graph(fn, framework=fw, **reps)
                   .median_us, "us", note=origin if impl == "ours" else "")
    for name in PASSES:
        times = rs.values(f"{name}_us")
        for other in ("cudnn", "general"):
            ratios = [times[c, other] / times[c, "ours"] for c, i in times
                      if i == "ours" and (c, other) in times]
            if ratios:
                rs.add(f"all {len(ratios)} layers", f"{other}/ours", f"{name}_speedup",
                       geomean(ratios), "x", note=f"geomean; min {min(ratios):.2f}, max "
                                                  f"{max(ratios):.2f}")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, [f"{n}_speedup" for n in PASSES]
                               + [f"{n}_us" for n in PASSES] + ["rel_err"])
    sections.append(("Notes", "Kernel time: CUDA-graph replay, median. fp32, TF32 off. "
                              "`general` is the direct forward and the fp32 implicit-GEMM "
                              "gradients these layers ran on before the depthwise kernels."))
    write_markdown(paths["md"], "Depthwise convolution: ours against cuDNN", env, sections)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PASSES), figsize=(12, 3.8), sharey=True)
    for ax, name in zip(axes, PASSES):
        times = rs.values(f"{name}_us")
        labels = [c for c, i in times if i == "ours"]
        series = {f"{o}/ours": [times.get((c, o), np.nan) / times[c, "ours"] for c in labels]
                  for o in ("cudnn", "general") if any((c, o) in times for c in labels)}
        grouped_bars(ax, labels, series)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_title(name.replace("_", " "), fontsize=9)
    axes[0].set_ylabel("time / ours (above 1: ours faster)")
    save_figure(fig, paths["png"])
    print(metric_sections(rows, [f"{n}_speedup" for n in PASSES])[0][1] if rows else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
