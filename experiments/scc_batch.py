"""DSXplore Fig. 13: the training step of DW + SCC networks against the batch size
(cg 2, co 50 %).

For each network of ``--models`` (the paper's VGG-16, MobileNet and ResNet-18) and each
batch of ``--batches`` (16 to 1024, powers of two), one training step (forward, loss,
backward, SGD) on random 1x32x32 data with every SCC layer on our kernels: the step time
and images per second.  Paper (V100): below batch 128 the step time barely grows (too few
threads to fill the GPU), above it grows with the batch.
"""

from __future__ import annotations

from experiments._scc import sweep, sweep_parser
from tensorconv.cli import guarded

NAME = "scc_batch"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def _args(argv):
    p = sweep_parser(NAME, __doc__)
    p.add_argument("--batches", nargs="+", type=int,
                   default=[16, 32, 64, 128, 256, 512, 1024])
    p.add_argument("--cg", type=int, default=2)
    p.add_argument("--co", type=float, default=0.5)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    return sweep(NAME, args, args.batches, lambda m, b: (m, b, args.cg, args.co, b),
                 axis="batch", baseline=False,
                 title="DW + SCC training step against the batch size",
                 notes=f"cg {args.cg}, co {args.co:g}, 1x32x32, fp32, our SCC kernels. "
                       f"Paper (V100, Fig. 13): flat below batch 128, growing above.")


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
