"""time_graph's order of work on the stream (CPU checks with a recording clock)."""

from __future__ import annotations

import pytest

from tensorconv import timing


class _Clock:
    """Records what time_graph asks of the stream, in order."""

    def __init__(self):
        self.log = []

    def event(self):
        return object()

    def record(self, ev):
        self.log.append("record")

    def elapsed_ms(self, a, b):
        return 0.5

    def hold(self, ns):
        self.log.append(("hold", ns))

    def capture(self, fn, calls, programmatic):
        return timing._Replay(lambda: self.log.append("launch"), None)


def test_each_replay_is_queued_behind_a_hold_before_its_start_event(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(timing, "_clock", lambda framework: clock)
    got = timing.time_graph(lambda: None, warmup=1, repeat=2, calls_per_graph=5, hold_us=40)
    assert got.median_us == pytest.approx(100.0)
    assert clock.log == [("hold", 40_000), "record", "launch", "record"] * 3


def test_no_hold_times_the_launch_too(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(timing, "_clock", lambda framework: clock)
    timing.time_graph(lambda: None, warmup=0, repeat=2, calls_per_graph=1, hold_us=0)
    assert clock.log == ["record", "launch", "record"] * 2


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_negative_hold_is_refused(bad):
    with pytest.raises(ValueError, match="hold_us"):
        timing.time_graph(lambda: None, hold_us=bad)
