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
        assert any(r.blocks for reports in report.values() for r in reports)


def test_sparse_conv2d_checks_its_arguments():
    with pytest.raises(TypeError, match="packed must be a BlockSparse"):
        SparseConv2d(np.ones((2, 2, 1, 1)))


def test_sparsify_keeps_a_layout_per_threshold_and_one_without_blocks(rng):
    pytest.importorskip("mtkahypar")
    model = get_model("small_cnn", in_channels=1)
    prune.apply_masks(model, prune.magnitude_masks(model, 4.0))
    report = sparsify(model, t2=(2, 4, 4, 16), b1=4, b2=4)
    for name, reports in report.items():
        assert [r.t2 for r in reports] == [2, 4, 16]
        layer = {n.rstrip("."): m for n, m in model.named_modules()}[name]
        digests = {v.layout.digest() for v in layer.variants}
        assert len(digests) == len(layer.variants) <= 4
        # the layout with no blocks is among them, last unless a threshold gave it
        assert not layer.variants[-1].layout.blocks
        assert all(np.array_equal(v.to_matrix(), layer.packed.to_matrix())
                   for v in layer.variants)
    with pytest.raises(ValueError, match="t2"):
        sparsify(get_model("small_cnn", in_channels=1), t2=())
    with pytest.raises(ValueError, match=r"t2\[1\]"):
        sparsify(get_model("small_cnn", in_channels=1), t2=(4, 0))
    for blocks in (True, False):        # refused even where no round would read it
        with pytest.raises(ValueError, match="min_gain"):
            sparsify(get_model("small_cnn", in_channels=1), blocks=blocks, min_gain=1.5)


def test_variants_must_hold_the_same_kernel(rng):
    from tensorconv.blocksparse import layout_from_pattern, pack

    w = (rng.standard_normal((8, 4, 3, 3)) * (rng.random((8, 4, 3, 3)) < 0.3)).astype(np.float32)
    a = pack(w, layout_from_pattern(w.reshape(8, -1) != 0, w.shape))
    w2 = w.copy()
    w2[w2 != 0] *= 2
    b = pack(w2, layout_from_pattern(w2.reshape(8, -1) != 0, w.shape))
    with pytest.raises(ValueError, match="variants\\[0\\] holds another kernel"):
        SparseConv2d(a, variants=[b])
    with pytest.raises(TypeError, match="variants\\[0\\] must be a BlockSparse"):
        SparseConv2d(a, variants=[w])
    assert SparseConv2d(a, variants=[a]).variants == (a, a)
