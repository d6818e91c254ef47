"""Per-stream scratch buffers (tensorconv.scratch): reused, grown, and dropped by the owner
of a stream — the captured training step, the inference engine, time_graph — so that no
stream's buffer outlives what was captured on it (CPU checks with stand-in devices)."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np
import pytest

from tensorconv import scratch, timing


class _Stream(SimpleNamespace):
    def __enter__(self):
        _current["stream"] = self
        return self

    def __exit__(self, *exc):
        _current["stream"] = None


_current = {"stream": None}
_XP = SimpleNamespace(
    empty=lambda n, dtype: np.empty(n, dtype),
    zeros=lambda n, dtype: np.zeros(n, dtype),
    cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: 0),
                         get_current_stream=lambda: _current["stream"]))


@pytest.fixture(autouse=True)
def _own_registry():
    tables = (scratch._workspaces, scratch._counters, scratch._outgrown)
    before = [dict(t) for t in tables]
    for t in tables:
        t.clear()
    yield
    for t, b in zip(tables, before):
        t.clear()
        t.update(b)


def test_a_streams_buffer_is_reused_grown_and_dropped_alone():
    a, b = _Stream(ptr=0xA0), _Stream(ptr=0xB0)
    with a:
        buf = scratch.workspace(_XP, 10)
        assert scratch.workspace(_XP, 4) is buf and buf.size == 10
        assert scratch.workspace(_XP, 12).size == 12
    with b:
        other = scratch.workspace(_XP, 10)
    scratch.release_workspace(a)
    assert (0, 0xA0) not in scratch._workspaces
    assert scratch._workspaces[(0, 0xB0)] is other


def test_counters_are_zeroed_per_stream_and_outgrown_buffers_live_until_released():
    a, b = _Stream(ptr=0xA0), _Stream(ptr=0xB0)
    with a:
        first = scratch.counters(_XP, 5)
        assert first.size == 1024 and first.dtype == np.int32 and not first.any()
        assert scratch.counters(_XP, 1024) is first
        small = scratch.workspace(_XP, 4)
        scratch.workspace(_XP, 40)
        grown = scratch.counters(_XP, 1025)
        assert grown.size == 2048 and not grown.any()
    with b:
        assert scratch.counters(_XP, 5) is not first     # never shared between streams
    # a graph captured on `a` before it grew may still hold the smaller buffers
    kept = scratch._outgrown[(0, 0xA0)]
    assert any(x is first for x in kept) and any(x is small for x in kept)
    scratch.release_workspace(a)
    assert all((0, 0xA0) not in t for t in (scratch._workspaces, scratch._counters,
                                             scratch._outgrown))
    assert (0, 0xB0) in scratch._counters


def test_time_graph_drops_its_streams_buffer_once_timed(monkeypatch):
    stream = _Stream(ptr=0xC0)

    class Clock:
        def event(self):
            return object()

        def record(self, ev):
            pass

        def elapsed_ms(self, a, b):
            return 1.0

        def hold(self, ns):
            pass

        def capture(self, fn, calls, programmatic):
            with stream:
                fn()
            return timing._Replay(lambda: None, stream)

    monkeypatch.setattr(timing, "_clock", lambda framework: Clock())
    got = timing.time_graph(lambda: scratch.workspace(_XP, 8), warmup=1, repeat=3,
                            calls_per_graph=2)
    assert got.median_us == pytest.approx(500.0)
    assert (0, 0xC0) not in scratch._workspaces


def test_an_engine_drops_its_streams_buffer_when_collected():
    from tensorconv.engine.runtime import InferenceEngine

    stream = _Stream(ptr=0xD0)
    with stream:
        scratch.workspace(_XP, 8)
    engine = object.__new__(InferenceEngine)   # planning needs a GPU; the stream is enough
    engine.stream = stream
    del engine
    gc.collect()
    assert (0, 0xD0) not in scratch._workspaces
