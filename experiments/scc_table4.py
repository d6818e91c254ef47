"""DSXplore table IV: MobileNet with sliding-channel, grouped and full pointwise stages.

Wang et al. (IPDPS'21), Table IV, on Fashion-MNIST padded to 32x32 instead of CIFAR-10: MobileNet
(DW + PW, the baseline) against DW + GPW with cg in {2, 4, 8} and DW + SCC with cg in {2, 4, 8}
and co in {33, 50} %.  Reports final and best test accuracy (``--seeds`` runs each variant
with several seeds, for gaps under a point), multiply-adds and parameters beside the paper's.
Every run checkpoints after each epoch; ``--time-budget`` stops between epochs; ``--merge``
keeps earlier calls' rows and seeds.
"""

from __future__ import annotations

from experiments._common import outputs, parser, training_args, work_dir
from experiments.scc_table2 import check_merge, common, merge_arg, report, runs_or_report
from tensorconv import bench
from tensorconv.cli import guarded
from tensorconv.results import ResultSet
from training.train import TrainConfig

NAME = "scc_table4"
# variant -> (MFLOPs, parameters in M, accuracy %), the paper's CIFAR-10 MobileNet
PAPER = {"mobilenet_v1": {
    "dw+pw": (50, 6.17, 92.05), "dw+gpw-cg2": (30, 0.59, 90.11), "dw+gpw-cg4": (20, 0.32, 88.88),
    "dw+gpw-cg8": (10, 0.18, 82.69), "dw+scc-cg2-co33": (30, 0.59, 91.20),
    "dw+scc-cg2-co50": (30, 0.59, 92.56), "dw+scc-cg4-co33": (20, 0.32, 91.71),
    "dw+scc-cg4-co50": (20, 0.32, 91.39), "dw+scc-cg8-co33": (10, 0.18, 90.71),
    "dw+scc-cg8-co50": (10, 0.18, 90.25)}}


def variants(args) -> list:
    base = common(args, "mobilenet_v1")
    out = []
    for seed in args.seeds:
        cfg = dict(base, seed=seed)
        out.append(("mobilenet_v1", "dw+pw", TrainConfig(**cfg)))
        for cg in (2, 4, 8):
            out.append(("mobilenet_v1", f"dw+gpw-cg{cg}", TrainConfig(**cfg, pointwise="gpw",
                                                                      cg=cg)))
            for co in (1 / 3, 0.5):
                out.append(("mobilenet_v1", f"dw+scc-cg{cg}-co{round(100 * co)}",
                            TrainConfig(**cfg, pointwise="scc", cg=cg, co=co)))
    return out


def main(argv=None) -> int:
    p = parser(NAME, __doc__)
    p.add_argument("--epochs", type=int, help="default: 30")
    p.add_argument("--seeds", type=int, nargs="+", help="default: 0")
    merge_arg(p)
    training_args(p)
    args = p.parse_args(argv)
    check_merge(p, args, dict(epochs=30, seeds=[0]))
    if args.quick:
        args.epochs = 1
    paths = outputs(NAME, args.out)
    work = None if args.report_only else work_dir(NAME, args, paths)   # a report trains nothing
    env = bench.environment()
    rs = ResultSet(NAME, env)
    runs = variants(args)
    runs_or_report(args, runs, rs, work, PAPER)
    report(args, rs, rs.env, "DSXplore table IV on Fashion-MNIST: MobileNet's pointwise stages",
           paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main, prog=f"python -m experiments.{NAME}"))
