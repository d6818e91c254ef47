"""DSXplore Fig. 11: the training step of DW + SCC networks against the number of channel
groups cg (co 50 %), normalised to cg = 1.

For each network of ``--models`` (the paper's VGG-16, MobileNet and ResNet-18) and each cg
of ``--cgs``, one training step (forward, loss, backward, SGD) at ``--batch`` 128 on
random 1x32x32 data with every SCC layer on our kernels (cg = 1 is a plain 1x1
convolution: each filter reads every channel).  Paper (V100): the step time falls as cg
grows, each filter reading Cin / cg channels.
"""

from __future__ import annotations

from experiments._scc import sweep, sweep_parser
from tensorconv.cli import guarded

NAME = "scc_groups"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def _args(argv):
    p = sweep_parser(NAME, __doc__)
    p.add_argument("--cgs", nargs="+", type=int, default=[1, 2, 4, 8])
    p.add_argument("--co", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=128)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    return sweep(NAME, args, args.cgs, lambda m, cg: (m, cg, cg, args.co, args.batch),
                 axis="cg", baseline=True,
                 title="DW + SCC training step against the channel groups",
                 notes=f"co {args.co:g}, batch {args.batch}, 1x32x32, fp32, our SCC kernels; "
                       f"relative: the step time over the first cg's. Paper (V100, Fig. 11): "
                       f"the step time falls as cg grows.")


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
