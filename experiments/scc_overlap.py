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

from experiments._common import parser
from experiments._scc import SWEEP_MODELS, partial_csv, run_sweep, write_sweep
from tensorconv import backend, bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet

NAME = "scc_overlap"
NEEDS_GPU = True  # tensorconv list marks it; on a CPU it says so and exits


def _args(argv):
    p = parser(NAME, __doc__)
    p.add_argument("--models", nargs="+", default=list(SWEEP_MODELS))
    p.add_argument("--cos", nargs="+", type=float, default=[0.1, 0.25, 0.33, 0.5, 0.75])
    p.add_argument("--cg", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    cp = backend.require_cuda(NAME)
    env = bench.environment()
    rs = ResultSet(NAME, env)
    models, cos = (args.models[:1], args.cos[:2]) if args.quick else (args.models, args.cos)
    points = [(m, f"{co:g}", args.cg, co, args.batch) for m in models for co in cos]
    ms = run_sweep(rs, args, cp, points, axis="co", baseline=f"{cos[0]:g}",
                   csv=partial_csv(NAME, args.out))
    print(write_sweep(NAME, rs, env, args, ms, axis="co",
                      title="DW + SCC training step against the channel overlap",
                      notes=f"cg {args.cg}, batch {args.batch}, 1x32x32, fp32, our SCC "
                            f"kernels; relative: the step time over co={cos[0]:g}'s. Paper "
                            f"(V100, Fig. 12): no evident change with co."))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
