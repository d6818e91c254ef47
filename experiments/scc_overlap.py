"""DSXplore Fig. 12: the training step of DW + SCC networks against the input-channel
overlap co (cg 2), normalised to co = 10 %.

For each network of ``--models`` (the paper's VGG-16, MobileNet and ResNet-18) and each co
of ``--cos``, one training step (forward, loss, backward, SGD) at ``--batch`` 128 on
random 1x32x32 data with every SCC layer on our kernels.  Paper (V100): co barely moves
the step time (every filter still reads Cin / cg channels); the fluctuation comes from data
reuse.  Ours: co changes the window groups (the cycle) and so our tiles' bands, which
this measures.
"""

from __future__ import annotations

from experiments._scc import sweep, sweep_parser
from tensorconv.cli import guarded

NAME = "scc_overlap"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def _args(argv):
    p = sweep_parser(NAME, __doc__)
    p.add_argument("--cos", nargs="+", type=float, default=[0.1, 0.25, 0.33, 0.5, 0.75])
    p.add_argument("--cg", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    return sweep(NAME, args, [f"{co:g}" for co in args.cos],
                 lambda m, co: (m, co, args.cg, float(co), args.batch),
                 axis="co", baseline=True,
                 title="DW + SCC training step against the channel overlap",
                 notes=f"cg {args.cg}, batch {args.batch}, 1x32x32, fp32, our SCC kernels; "
                       f"relative: the step time over the first co's. Paper (V100, Fig. 12): "
                       f"no evident change with co.")


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
