"""Magnitude masks and masked models."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.compress import prune
from tensorconv.nn import get_model


def test_top_magnitude_keeps_the_largest_and_breaks_ties_reproducibly():
    w = np.array([[0.5, -2.0], [1.0, 1.0]], np.float32)
    assert prune.top_magnitude(w, 2).tolist() == [[False, True], [True, False]]
    assert prune.top_magnitude(w, 0).sum() == 0 and prune.top_magnitude(w, 9).all()
    assert np.array_equal(prune.project_top(w, 1), [[0, -2.0], [0, 0]])


@pytest.mark.parametrize("ratio", [4, 8])
def test_magnitude_masks_prune_every_candidate_by_the_ratio(ratio):
    model = get_model("resnet20", in_channels=1)
    masks = prune.magnitude_masks(model, ratio)
    convs = prune.prune_candidates(model)
    assert set(masks) == set(convs) and "stem.0" not in masks
    for name, m in masks.items():
        assert m.sum() == prune.keep_count(m.size, ratio)
        w = np.abs(convs[name].weight.data)
        assert w[m].min() >= w[~m].max()
    prune.apply_masks(model, masks)
    assert prune.density(model, masks) == pytest.approx(1 / ratio, rel=0.02)


def test_bad_masks_are_refused_before_anything_changes():
    model = get_model("resnet20", in_channels=1)
    masks = prune.magnitude_masks(model, 4)
    name = sorted(masks)[0]
    before = {k: v.copy() for k, v in model.state_dict().items()}
    for bad, msg in (({**masks, "nope": masks[name]}, "no dense convolution"),
                     ({**masks, name: masks[name][:1]}, "must be a bool array of shape"),
                     ({**masks, name: masks[name].astype(np.float32)}, "must be a bool array")):
        with pytest.raises(ValueError, match=msg):
            prune.apply_masks(model, bad)
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="ratio must be >= 1"):
        prune.magnitude_masks(model, 0.5)
    with pytest.raises(ValueError, match="no prunable convolution"):
        prune.magnitude_masks(model, 4, names=["stem.0"])
