"""cuDNN fp32 time of TDC core-convolution shapes in fresh processes: the "best of cuDNN" baseline.

PyTorch's cuDNN autotuning (``cudnn.benchmark``) times each algorithm once per
process and keeps its pick, and on these batch-1 shapes the pick differs between
processes (e.g. 9.4 or 15.4 µs for (32, 32, 28, 28) on the H100); with autotuning
off cuDNN's heuristic is sometimes faster still ((32, 32, 7, 7): 9.2 against
14.8 µs) and sometimes far slower.  :func:`fresh_times` times every shape in
``runs`` new processes with autotuning and in one with the heuristic, so that a
figure can compare against the fastest cuDNN managed rather than one draw.

Run as ``python -m experiments._cudnn_fresh MODE C,N,H,W ...`` (MODE ``bench``
or ``heuristic``) it prints one JSON object: case -> graph-replay median in µs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MODES = ("bench", "heuristic")


def _case(shape) -> str:
    return "_".join(str(v) for v in shape)


def time_shapes(shapes, mode: str) -> dict:
    """Graph-replay median (µs) of cuDNN fp32 (3x3, pad 1, batch 1) per shape, in this process."""
    import cupy as cp
    import numpy as np
    import torch

    from tensorconv import bench, timing

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    rng = np.random.default_rng(0)
    out = {}
    for c, n, h, w in shapes:
        x = cp.asarray(rng.standard_normal((1, c, h, w)).astype(np.float32))
        wt = cp.asarray(rng.standard_normal((n, c, 3, 3)).astype(np.float32))
        run = bench.cudnn_conv2d(x, wt, None, 1, 1, allow_tf32=False)
        torch.backends.cudnn.benchmark = mode == "bench"
        out[_case((c, n, h, w))] = timing.time_graph(run, framework="torch", repeat=30).median_us
    return out


def fresh_times(shapes, runs: int, timeout_s: float = 300.0) -> dict:
    """Per case, the times of ``runs`` fresh autotuning processes and of one heuristic process.

    Returns ``{case: {"bench": [µs, ...], "heuristic": µs}}``.
    """
    root = Path(__file__).resolve().parent.parent
    args = [",".join(str(v) for v in s) for s in shapes]

    def one(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "experiments._cudnn_fresh", mode, *args],
                              cwd=root, env=os.environ.copy(), capture_output=True, text=True,
                              timeout=timeout_s, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    benches = [one("bench") for _ in range(runs)]
    heuristic = one("heuristic")
    return {_case(s): {"bench": [b[_case(s)] for b in benches], "heuristic": heuristic[_case(s)]}
            for s in shapes}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: python -m experiments._cudnn_fresh bench|heuristic C,N,H,W ...")
    shapes = [tuple(int(v) for v in a.split(",")) for a in argv[1:]]
    print(json.dumps(time_shapes(shapes, argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
