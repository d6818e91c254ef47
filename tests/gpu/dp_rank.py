"""One rank of ``tests/gpu/test_dp_gpu.py``: trains a small model for a few SGD steps on
its share of fixed global batches and writes its state (weights, batch-norm statistics)
and losses to ``OUT/rank{r}.npz``.  ``MODEL`` is ``plain`` (no batch norm, whose per-rank
statistics would differ from one GPU's) or ``syncbn`` (batch norm synchronised over the
ranks).

Run through :func:`training.launch.launch` (``python -m tests.gpu.dp_rank OUT STEPS
CAPTURE MODEL``), or as a plain process: one GPU, no communicator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

GLOBAL_BATCH = 16


def model(kind: str = "plain", seed: int = 0):
    from tensorconv.nn import layers as L

    rng = np.random.default_rng(seed)
    norm = (lambda c: [L.BatchNorm2d(c)]) if kind == "syncbn" else (lambda c: [])
    return L.Sequential(L.Conv2d(3, 16, 3, 1, 1, rng=rng), *norm(16), L.ReLU(),
                        L.Conv2d(16, 32, 3, 2, 1, rng=rng), *norm(32), L.ReLU(),
                        L.GlobalAvgPool2d(), L.Linear(32, 10, rng=rng))


def batches(steps: int):
    """The global batches every rank (and the one-GPU run) draws: images, labels."""
    rng = np.random.default_rng(1)
    return (rng.standard_normal((steps, GLOBAL_BATCH, 3, 16, 16)).astype(np.float32),
            rng.integers(0, 10, (steps, GLOBAL_BATCH)))


def main(out: str, steps: str, capture: str, kind: str = "plain") -> int:
    import cupy as cp

    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F
    from tensorconv.distributed import Reducer
    from tensorconv.nn.captured import CapturedStep
    from tensorconv.nn.optim import SGD
    from training.parallel import Parallel

    par = Parallel.from_env(sync_bn=kind == "syncbn")
    rank, size = (par.rank, par.size) if par is not None else (0, 1)
    net = model(kind).to("gpu")
    opt = SGD(net.parameters(), 0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    # a small bucket cap: several buckets, so their order and overlap are exercised
    reducer = Reducer(net.parameters(), par.comm, cap_bytes=4 * 2000) \
        if par is not None and size > 1 else None
    if par is not None:
        par.broadcast_model(net)
        if par.sync_bn:
            par.sync_batch_norm(net)
    share = GLOBAL_BATCH // size
    x, y = cp.empty((share, 3, 16, 16), np.float32), cp.empty(share, np.int64)
    stepper = CapturedStep(net, opt, x, y, reducer=reducer, strict=True) \
        if capture == "on" else None
    xs, ys = batches(int(steps))
    losses = []
    for xb, yb in zip(xs, ys):
        x[...] = cp.asarray(xb[rank * share:(rank + 1) * share])
        y[...] = cp.asarray(yb[rank * share:(rank + 1) * share])
        if stepper is not None:
            loss = stepper()[0]
        else:
            loss = F.softmax_cross_entropy(net(Tensor(x)), y)
            opt.zero_grad()
            loss.backward() if reducer is None else reducer.backward(loss)
            opt.step()
            loss = loss.data
        losses.append(float(loss))
    np.savez(Path(out) / f"rank{rank}.npz", losses=np.array(losses),
             replays=stepper.replays if stepper is not None else 0,
             **{f"s:{k}": v for k, v in net.state_dict().items()})
    del stepper              # left to the collector: its graphs go before the communicator
    if par is not None:
        par.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
