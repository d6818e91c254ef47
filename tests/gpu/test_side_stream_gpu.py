"""Weight gradients on a side stream (``autograd.side_stream``): the same gradients bit for
bit as on one stream, for a network, a weight used twice and a weight that is not a leaf;
the arrays a forked kernel reads outlive it; bad use said."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor, side_stream
from tensorconv.autograd import functions as F

pytestmark = pytest.mark.gpu


def _grads(model, x, y, stream):
    model.zero_grad()
    loss = F.softmax_cross_entropy(model(Tensor(x)), y, check=False)
    with side_stream.weight_gradients_on(stream) as forks:
        loss.backward()
    return {n: p.grad.get() for n, p in model.named_parameters()}, forks()


def _sides(n):
    import cupy as cp

    streams = tuple(cp.cuda.Stream(non_blocking=True) for _ in range(n))
    return streams[0] if n == 1 else streams


@pytest.mark.parametrize("sides", [1, 3])
@pytest.mark.parametrize("model_name", ["resnet20", "googlenet"])
def test_a_network_gets_the_same_gradients_with_the_weight_gradients_forked(rng, model_name,
                                                                            sides):
    import cupy as cp

    from tensorconv.nn import get_model

    # two copies: a model's dropout draws a new mask at every call
    a, b = (get_model(model_name, in_channels=1, num_classes=10, seed=0).to("gpu")
            for _ in range(2))
    x = cp.asarray(rng.standard_normal((8, 1, 32, 32)).astype(np.float32))
    y = cp.asarray(rng.integers(0, 10, 8))
    one, none = _grads(a, x, y, None)
    two, forks = _grads(b, x, y, _sides(sides))
    model = b
    convs = sum(1 for n, p in model.named_parameters() if p.data.ndim == 4)
    assert none == 0 and forks == convs and forks > 0
    assert one.keys() == two.keys()
    for k in one:
        np.testing.assert_array_equal(one[k], two[k], err_msg=k)


def _two_convs(rng, w_of, stream):
    """A weight read by two convolutions (``w_of`` makes each one's weight from the leaf)."""
    import cupy as cp

    x = Tensor(cp.asarray(rng.standard_normal((4, 6, 12, 12)).astype(np.float32)),
               requires_grad=True)
    w = Tensor(cp.asarray(rng.standard_normal((6, 6, 3, 3)).astype(np.float32)),
               requires_grad=True)
    h = F.relu(F.conv2d(x, w_of(w), padding=1))
    out = F.conv2d(h, w_of(w), padding=1)
    gy = cp.asarray(rng.standard_normal(out.shape).astype(np.float32))
    with side_stream.weight_gradients_on(stream) as forks:
        out.backward(gy)
    return w.grad.get(), x.grad.get(), forks()


@pytest.mark.parametrize("sides", [1, 2])
@pytest.mark.parametrize("case", ["shared leaf", "computed weight"])
def test_a_weight_read_twice_or_computed_gets_the_same_gradient(case, sides):
    w_of = (lambda w: w) if case == "shared leaf" else (lambda w: w * 0.5)
    side = _sides(sides)
    base = _two_convs(np.random.default_rng(7), w_of, None)
    forked = _two_convs(np.random.default_rng(7), w_of, side)
    np.testing.assert_array_equal(base[0], forked[0])
    np.testing.assert_array_equal(base[1], forked[1])
    # a weight that is not a leaf is consumed by its creator on the main stream: not forked
    assert forked[2] == (2 if case == "shared leaf" else 0)


def test_a_forked_gradient_reads_arrays_the_main_stream_has_let_go(rng):
    """The side stream is held busy, so the forked weight gradient starts late; meanwhile
    the main stream runs the data gradient, the layer's input and output gradient are
    dropped on the host and their memory is handed out at once and filled with NaN.  The
    gradient must still be that of the original values (the fork holds them).  An earlier
    form held the main stream instead, and passed with nothing held: the forked kernel
    had finished before the NaN fills ran."""
    import cupy as cp

    from tensorconv.timing import _hold

    side = cp.cuda.Stream(non_blocking=True)
    xs = rng.standard_normal((16, 32, 16, 16)).astype(np.float32)
    ws = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    gys = rng.standard_normal((16, 32, 16, 16)).astype(np.float32)
    want = None
    for stream in (None, side):
        x = Tensor(cp.asarray(xs), requires_grad=True)
        w = Tensor(cp.asarray(ws), requires_grad=True)
        out = F.conv2d(x, w, padding=1)
        gy = cp.asarray(gys)
        cp.cuda.Device().synchronize()
        if stream is not None:
            _hold(cp, stream, 5_000_000)     # 5 ms before the fork's kernel can start
        with side_stream.weight_gradients_on(stream):
            out.backward(gy)
            del out, gy, x
            junk = [cp.full((16, 32, 16, 16), np.nan, np.float32) for _ in range(16)]
        del junk
        got = w.grad.get()
        if want is None:
            want = got
    np.testing.assert_array_equal(want, got)


def test_bad_use_is_said():
    import cupy as cp

    with pytest.raises(TypeError, match="stream"):
        with side_stream.weight_gradients_on("side"):
            pass
    with pytest.raises(ValueError, match="current stream"):
        with side_stream.weight_gradients_on(cp.cuda.get_current_stream()):
            pass
    side = cp.cuda.Stream(non_blocking=True)
    with pytest.raises(ValueError, match="current stream"):
        with side_stream.weight_gradients_on([side, cp.cuda.get_current_stream()]):
            pass
    with pytest.raises(ValueError, match="twice"):
        with side_stream.weight_gradients_on((side, side)):
            pass
    with pytest.raises(ValueError, match="at least one"):
        with side_stream.weight_gradients_on(()):
            pass
    with pytest.raises(TypeError, match="stream"):
        with side_stream.weight_gradients_on((side, "side")):
            pass
    with side_stream.weight_gradients_on(side):
        with pytest.raises(RuntimeError, match="already active"):
            with side_stream.weight_gradients_on(cp.cuda.Stream(non_blocking=True)):
                pass
        x = Tensor(cp.ones((1, 2, 4, 4), cp.float32))
        w = Tensor(cp.ones((2, 2, 1, 1), cp.float32), requires_grad=True)
        with pytest.raises(ValueError, match="on_leaf_done"):
            F.conv2d(x, w).backward(cp.ones((1, 2, 4, 4), cp.float32), on_leaf_done=print)
    assert side_stream.active() is None
