"""Sliding-channel convolution on CuPy: the dense-masked form and the paper's two operator
stacks (Base, Opt) against the NumPy reference, forward and gradients."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.reference import scc
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("impl", ["scc_conv", "scc_channel_stack", "scc_conv_stack"])
@pytest.mark.parametrize("cin,cout,cg,co", [(32, 48, 2, 0.5), (24, 20, 4, 0.33),
                                            (16, 16, 8, 0.25)])
def test_scc_on_the_gpu_matches_the_reference(rng, impl, cin, cout, cg, co):
    import cupy as cp

    g = scc.scc_geometry(cin, cout, cg, co)
    x = rng.standard_normal((3, cin, 7, 5)).astype(np.float32)
    w = rng.standard_normal((cout, g.u)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    gy = rng.standard_normal((3, cout, 7, 5)).astype(np.float32)
    ts = [Tensor(cp.asarray(a), requires_grad=True) for a in (x, w, b)]
    y = getattr(F, impl)(ts[0], ts[1], g, ts[2])
    y.backward(cp.asarray(gy))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    assert rel_err(y.data.get(), scc.scc_forward(x64, w64, g, b.astype(np.float64))) <= 1e-5
    gx, gw = scc.scc_backward(x64, w64, gy.astype(np.float64), g)
    assert rel_err(ts[0].grad.get(), gx) <= 1e-5
    assert rel_err(ts[1].grad.get(), gw) <= 1e-5
    assert rel_err(ts[2].grad.get(), gy.astype(np.float64).sum(axis=(0, 2, 3))) <= 1e-5
