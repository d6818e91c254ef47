"""Hardware-aware rank selection (TDC Algorithm 1) on synthetic performance tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorconv.compress import performance
from tensorconv.compress.ranks import LayerSpec, candidate_ranks, layer_specs, select_ranks
from tensorconv.nn import get_model

A = LayerSpec("a", 128, 128, 3, 3, 28, 28, 28, 28, 1, 1)
B = LayerSpec("b", 256, 256, 3, 3, 14, 14, 14, 14, 1, 1)


def _table(spec, speed=1.0, step=2_000_000):
    """Latency grows with the core's MACs in steps (a staircase), like the paper's."""
    return {r: speed * (1 + (spec.tucker_macs(*r) // step)) for r in candidate_ranks(spec)}


def test_candidates_step_32():
    assert candidate_ranks(A)[:3] == [(32, 32), (32, 64), (32, 96)]
    assert all(d1 < 128 and d2 < 128 for d1, d2 in candidate_ranks(A))


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_fastest_fitting_ranks_and_ties_to_larger_ranks(noise):
    """Exact ties of the staircase, or the same seen through 1 % timing noise (tie = 2 %):
    the largest ranks among the fastest fitting ones."""
    rng = np.random.default_rng(0)
    exact = {"a": _table(A, step=30_000_000), "b": _table(B, step=30_000_000)}
    table = {k: {r: t * (1 + noise * rng.uniform(-1, 1)) for r, t in v.items()}
             for k, v in exact.items()}
    plan = select_ranks([A, B], 0.5, table, {"a": 100.0, "b": 100.0})
    assert plan.reduction >= 0.5 and not plan.dense
    for spec in (A, B):
        d1, d2 = plan.ranks[spec.name]
        t = exact[spec.name][(d1, d2)]
        fits = {r: v for r, v in exact[spec.name].items()
                if spec.tucker_macs(*r) <= 0.5 * spec.dense_macs}
        assert t == min(fits.values())
        assert d1 * d2 == max(r[0] * r[1] for r, v in fits.items() if v == t)
    ramp = {k: {r: 1 + r[0] * r[1] / 1000 for r in v} for k, v in table.items()}  # no ties
    plan = select_ranks([A, B], 0.5, ramp, {"a": 100.0, "b": 100.0}, tie=0.0)
    assert set(plan.ranks.values()) == {(32, 32)}
    # a wide tie takes larger ranks, but none slower than the theta rule allows
    gentle = {k: {r: 1 + r[0] * r[1] / 10_000 for r in v} for k, v in table.items()}
    plan = select_ranks([A, B], 0.5, gentle, {"a": 1.3 / 0.85, "b": 100.0}, tie=0.5)
    assert gentle["a"][plan.ranks["a"]] < 1.3 <= gentle["a"][(64, 64)]  # tied, fits, too slow
    assert plan.ranks["a"] != (32, 32) and not plan.dense
    with pytest.raises(ValueError, match="tie"):
        select_ranks([A, B], 0.5, ramp, {"a": 1, "b": 1}, tie=1.5)


def test_theta_keeps_slow_layers_dense_and_redistributes():
    table = {"a": _table(A), "b": _table(B)}
    # layer a's Tucker forms are no faster than its dense form: it stays dense, b cuts more
    plan = select_ranks([A, B], 0.3, table, {"a": 1.0, "b": 100.0})
    assert plan.dense == ["a"] and "a" not in plan.ranks
    assert plan.reduction >= 0.3
    d1, d2 = plan.ranks["b"]
    share = 0.3 * (A.dense_macs + B.dense_macs) / B.dense_macs
    assert B.tucker_macs(d1, d2) <= (1 - share) * B.dense_macs


def test_a_layer_that_cannot_reach_its_share_takes_its_largest_cut():
    small = LayerSpec("s", 64, 64, 3, 3, 56, 56, 56, 56, 1, 1)   # step 32: only (32, 32), ~64% cut
    table = {"s": _table(small), "b": _table(B)}
    plan = select_ranks([small, B], 0.66, table, {"s": 100.0, "b": 100.0})
    assert plan.ranks["s"] == (32, 32) and plan.reduction >= 0.66


def test_impossible_budgets_are_errors():
    table = {"a": _table(A), "b": _table(B)}
    with pytest.raises(ValueError, match="budget must be"):
        select_ranks([A, B], 1.2, table, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="cannot be met.*2 stay dense"):
        select_ranks([A, B], 0.5, table, {"a": 0.5, "b": 0.5})
    with pytest.raises(ValueError, match="no performance table"):
        select_ranks([A], 0.5, {}, {"a": 1})


def test_layer_specs_from_a_model():
    specs = layer_specs(get_model("resnet18_imagenet"), (1, 3, 224, 224))
    first = specs[0]
    assert (first.name, first.c, first.n, first.h, first.oh) == ("stages.0.0.conv1", 64, 64, 56, 56)
    down = next(s for s in specs if s.name == "stages.1.0.conv1")
    assert (down.stride, down.h, down.oh) == (2, 56, 28)
    assert len(specs) == 16  # every 3x3 conv of the blocks; the 7x7 stem reads 3 channels


def test_performance_tables_measure_each_shape_once_and_resume(tmp_path, monkeypatch):
    """Layers of one shape share a measurement; a checkpointed run killed part-way
    continues where it stopped and measures nothing twice."""
    twin = LayerSpec("a2", *[getattr(A, f) for f in ("c", "n", "r", "s", "h", "w", "oh", "ow",
                                                      "stride", "padding")])
    calls = []

    def fake_latency(spec, r=None, *, repeat, chained=False):
        calls.append((spec.c, r))
        if len(calls) == 5 and kill:
            raise KeyboardInterrupt
        return 1000.0 if r is None else float(spec.tucker_macs(*r) // 100_000)

    monkeypatch.setattr(performance, "layer_latency", fake_latency)
    path = tmp_path / "t.json"
    kill = True
    with pytest.raises(KeyboardInterrupt):
        performance.performance_tables([A, twin, B], 64, checkpoint=path)
    kill = False
    table, dense = performance.performance_tables([A, twin, B], 64, checkpoint=path)
    want = {s.name: candidate_ranks(s, 64) for s in (A, B)}
    assert len(calls) == 2 + len(want["a"]) + len(want["b"]) + 1   # the killed one again
    assert len(set(calls)) == len(calls) - 1 and calls[5] == calls[4]   # resumed at the kill
    assert table["a"] == table["a2"] and dense["a2"] == 1000.0
    assert sorted(table["b"]) == sorted(want["b"])
    assert table["b"][(64, 64)] == B.tucker_macs(64, 64) // 100_000
    calls.clear()
    thin, _ = performance.performance_tables([A, B], 64, thin=2, checkpoint=path)
    assert not calls and list(thin["b"]) == want["b"][::2]
    # measured with other kernels: nothing of it is reused (nor mixed with new entries)
    from tensorconv import tunecache

    monkeypatch.setattr(tunecache, "kernels_version", lambda: "edited")
    again, _ = performance.performance_tables([A, B], 64, thin=2, checkpoint=path)
    assert len(calls) == 2 + len(want["a"][::2]) + len(want["b"][::2]) and again == thin
    # nor is a table of the other kind of Tucker entry (chained first 1x1s)
    calls.clear()
    performance.performance_tables([A, B], 64, thin=2, checkpoint=path, chained=True)
    assert len(calls) == 2 + len(want["a"][::2]) + len(want["b"][::2])
    assert "next first 1x1" in json.loads(path.read_text())["taken_with"]["chained"]


def test_performance_tables_reuse_a_table_of_other_kernels_whole(tmp_path, monkeypatch):
    """other_kernels takes a complete checkpoint measured with other kernel sources as it
    is, and refuses one that lacks entries or was taken another way."""
    from tensorconv import tunecache

    calls = []

    def fake_latency(spec, r=None, *, repeat, chained=False):
        calls.append((spec.c, r))
        return 1000.0 if r is None else float(spec.tucker_macs(*r) // 100_000)

    monkeypatch.setattr(performance, "layer_latency", fake_latency)
    path = tmp_path / "t.json"
    with pytest.raises(ValueError, match="needs a checkpoint"):
        performance.performance_tables([A, B], 64, checkpoint=path, other_kernels=True)
    thin, _ = performance.performance_tables([A, B], 64, thin=2, checkpoint=path)
    measured = len(calls)
    monkeypatch.setattr(tunecache, "kernels_version", lambda: "edited")
    again, _ = performance.performance_tables([A, B], 64, thin=2, checkpoint=path,
                                              other_kernels=True)
    assert again == thin and len(calls) == measured
    assert json.loads(path.read_text())["taken_with"]["kernels"] != "edited"
    with pytest.raises(ValueError, match="lacks"):
        performance.performance_tables([A, B], 64, checkpoint=path, other_kernels=True)
    with pytest.raises(ValueError, match="another kernel version"):
        performance.performance_tables([A, B], 64, thin=2, checkpoint=path, chained=True,
                                 other_kernels=True)
    assert len(calls) == measured
