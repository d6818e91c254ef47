"""``autograd.side_stream`` off the GPU: without a side stream nothing changes."""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import Tensor, side_stream
from tensorconv.autograd import functions as F


def test_without_a_stream_the_block_changes_nothing(rng):
    x = Tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    gy = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    F.conv2d(x, w, padding=1).backward(gy)
    want = w.grad.copy(), x.grad.copy()
    x.grad = w.grad = None
    with side_stream.weight_gradients_on(None) as forks:
        assert side_stream.active() is None
        F.conv2d(x, w, padding=1).backward(gy)
    assert forks() == 0
    np.testing.assert_array_equal(w.grad, want[0])
    np.testing.assert_array_equal(x.grad, want[1])


def test_on_side_runs_here_when_no_side_stream_is_active():
    assert side_stream.on_side(lambda: 41 + 1, "held") == 42
    side_stream.settle()    # nothing to wait for
