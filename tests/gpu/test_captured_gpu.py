"""The captured training step against eager steps: the same losses, weights, velocities and
batch-norm statistics, bit for bit; capture again after a change; a step that cannot be
captured said, and trained eagerly."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _setup(model_name, batch, size, seed=0):
    import cupy as cp

    from tensorconv.nn import get_model
    from tensorconv.nn.optim import SGD

    model = get_model(model_name, in_channels=1, num_classes=10, seed=seed).to("gpu")
    opt = SGD(model.parameters(), 0.05, 0.9, True, 5e-4)
    x = cp.empty((batch, 1, size, size), cp.float32)
    y = cp.empty(batch, cp.int64)
    return model, opt, x, y


def _eager(model, opt, x, y, after_backward=None, after_step=None):
    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    logits = model(Tensor(x))
    loss = F.softmax_cross_entropy(logits, y, check=False)
    right = (logits.data.argmax(axis=1) == y).sum()
    opt.zero_grad()
    loss.backward()
    if after_backward:
        after_backward()
    opt.step()
    if after_step:
        after_step()
    return float(loss.data), int(right)


def _state(model, opt):
    sd = model.state_dict()
    return {**sd, **{f"v{i}": v.get() for i, v in enumerate(opt.velocity)}}


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _batches(rng, steps, batch, size):
    return [(rng.standard_normal((batch, 1, size, size)).astype(np.float32),
             rng.integers(0, 10, batch)) for _ in range(steps)]


@pytest.mark.parametrize("model_name,batch,size,overlap", [
    ("resnet20", 32, 16, True), ("small_cnn", 24, 28, True), ("vgg16", 8, 32, 2),
    ("googlenet", 8, 32, 3)])
def test_captured_steps_equal_eager_steps_bit_for_bit(rng, model_name, batch, size, overlap):
    from tensorconv.nn.captured import CapturedStep

    eager = _setup(model_name, batch, size)
    capt = _setup(model_name, batch, size)
    step = CapturedStep(*capt, strict=True, overlap=overlap)
    lrs = [0.05, 0.04, 0.1, 0.02, 0.07, 0.01]
    for lr, (xb, yb) in zip(lrs, _batches(rng, len(lrs), batch, size)):
        for m, o, x, y in (eager, capt):
            x.set(xb)
            y.set(yb)
            o.lr = lr
        want = _eager(*eager)
        loss, right = step()
        assert (float(loss), int(right)) == want
    assert step.captures == 1 and step.replays == len(lrs) - 1 and step.failure is None
    assert step.kernels > 0
    # every convolution's weight gradient ran on the side stream, and still bit for bit
    assert step.forked == sum(1 for p in capt[0].parameters() if p.data.ndim == 4) > 0
    assert capt[1].steps == eager[1].steps == len(lrs)
    _assert_same(_state(*eager[:2]), _state(*capt[:2]))


class _TwinRanks:
    """A communicator as if two ranks had the same gradients: its all-reduce doubles the
    buffer on a stream of its own (as NCCL's would sum it there), so a data-parallel step's
    fork to the communicator's stream and join back are captured; the reducer's mean
    leaves the gradients as they were, exactly."""

    rank, size = 0, 2

    def __init__(self):
        import cupy as cp

        self.cp, self.stream, self.calls = cp, cp.cuda.Stream(non_blocking=True), 0

    def all_reduce(self, buf):
        cp = self.cp
        self.stream.wait_event(cp.cuda.get_current_stream().record())
        with self.stream:
            buf += buf
        self.calls += 1

    def wait(self):
        self.cp.cuda.get_current_stream().wait_event(self.stream.record())


def test_a_data_parallel_step_is_captured_with_its_all_reduces(rng):
    from tensorconv.distributed import Reducer
    from tensorconv.nn.captured import CapturedStep

    eager = _setup("resnet20", 16, 16)
    capt = _setup("resnet20", 16, 16)
    comm = _TwinRanks()
    reducer = Reducer(capt[0].parameters(), comm, cap_bytes=4 * 20000)
    assert len(reducer.buckets) > 2
    step = CapturedStep(*capt, reducer=reducer, strict=True)
    for i, (xb, yb) in enumerate(_batches(rng, 6, 16, 16)):
        if i == 4:
            step.close()       # the graphs go (first, before any communicator); then again
        for m, o, x, y in (eager, capt):
            x.set(xb)
            y.set(yb)
        want = _eager(*eager)
        loss, right = step()
        assert (float(loss), int(right)) == want
    assert step.captures == 2 and step.replays == 4
    # each eager step and each capture called the communicator; replays did not
    assert comm.calls == 4 * len(reducer.buckets)
    _assert_same(_state(*eager[:2]), _state(*capt[:2]))
    with pytest.raises(ValueError, match="reducer must average exactly"):
        CapturedStep(*eager, reducer=reducer)
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        CapturedStep(*eager, overlap=-1)
    with pytest.raises(TypeError, match="overlap"):
        CapturedStep(*eager, overlap=1.5)


@pytest.mark.parametrize("capture", [False, True])
def test_synchronised_batch_norm_over_twin_ranks_is_plain_batch_norm(rng, capture):
    """Twin ranks hold the same batch: their summed statistics over twice the count are
    this batch's, so the step equals a plain one bit for bit (but the running variance,
    whose unbiased correction counts both ranks' images), with the statistics' all-reduces
    in the kernels' path and, captured, inside the graphs."""
    from tensorconv.distributed import Reducer
    from tensorconv.nn.captured import CapturedStep
    from tensorconv.nn.layers import BatchNorm2d
    from training.parallel import Parallel

    eager = _setup("resnet20", 16, 16)
    synced = _setup("resnet20", 16, 16)
    comm = _TwinRanks()
    par = Parallel(0, 2, comm, sync_bn=True)
    layers = par.sync_batch_norm(synced[0])
    assert layers == sum(isinstance(m, BatchNorm2d) for m in synced[0].modules()) > 10
    reducer = Reducer(synced[0].parameters(), comm)
    step = CapturedStep(*synced, reducer=reducer, strict=True) if capture else None
    for xb, yb in _batches(rng, 3, 16, 16):
        for m, o, x, y in (eager, synced):
            x.set(xb)
            y.set(yb)
        want = _eager(*eager)
        if step is None:
            got = _reduced_eager(*synced, reducer)
        else:
            loss, right = step()
            got = (float(loss), int(right))
        assert got == want
    a, b = _state(*eager[:2]), _state(*synced[:2])
    for k in a:
        if k.endswith("running_var"):
            np.testing.assert_allclose(b[k], a[k], rtol=2e-3, err_msg=k)
        else:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)
    # the eager step (and the capture) called the communicator for every BN, both passes
    assert comm.calls >= 2 * layers + len(reducer.buckets)


def _reduced_eager(model, opt, x, y, reducer):
    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    logits = model(Tensor(x))
    loss = F.softmax_cross_entropy(logits, y, check=False)
    right = (logits.data.argmax(axis=1) == y).sum()
    opt.zero_grad()
    reducer.backward(loss)
    opt.step()
    return float(loss.data), int(right)


def test_a_change_to_what_the_graphs_read_captures_again(rng):
    from tensorconv.nn.captured import CapturedStep

    eager, capt = _setup("resnet20", 16, 16), _setup("resnet20", 16, 16)
    step = CapturedStep(*capt, strict=True)
    batches = _batches(rng, 7, 16, 16)
    for i, (xb, yb) in enumerate(batches):
        if i == 3:   # new parameter arrays (a checkpoint loaded): stale pointers otherwise
            sd = eager[0].state_dict()
            for m in (eager[0], capt[0]):
                m.load_state_dict(sd)
        if i == 5:   # a new momentum is a kernel argument of the update graph
            eager[1].momentum = capt[1].momentum = 0.5
        for m, o, x, y in (eager, capt):
            x.set(xb)
            y.set(yb)
        assert (float(step()[0])) == _eager(*eager)[0]
    assert step.captures == 3 and step.replays == 4
    _assert_same(_state(*eager[:2]), _state(*capt[:2]))


def test_masked_training_is_captured_with_its_hooks(rng):
    from tensorconv.compress.prune import magnitude_masks
    from tensorconv.nn.captured import CapturedStep
    from training.masked import MaskedTraining

    eager, capt = _setup("resnet20", 16, 16), _setup("resnet20", 16, 16)
    masks = magnitude_masks(eager[0], 4.0)
    me, mc = MaskedTraining(eager[0], masks), MaskedTraining(capt[0], masks)
    step = CapturedStep(*capt, strict=True, after_backward=mc.after_backward,
                        after_step=mc.after_step)
    for xb, yb in _batches(rng, 4, 16, 16):
        for m, o, x, y in (eager, capt):
            x.set(xb)
            y.set(yb)
        assert float(step()[0]) == _eager(*eager, me.after_backward, me.after_step)[0]
    assert step.replays == 3
    _assert_same(_state(*eager[:2]), _state(*capt[:2]))
    for name, c in mc.masks.items():
        w, m = c
        assert not np.any(w.data.get()[~m.get().astype(bool)]), name


def test_admm_and_clipping_are_captured_with_the_step(rng):
    """ADMM's penalty gradient and the gradient clipping run inside the graphs: the same
    losses and state as eager steps, bit for bit, across an epoch's new Z, U and rho (written
    into the arrays the graphs read: no new capture)."""
    from tensorconv.nn.captured import CapturedStep
    from training.admm_prune import ADMMPrune
    from training.steps import after_backward_hooks

    eager, capt = _setup("resnet20", 16, 16), _setup("resnet20", 16, 16)
    ae, ac = ADMMPrune(eager[0], 4.0, 0.05, 2.0), ADMMPrune(capt[0], 4.0, 0.05, 2.0)
    # a bound the random batches' gradients pass, so that the scaling runs
    he, hc = (after_backward_hooks(o, a, None, 0.05) for o, a in ((eager[1], ae), (capt[1], ac)))
    step = CapturedStep(*capt, strict=True, after_backward=hc)
    for i, (xb, yb) in enumerate(_batches(rng, 6, 16, 16)):
        if i == 3:
            ae.end_epoch()
            ac.end_epoch()
        for m, o, x, y in (eager, capt):
            x.set(xb)
            y.set(yb)
        assert float(step()[0]) == _eager(*eager, he)[0]
    assert step.captures == 1 and step.replays == 5
    _assert_same(_state(*eager[:2]), _state(*capt[:2]))
    for n in ae.convs:
        np.testing.assert_array_equal(ae.z[n].get(), ac.z[n].get())
        np.testing.assert_array_equal(ae.u[n].get(), ac.u[n].get())


def test_an_admm_run_with_clipping_is_captured_and_keeps_the_eager_history(tmp_path):
    from training.train import TrainConfig, train

    def run(capture):
        cfg = TrainConfig(model="resnet20", dataset="synthetic", epochs=2, batch_size=32,
                          lr=0.05, train_limit=256, test_limit=64, pad_to=16, device="gpu",
                          warmup_epochs=1, capture=capture, admm_prune_ratio=4.0,
                          admm_rho=1e-2, clip_grad=1.0)
        return train(cfg, tmp_path / f"{capture}.npz", progress=False, log_every=1)

    eager, capt = run("off"), run("on")
    assert [h["step"] for h in capt.history] == ["captured"] * 2
    assert capt.step_losses == eager.step_losses
    assert [h["admm_gap"] for h in capt.history] == [h["admm_gap"] for h in eager.history]
    _assert_same(capt.model.state_dict(), eager.model.state_dict())


def test_a_step_that_cannot_be_captured_is_said_and_runs_eagerly(rng):
    from tensorconv.autograd import functions as F
    from tensorconv.nn.captured import CapturedStep, CaptureError

    def checked_loss(logits, labels):   # reads the labels on the host: not capturable
        return F.softmax_cross_entropy(logits, labels, check=True)

    eager, capt = _setup("small_cnn", 8, 28), _setup("small_cnn", 8, 28)
    batches = _batches(rng, 3, 8, 28)
    strict = CapturedStep(*_setup("small_cnn", 8, 28), loss_fn=checked_loss, strict=True)
    strict.x.set(batches[0][0])
    strict.y.set(batches[0][1])
    with pytest.raises(CaptureError, match="could not be captured"):
        strict()
    step = CapturedStep(*capt, loss_fn=checked_loss)
    for xb, yb in batches:
        for m, o, x, y in (eager, capt):
            x.set(xb)
            y.set(yb)
        assert float(step()[0]) == _eager(*eager)[0]
    assert step.failure and "could not be captured" in step.failure and step.replays == 0
    _assert_same(_state(*eager[:2]), _state(*capt[:2]))


@pytest.mark.parametrize("device_data", [True, False])
def test_training_runs_give_the_same_history_captured_or_eager(tmp_path, device_data):
    from training.train import TrainConfig, train

    def run(capture):
        cfg = TrainConfig(model="resnet20", dataset="synthetic", epochs=2, batch_size=32,
                          lr=0.05, train_limit=256, test_limit=64, pad_to=16, device="gpu",
                          warmup_epochs=1, device_data=device_data, capture=capture)
        return train(cfg, tmp_path / f"{capture}.npz", progress=False, log_every=1)

    eager, capt = run("off"), run("on")
    assert [h["step"] for h in capt.history] == ["captured"] * 2
    assert [h["step"] for h in eager.history] == ["eager"] * 2
    assert capt.step_losses == eager.step_losses
    for a, b in zip(capt.history, eager.history):
        assert (a["train_loss"], a["train_acc"], a["test_loss"]) == \
               (b["train_loss"], b["train_acc"], b["test_loss"])
    _assert_same(capt.model.state_dict(), eager.model.state_dict())


def test_linear_on_the_gpu_matches_the_reference(rng):
    import cupy as cp

    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    for n, i, o in [(1, 1, 1), (37, 70, 10), (128, 512, 100), (5, 9, 300)]:
        x, w = rng.standard_normal((n, i)), rng.standard_normal((o, i))
        b, gy = rng.standard_normal(o), rng.standard_normal((n, o))
        ts = [Tensor(cp.asarray(a, cp.float32), requires_grad=True) for a in (x, w, b)]
        y = F.linear(*ts)
        y.backward(cp.asarray(gy, cp.float32))
        want = x @ w.T + b
        np.testing.assert_allclose(y.data.get(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        for t, ref in zip(ts, (gy @ w, gy.T @ x, gy.sum(0))):
            np.testing.assert_allclose(t.grad.get(), ref, rtol=1e-4,
                                       atol=1e-4 * np.abs(ref).max())


def test_the_input_images_get_no_gradient_kernel_on_the_gpu(rng):
    import cupy as cp

    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    x = cp.asarray(rng.standard_normal((3, 2, 9, 9)), cp.float32)
    w = cp.asarray(rng.standard_normal((5, 2, 3, 3)), cp.float32)
    grads = []
    for wanted in (False, True):
        xt, wt = Tensor(x, requires_grad=wanted), Tensor(w, requires_grad=True)
        y = F.conv2d(xt, wt, stride=2, padding=1)
        gx, gw = y.creator.backward(cp.ones(y.shape, cp.float32))
        assert (gx is None) != wanted
        grads.append(gw.get())
    np.testing.assert_array_equal(grads[0], grads[1])


def test_tf32_training_runs_one_pass_and_its_checkpoint_says_so(tmp_path):
    """precision="tf32": the tensor-core convolutions take one tf32 pass, so the losses
    move away from the fp32 run's (by tf32's error, not more); a checkpoint keeps the
    setting and refuses a resume under the other."""
    from training import checkpoint as ckpt
    from training.train import TrainConfig, train

    def run(prec, path):
        cfg = TrainConfig(model="resnet20", dataset="synthetic", epochs=1, batch_size=64,
                          lr=0.05, train_limit=256, test_limit=64, pad_to=32, device="gpu",
                          warmup_epochs=0, precision=prec)
        return train(cfg, path, progress=False, log_every=1)

    fp32, tf32 = run("fp32", tmp_path / "fp32.npz"), run("tf32", tmp_path / "tf32.npz")
    a = np.array([v for _, v in fp32.step_losses])
    b = np.array([v for _, v in tf32.step_losses])
    assert a[0] != b[0] and np.abs(a - b).max() < 0.05 * np.abs(a).max(), (a, b)
    with pytest.raises(ckpt.CheckpointMismatchError, match="precision"):
        run("fp32", tmp_path / "tf32.npz")


def test_runs_trained_one_after_another_free_their_gpu_memory(tmp_path):
    """Each one-epoch chunk builds a model, its data and a captured step on the GPU: a study
    training chunk after chunk in one process must not keep them (the captured step closed,
    its stream's scratch dropped, the cycles collected)."""
    import cupy as cp

    from tensorconv import scratch as _scratch
    from training.chunks import TimeBudget, train_within
    from training.train import TrainConfig

    pool = cp.get_default_memory_pool()
    used, scratch = [], []
    for run in range(4):
        cfg = TrainConfig(model="resnet20", dataset="synthetic", epochs=2, batch_size=32,
                          train_limit=128, test_limit=64, device="gpu", capture="on",
                          seed=run)
        train_within(cfg, tmp_path / f"run{run}.npz", TimeBudget(None), progress=False)
        cp.cuda.Device().synchronize()
        used.append(pool.used_bytes())
        scratch.append(len(_scratch._workspaces))
    assert scratch[-1] == scratch[0], scratch      # no stream's scratch outlives its step
    assert used[-1] <= used[0] + (1 << 20), used  # runs 2-4 keep nothing that run 1 did not
