"""A pruned model as SparseConv2d layers computes what the masked dense model computes."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor, no_grad
from tensorconv.compress import prune
from tensorconv.compress.sparse import sparsify
from tensorconv.nn import count_flops_params, get_model
from tensorconv.nn.sparse import SparseConv2d


@pytest.mark.parametrize("blocks", [False, True])
def test_a_sparsified_model_matches_the_masked_dense_model(rng, blocks):
    if blocks:
        pytest.importorskip("mtkahypar")
    model = get_model("resnet20", in_channels=1)
    masks = prune.magnitude_masks(model, 8.0)
    prune.apply_masks(model, masks)
    model.eval()
    x = Tensor(rng.standard_normal((2, 1, 32, 32)).astype(np.float32))
    with no_grad():
        want = model(x).data
    dense = count_flops_params(model, (1, 1, 32, 32))
    report = sparsify(model, blocks=blocks, t2=4, b1=4, b2=4)
    assert set(report) == set(masks)
    assert all(isinstance(m, SparseConv2d) for name, m in model.named_modules()
               if name.rstrip(".") in masks)
    with no_grad():
        got = model(x).data
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    sparse = count_flops_params(model, (1, 1, 32, 32))
    kept = sum(int(m.sum()) for m in masks.values())
    total = sum(m.size for m in masks.values())
    assert sparse["params"] == dense["params"] - total + kept
    assert sparse["macs"] < dense["macs"]
    if blocks:
        assert any(r.blocks for r in report.values())


def test_sparse_conv2d_checks_its_arguments():
    with pytest.raises(TypeError, match="packed must be a BlockSparse"):
        SparseConv2d(np.ones((2, 2, 1, 1)))
