"""Counter-based dropout on the CPU: the NumPy reference against a plain-Python SplitMix64,
its statistics, the op's counter and checks, the layer's state (resume, older states)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.nn import layers as L
from tensorconv.ops import dropout as op
from tensorconv.reference import dropout as ref

M64 = (1 << 64) - 1


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _keep_python(seed: int, step: int, i: int, p: float) -> bool:
    """One element's draw in Python integers (wrapping by hand), as dropout.cu writes it."""
    key = _mix((seed * 0x9E3779B97F4A7C15 + step) & M64)
    return (_mix(key ^ ((i * 0xD1B54A32D192ED03) & M64)) >> 40) >= round(p * (1 << 24))


@pytest.mark.parametrize("seed,step,p", [(0, 0, 0.5), (7, 3, 0.1), (2**63 + 5, 2**40, 0.9),
                                         (123456789, 1, 0.4)])
def test_the_reference_mask_is_the_kernels_integer_arithmetic(seed, step, p):
    n = 300
    want = [_keep_python(seed, step, i, p) for i in range(n)]
    np.testing.assert_array_equal(ref.dropout_mask(seed, step, n, p), want)


def test_masks_are_independent_across_elements_steps_and_seeds():
    n, p = 200_000, 0.4
    a = ref.dropout_mask(3, 0, n, p)
    sd = np.sqrt(p * (1 - p) / n)
    assert abs(a.mean() - (1 - p)) < 5 * sd                       # P(keep) = 1 - p
    both = (a[1:] & a[:-1]).mean()                                 # neighbours unrelated
    assert abs(both - (1 - p) ** 2) < 5 * np.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / n)
    for other in (ref.dropout_mask(3, 1, n, p), ref.dropout_mask(4, 0, n, p)):
        agree = (a == other).mean()                                # another step / seed
        assert abs(agree - (p * p + (1 - p) ** 2)) < 0.01
    np.testing.assert_array_equal(a, ref.dropout_mask(3, 0, n, p))  # a pure function


def test_p_zero_keeps_everything_and_p_near_one_drops_almost_all():
    assert ref.dropout_mask(1, 2, 1000, 0.0).all()
    assert ref.dropout_mask(1, 2, 100_000, 0.999).mean() < 0.003


def test_the_op_advances_its_counter_and_scales_what_it_keeps(rng):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    step = op.new_step()
    y0, m0 = op.dropout_forward(x, 0.3, 11, step)
    assert step[0] == 1 and m0.dtype == np.uint8 and m0.shape == x.shape
    keep = ref.dropout_mask(11, 0, x.size, 0.3).reshape(x.shape)
    np.testing.assert_array_equal(m0, keep)
    np.testing.assert_array_equal(y0, np.where(keep, x * np.float32(1 / 0.7), 0))
    assert y0.dtype == np.float32
    y1, m1 = op.dropout_forward(x, 0.3, 11, step)
    assert step[0] == 2 and not np.array_equal(m0, m1)
    gy = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(op.dropout_backward(gy, m1, 0.3),
                                  np.where(m1 == 1, gy * np.float32(1 / 0.7), 0))


@pytest.mark.parametrize("call,exc,match", [
    (lambda x, s: op.dropout_forward(x, 1.0, 0, s), ValueError, "p must be < 1"),
    (lambda x, s: op.dropout_forward(x, -0.1, 0, s), ValueError, "p must be >= 0"),
    (lambda x, s: op.dropout_forward(x, 0.5, -1, s), ValueError, "seed must be >= 0"),
    (lambda x, s: op.dropout_forward(x, 0.5, 2**64, s), ValueError, "seed must be below"),
    (lambda x, s: op.dropout_forward(x, 0.5, 1.5, s), TypeError, "seed must be an int"),
    (lambda x, s: op.dropout_forward(x, 0.5, 0, s, offset=-1), ValueError,
     "offset must be >= 0"),
    (lambda x, s: op.dropout_forward(x, 0.5, 0, np.zeros(2, np.int64)), ValueError,
     "step must have shape"),
    (lambda x, s: op.dropout_forward(x, 0.5, 0, np.zeros(1, np.int32)), TypeError,
     "step must be int64"),
    (lambda x, s: op.dropout_forward(x.astype(np.int32), 0.5, 0, s), TypeError,
     "x must be float32 or float64"),
    (lambda x, s: op.dropout_forward(x.T, 0.5, 0, s), ValueError, "x"),
    (lambda x, s: op.dropout_backward(x, np.ones((2, 2), np.uint8), 0.5), ValueError, "mask"),
    (lambda x, s: op.dropout_backward(x, np.ones(x.shape, bool), 0.5), TypeError,
     "mask must be uint8"),
])
def test_bad_arguments_are_named_and_the_counter_is_left_alone(rng, call, exc, match):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    step = op.new_step()
    with pytest.raises(exc, match=match):
        call(x, step)
    assert step[0] == 0


def test_ranks_of_a_data_parallel_run_draw_the_one_gpu_runs_masks(rng):
    """Rank r of R takes rows r·n .. (r+1)·n of the global batch: with ``shard`` set its
    dropout draws exactly those rows' masks of the whole batch."""
    x = rng.standard_normal((12, 7))
    whole = L.Dropout(0.4, seed=5)
    ranks = [L.Dropout(0.4, seed=5) for _ in range(3)]
    for r, m in enumerate(ranks):
        m.shard = (r, 3)
    for _ in range(2):                       # two steps: every counter moves alike
        want = whole(_tensor(x)).data
        got = np.concatenate([m(_tensor(x[4 * r:4 * r + 4])).data for r, m in enumerate(ranks)])
        np.testing.assert_array_equal(got, want)


def test_the_layer_keeps_its_counter_as_state_and_resumes_the_stream(rng):
    x = rng.standard_normal((6, 8))
    a = L.Dropout(0.5, seed=3)
    outs = [a(_tensor(x)).data for _ in range(3)]
    assert not np.array_equal(outs[0], outs[1])
    b = L.Dropout(0.5, seed=3)
    b(_tensor(x))
    state = b.state_dict()
    assert list(state) == ["step"] and state["step"][0] == 1
    c = L.Dropout(0.5, seed=3)
    c.load_state_dict(state)                       # a resumed run draws call 1 next
    np.testing.assert_array_equal(c(_tensor(x)).data, outs[1])
    c.eval()
    np.testing.assert_array_equal(c(_tensor(x)).data, x)    # identity, counter unmoved
    assert c.step[0] == 2


def test_a_state_saved_before_the_counter_existed_still_loads():
    from tensorconv.nn import get_model

    net = get_model("googlenet", in_channels=1, num_classes=10)
    old = {k: v for k, v in net.state_dict().items() if not k.endswith("dropout.step")}
    assert len(old) == len(net.state_dict()) - 1
    net.dropout.step[0] = 5
    net.load_state_dict(old)                       # kept as it was
    assert net.dropout.step[0] == 5
    with pytest.raises(ValueError, match="missing"):   # required entries still are
        net.load_state_dict({k: v for k, v in old.items() if not k.endswith("fc.bias")})


def _tensor(x):
    from tensorconv.autograd import Tensor

    return Tensor(x, requires_grad=True)
