"""Every public conv entry point refuses bad input with an error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import ops, reference
from tensorconv.checks import pair

F32 = np.float32


def _ok():
    return np.ones((2, 4, 8, 8), F32), np.ones((6, 2, 3, 3), F32)


BAD = [
    # (description, kwargs overrides, exception, message fragment)
    ("x wrong ndim", dict(x=np.ones((4, 8, 8), F32)), ValueError, "x must be 4-D"),
    ("w wrong ndim", dict(w=np.ones((6, 2, 3), F32)), ValueError, "w must be 4-D"),
    ("channels mismatch", dict(w=np.ones((6, 3, 3, 3), F32)), ValueError,
     "input channels per group"),
    ("groups not dividing C", dict(groups=3, w=np.ones((6, 1, 3, 3), F32)), ValueError,
     "does not divide the input"),
    ("groups not dividing K", dict(w=np.ones((5, 2, 3, 3), F32)), ValueError,
     "does not divide the output"),
    ("float64 x", dict(x=np.ones((2, 4, 8, 8))), TypeError, "x must be float32"),
    ("float64 w", dict(w=np.ones((6, 2, 3, 3))), TypeError, "w must be float32"),
    ("int x", dict(x=np.ones((2, 4, 8, 8), np.int32)), TypeError, "x must be float32"),
    ("non-contiguous x", dict(x=np.ones((2, 4, 8, 16), F32)[..., ::2]), ValueError,
     "x must be C-contiguous"),
    ("empty x", dict(x=np.ones((0, 4, 8, 8), F32)), ValueError, "x is empty"),
    ("empty w", dict(w=np.ones((0, 2, 3, 3), F32)), ValueError, "w is empty"),
    ("bias length", dict(bias=np.ones(5, F32)), ValueError, "bias has 5 entries"),
    ("bias dtype", dict(bias=np.ones(6)), TypeError, "bias must be float32"),
    ("stride zero", dict(stride=0), ValueError, "stride must be >= 1"),
    ("negative padding", dict(padding=-1), ValueError, "padding must be >= 0"),
    ("dilation tuple of 3", dict(dilation=(1, 2, 3)), TypeError,
     "dilation must be an int or a pair"),
    ("groups zero", dict(groups=0), ValueError, "groups must be >= 1"),
    ("groups float", dict(groups=2.0), TypeError, "groups must be an int"),
    ("padding float pair", dict(padding=(1.5, 1.5)), TypeError, "padding must be an int or a pair"),
    ("padding float", dict(padding=1.0), TypeError, "padding must be an int or a pair"),
    ("stride string", dict(stride="22"), TypeError, "stride must be an int or a pair"),
    ("stride bool", dict(stride=True), TypeError, "stride must be an int or a pair"),
    ("dilation numpy float", dict(dilation=np.float32(1)), TypeError,
     "dilation must be an int or a pair"),
    ("filter larger than input", dict(w=np.ones((6, 2, 11, 11), F32)), ValueError, "does not fit"),
    ("list instead of array", dict(x=[[1.0]]), TypeError, "x must be a NumPy/CuPy array"),
    ("unknown algorithm", dict(algorithm="fft"), ValueError, "algorithm must be one of"),
    ("splits out of range", dict(splits=999), ValueError, "splits must be an int"),
]


@pytest.mark.parametrize("desc,over,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_ops_conv2d_rejects(desc, over, exc, msg):
    x, w = _ok()
    kw = dict(x=x, w=w, bias=None, stride=1, padding=1, dilation=1, groups=2)
    kw.update(over)
    with pytest.raises(exc, match=msg):
        ops.conv2d(**kw)


def test_ops_conv2d_accepts_the_good_case():
    x, w = _ok()
    assert ops.conv2d(x, w, padding=1, groups=2).shape == (2, 6, 8, 8)


def test_reference_rejects_dtype_mismatch():
    with pytest.raises(TypeError, match="differs from x"):
        reference.conv2d(np.ones((1, 2, 4, 4), F32), np.ones((3, 2, 3, 3)))


def test_out_is_gpu_only():
    x, w = _ok()
    with pytest.raises(ValueError, match="out is supported on the GPU path only"):
        ops.conv2d(x, w, padding=1, groups=2, out=np.empty((2, 6, 8, 8), F32))


def test_pair():
    assert pair(3, "stride", minimum=1) == (3, 3)
    assert pair((1, 2), "stride", minimum=1) == (1, 2)
    with pytest.raises(TypeError, match="stride"):
        pair("ab", "stride", minimum=1)


# ----------------------------------------------------------------------------- layers


LAYER_CASES = [
    ("Conv2d groups 0", lambda L: L.Conv2d(4, 4, 3, groups=0), ValueError, "groups must be >= 1"),
    ("Conv2d float channels", lambda L: L.Conv2d(4.0, 4, 3), TypeError, "in_channels must be"),
    ("Conv2d float padding", lambda L: L.Conv2d(4, 4, 3, padding=(1.5, 1.5)), TypeError,
     "padding must be an int or a pair"),
    ("Conv2d string stride", lambda L: L.Conv2d(4, 4, 3, stride="2"), TypeError,
     "stride must be"),
    ("Conv2d bias array", lambda L: L.Conv2d(4, 4, 3, bias=np.ones(4)), TypeError,
     "bias must be True or False"),
    ("Linear zero", lambda L: L.Linear(0, 3), ValueError, "in_features must be >= 1"),
    ("BatchNorm2d zero", lambda L: L.BatchNorm2d(0), ValueError, "channels must be >= 1"),
    ("BatchNorm2d eps 0", lambda L: L.BatchNorm2d(4, eps=0.0), ValueError, "eps must be > 0"),
    ("BatchNorm2d momentum nan", lambda L: L.BatchNorm2d(4, momentum=float("nan")), ValueError,
     "momentum must be finite"),
    ("MaxPool2d kernel 0", lambda L: L.MaxPool2d(0), ValueError, "kernel_size must be >= 1"),
    ("AvgPool2d big padding", lambda L: L.AvgPool2d(2, padding=2), ValueError,
     "at most half the kernel"),
    ("Dropout p 1", lambda L: L.Dropout(1.0), ValueError, "p must be < 1"),
]


@pytest.mark.parametrize("desc,make,exc,msg", LAYER_CASES, ids=[c[0] for c in LAYER_CASES])
def test_layer_constructors_check_their_arguments(desc, make, exc, msg):
    from tensorconv.nn import layers as L

    with pytest.raises(exc, match=msg):
        make(L)


def test_tucker_and_cp_layers_check_ranks():
    from tensorconv.nn.cp import CPConv2d
    from tensorconv.nn.tucker import TuckerConv2d

    with pytest.raises(TypeError, match="ranks must be a pair of ints"):
        TuckerConv2d(8, 8, 3, (2.5, 2))
    with pytest.raises(ValueError, match="must lie in"):
        TuckerConv2d(8, 8, 3, (0, 2))
    with pytest.raises(TypeError, match="rank must be an int"):
        CPConv2d(8, 8, 3, 2.0)


# ----------------------------------------------------------------------------- decompositions


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_decompositions_refuse_non_finite_weights(rng, bad):
    from tensorconv.decomp import cp as cpd
    from tensorconv.decomp import tucker as td

    w = rng.standard_normal((8, 6, 3, 3)).astype(F32)
    w[1, 2, 0, 0] = bad
    with pytest.raises(ValueError, match="w has 1 non-finite"):
        td.hosvd(w, (3, 4))
    with pytest.raises(ValueError, match="w has 1 non-finite"):
        td.partial_tucker(w, (3, 4))
    with pytest.raises(ValueError, match="w has 1 non-finite"):
        cpd.parafac(w, 3)


def test_decompositions_check_ranks(rng):
    from tensorconv.decomp import tucker as td

    w = rng.standard_normal((8, 6, 3, 3)).astype(F32)
    with pytest.raises(TypeError, match="ranks must be a pair of ints"):
        td.hosvd(w, (3.0, 4))
    with pytest.raises(ValueError, match="rank D1=7"):
        td.hosvd(w, (7, 4))


def test_gnetcon_refuses_non_positive_sizes():
    from tensorconv.decomp import gnetcon as g

    with pytest.raises(ValueError, match=r"sizes\['r'\] must be >= 1"):
        g.cp_conv_network(1, 8, 8, 6, 6, 3, 3, 0)
    with pytest.raises(ValueError, match=r"sizes\['n'\] must be >= 1"):
        g.cp_conv_network(-1, 8, 8, 6, 6, 3, 3, 2)
    with pytest.raises(TypeError, match=r"sizes\['y'\] must be an int"):
        g.cp_conv_network(1, 8, 8, 6.5, 6, 3, 3, 2)
    with pytest.raises(ValueError, match="memory_cap must be >= 1"):
        g.gnetcon(g.cp_conv_network(1, 8, 8, 6, 6, 3, 3, 2), memory_cap=0)


# ----------------------------------------------------------------------------- transforms


def _weights(model) -> dict:
    return {k: v.copy() for k, v in model.state_dict().items()}


def test_tuckerize_checks_every_rank_before_it_changes_the_model():
    from tensorconv.compress import tuckerize, uniform_ranks
    from tensorconv.nn import get_model

    model = get_model("resnet20", in_channels=1)
    ranks = uniform_ranks(model, 0.5, (1, 1, 32, 32))
    before = _weights(model)
    last = sorted(ranks)[-1]
    for bad, exc, msg in (((0, 4), ValueError, "must lie in"),
                          ((2.0, 4), TypeError, "pair of ints"), ("ab", TypeError, "pair of ints")):
        with pytest.raises(exc, match=msg):
            tuckerize(model, {**ranks, last: bad})
        assert _weights(model).keys() == before.keys()          # nothing converted
    with pytest.raises(ValueError, match="method must be"):
        tuckerize(model, ranks, method="svd")
    with pytest.raises(ValueError, match="reduction must be < 1"):
        uniform_ranks(model, 1.0, (1, 1, 32, 32))


def test_tuckerize_and_cpize_refuse_non_finite_weights_before_any_change():
    from tensorconv.compress import cpize, tucker_candidates, tuckerize, uniform_ranks
    from tensorconv.nn import get_model

    model = get_model("resnet20", in_channels=1)
    ranks = uniform_ranks(model, 0.5, (1, 1, 32, 32))
    name = sorted(ranks)[-1]
    tucker_candidates(model)[name].weight.data[0, 0, 0, 0] = np.inf
    before = _weights(model).keys()
    with pytest.raises(ValueError, match=f"the weights of '{name}' has 1 non-finite"):
        tuckerize(model, ranks)
    with pytest.raises(ValueError, match=f"the weights of '{name}' has 1 non-finite"):
        cpize(model, 3)
    assert _weights(model).keys() == before
    with pytest.raises(ValueError, match="rank must be >= 1"):
        cpize(model, 0, decompose=False)


def test_batch_norm_running_statistics_of_the_wrong_length_are_refused(rng):
    from tensorconv.autograd import Tensor
    from tensorconv.autograd import functions as F

    x = Tensor(rng.standard_normal((2, 4, 3, 3)).astype(F32))
    gamma, beta = Tensor(np.ones(4, F32)), Tensor(np.zeros(4, F32))
    for training in (True, False):
        with pytest.raises(ValueError, match="running_mean has 1 entries; x has 4 channels"):
            F.batch_norm2d(x, gamma, beta, np.zeros(1, F32), np.ones(4, F32), training=training)
        with pytest.raises(ValueError, match="running_var has 8 entries"):
            F.batch_norm2d(x, gamma, beta, np.zeros(4, F32), np.ones(8, F32), training=training)
