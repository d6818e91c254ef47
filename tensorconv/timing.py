"""The GPU's own clock (CUDA events) around a callable: how the library and the
benchmarks time kernels.

* :func:`time_events` — eager calls, one event pair around each; includes the
  Python and launch overhead a user pays when calling the op directly.
* :func:`time_graph` — the calls captured once into a CUDA graph and replayed;
  per-call time with launch overhead removed (the kernel-level figure).  Each replay
  is queued behind a short hold of the stream (``kernels_cu/timing_hold.cu``), so the
  host's launch of the replay is not counted either (``hold_us=0`` counts it, as an
  end-to-end latency would).

Both warm up first and report the median over repeats with the spread.  The
same helpers time PyTorch callables (cuDNN baselines, :mod:`tensorconv.bench`)
through a PyTorch clock, so ours and the baseline are measured the same way in
the same run.  Tuners and the inference engine's choices time through here.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv import graph as captured_graph
from tensorconv.scratch import release_workspace


@dataclass(frozen=True)
class Timing:
    """Summary of repeated timings of one callable, in microseconds per call."""

    median_us: float
    p10_us: float
    p90_us: float
    min_us: float
    repeats: int
    method: str  # "events" or "graph"

    @classmethod
    def from_samples(cls, samples_us, method: str) -> "Timing":
        s = np.asarray(samples_us, dtype=np.float64)
        if s.size == 0:
            raise ValueError("no timing samples")
        p10, med, p90 = np.percentile(s, [10, 50, 90])
        return cls(float(med), float(p10), float(p90), float(s.min()), int(s.size), method)


class _CupyClock:
    """Events, synchronisation and graph capture through CuPy."""

    def __init__(self):
        self.cp = backend.require_cuda("GPU timing")

    def event(self):
        return self.cp.cuda.Event()

    def record(self, ev):
        ev.record(self.cp.cuda.get_current_stream())

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return self.cp.cuda.get_elapsed_time(start, end)

    def hold(self, ns: int) -> None:
        _hold(self.cp, self.cp.cuda.get_current_stream(), ns)

    def capture(self, fn, calls: int, programmatic: bool):
        stream = self.cp.cuda.Stream(non_blocking=True)
        # after the caller's queued work: fn may read what it wrote (a host-to-device copy
        # of weights can still be in flight, and a non-blocking stream does not wait for it)
        stream.wait_event(self.cp.cuda.get_current_stream().record())
        with stream:
            fn()  # warm the stream: allocations and lazy loads must not happen in capture
            stream.synchronize()
            graph = captured_graph.CapturedGraph(stream, lambda: [fn() for _ in range(calls)],
                                                 programmatic=programmatic)
        return _Replay(lambda: graph.launch(stream), stream)


class _TorchClock:
    """The same interface over PyTorch's events and ``torch.cuda.CUDAGraph``."""

    def __init__(self):
        import torch  # optional baseline dependency, imported only when timing it

        self.torch = torch

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, ev):
        ev.record()

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return start.elapsed_time(end)

    def hold(self, ns: int) -> None:
        cp = backend.require_cuda("GPU timing")
        with warnings.catch_warnings():
            # CuPy 14 deprecates ExternalStream for Stream.from_external, which older CuPy
            # lacks; unfiltered, the warning came once a timed sample (thousands a run)
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = cp.cuda.ExternalStream(self.torch.cuda.current_stream().cuda_stream)
        _hold(cp, stream, ns)

    def capture(self, fn, calls: int, programmatic: bool):
        if programmatic:
            raise ValueError("programmatic edges are ours: time PyTorch with programmatic=False")
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        return _Replay(graph.replay, None)


def _hold(cp, stream, ns: int) -> None:
    """Queue ``tc_hold`` on ``stream``: it stays busy for ``ns`` nanoseconds."""
    kernel = cuda.get_kernel("timing_hold.cu", "tc_hold")
    with stream:
        kernel((1,), (1,), (np.uint64(ns),))


class _Replay:
    """A captured graph and the stream its replays (and their events) run on."""

    def __init__(self, launch, stream):
        self.launch, self.stream = launch, stream


def _clock(framework: str):
    if framework == "cupy":
        return _CupyClock()
    if framework == "torch":
        return _TorchClock()
    raise ValueError(f"framework must be 'cupy' or 'torch', got {framework!r}")


def time_events(fn, *, warmup: int = 10, repeat: int = 100, framework: str = "cupy") -> Timing:
    """Median time of eager calls of ``fn`` (an event pair around each call)."""
    clock = _clock(framework)
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        a, b = clock.event(), clock.event()
        clock.record(a)
        fn()
        clock.record(b)
        samples.append(1e3 * clock.elapsed_ms(a, b))
    return Timing.from_samples(samples, "events")


HOLD_US = 100.0
"""How long :func:`time_graph` holds the stream before each replay's start event: longer
than the host takes to record the event and launch the replay."""


def time_graph(fn, *, warmup: int = 3, repeat: int = 30, calls_per_graph: int = 20,
               framework: str = "cupy", programmatic: bool = False,
               hold_us: float = HOLD_US) -> Timing:
    """Per-call time of ``fn`` replayed from a CUDA graph of ``calls_per_graph`` calls.

    ``fn`` must not allocate device memory on the first call after its warm-up
    (pass preallocated outputs) and must not call cuBLAS under CuPy 14, which
    refuses cuBLAS during stream capture.  ``programmatic`` makes the graph's
    edges between our kernels programmatic, as the inference engine's are
    (:mod:`tensorconv.graph`).  ``hold_us``: the stream is held that long before each
    replay's start event, so the replay is queued when the stream reaches it and the
    host's launch of it is not timed (each sample waits for its replay, so without the
    hold the stream is idle at the start event and the launch lands inside the
    interval); 0 times the launch too.
    """
    if not hold_us >= 0:
        raise ValueError(f"hold_us must be >= 0, got {hold_us!r}")
    clock = _clock(framework)
    replay = clock.capture(fn, calls_per_graph, programmatic)
    hold_ns = int(round(1e3 * hold_us))

    def timed():
        a, b = clock.event(), clock.event()
        if hold_ns:
            clock.hold(hold_ns)
        clock.record(a)
        replay.launch()
        clock.record(b)
        return a, b

    def once() -> float:
        if replay.stream is not None:
            with replay.stream:
                a, b = timed()
        else:
            a, b = timed()
        return 1e3 * clock.elapsed_ms(a, b) / calls_per_graph

    for _ in range(warmup):
        once()
    samples = [once() for _ in range(repeat)]   # each read waits for its replay to end
    if replay.stream is not None:
        release_workspace(replay.stream)        # the graph replays no more
    return Timing.from_samples(samples, "graph")


def time_host(fn, *, warmup: int = 1, repeat: int = 5) -> Timing:
    """Median wall time of ``fn`` on the CPU (NumPy backend), microseconds."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(1e6 * (time.perf_counter() - t0))
    return Timing.from_samples(samples, "host")
