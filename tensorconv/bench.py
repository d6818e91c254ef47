"""Timing, baselines and roofline figures for benchmarks (never for tests).

Two ways to time a callable, both on the GPU's own clock (CUDA events):

* :func:`time_events` — eager calls, one event pair around each; includes the
  Python and launch overhead a user pays when calling the op directly.
* :func:`time_graph` — the calls captured once into a CUDA graph and replayed;
  per-call time with launch overhead removed (the kernel-level figure).

Both warm up first and report the median over repeats with the spread.  The
same helpers time PyTorch callables (cuDNN baselines) through a PyTorch clock,
so ours and the baseline are measured the same way in the same run.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorconv import __version__, backend, cuda
from tensorconv import graph as captured_graph


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

    def capture(self, fn, calls: int, programmatic: bool):
        stream = self.cp.cuda.Stream(non_blocking=True)
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


def time_graph(fn, *, warmup: int = 3, repeat: int = 30, calls_per_graph: int = 20,
               framework: str = "cupy", programmatic: bool = False) -> Timing:
    """Per-call time of ``fn`` replayed from a CUDA graph of ``calls_per_graph`` calls.

    ``fn`` must not allocate device memory on the first call after its warm-up
    (pass preallocated outputs) and must not call cuBLAS under CuPy 14, which
    refuses cuBLAS during stream capture.  ``programmatic`` makes the graph's
    edges between our kernels programmatic, as the inference engine's are
    (:mod:`tensorconv.graph`).
    """
    clock = _clock(framework)
    replay = clock.capture(fn, calls_per_graph, programmatic)

    def once() -> float:
        a, b = clock.event(), clock.event()
        if replay.stream is not None:
            with replay.stream:
                clock.record(a)
                replay.launch()
                clock.record(b)
        else:
            clock.record(a)
            replay.launch()
            clock.record(b)
        return 1e3 * clock.elapsed_ms(a, b) / calls_per_graph

    for _ in range(warmup):
        once()
    return Timing.from_samples([once() for _ in range(repeat)], "graph")


# --------------------------------------------------------------------------- baselines

def torch_cudnn_available() -> bool:
    """True when PyTorch with a CUDA device and cuDNN can be imported."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available() and torch.backends.cudnn.is_available())


def cudnn_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                 allow_tf32: bool = False):
    """A zero-argument callable running cuDNN (PyTorch ``conv2d``) on ``x``, ``w``.

    The CuPy inputs are shared with PyTorch through DLPack (no copy).
    ``cudnn.benchmark`` is on, so PyTorch picks cuDNN's fastest algorithm for
    the shape during warm-up; ``allow_tf32`` selects whether it may use TF32
    tensor cores for fp32 inputs (the record should say which was timed).
    """
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = allow_tf32
    xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
    bt = None if bias is None else torch.from_dlpack(bias)

    def run():
        return F.conv2d(xt, wt, bt, stride, padding, dilation, groups)

    return run


def cublas_conv1x1(x, w):
    """A callable computing a stride-1 1x1 convolution as one cuBLAS GEMM per image.

    ``w`` (K, C) times each image's (C, H*W) view; eager only (CuPy 14 refuses
    cuBLAS during graph capture).
    """
    cp = backend.require_cuda("cublas_conv1x1")
    n, c, h, wd = x.shape
    w2 = w.reshape(w.shape[0], c)
    x3 = x.reshape(n, c, h * wd)
    out = cp.empty((n, w2.shape[0], h * wd), dtype=x.dtype)

    def run():
        return cp.matmul(w2, x3, out=out)

    return run


def torch_cp_sequence(x, s, h, w, t, padding=0, *, allow_tf32: bool = False):
    """A callable running a CP layer as PyTorch's four calls (cuDNN 1x1, depthwise kh x 1,
    depthwise 1 x kw, cuDNN 1x1): the pairwise sequence on the vendor libraries.

    Factors as for :func:`tensorconv.ops.cp.cp_conv2d`; CuPy arrays shared through
    DLPack.  Stride 1; ``padding`` is (ph, pw).
    """
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    xt = torch.from_dlpack(x)
    st, ht, wt, tt = (torch.from_dlpack(a) for a in (s, h, w, t))
    r = st.shape[1]
    w_in = st.t().contiguous()[:, :, None, None]
    w_h = ht.t().contiguous()[:, None, :, None]
    w_w = wt.t().contiguous()[:, None, None, :]
    w_out = tt.contiguous()[:, :, None, None]
    ph, pw = padding

    def run():
        y = F.conv2d(xt, w_in)
        y = F.conv2d(y, w_h, padding=(ph, 0), groups=r)
        y = F.conv2d(y, w_w, padding=(0, pw), groups=r)
        return F.conv2d(y, w_out)

    return run


def peak_device_bytes(fn, framework: str = "cupy") -> int:
    """Device memory ``fn`` allocates at its peak beyond what was already in use: its
    outputs, intermediates and workspace (CuPy's pool through a memory hook, or
    PyTorch's allocator statistics)."""
    if framework == "torch":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - base)
    cp = backend.require_cuda("peak_device_bytes")
    pool = cp.get_default_memory_pool()

    class Peak(cp.cuda.MemoryHook):
        name = "tensorconv_peak"

        def __init__(self):
            self.peak = pool.used_bytes()

        def malloc_postprocess(self, **kwargs):
            self.peak = max(self.peak, pool.used_bytes())

    cp.cuda.Device().synchronize()
    base = pool.used_bytes()
    with Peak() as hook:
        result = fn()
        cp.cuda.Device().synchronize()
    del result
    return int(hook.peak - base)


# --------------------------------------------------------------------------- roofline

@dataclass(frozen=True)
class Ceilings:
    """Measured device ceilings that roofline floors are drawn against."""

    copy_bytes_per_s: float   # device-to-device copy, bytes read + written
    fp32_flops_per_s: float   # cuBLAS SGEMM (no TF32), 8192^3
    launch_eager_us: float    # empty kernel from Python
    launch_graph_us: float    # empty kernel inside a CUDA graph


def measure_ceilings(quick: bool = False) -> Ceilings:
    """Measure the copy bandwidth, the fp32 GEMM rate and the launch floor."""
    cp = backend.require_cuda("measure_ceilings")
    nbytes = (64 if quick else 512) << 20
    n = 4096 if quick else 8192

    def copy_time() -> float:
        src = cp.random.random(nbytes // 4, dtype=cp.float32)
        dst = cp.empty_like(src)
        return time_events(lambda: cp.copyto(dst, src), warmup=3,
                           repeat=10 if quick else 30).median_us

    def gemm_time() -> float:
        a = cp.random.random((n, n), dtype=cp.float32)
        b = cp.random.random((n, n), dtype=cp.float32)
        c = cp.empty((n, n), dtype=cp.float32)
        return time_events(lambda: cp.matmul(a, b, out=c), warmup=2,
                           repeat=5 if quick else 10).median_us

    t_copy, t_gemm = copy_time(), gemm_time()
    cp.get_default_memory_pool().free_all_blocks()  # the big operands are gone: give them back
    floor = launch_floor(quick)
    return Ceilings(2 * nbytes / (t_copy * 1e-6), 2 * n ** 3 / (t_gemm * 1e-6),
                    floor["eager"].median_us, floor["graph"].median_us)


def launch_floor(quick: bool = False) -> dict:
    """Time an empty kernel eagerly, inside a CUDA graph and, where the device has them,
    inside a graph with programmatic edges (:mod:`tensorconv.graph`): the per-kernel floor."""
    kernel = cuda.get_kernel("launch_floor.cu", "empty_kernel")

    def launch():
        kernel((1,), (32,), ())

    reps = 50 if quick else 200
    out = {"eager": time_events(launch, repeat=reps),
           "graph": time_graph(launch, repeat=reps // 5, calls_per_graph=100)}
    if captured_graph.supported():
        out["graph_programmatic"] = time_graph(launch, repeat=reps // 5, calls_per_graph=100,
                                               programmatic=True)
    return out


def sync_floor(quick: bool = False, steps: int = 32) -> dict:
    """Per-step cost (µs) of the cheapest layer boundary: every block (one per SM) reads a
    value another block wrote in the step before, ``"graph_launch"`` as one dependent launch
    per step in a CUDA graph, ``"programmatic_launch"`` the same with programmatic edges
    (where the device has them), ``"grid_barrier"`` as grid-wide barriers inside one
    persistent kernel.  Each chain's result is checked first (a broken barrier, or a
    launch that read before the one ahead of it had written, raises)."""
    cp = backend.require_cuda("sync_floor")
    if steps < 2 or steps % 2:
        raise ValueError(f"steps must be even and >= 2, got {steps}")
    nb = backend.device_facts().sm_count
    step = cuda.get_kernel("launch_floor.cu", "dependent_step")
    barrier = cuda.get_kernel("launch_floor.cu", "barrier_steps")
    buf, count = cp.zeros(2 * nb, cp.float32), cp.zeros(2, cp.uint32)

    def chain():
        for s in range(steps):
            step((nb,), (32,), (buf, np.int32(s)))

    def persistent():
        barrier((nb,), (32,), (buf, count, count[1:], np.int32(steps)))

    cases = [("graph_launch", chain, False), ("grid_barrier", persistent, False)]
    if captured_graph.supported():
        cases.insert(1, ("programmatic_launch", chain, True))
    out = {}
    stream = cp.cuda.Stream(non_blocking=True)
    for name, run, programmatic in cases:
        with stream:
            buf.fill(0)
            captured_graph.CapturedGraph(stream, run,
                                         programmatic=programmatic).launch(stream)
            stream.synchronize()
        if not bool((buf[:nb] == steps).all()) or int(count[0]) != 0:
            raise RuntimeError(f"sync_floor: the {name} chain computed a wrong result")
        t = time_graph(run, repeat=5 if quick else 30, calls_per_graph=5,
                       programmatic=programmatic)
        out[name] = t.median_us / steps
    return out


def roofline_floor_us(flops: float, min_bytes: float, ceilings: Ceilings) -> float:
    """The time no implementation beats: the slower of compute and memory at the ceilings."""
    return 1e6 * max(flops / ceilings.fp32_flops_per_s, min_bytes / ceilings.copy_bytes_per_s)


# --------------------------------------------------------------------------- environment

def _git_commit() -> str:
    """The source commit: ``TENSORCONV_COMMIT`` (set where the tree has no .git), else git's."""
    if os.environ.get("TENSORCONV_COMMIT"):
        return os.environ["TENSORCONV_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).resolve().parent, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(with_torch: bool = False) -> dict:
    """Where and how a result was measured: device, versions, command, commit, time."""
    env = {
        "tensorconv": __version__,
        "commit": _git_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host_cpu": platform.processor() or platform.machine(),
    }
    if backend.gpu_available():
        import cupy

        facts = backend.device_facts()
        env.update(device=facts.name, arch=facts.arch, sms=facts.sm_count,
                   cuda_runtime=facts.cuda_runtime, cuda_driver=facts.cuda_driver,
                   cupy=cupy.__version__)
    else:
        env["device"] = f"CPU ({env['host_cpu']}, NumPy backend)"
    if with_torch and torch_cudnn_available():
        import torch

        env.update(torch=torch.__version__, cudnn=torch.backends.cudnn.version())
    return env


def time_host(fn, *, warmup: int = 1, repeat: int = 5) -> Timing:
    """Median wall time of ``fn`` on the CPU (NumPy backend), microseconds."""
    import time

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(1e6 * (time.perf_counter() - t0))
    return Timing.from_samples(samples, "host")
