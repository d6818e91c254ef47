"""DSXplore Fig. 11: the training step of DW + SCC networks against the number of channel
groups cg (co 50 %), normalised to cg = 1.

For each network of ``--models`` (the paper's VGG-16, MobileNet and ResNet-18) and each cg
of ``--cgs``, one training step (forward, loss, backward, SGD) at ``--batch`` 128 on
random 1x32x32 data with every SCC layer on our kernels (cg = 1 is a plain 1x1
convolution: each filter reads every channel).  Paper (V100): the step time falls as cg
grows, each filter reading Cin / cg channels.
"""

from __future__ import annotations

from experiments._common import parser
from experiments._scc import SWEEP_MODELS, partial_csv, run_sweep, write_sweep
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet

NAME = "scc_groups"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", default=list(SWEEP_MODELS))
    p.add_argument("--cgs", nargs="+", type=int, default=[1, 2, 4, 8])
    p.add_argument("--co", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    env = bench.environment()
    rs = ResultSet(NAME, env)
    models, cgs = (args.models[:1], args.cgs[:2]) if args.quick else (args.models, args.cgs)
    points = [(m, cg, cg, args.co, args.batch) for m in models for cg in cgs]
    ms = run_sweep(rs, args, cp, points, axis="cg", baseline=cgs[0],
                   csv=partial_csv(NAME, args.out))
    print(write_sweep(NAME, rs, env, args, ms, axis="cg",
                      title="DW + SCC training step against the channel groups",
                      notes=f"co {args.co:g}, batch {args.batch}, 1x32x32, fp32, our SCC "
                            f"kernels; relative: the step time over cg={cgs[0]}'s. Paper "
                            f"(V100, Fig. 11): the step time falls as cg grows."))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
