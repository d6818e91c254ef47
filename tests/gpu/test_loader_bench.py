"""Kernel loading (cache, compile errors, CUDA headers) and the GPU timers."""

from __future__ import annotations

import math

import pytest

from tensorconv import backend, bench, cuda, graph, timing

pytestmark = pytest.mark.gpu


def test_device_facts():
    f = backend.device_facts()
    assert f.sm_count > 0 and f.smem_per_block_optin >= f.smem_per_block > 0
    assert f.arch.startswith("sm_") and f.name


def test_kernels_are_cached():
    a = cuda.get_kernel("direct_conv.cu", "conv2d_direct_fwd<8, 3, 3>")
    b = cuda.get_kernel("direct_conv.cu", "conv2d_direct_fwd<8, 3, 3>")
    assert a is b and a.num_regs > 0 and a.local_size_bytes == 0  # no spills to local memory


def test_missing_kernel_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORCONV_KERNEL_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nope.cu"):
        cuda.get_kernel("nope.cu", "k")


def test_compile_error_names_file_options_and_log(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text(
        'extern "C" __global__ void k(float* p) { p[0] = undeclared; }\n')
    monkeypatch.setenv("TENSORCONV_KERNEL_DIR", str(tmp_path))
    with pytest.raises(cuda.KernelCompileError) as info:
        cuda.get_kernel("broken.cu", "k", defines={"MY_DEFINE": 3})
    text = str(info.value)
    assert "broken.cu" in text and "-DMY_DEFINE=3" in text and "undeclared" in text


def test_wmma_header_compiles_through_nvrtc(tmp_path, monkeypatch):
    """CuPy 14's NVRTC misses crt/mma.h unless the toolkit include dir is passed."""
    assert cuda.cuda_include_dirs(), "no CUDA include directory found"
    (tmp_path / "wmma.cu").write_text(
        "#include <mma.h>\n"
        'extern "C" __global__ void k(float* out) {\n'
        "  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> c;\n"
        "  nvcuda::wmma::fill_fragment(c, 1.0f);\n"
        "  nvcuda::wmma::store_matrix_sync(out, c, 16, nvcuda::wmma::mem_row_major);\n}\n")
    monkeypatch.setenv("TENSORCONV_KERNEL_DIR", str(tmp_path))
    import cupy as cp

    out = cp.zeros(256, cp.float32)
    cuda.get_kernel("wmma.cu", "k")((1,), (32,), (out,))
    assert float(out.sum()) == 256.0


def test_timers_return_finite_positive_times():
    import cupy as cp

    a = cp.ones(1 << 20, cp.float32)
    b = cp.empty_like(a)
    for t in (timing.time_events(lambda: cp.copyto(b, a), warmup=2, repeat=5),
              timing.time_graph(lambda: cp.copyto(b, a), warmup=1, repeat=3, calls_per_graph=4)):
        assert math.isfinite(t.median_us) and t.median_us > 0
    programmatic = graph.supported()
    floor = bench.launch_floor(quick=True)
    assert set(floor) == {"eager", "graph"} | ({"graph_programmatic"} if programmatic else set())
    assert all(math.isfinite(t.median_us) and t.median_us > 0 for t in floor.values())
    sync = bench.sync_floor(quick=True, steps=6)        # checks every chain's result itself
    assert set(sync) == ({"graph_launch", "grid_barrier"}
                         | ({"programmatic_launch"} if programmatic else set()))
    assert all(math.isfinite(v) and v > 0 for v in sync.values())
    with pytest.raises(ValueError, match="steps"):
        bench.sync_floor(steps=3)


def test_the_hold_keeps_its_stream_busy_for_as_long_as_asked():
    import cupy as cp

    clock = timing._CupyClock()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    clock.hold(200_000)
    b.record()
    assert clock.elapsed_ms(a, b) >= 0.2


def test_graph_times_leave_the_hosts_launch_of_each_replay_out():
    """One empty kernel a replay: timed with the launch, the host's launch call lies
    inside the interval; behind the hold, only the GPU's replay does."""
    kernel = cuda.get_kernel("launch_floor.cu", "empty_kernel")
    run = lambda: kernel((1,), (32,), ())                        # noqa: E731
    plain = timing.time_graph(run, repeat=50, calls_per_graph=1, hold_us=0)
    held = timing.time_graph(run, repeat=50, calls_per_graph=1)
    assert held.median_us < plain.median_us


def test_pytorch_graph_times_take_the_hold_too():
    torch = pytest.importorskip("torch")
    if not bench.torch_cudnn_available():
        pytest.skip("PyTorch without CUDA")
    a = torch.ones(1 << 16, device="cuda")
    b = torch.empty_like(a)
    t = timing.time_graph(lambda: b.copy_(a), repeat=5, calls_per_graph=2, framework="torch")
    assert math.isfinite(t.median_us) and t.median_us > 0


def test_graph_timing_starts_after_the_callers_queued_work():
    """The function timed reads what the caller's stream is still writing (a planner's
    weights copied in, then timed on a stream of the timer's own): its first call must
    see it written.  Engine planning broke this way when its stream and the timer's did
    not wait for each other."""
    import cupy as cp

    caller = cp.cuda.Stream(non_blocking=True)
    with caller:
        a = cp.zeros(1, cp.float32)
        timing._hold(cp, caller, 50_000_000)     # 50 ms: the write lands long after the call
        a.fill(1.0)
        b = cp.empty_like(a)
        seen = []

        def fn():
            if not seen:
                seen.append(float(a.get()[0]))   # the warm call, before capture
            cp.copyto(b, a)

        timing.time_graph(fn, warmup=0, repeat=1, calls_per_graph=1)
    assert seen == [1.0]
