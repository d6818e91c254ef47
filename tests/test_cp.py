"""CP format of conv kernels and the CPConv2d layer (CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.autograd import Tensor
from tensorconv.compress import cpize
from tensorconv.decomp import cp as cpd
from tensorconv.nn import count_flops_params, get_model
from tensorconv.nn.cp import CPConv2d
from tests.helpers import device_facts, gradcheck_module, rel_err


def _factors(rng, n, c, kh, kw, r):
    return cpd.CPFactors(rng.standard_normal((c, r)), rng.standard_normal((kh, r)),
                         rng.standard_normal((kw, r)), rng.standard_normal((n, r)))


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), ((1, 2), (0, 2)), (2, 0)])
def test_layer_equals_conv_with_the_reconstructed_kernel(rng, stride, padding):
    f = _factors(rng, 7, 5, 3, 5, 4)
    layer = CPConv2d(5, 7, (3, 5), 4, stride, padding, bias=False)
    for p in layer.parameters():
        p.data = p.data.astype(np.float64)  # first: load_factors keeps the layer's dtype
    layer.load_factors(f)
    x = rng.standard_normal((2, 5, 11, 9))
    ref = reference.conv2d(x, cpd.reconstruct(f), stride=stride, padding=padding)
    assert rel_err(layer(Tensor(x)).data, ref) < 1e-12
    g = layer.factors()
    assert rel_err(cpd.reconstruct(g), cpd.reconstruct(f)) < 1e-12


def test_parafac_recovers_an_exact_low_rank_kernel():
    # fixed factors: ALS from a random start can stall for nearly collinear random factors
    # (seen once in ~60 fresh draws), which says nothing about our code
    w = cpd.reconstruct(_factors(np.random.default_rng(0), 8, 6, 3, 3, 2))
    f = cpd.parafac(w, 2, n_iter_max=500)
    assert f.rank == 2 and cpd.relative_error(w, f) < 1e-4
    assert cpd.relative_error(w, cpd.parafac(w, 1)) > 1e-3   # rank 1 cannot


def test_cp_layer_gradcheck(rng):
    layer = CPConv2d(3, 4, 3, 2, stride=2, padding=1, bias=True, rng=rng)
    gradcheck_module(layer, (2, 3, 6, 5), rng)


def test_cpize_and_errors():
    model = get_model("resnet20", in_channels=1)
    base = count_flops_params(model, (1, 1, 32, 32))["macs"]
    errors = cpize(model, 4)
    assert len(errors) == 18 and all(0 < e < 1 for e in errors.values())
    assert isinstance(model.stages[2][1].conv2, CPConv2d)
    assert count_flops_params(model, (1, 1, 32, 32))["macs"] < 0.2 * base
    with pytest.raises(ValueError, match="rank must be"):
        CPConv2d(4, 4, 3, 0)
    with pytest.raises(ValueError, match="factor S has shape"):
        CPConv2d(4, 4, 3, 2).load_factors(cpd.CPFactors(np.ones((5, 2)), np.ones((3, 2)),
                                                         np.ones((3, 2)), np.ones((4, 2))))
    with pytest.raises(ValueError, match="rank must be >= 1"):
        cpd.parafac(np.ones((4, 4, 3, 3)), 0)


def test_cp_conv2d_cpu_path_and_bad_input(rng):
    from tensorconv.ops import cp_conv as cpops

    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    f = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 3), (5, 3), (6, 3))]
    y = cpops.cp_conv2d(x, *f, stride=1, padding=(1, 2))
    f64 = cpd.CPFactors(*(a.astype(np.float64) for a in f))
    ref = reference.conv2d(x.astype(np.float64), cpd.reconstruct(f64), padding=(1, 2))
    assert rel_err(y, ref) < 1e-5
    with pytest.raises(ValueError, match="variant"):
        cpops.cp_conv2d(x, *f, variant="gemm")
    with pytest.raises(ValueError, match="template limit"):
        cpops.cp_conv2d(x, *[np.ones((a.shape[0], 40), np.float32) for a in f])
    with pytest.raises(ValueError, match="does not fit"):
        cpops.cp_conv2d(np.ascontiguousarray(x[:, :, :2, :2]), *f)


def test_cp_conv2d_cpu_epilogue_and_tiles(rng):
    from tensorconv.ops import cp_conv as cpops

    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    f = [rng.standard_normal(s).astype(np.float32) for s in ((5, 2), (3, 2), (3, 2), (4, 2))]
    bias = rng.standard_normal(4).astype(np.float32)
    res = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    y = cpops.cp_conv2d(x, *f, padding=1, bias=bias, residual=res, relu=True)
    ref = np.maximum(reference.conv2d(x, cpd.reconstruct(cpd.CPFactors(*f)), bias, padding=1)
                     + res, 0)
    assert rel_err(y, ref) < 1e-6
    with pytest.raises(ValueError, match="residual has shape"):
        cpops.cp_conv2d(x, *f, padding=0, residual=res)
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        cpops.cp_conv2d(x, *f, tile=cpops.Tile(4, 48))
    facts = device_facts()

    def problem(c, kh, kw, oh, ow, stride=(1, 1)):
        h, w = (oh - 1) * stride[0] + kh, (ow - 1) * stride[1] + kw
        return cpops.Problem(1, c, h, w, 16, kh, kw, 4, stride, (0, 0))

    def candidates(c, kh, kw=1, stride=(1, 1)):
        return cpops.candidates(problem(c, kh, kw, 20, 20, stride), facts)

    # the default tile splits channels further when a batch-1 layer has few pixels
    small = cpops.default_tile(problem(192, 3, 3, 13, 13), facts)
    large = cpops.default_tile(problem(192, 3, 3, 224, 224), facts)
    assert small.lanes > large.lanes and small.threads % small.lanes == 0
    assert small.rows == 0
    assert cpops.default_tile(problem(3, 11, 11, 224, 224, (2, 2)), facts).rows == 1
    assert cpops.default_tile(problem(3, 11, 11, 224, 224), facts).scheme == "separable"
    for tile in candidates(300, 3):
        tile.validate()
    assert max(t.lanes for t in candidates(300, 3)) == 512
    assert max(t.lanes for t in candidates(3, 1)) == 4
    assert max(t.lanes for t in candidates(3, 11) if t.rows == 1) == 64
    assert any(t.scheme == "separable" for t in candidates(3, 11, 11))
    assert not any(t.scheme == "separable" for t in candidates(3, 11, 11, (2, 2)))
    with pytest.raises(ValueError, match="separable scheme needs stride 1"):
        cpops.cp_conv2d(x, *f, 2, tile=cpops.Tile(1, 64, scheme="separable"))


def test_intermediate_bytes_of_the_cp_sequence():
    from tensorconv.decomp import gnetcon as g

    net = g.cp_conv_network(1, 48, 256, 55, 55, 5, 5, 4)
    plan = g.gnetcon(net)
    sizes = g.intermediate_bytes(net, plan)
    assert len(sizes) == 4 and sizes[-1] == 4 * 256 * 55 * 55
    assert max(sizes[:-1]) == plan.peak_bytes


def test_tuned_tile_is_none_until_tuned(tmp_path, monkeypatch, rng):
    from tensorconv.ops import cp_conv as cpops

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    f = tuple(np.zeros(s, np.float32) for s in ((8, 2), (3, 2), (3, 2), (4, 2)))
    p = cpops.problem((1, 8, 9, 9), f, 1, (1, 1))
    assert p.output_shape == (1, 4, 9, 9) and cpops.tuned_tile(p) is None


def test_balance_keeps_the_kernel_and_equalises_column_norms(rng):
    f = _factors(rng, 7, 5, 3, 3, 4)
    f = cpd.CPFactors(f.s * 300.0, f.h, f.w, f.t / 500.0)
    b = cpd.balance(f)
    assert np.allclose(cpd.reconstruct(b), cpd.reconstruct(f))
    norms = np.stack([np.linalg.norm(a, axis=0) for a in (b.s, b.h, b.w, b.t)])
    assert np.allclose(norms, norms[0:1])
