"""Every differentiable function passes gradcheck; the graph machinery is right."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.autograd import Tensor, gradcheck, no_grad
from tensorconv.autograd import functions as F
from tests.helpers import random_conv_case, rel_err


def T(rng, *shape, grad=True):
    return Tensor(rng.standard_normal(shape), requires_grad=grad)


@pytest.mark.parametrize("trial", range(5))
def test_conv2d_gradcheck_random_shapes(rng, trial):
    xs, ws, kw = random_conv_case(rng, max_hw=6, max_channels=3)
    x, w, b = T(rng, *xs), T(rng, *ws), T(rng, ws[0])
    gradcheck(lambda x, w, b: F.conv2d(x, w, b, **kw), [x, w, b])
    assert rel_err(F.conv2d(x, w, b, **kw).data, reference.conv2d(x.data, w.data, b.data,
                                                                  **kw)) < 1e-12


def test_linear_gradcheck(rng):
    gradcheck(F.linear, [T(rng, 4, 5), T(rng, 3, 5), T(rng, 3)])
    gradcheck(lambda x, w: F.linear(x, w), [T(rng, 4, 5), T(rng, 3, 5)])


def test_broadcast_arithmetic_gradcheck(rng):
    gradcheck(lambda a, b: F.add(a, b), [T(rng, 2, 3, 4), T(rng, 1, 3, 1)])
    gradcheck(lambda a, b: F.mul(a, b), [T(rng, 2, 3, 4), T(rng, 4)])
    gradcheck(lambda a: a * 3.0 - a + 1.0, [T(rng, 3, 2)])


def test_shape_functions_gradcheck(rng):
    gradcheck(lambda a: F.reshape(a, (6, 4)), [T(rng, 2, 3, 4)])
    gradcheck(F.flatten, [T(rng, 2, 3, 2, 2)])
    gradcheck(lambda a, b, c: F.concat([a, b, c], axis=1),
              [T(rng, 2, 1, 3, 3), T(rng, 2, 4, 3, 3), T(rng, 2, 2, 3, 3)])


def test_activation_gradcheck(rng):
    x = Tensor(rng.standard_normal((3, 4)) + np.sign(rng.standard_normal((3, 4))) * 0.1, True)
    gradcheck(F.relu, [x])
    # a fresh counter each evaluation: every call of the check draws the same mask
    gradcheck(lambda a: F.dropout(a, 0.4, 7, np.zeros(1, np.int64)), [T(rng, 5, 6)])


@pytest.mark.parametrize("kernel,stride,padding",
                         [(2, 2, 0), (3, 2, 1), (3, 1, 1), ((2, 3), (1, 2), (1, 0))])
def test_pooling_gradcheck(rng, kernel, stride, padding):
    x = T(rng, 2, 3, 7, 6)
    gradcheck(lambda a: F.max_pool2d(a, kernel, stride, padding), [x])
    gradcheck(lambda a: F.avg_pool2d(a, kernel, stride, padding), [x])


def test_global_avg_pool_gradcheck(rng):
    gradcheck(F.global_avg_pool2d, [T(rng, 2, 3, 4, 5)])


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradcheck(rng, training):
    c = 3
    x, g, b = T(rng, 4, c, 3, 2), Tensor(rng.random(c) + 0.5, True), T(rng, c)
    rm, rv = rng.standard_normal(c), rng.random(c) + 0.5
    gradcheck(lambda x, g, b: F.batch_norm2d(x, g, b, rm.copy(), rv.copy(), training=training),
              [x, g, b])


def test_batch_norm_relu_fused_gradcheck(rng):
    c = 3
    x, g, b = T(rng, 4, c, 3, 2), Tensor(rng.random(c) + 0.5, True), T(rng, c)
    rm, rv = np.zeros(c), np.ones(c)
    fused = lambda x, g, b: F.batch_norm2d(x, g, b, rm.copy(), rv.copy(), training=True,  # noqa: E731
                                           relu=True)
    gradcheck(fused, [x, g, b])
    plain = F.relu(F.batch_norm2d(x, g, b, rm.copy(), rv.copy(), training=True))
    np.testing.assert_array_equal(fused(x, g, b).data, plain.data)


def test_batch_norm_backward_beta_needs_the_relu_output(rng):
    """``beta`` only recomputes a fused ReLU's mask: alone (no ``y``) it is refused, and off
    the kernels (NumPy) the mask is read from ``y`` as before."""
    from tensorconv import ops

    x, gy = (rng.standard_normal((2, 3, 4, 4)).astype(np.float32) for _ in range(2))
    g, b = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    y, mean, invstd = ops.batch_norm_forward(x, g, b, np.zeros(3, np.float32),
                                             np.ones(3, np.float32), training=True, relu=True)
    with pytest.raises(ValueError, match="beta recomputes"):
        ops.batch_norm_backward(x, gy, mean, invstd, g, training=True, beta=b)
    want = ops.batch_norm_backward(x, gy, mean, invstd, g, training=True, y=y)
    got = ops.batch_norm_backward(x, gy, mean, invstd, g, training=True, y=y, beta=b)
    for a, c in zip(want, got):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("training,relu", [(True, True), (True, False), (False, True)])
def test_batch_norm_with_a_residual_is_the_add_and_relu_after_it(rng, training, relu):
    """``batch_norm2d(..., residual=r)``: gradients by gradcheck (float64), and in float32
    the values and every gradient of batch norm, Add and ReLU as separate nodes, bit for
    bit; the sum keeps no tensor of its own."""
    c = 3
    x, g, b, r = T(rng, 4, c, 3, 2), Tensor(rng.random(c) + 0.5, True), T(rng, c), \
        T(rng, 4, c, 3, 2)
    rm, rv = rng.standard_normal(c), rng.random(c) + 0.5
    fused = lambda x, g, b, r: F.batch_norm2d(x, g, b, rm.copy(), rv.copy(),  # noqa: E731
                                              training=training, relu=relu, residual=r)
    gradcheck(fused, [x, g, b, r])

    def run(one_node):
        ts = [Tensor(a.data.astype(np.float32), True) for a in (x, g, b, r)]
        y = (F.batch_norm2d(*ts[:3], rm.astype(np.float32), rv.astype(np.float32),
                            training=training, relu=relu, residual=ts[3]) if one_node else
             (F.relu if relu else (lambda t: t))(
                 F.batch_norm2d(*ts[:3], rm.astype(np.float32), rv.astype(np.float32),
                                training=training) + ts[3]))
        gy = np.random.default_rng(7).standard_normal(y.shape).astype(np.float32)
        y.backward(gy)
        return [y.data] + [t.grad for t in ts]

    for one, sep in zip(run(True), run(False)):
        assert one.dtype == np.float32
        np.testing.assert_array_equal(one, sep)
    with pytest.raises(ValueError, match="residual"):
        F.batch_norm2d(x, g, b, rm.copy(), rv.copy(), training=training, residual=T(rng, 4, c))


def test_batch_norm_statistics(rng):
    x = rng.standard_normal((8, 3, 5, 5)) * 2 + 1
    rm, rv = np.zeros(3), np.ones(3)
    y = F.batch_norm2d(Tensor(x), Tensor(np.ones(3)), Tensor(np.zeros(3)), rm, rv,
                       training=True, momentum=0.5).data
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 2, 3)), 1, atol=1e-3)
    np.testing.assert_allclose(rm, 0.5 * x.mean(axis=(0, 2, 3)))
    np.testing.assert_allclose(rv, 0.5 + 0.5 * x.var(axis=(0, 2, 3), ddof=1))


def test_softmax_cross_entropy(rng):
    logits = T(rng, 5, 4)
    labels = np.array([0, 3, 1, 1, 2])
    gradcheck(lambda z: F.softmax_cross_entropy(z, labels), [logits])
    z = logits.data
    expected = -np.mean(z[np.arange(5), labels] - np.log(np.exp(z).sum(1)))
    assert np.isclose(F.softmax_cross_entropy(logits, labels).item(), expected)
    big = Tensor(np.array([[1000.0, 0.0], [0.0, -1000.0]]))
    assert np.isfinite(F.softmax_cross_entropy(big, np.array([1, 1])).item())  # stable


def test_labels_are_checked():
    z = Tensor(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 4\)"):
        F.softmax_cross_entropy(z, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match="labels must have shape"):
        F.softmax_cross_entropy(z, np.array([0, 1]))
    with pytest.raises(TypeError, match="integers"):
        F.softmax_cross_entropy(z, np.array([0.0, 1.0, 2.0]))


def test_diamond_graph_accumulates(rng):
    x = T(rng, 3)
    y = F.mul(x, x)            # x used twice in one function
    z = F.add(F.relu(y), y)    # y used twice downstream
    z.backward(np.ones(3))
    np.testing.assert_allclose(x.grad, 2 * (2 * x.data))


def test_no_grad_records_nothing(rng):
    x = T(rng, 3)
    with no_grad():
        y = F.relu(x)
    assert y.creator is None and not y.requires_grad


def test_backward_needs_scalar_or_grad(rng):
    with pytest.raises(ValueError, match="one-element"):
        F.relu(T(rng, 3)).backward()


def test_gradcheck_catches_a_wrong_gradient(rng):
    class Wrong(F.relu.__globals__["ReLU"]):
        def backward(self, gy):
            return gy * 2.0

    with pytest.raises(AssertionError, match="differs"):
        gradcheck(lambda a: Wrong.apply(a), [T(rng, 4)])


# ----------------------------------------------------------------------------- refusals


class _WrongSquare:
    """``x**2`` whose backward forgets the factor 2."""

    @staticmethod
    def apply(x):
        from tensorconv.autograd.function import Function

        class Square(Function):
            def forward(self, a):
                self.a = a
                return a * a

            def backward(self, g):
                return (g * self.a,)

        return Square.apply(x)


def test_gradcheck_catches_a_wrong_backward_on_a_non_contiguous_input(rng):
    from tensorconv.autograd import Tensor, gradcheck

    base = rng.standard_normal((4, 6))
    x = Tensor(base[:, ::2], requires_grad=True)          # a strided view
    assert not x.data.flags.c_contiguous
    with pytest.raises(AssertionError, match="gradient of input 0"):
        gradcheck(_WrongSquare.apply, [x])
    assert np.array_equal(x.data, base[:, ::2])           # perturbations undone


def test_gradcheck_refuses_to_check_nothing(rng):
    from tensorconv.autograd import Tensor, gradcheck

    with pytest.raises(ValueError, match="no input requires a gradient"):
        gradcheck(lambda x: x * 2.0, [Tensor(rng.standard_normal(3))])


def test_item_of_a_tensor_with_many_elements_is_an_error():
    from tensorconv.autograd import Tensor

    assert Tensor(np.array([2.5])).item() == 2.5
    with pytest.raises(ValueError, match=r"item\(\) needs a one-element tensor"):
        Tensor(np.ones(3)).item()


@pytest.mark.parametrize("seed,exc,msg", [
    (np.ones((1, 3, 4)), ValueError, "grad has shape"),
    (np.ones((4,)), ValueError, "grad has shape"),
    (np.ones((3, 4), np.float32), TypeError, "grad is float32"),
    ([[1.0] * 4] * 3, TypeError, "grad"),
])
def test_a_seed_gradient_must_match_the_tensor(seed, exc, msg):
    from tensorconv.autograd import Tensor

    x = Tensor(np.ones((3, 4)), requires_grad=True)
    y = x * 2.0
    with pytest.raises(exc, match=msg):
        y.backward(seed)
    assert x.grad is None


@pytest.mark.parametrize("how", ["assign", "subtract", "item"])
def test_changing_a_saved_input_in_place_before_backward_is_an_error(how):
    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    x = Tensor(np.arange(6.0).reshape(2, 3) - 2.0, requires_grad=True)
    w = Tensor(np.ones((2, 3)), requires_grad=True)
    y = F.relu(x * w)
    if how == "assign":
        w.data = np.zeros((2, 3))
    elif how == "subtract":
        w.data -= 1.0
    else:
        w[0, 0] = 5.0
    with pytest.raises(RuntimeError, match="changed in place after the forward pass"):
        y.backward(np.ones(y.shape))


def test_a_fresh_forward_after_an_in_place_change_is_fine():
    from tensorconv.autograd import Tensor

    w = Tensor(np.ones(3), requires_grad=True)
    w.data -= 0.5
    y = w * 3.0
    y.backward(np.ones(3))
    assert np.allclose(w.grad, 3.0)


def test_a_gradient_nobody_reads_is_not_computed(rng):
    """An input image needs no gradient: the convolution's backward skips it, and the
    weight gradient is what it is when the input's is wanted too."""
    from tensorconv.autograd.functions.connection import Conv2d

    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    grads = {}
    for wanted in (False, True):
        xt, wt = Tensor(x, requires_grad=wanted), Tensor(w, requires_grad=True)
        y = F.conv2d(xt, wt, padding=1)
        assert isinstance(y.creator, Conv2d)
        assert y.creator.needs_input_grad == (wanted, True)
        gx, gw = y.creator.backward(np.ones(y.shape, np.float32))
        assert (gx is None) != wanted
        grads[wanted] = gw
    np.testing.assert_array_equal(grads[False], grads[True])


def _residual_block(x, w1, w2, ws=None):
    """conv(relu(conv(x))) plus x (or a 1x1 stride-1 projection of it): x has two readers."""
    h = F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1)
    return F.add(h, x if ws is None else F.conv2d(x, ws))


@pytest.mark.parametrize("projection", [False, True])
def test_a_convolution_adds_its_input_s_other_gradient_to_the_same_bits(rng, projection,
                                                                          monkeypatch):
    """Where a convolution's input already holds a gradient from another reader, the
    backward pass hands it to the convolution (``grad_addends``), which returns the sum:
    the same bits as the separate add, and the hand-over happens in a residual block."""
    from tensorconv.autograd.functions.connection import Conv2d

    x0 = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w0 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    w1, w2 = (rng.standard_normal((4, 4, 3, 3)).astype(np.float32) for _ in range(2))
    ws = rng.standard_normal((4, 4, 1, 1)).astype(np.float32) if projection else None
    seen, backward = [], Conv2d.backward

    def spy(self, gy):
        seen.append(self.addend(0) is not None)
        return backward(self, gy)

    monkeypatch.setattr(Conv2d, "backward", spy)
    grads = {}
    for fused in ((0,), ()):
        monkeypatch.setattr(Conv2d, "adds_to_input_grad", fused)
        seen.clear()
        params = [Tensor(a, requires_grad=True) for a in (w0, w1, w2)]
        wst = Tensor(ws, requires_grad=True) if projection else None
        x = F.conv2d(Tensor(x0), params[0], padding=1)   # a non-leaf input to the block
        y = _residual_block(x, params[1], params[2], wst)
        y.backward(np.ones(y.shape, np.float32))
        grads[fused] = [p.grad for p in params] + ([wst.grad] if projection else [])
        assert any(seen) == bool(fused)
    for a, b in zip(grads[(0,)], grads[()]):
        np.testing.assert_array_equal(a, b)


def test_the_kernel_path_adds_an_addend_it_cannot_read_after(rng, monkeypatch):
    """The GPU branch of the convolution's backward (run here on NumPy arrays): x's other
    gradient, a non-contiguous slice of a concatenation's, is added after the data
    gradient (the kernels read C-contiguous float32 only), to the same bits."""
    from tensorconv.autograd.functions import connection

    monkeypatch.setattr(connection, "_kernel_path", lambda *arrays: all(
        a.dtype == np.float32 and a.flags.c_contiguous for a in arrays if a is not None))
    x0 = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w0, w1 = (rng.standard_normal((3, 3, 3, 3)).astype(np.float32) for _ in range(2))
    grads = {}
    for fused in ((0,), ()):
        monkeypatch.setattr(connection.Conv2d, "adds_to_input_grad", fused)
        params = [Tensor(w, requires_grad=True) for w in (w0, w1)]
        x = F.conv2d(Tensor(x0), params[0], padding=1)
        y = F.concat([x, F.conv2d(x, params[1], padding=1)], axis=1)   # x: read twice
        assert y.creator is not None and x.creator.on_gpu
        y.backward(np.ones(y.shape, np.float32))
        grads[fused] = [p.grad for p in params]
    for a, b in zip(grads[(0,)], grads[()]):
        np.testing.assert_array_equal(a, b)


def test_an_input_read_twice_by_one_function_takes_its_addend_once(rng):
    """f(h, h), both inputs declared: h's earlier gradient goes to the first only (given to
    both, it would count twice); a leaf never gets one."""
    from tensorconv.autograd.function import Function

    class Product(Function):   # a * b, adding each input's addend as it returns
        adds_to_input_grad = (0, 1)

        def forward(self, a, b):
            self.a, self.b = a, b
            return a * b

        def backward(self, gy):
            gins = [gy * self.b, gy * self.a]
            self.got = [self.addend(i) is not None for i in range(2)]
            return tuple(g if self.addend(i) is None else self.addend(i) + g
                         for i, g in enumerate(gins))

    a = rng.standard_normal(5)
    x = Tensor(a, requires_grad=True)
    h = F.mul(x, 3.0)                        # a non-leaf with two readers below
    p = Product.apply(h, h)
    z = F.add(F.relu(h), p)                  # relu's gradient reaches h first
    z.backward(np.ones(5))
    assert p.creator.got == [True, False]
    np.testing.assert_allclose(x.grad, 3.0 * (2 * 3.0 * a + (3.0 * a > 0)))
    leaf = Tensor(a, requires_grad=True)
    q = Product.apply(leaf, leaf)
    F.add(q, F.relu(leaf)).backward(np.ones(5))
    assert q.creator.got == [False, False]
    np.testing.assert_allclose(leaf.grad, 2 * a + (a > 0))
