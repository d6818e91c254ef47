"""Data parallelism on real GPUs through NCCL (issue 27): two ranks, one GPU each, as
threads, train the same steps as one GPU at the same global batch (a model without batch
norm, whose per-rank statistics would differ) and end with the same losses and weights
within float reduction-order tolerance.  Needs two GPUs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.nn import layers as L
from tensorconv.nn.optim import SGD

pytestmark = pytest.mark.gpu


def _model(seed=0):
    rng = np.random.default_rng(seed)
    return L.Sequential(L.Conv2d(3, 16, 3, 1, 1, rng=rng), L.ReLU(),
                        L.Conv2d(16, 32, 3, 2, 1, rng=rng), L.ReLU(), L.GlobalAvgPool2d(),
                        L.Linear(32, 10, rng=rng))


def _train(xs, ys, rank, size, comm, device):
    import cupy as cp

    from tensorconv.distributed import Reducer

    with cp.cuda.Device(device):
        model = _model().to("gpu")
        opt = SGD(model.parameters(), 0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
        reducer = Reducer(model.parameters(), comm, cap_bytes=4 * 2000) if comm else None
        share, losses = len(xs[0]) // size, []
        for x, y in zip(xs, ys):
            xb = cp.asarray(x[rank * share:(rank + 1) * share])
            yb = cp.asarray(y[rank * share:(rank + 1) * share])
            loss = F.softmax_cross_entropy(model(Tensor(xb)), yb)
            opt.zero_grad()
            if reducer is None:
                loss.backward()
            else:
                reducer.begin()
                loss.backward(on_leaf_done=reducer.leaf_done)
                reducer.finish()
            opt.step()
            losses.append(float(loss.data))
        return [p.data.get() for p in model.parameters()], losses


def test_two_gpus_train_like_one_at_the_same_global_batch(tmp_path):
    import cupy as cp

    from tensorconv.distributed import NcclCommunicator

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs (nvidia-h200-x2 or larger)")
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 16, 3, 16, 16)).astype(np.float32)
    ys = rng.integers(0, 10, (4, 16))
    one = _train(xs, ys, 0, 1, None, 0)
    out, errors = [None, None], []

    def rank(r):
        try:
            with cp.cuda.Device(r):
                comm = NcclCommunicator(r, 2, tmp_path / "nccl.id")
            out[r] = _train(xs, ys, r, 2, comm, r)
        except BaseException as exc:   # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors:
        raise errors[0]
    for w0, w1 in zip(out[0][0], out[1][0]):
        np.testing.assert_array_equal(w0, w1)
    for w, w_one in zip(out[0][0], one[0]):
        np.testing.assert_allclose(w, w_one, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose([(a + b) / 2 for a, b in zip(out[0][1], out[1][1])], one[1],
                               rtol=1e-4)
