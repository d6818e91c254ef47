"""DSXplore Fig. 10: the memory the channel-cyclic reuse saves.

For each network of ``--models`` made DW + SCC (cg ``--cg``, co ``--co``) at ``--batch``
(128) on random 1x32x32 data, the GPU memory a training forward holds for the backward
(CuPy's pool: bytes in use after the forward, less before it) is measured with every SCC
layer on:

* ``base``: the channel stack without channel-cyclic reuse (every filter's window copied
  into one concatenated tensor);
* ``opt``: the convolution stack with channel-cyclic reuse (the cycle's windows once);
* ``ours``: the SCC kernels (no copy of the input at all);
* ``dense``: the dense-masked 1x1 form.

Reports each and the saving ``1 - opt / base`` beside the paper's 72.88-83.33 %.
"""

from __future__ import annotations

import gc

import numpy as np

from experiments._common import grouped_bars, outputs, parser, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.cli import guarded
from tensorconv.compress.separable import separable
from tensorconv.nn import get_model
from tensorconv.nn.scc import SCCConv2d
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

NAME = "scc_memory"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits
IMPLS = {"base": "channel_stack", "opt": "conv_stack", "ours": "kernels", "dense": "dense"}
PAPER = (72.88, 83.33)   # % saved by the channel-cyclic reuse, Fig. 10


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+",
                   default=["vgg16", "vgg19", "resnet18", "resnet50_cifar", "mobilenet_v1"])
    p.add_argument("--cg", type=int, default=2)
    p.add_argument("--co", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=128)
    return p.parse_args(argv)


def forward_bytes(model, shape, cp) -> int:
    """Bytes the pool holds after a training forward (loss included) beyond before it."""
    rng = np.random.default_rng(0)
    x = Tensor(cp.asarray(rng.standard_normal(shape).astype(np.float32)))
    y = cp.asarray(rng.integers(0, 10, shape[0]))
    pool = cp.get_default_memory_pool()
    # Garbage of earlier work (a previous model's graph in a reference cycle) collected in
    # the middle of the forward would be subtracted from it: collect it first, and keep the
    # collector off while the forward runs.
    gc.collect()
    cp.cuda.Device().synchronize()
    before = pool.used_bytes()
    gc.disable()
    try:
        loss = F.softmax_cross_entropy(model(x), y, check=False)
        cp.cuda.Device().synchronize()
        held = pool.used_bytes() - before
    finally:
        gc.enable()
    del loss
    return int(held)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    env = bench.environment()
    rs = ResultSet(NAME, env)
    models = args.models[:1] if args.quick else args.models
    shape = (args.batch, 1, 32, 32)
    for name in models:
        for impl, layer_impl in IMPLS.items():
            model = separable(get_model(name, in_channels=1), "scc", cg=args.cg,
                              co=args.co).to("gpu")
            for m in model.modules():
                if isinstance(m, SCCConv2d):
                    m.impl = layer_impl
            try:
                rs.add(name, impl, "forward_mib", forward_bytes(model, shape, cp) / 2 ** 20,
                       "MiB")
            except cp.cuda.memory.OutOfMemoryError:
                rs.add(name, impl, "out_of_memory", 1, "1")
            del model
            cp.get_default_memory_pool().free_all_blocks()
    mib = rs.values("forward_mib")
    for name in models:
        if (name, "base") in mib and (name, "opt") in mib:
            rs.add(name, "opt vs base", "saved_pct", 100 * (1 - mib[(name, "opt")] /
                                                            mib[(name, "base")]), "%",
                   note=f"paper {PAPER[0]}-{PAPER[1]} %")
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    sections = metric_sections(rows, ("forward_mib", "saved_pct",
                                                         "out_of_memory"))
    sections.append(("Notes", f"DW + SCC cg{args.cg} co{args.co:g}, batch {args.batch}, "
                              f"1x32x32, fp32: the memory a training forward keeps for its "
                              f"backward. Paper (V100): the channel-cyclic reuse saves "
                              f"{PAPER[0]}-{PAPER[1]} %."))
    write_markdown(paths["md"], "Memory of the SCC implementations", env, sections)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    grouped_bars(ax, models, {i: [mib.get((m, i), np.nan) for m in models] for i in IMPLS})
    ax.set_ylabel("forward memory (MiB)")
    save_figure(fig, paths["png"])
    print(sections[0][1])
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
