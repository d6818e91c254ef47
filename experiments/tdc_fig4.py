"""TDC figure 4: latency staircase of the core convolution as N grows (C = 64, H = W in {28, 14}).

The paper (2080 Ti) shows that the time stays flat over ranges of N — the
reason TDC picks ranks by measured latency rather than FLOPs.  We time the
paper's scheme with the oracle tile, our cluster, tensor-core (3xTF32) and
Winograd kernels with their oracle tiles, our implicit-GEMM kernel and cuDNN for
N = 32, 64, ..., 256 (3x3, pad 1, batch 1, fp32, CUDA-graph replay).
"""

from __future__ import annotations

from experiments._common import outputs, parser, pyplot, save_figure
from experiments._tdc import measure_core_shape
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet, pivot_markdown, read_csv, write_markdown

NAME = "tdc_fig4"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    args = p.parse_args(argv)
    backend.require_cuda(NAME)
    env = bench.environment(with_torch=True)
    rs = ResultSet(NAME, env)
    ns = [64, 128, 256] if args.quick else list(range(32, 257, 32))
    from tqdm import tqdm

    series = {}
    for hw in (28, 14):
        for n in tqdm(ns, desc=f"{NAME} H=W={hw}"):
            series[(hw, n)] = measure_core_shape(rs, f"64_{n}_{hw}_{hw}", 64, n, hw, hw,
                                                 quick=args.quick, check=False)
    paths = outputs(NAME, args.out)
    rs.write_csv(paths["csv"])
    rows = read_csv(paths["csv"])
    write_markdown(paths["md"], "TDC figure 4: core-convolution latency vs output channels", env,
                   [("Time (µs, CUDA-graph replay)", pivot_markdown(rows, "time_us")),
                    ("Notes", __doc__.split("\n\n", 1)[1].replace("\n", " "))])

    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, hw in zip(axes, (28, 14)):
        for v in ("tdc-oracle", "cluster-oracle", "tf32x3-oracle", "winograd-oracle", "igemm",
                  "cudnn-fp32"):
            ys = [series[(hw, n)].get(v) for n in ns]
            if all(y is not None for y in ys):
                ax.step(ns, ys, where="mid", marker="o", label=v)
        ax.set_title(f"C = 64, H = W = {hw}")
        ax.set_xlabel("N (output channels)")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("µs")
    save_figure(fig, paths["png"])
    print(pivot_markdown(rows, "time_us"))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
