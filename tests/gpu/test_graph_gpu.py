"""Graphs with programmatic edges: dependent kernels still see what the kernels ahead of
them wrote, edges into kernels that do not wait stay ordinary, engines agree bitwise."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, cuda
from tensorconv import graph as captured_graph
from tensorconv.compress import tuckerize, uniform_ranks
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model

pytestmark = pytest.mark.gpu

needs_sm90 = pytest.mark.skipif(
    not backend.gpu_available() or not captured_graph.supported(),
    reason="programmatic edges need compute capability 9.0")


def _chain(cp, steps, between=None):
    """``steps`` launches, one block per SM, each reading a neighbour's value of the step
    before: the result is ``steps`` everywhere only if every launch saw the last one's."""
    nb = backend.device_facts().sm_count
    step = cuda.get_kernel("launch_floor.cu", "dependent_step")
    buf = cp.zeros(2 * nb, cp.float32)

    def run():
        for s in range(steps):
            step((nb,), (32,), (buf, np.int32(s)))
            if between is not None and s == steps // 2:
                between(buf)
    return buf, run


@needs_sm90
@pytest.mark.parametrize("steps", [2, 17, 64])
def test_programmatic_chain_sees_every_write(steps):
    import cupy as cp

    buf, run = _chain(cp, steps)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        g = captured_graph.CapturedGraph(stream, run, programmatic=True)
        assert (g.kernels, g.programmatic_edges) == (steps, steps - 1)
        nb = buf.size // 2
        last = (steps & 1) * nb  # the half the last step writes
        for rep in range(20):
            buf.fill(np.nan)
            buf[:nb] = 0  # the half step 0 reads
            g.launch(stream)
            stream.synchronize()
            assert bool((buf[last:last + nb] == steps).all()), rep

@needs_sm90
def test_edges_into_foreign_kernels_stay_ordinary():
    import cupy as cp

    def bump(buf):  # a CuPy kernel: it never waits, so nothing may start it early
        buf += 0.0

    buf, run = _chain(cp, 6, between=bump)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        run()  # compile the CuPy kernel outside the capture
        buf.fill(0)
        g = captured_graph.CapturedGraph(stream, run, programmatic=True)
        # 7 kernels, 6 edges: the one into the CuPy kernel stays ordinary
        assert (g.kernels, g.programmatic_edges) == (7, 5)
        g.launch(stream)
        stream.synchronize()
    assert bool((buf[: buf.size // 2] == 6).all())


def test_programmatic_refused_where_unsupported(monkeypatch):
    import cupy as cp

    monkeypatch.setattr(captured_graph, "supported", lambda: False)
    with pytest.raises(ValueError, match="compute capability"):
        captured_graph.CapturedGraph(cp.cuda.Stream(non_blocking=True), lambda: None,
                                     programmatic=True)


def test_an_engine_refuses_programmatic_edges_it_cannot_have(monkeypatch):
    model = get_model("small_cnn").to("gpu").eval()
    with pytest.raises(TypeError, match="programmatic must be True or False"):
        InferenceEngine(model, (1, 1, 28, 28), programmatic="yes")
    monkeypatch.setattr(captured_graph, "supported", lambda: False)
    with pytest.raises(ValueError, match="compute capability"):
        InferenceEngine(model, (1, 1, 28, 28), programmatic=True)
    assert not InferenceEngine(model, (1, 1, 28, 28)).plan.programmatic


def test_ordinary_capture_replays(rng):
    import cupy as cp

    buf, run = _chain(cp, 5)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        g = captured_graph.CapturedGraph(stream, run, programmatic=False)
        assert (g.kernels, g.programmatic_edges) == (5, 0)
        g.launch(stream)
        stream.synchronize()
    assert bool((buf[buf.size // 2:] == 5).all())


@needs_sm90
@pytest.mark.parametrize("name,shape,tucker", [
    ("resnet18_imagenet", (1, 3, 96, 96), True),
    ("resnet50", (2, 3, 64, 64), False),
    ("densenet121", (1, 3, 64, 64), False),
])
def test_programmatic_engine_matches_ordinary_bitwise(rng, name, shape, tucker):
    import cupy as cp

    model = get_model(name)
    if tucker:
        tuckerize(model, uniform_ranks(model, 0.65, shape), decompose=False)
    model.to("gpu").eval()
    ordinary = InferenceEngine(model, shape, programmatic=False)
    fast = InferenceEngine(model, shape)
    assert ordinary.graph.programmatic_edges == 0
    # the plans know how their graphs run, for the choices timed while planning
    assert fast.plan.programmatic and not ordinary.plan.programmatic
    assert not InferenceEngine(model, shape, graph=False).plan.programmatic
    # every edge between two of our kernels is programmatic (DenseNet's concatenations
    # may add CuPy copies, whose edges stay ordinary), the forks and joins of the
    # projection shortcuts' branches too
    assert 0 < fast.graph.programmatic_edges <= fast.graph.edges
    if name != "densenet121":
        assert fast.graph.programmatic_edges == fast.graph.edges > fast.graph.kernels - 1
        assert fast.sections > 0
    for _ in range(3):
        x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
        assert np.array_equal(fast(x).get(), ordinary(x).get())
