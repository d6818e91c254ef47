"""Baselines, ceilings and the environment a result was measured in (benchmarks, never tests).

* baselines: cuDNN through PyTorch (:func:`cudnn_conv2d`, :func:`torch_cp_sequence`),
  cuBLAS through CuPy (:func:`cublas_conv1x1`), peak device memory of a callable;
* ceilings: copy bandwidth, fp32 GEMM rate, launch and synchronisation floors, the
  roofline floor they give a kernel;
* :func:`environment`: device, versions, command and commit, for every results file.

Timing itself is :mod:`tensorconv.timing` (the library's tuners use it too).
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
from tensorconv.timing import time_events, time_graph

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

    Factors as for :func:`tensorconv.ops.cp_conv2d`; CuPy arrays shared through
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
    stream.wait_event(cp.cuda.get_current_stream().record())   # buf and count zeroed there
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

def _git_commit(where: Path | None = None) -> str:
    """The source commit: ``TENSORCONV_COMMIT`` (set where the tree has no .git), else
    git's, with ``+dirty`` where tracked files differ from it (a run on uncommitted
    kernels must not carry a clean commit's name)."""
    if os.environ.get("TENSORCONV_COMMIT"):
        return os.environ["TENSORCONV_COMMIT"]
    cwd = where or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=cwd, timeout=5)
        commit = out.stdout.strip()
        if not commit:
            return "unknown"
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, cwd=cwd, timeout=10)
        return commit + ("+dirty" if changed.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_label() -> str:
    """The device a measurement taken now runs on, as results files name it."""
    if backend.gpu_available():
        return backend.device_facts().name
    return f"CPU ({platform.processor() or platform.machine()}, NumPy backend)"


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
        env.update(device=device_label(), arch=facts.arch, sms=facts.sm_count,
                   cuda_runtime=facts.cuda_runtime, cuda_driver=facts.cuda_driver,
                   cupy=cupy.__version__)
    else:
        env["device"] = device_label()
    if with_torch and torch_cudnn_available():
        import torch

        env.update(torch=torch.__version__, cudnn=torch.backends.cudnn.version())
    return env
