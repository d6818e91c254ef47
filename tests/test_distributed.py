"""Data parallelism on the CPU (issue 27): buckets, the reducer's order and overlap against
fake communicators (ranks as threads), and data-parallel SGD equal to one process at the
same global batch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.distributed import FakeGroup, Reducer, make_buckets
from tensorconv.distributed.comm import read_unique_id, write_unique_id
from tensorconv.nn import layers as L
from tensorconv.nn.optim import SGD


def _model(seed=0):
    rng = np.random.default_rng(seed)
    return L.Sequential(L.Conv2d(2, 6, 3, 1, 1, rng=rng), L.ReLU(),
                        L.Conv2d(6, 6, 3, 1, 1, rng=rng), L.ReLU(), L.GlobalAvgPool2d(),
                        L.Linear(6, 5, rng=rng))


def _run_ranks(size, fn):
    """``fn(rank, comm)`` on ``size`` threads; re-raise the first failure."""
    group, errors, results = FakeGroup(size), [], [None] * size

    def body(r):
        try:
            results[r] = fn(r, group.rank(r))
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)
            group._barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results, group


def test_buckets_go_last_parameter_first_and_respect_the_cap():
    sizes = [10, 300, 5, 40, 1000, 7]
    buckets = make_buckets(sizes, itemsize=4, cap_bytes=4 * 320)
    order = [i for b in buckets for i in b.params]
    assert order == [5, 4, 3, 2, 1, 0]                     # reverse, each once
    assert buckets[0].params == (5,)                        # 7 + 1000 > 320: 1000 alone
    assert buckets[1].params == (4,) and buckets[1].size == 1000
    assert all(b.size * 4 <= 4 * 320 or len(b.params) == 1 for b in buckets)
    for b in buckets:
        assert list(b.offsets) == list(np.cumsum([0] + [sizes[i] for i in b.params])[:-1])
        assert b.size == sum(sizes[i] for i in b.params)
    assert len(make_buckets(sizes)) == 1                    # 25 MiB holds them all
    with pytest.raises(ValueError, match="empty"):
        make_buckets([])
    with pytest.raises(TypeError, match=r"sizes\[1\]"):
        make_buckets([3, 2.5])


def test_a_bucket_goes_out_while_the_backward_pass_runs_and_in_order():
    x = np.random.default_rng(1).standard_normal((4, 2, 6, 6)).astype(np.float32)
    y = np.array([0, 1, 2, 3])

    def rank(r, comm):
        model = _model()
        reducer = Reducer(model.parameters(), comm, cap_bytes=4 * 40)   # several buckets
        loss = F.softmax_cross_entropy(model(Tensor(x[2 * r:2 * r + 2])), y[2 * r:2 * r + 2])
        reducer.begin()
        loss.backward(on_leaf_done=reducer.leaf_done)
        launched = list(reducer.launched_at)
        reducer.finish()
        return launched, len(reducer.buckets), len(model.parameters())

    results, group = _run_ranks(2, rank)
    launched, buckets, params = results[0]
    assert buckets > 2
    assert launched[0] < params                 # the first bucket left before the last grad
    assert launched == sorted(launched)
    calls = [c for r, c, _ in group.log if r == 0]
    assert calls == sorted(calls) and len(calls) == buckets
    sizes = {r: [n for rr, _, n in group.log if rr == r] for r in (0, 1)}
    assert sizes[0] == sizes[1]                 # both ranks: the same collectives, in order


def test_data_parallel_sgd_equals_one_process_at_the_same_global_batch():
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((3, 8, 2, 6, 6)).astype(np.float32)
    ys = rng.integers(0, 5, (3, 8))

    def train(r, comm, size):
        model = _model()
        opt = SGD(model.parameters(), 0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        reducer = Reducer(model.parameters(), comm, cap_bytes=4 * 64)
        share = 8 // size
        losses = []
        for x, y in zip(xs, ys):
            xb, yb = x[r * share:(r + 1) * share], y[r * share:(r + 1) * share]
            loss = F.softmax_cross_entropy(model(Tensor(xb)), yb)
            opt.zero_grad()
            reducer.backward(loss)
            opt.step()
            losses.append(float(loss.data))
        return [p.data.copy() for p in model.parameters()], losses

    (one,), _ = _run_ranks(1, lambda r, c: train(r, c, 1))
    two, _ = _run_ranks(2, lambda r, c: train(r, c, 2))
    for w0, w1 in zip(two[0][0], two[1][0]):
        np.testing.assert_array_equal(w0, w1)                  # the ranks agree exactly
    for w, w_one in zip(two[0][0], one[0]):
        np.testing.assert_allclose(w, w_one, rtol=1e-5, atol=1e-6)
    global_loss = [(a + b) / 2 for a, b in zip(two[0][1], two[1][1])]
    np.testing.assert_allclose(global_loss, one[1], rtol=1e-5)


def test_unused_parameters_count_as_zeros_and_bad_input_is_refused():
    model = _model()
    extra = L.Linear(3, 3)                       # never used: its gradient stays None

    def rank(r, comm):
        params = model.parameters() + extra.parameters()
        reducer = Reducer(params, comm)
        x = np.ones((1, 2, 6, 6), np.float32)
        F.softmax_cross_entropy(model(Tensor(x)), np.array([1])).backward(
            on_leaf_done=reducer.leaf_done)
        reducer.finish()
        return [p.grad for p in extra.parameters()]

    (grads,), _ = _run_ranks(1, rank)
    assert all(np.array_equal(g, np.zeros_like(g)) for g in grads)
    with pytest.raises(ValueError, match="empty"):
        Reducer([], FakeGroup(1).rank(0))
    with pytest.raises(ValueError, match="rank 2"):
        FakeGroup(2).rank(2)


def test_the_unique_id_travels_through_a_file(tmp_path):
    path = tmp_path / "nccl.id"
    with pytest.raises(TimeoutError, match="rank 0"):
        read_unique_id(path, timeout=0.1)
    write_unique_id(path, b"\x00\x01\xfe")
    assert read_unique_id(path) == b"\x00\x01\xfe"
    write_unique_id(path, (1, -2, 3))                 # older CuPy: a tuple of ints
    assert read_unique_id(path) == (1, -2, 3)


def _bn_model(seed=0):
    rng = np.random.default_rng(seed)
    return L.Sequential(L.Conv2d(2, 6, 3, 1, 1, rng=rng), L.BatchNorm2d(6), L.ReLU(),
                        L.Conv2d(6, 6, 3, 2, 1, rng=rng), L.BatchNorm2d(6), L.ReLU(),
                        L.GlobalAvgPool2d(), L.Linear(6, 5, rng=rng))


def test_synchronised_batch_norm_is_the_global_batch_s_forward_and_backward():
    from tensorconv.ops import batch_norm_backward, batch_norm_forward

    rng = np.random.default_rng(4)
    x = (3 * rng.standard_normal((6, 5, 4, 3)) + 1).astype(np.float32)
    gy = rng.standard_normal(x.shape).astype(np.float32)
    gamma, beta = rng.random(5).astype(np.float32) + 0.5, rng.standard_normal(5).astype(np.float32)
    stats = [np.zeros(5, np.float32), np.ones(5, np.float32)]
    y_all, mean, invstd = batch_norm_forward(x, gamma, beta, *stats, training=True)
    gx_all, dgamma, dbeta = batch_norm_backward(x, gy, mean, invstd, gamma, training=True)

    def rank(r, comm):
        part = slice(2 * r, 2 * r + 2)
        run = [np.zeros(5, np.float32), np.ones(5, np.float32)]
        y, m, s = batch_norm_forward(x[part], gamma, beta, *run, training=True, group=comm)
        gx, dg, db = batch_norm_backward(x[part], gy[part], m, s, gamma, training=True,
                                         group=comm)
        return y, gx, dg, db, run

    ranks, _ = _run_ranks(3, rank)
    for r, (y, gx, dg, db, run) in enumerate(ranks):
        part = slice(2 * r, 2 * r + 2)
        np.testing.assert_allclose(y, y_all[part], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(gx, gx_all[part], rtol=1e-4, atol=1e-5)
        # the ranks' mean of their own sums: what averaging the gradients makes of them
        np.testing.assert_allclose(dg, dgamma / 3, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(db, dbeta / 3, rtol=1e-4, atol=1e-6)
        for a, b in zip(run, stats):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)   # running statistics
    # a lone rank, or evaluation, exchanges nothing
    solo = FakeGroup(1).rank(0)
    y1, _, _ = batch_norm_forward(x, gamma, beta, *[np.zeros(5, np.float32),
                                                    np.ones(5, np.float32)],
                                  training=True, group=solo)
    np.testing.assert_array_equal(y1, y_all)
    assert solo.calls == 0
    with pytest.raises(TypeError, match="group must be a communicator"):
        batch_norm_forward(x, gamma, beta, *stats, training=True, group=object())


@pytest.mark.parametrize("sync", [True, False])
def test_two_ranks_with_synchronised_batch_norm_train_like_one_process(sync):
    from training.parallel import Parallel

    rng = np.random.default_rng(5)
    xs = rng.standard_normal((3, 8, 2, 6, 6)).astype(np.float32)
    ys = rng.integers(0, 5, (3, 8))

    def train(r, comm, size):
        model = _bn_model()
        par = Parallel(r, size, comm, sync_bn=sync)
        if sync:
            assert par.sync_batch_norm(model) == 2
        opt = SGD(model.parameters(), 0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        reducer = Reducer(model.parameters(), comm, cap_bytes=4 * 64)
        share = 8 // size
        for x, y in zip(xs, ys):
            xb, yb = x[r * share:(r + 1) * share], y[r * share:(r + 1) * share]
            loss = F.softmax_cross_entropy(model(Tensor(xb)), yb)
            opt.zero_grad()
            reducer.backward(loss)
            opt.step()
        return model.state_dict()

    (one,), _ = _run_ranks(1, lambda r, c: train(r, c, 1))
    two, _ = _run_ranks(2, lambda r, c: train(r, c, 2))
    same = all(np.allclose(two[0][k], one[k], rtol=1e-4, atol=1e-5) for k in one)
    assert same == sync        # per-rank statistics (DDP's default) train another model
    if sync:
        for k in one:
            np.testing.assert_array_equal(two[0][k], two[1][k], err_msg=k)
