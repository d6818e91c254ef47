"""TDC figure 8 (ResNet-18 part): end-to-end batch-1 latency, original vs Tucker-format.

ResNet-18 (ImageNet-style, 224x224, fp32, batch 1), every variant timed by
CUDA-graph replay in one run:

* ``cudnn-original`` — torchvision's ResNet-18 through PyTorch/cuDNN (TF32 off;
  ``-tf32``: PyTorch's default TF32 convolutions);
* ``cudnn-tucker`` — the Tucker-format model (each 3x3 conv as 1x1 -> core ->
  1x1, ranks for a ``--reduction`` MAC cut) through PyTorch/cuDNN;
* ``ours-original`` / ``ours-tucker`` — our inference engine (BN folded, fused
  epilogues, the TDC core kernel for the Tucker cores, one CUDA graph).

Latency does not depend on the weights' values, so the Tucker factors are
random (no decomposition needed).  The paper (A100) reports ResNet-18: 3.27x
over the original through cuDNN and 2.21x over the Tucker model through cuDNN.
DenseNet-121/201, ResNet-50 and VGG-16 are not measured yet.
"""

from __future__ import annotations

import numpy as np

from experiments._common import outputs, parser, pyplot, save_figure
from experiments.bench_inference import torch_name
from tensorconv import backend, bench
from tensorconv.nn import count_flops_params, get_model
from tensorconv.nn.engine import InferenceEngine
from tensorconv.nn.tucker import TuckerConv2d, tuckerize, uniform_ranks
from tensorconv.results import ResultSet, long_markdown, pivot_markdown, read_csv, write_markdown

NAME = "tdc_fig8"
PAPER = {"ours-tucker/cudnn-original": 3.27, "ours-tucker/cudnn-tucker": 2.21}


def torch_model(model):
    """The same network in PyTorch, our weights loaded (Tucker layers as Sequential(1x1, core, 1x1))."""
    import torch
    from torchvision.models import resnet18

    net = resnet18(num_classes=1000)
    for name, m in model.named_modules():
        if isinstance(m, TuckerConv2d):
            tname = torch_name(name.rstrip(".") + ".x").rsplit(".", 1)[0]
            parent_name, _, attr = tname.rpartition(".")
            parent = net.get_submodule(parent_name)
            d1, d2 = m.ranks
            k, s, p = m.kernel_size, m.stride, m.padding
            setattr(parent, attr, torch.nn.Sequential(
                torch.nn.Conv2d(m.in_channels, d1, 1, bias=False),
                torch.nn.Conv2d(d1, d2, k, s, p, bias=False),
                torch.nn.Conv2d(d2, m.out_channels, 1, bias=False)))
    state = {torch_name(k).replace(".first.", ".0.").replace(".core.", ".1.").replace(".last.", ".2."):
             torch.from_numpy(v) for k, v in model.state_dict().items()}
    missing = net.load_state_dict(state, strict=False)
    if missing.unexpected_keys or [k for k in missing.missing_keys if "num_batches" not in k]:
        raise RuntimeError(f"weight mapping failed: {missing}")
    return net.cuda().eval()


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--reduction", type=float, default=0.65, help="MAC reduction of the Tucker model")
    args = p.parse_args(argv)
    cp = backend.require_cuda(NAME)
    shape = (1, 3, 224, 224)
    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    original = get_model("resnet18_imagenet")
    tucker = get_model("resnet18_imagenet")
    ranks = uniform_ranks(tucker, args.reduction, shape)
    tuckerize(tucker, ranks, decompose=False)
    macs = {k: count_flops_params(m, shape)["macs"] for k, m in (("original", original),
                                                                 ("tucker", tucker))}
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    case = "resnet18/b1"
    rs.add(case, "tucker", "mac_reduction", 100 * (1 - macs["tucker"] / macs["original"]), "%",
           note=f"ranks for a {args.reduction:.0%} target; paper's ResNet-18: 63% (Table 3)")
    reps = dict(repeat=30 if args.quick else 100)
    times = {}
    for label, model in (("original", original), ("tucker", tucker)):
        model.to("gpu").eval()
        engine = InferenceEngine(model, shape)
        out = engine(x)
        with engine.stream:
            times[f"ours-{label}"] = bench.time_events(engine.replay, **reps).median_us
        rs.add(case, f"ours-{label}", "launches", engine.launches, "count")
        if bench.torch_cudnn_available():
            import torch

            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = False
            net = torch_model(model)
            xt = torch.from_dlpack(x)
            for tf32 in (False, True):
                torch.backends.cudnn.allow_tf32 = tf32
                with torch.no_grad():
                    ref = net(xt)
                    if not tf32:
                        err = float(torch.linalg.norm(ref - torch.from_dlpack(out))
                                    / torch.linalg.norm(ref))
                        rs.add(case, f"ours-{label}", "rel_err_vs_pytorch", err, "1")
                    t = bench.time_graph(lambda: net(xt), framework="torch", calls_per_graph=1,
                                         **reps)
                times[f"cudnn-{label}{'-tf32' if tf32 else ''}"] = t.median_us
    for v, us in times.items():
        rs.add(case, v, "latency_us", us, "us", note="CUDA-graph replay median")
    if "cudnn-original" in times:
        for base in ("cudnn-original", "cudnn-tucker", "cudnn-original-tf32", "cudnn-tucker-tf32"):
            key = f"ours-tucker/{base}"
            rs.add(case, key, "speedup", times[base] / times["ours-tucker"], "x",
                   paper_value=PAPER.get(key))
        rs.add(case, "ours-tucker/ours-original", "speedup",
               times["ours-original"] / times["ours-tucker"], "x")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "TDC figure 8 (ResNet-18): end-to-end batch-1 latency", env,
                   [("Latency (µs)", pivot_markdown(rows, "latency_us")),
                    ("Speed-ups and checks", long_markdown([r for r in rows
                                                            if r["metric"] != "latency_us"])),
                    ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])

    plt = pyplot()

    lat = [r for r in rows if r["metric"] == "latency_us"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh([r["variant"] for r in lat], [r["value"] for r in lat])
    ax.set_xlabel("ResNet-18 batch-1 latency (µs), H100")
    save_figure(fig, paths["png"])
    print(long_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
