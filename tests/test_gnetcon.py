"""gnetcon: optimal pairwise sequences of generalized tensor networks."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import reference
from tensorconv.decomp import cp as cpd
from tensorconv.decomp import gnetcon as g
from tests.helpers import rel_err


def _standard_network(rng):
    """A tensor network in the strict sense: every label joins two tensors or is an output."""
    n = int(rng.integers(3, 7))
    tensors = {f"T{i}": [] for i in range(n)}
    labels = iter("abcdefghijklmnopqrstuvwxyz")
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < 0.5:
                lab = next(labels)
                tensors[f"T{i}"].append(lab)
                tensors[f"T{j}"].append(lab)
    output = []
    for i in range(n):
        if rng.random() < 0.5 or not tensors[f"T{i}"]:
            lab = next(labels)
            tensors[f"T{i}"].append(lab)
            output.append(lab)
    sizes = {lab: int(rng.integers(2, 9)) for ls in tensors.values() for lab in ls}
    return g.Network(tensors={k: tuple(v) for k, v in tensors.items()}, sizes=sizes,
                     output=tuple(output))


def _hyperedge_network(rng):
    """Labels may join three or more tensors (like a CP rank)."""
    pool = "abcdefgh"
    tensors = {f"T{i}": tuple(str(c) for c in rng.choice(list(pool), size=int(rng.integers(1, 4)),
                                                           replace=False))
               for i in range(int(rng.integers(3, 6)))}
    labels = [lab for ls in tensors.values() for lab in ls]
    sizes = {lab: int(rng.integers(2, 9)) for lab in set(labels)}
    output = tuple(sorted(lab for lab in set(labels) if labels.count(lab) == 1))
    return g.Network(tensors=tensors, sizes=sizes, output=output)


def _einsum_spec(net):
    spec = ",".join("".join(ls) for ls in net.tensors.values()) + "->" + "".join(net.output)
    return spec, [tuple(net.sizes[lab] for lab in ls) for ls in net.tensors.values()]


def _linear_path(plan, names):
    """The plan as opt_einsum's list of index pairs."""
    current, steps = list(names), []

    def rec(node):
        if isinstance(node, str):
            return node
        a, b = rec(node[0]), rec(node[1])
        i, j = sorted((current.index(a), current.index(b)))
        steps.append((i, j))
        current.pop(j)
        current.pop(i)
        current.append((a, b))
        return (a, b)

    rec(plan.sequence)
    return steps


@pytest.mark.parametrize("trial", range(25))
def test_contraction_networks_match_opt_einsum(rng, trial):
    oe = pytest.importorskip("opt_einsum")
    net = _standard_network(rng)
    spec, shapes = _einsum_spec(net)
    _, info = oe.contract_path(spec, *shapes, shapes=True, optimize="optimal")
    assert g.gnetcon(net).cost == info.opt_cost


@pytest.mark.parametrize("trial", range(25))
def test_hyperedge_networks_cost_model_and_optimality(rng, trial):
    """opt_einsum prices our path exactly as we do; ours is never dearer than its 'optimal'
    (which skips some outer products) and equals exhaustive enumeration."""
    oe = pytest.importorskip("opt_einsum")
    net = _hyperedge_network(rng)
    spec, shapes = _einsum_spec(net)
    plan = g.gnetcon(net)
    _, ours = oe.contract_path(spec, *shapes, shapes=True,
                               optimize=_linear_path(plan, list(net.tensors)))
    _, best = oe.contract_path(spec, *shapes, shapes=True, optimize="optimal")
    assert plan.cost == ours.opt_cost <= best.opt_cost
    assert plan.cost == g.brute_force_cost(net)


@pytest.mark.parametrize("trial", range(10))
def test_generalized_networks_match_brute_force(rng, trial):
    n, s, t, y, x = (int(v) for v in rng.integers(1, 9, size=5))
    kh, kw, r = (int(v) for v in rng.integers(1, 6, size=3))
    net = g.cp_conv_network(n, s, t, y, x, kh, kw, r)
    assert g.gnetcon(net).cost == g.brute_force_cost(net)


def test_figure_5b_style_network_with_all_three_operations():
    # A *(y,h) B x(c) C o(r) D: a convolution, a contraction and a shared (outer) rank mode
    net = g.Network(tensors={"A": ("y", "c", "r"), "B": ("h", "r"), "C": ("c", "k"),
                             "D": ("r", "m")},
                    sizes={"y": 7, "c": 6, "r": 4, "h": 3, "k": 5, "m": 2},
                    conv=[("y", "h")], output=("y", "k", "m"))
    plan = g.gnetcon(net)
    assert plan.cost == g.brute_force_cost(net)


@pytest.mark.parametrize("trial", range(5))
def test_executor_computes_the_cp_convolution(rng, trial):
    n, s, t, y, x = (int(v) for v in rng.integers(1, 8, size=5))
    kh, kw = (int(v) for v in rng.choice([1, 3, 5], size=2))
    r = int(rng.integers(1, 5))
    net = g.cp_conv_network(n, s, t, y, x, kh, kw, r)
    f = cpd.CPFactors(rng.standard_normal((s, r)), rng.standard_normal((kh, r)),
                      rng.standard_normal((kw, r)), rng.standard_normal((t, r)))
    u = rng.standard_normal((n, s, y, x))
    out = g.execute(net, g.gnetcon(net), {"U": u, "S": f.s, "H": f.h, "W": f.w, "T": f.t})
    ref = reference.conv2d(u, cpd.reconstruct(f), padding=((kh - 1) // 2, (kw - 1) // 2))
    assert rel_err(out, ref) < 1e-12


def test_memory_cap():
    # the cheapest order builds a 112-byte intermediate; under a 111-byte cap another is best
    net = g.Network(tensors={"T0": ("a", "b"), "T1": ("h", "g", "d"), "T2": ("b",), "T3": ("d",)},
                    sizes={"a": 7, "b": 3, "h": 7, "g": 4, "d": 2}, output=("a", "g", "h"))
    free = g.gnetcon(net)
    assert (free.cost, free.peak_bytes) == (350, 112)
    capped = g.gnetcon(net, memory_cap=111)
    assert capped.peak_bytes <= 111 and capped.cost == 840
    assert capped.cost == g.brute_force_cost(net, memory_cap=111)
    with pytest.raises(g.NoFeasibleSequence, match="memory cap of 8 bytes"):
        g.gnetcon(g.cp_conv_network(1, 48, 256, 27, 27, 5, 5, 4), memory_cap=8)


def test_bad_networks():
    with pytest.raises(ValueError, match="has no size"):
        g.Network(tensors={"A": ("i",)}, sizes={})
    with pytest.raises(ValueError, match="no tensor has"):
        g.Network(tensors={"A": ("i",)}, sizes={"i": 2}, conv=[("i", "q")])
    with pytest.raises(ValueError, match="at least two"):
        g.gnetcon(g.Network(tensors={"A": ("i",)}, sizes={"i": 2}, output=("i",)))


@pytest.mark.parametrize("kh,kw", [(3, 5), (1, 3), (5, 1)])
def test_depthwise_view_equals_the_windowed_einsum(rng, kh, kw):
    """The GPU executor's depthwise-kernel view of a convolution step (run here through the
    NumPy reference conv) against the windowed einsum it replaces."""
    net = g.cp_conv_network(2, 5, 4, 7, 6, kh, kw, 3)
    a = rng.standard_normal((2, 3, 7, 6))
    labels = ("n", "r", "y", "x")
    for inp, filt, k in (("y", "h", kh), ("x", "w", kw)):
        f = rng.standard_normal((k, 3))
        a4, w, pad = g._as_depthwise(net, a, labels, f, (filt, "r"), labels, [(inp, filt)])
        got = reference.conv2d(a4, w, padding=pad, groups=w.shape[0]).reshape(a.shape)
        aw, law = g._windowed(net, np, a, labels, [(inp, filt)])
        assert np.allclose(got, g._einsum(np, aw, law, f, (filt, "r"), labels))
