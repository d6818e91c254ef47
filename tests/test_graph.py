"""Which kernels may start before the kernel ahead of them has finished, and the
per-stream scratch that captured graphs point at (CPU checks)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import cuda


@pytest.mark.parametrize("path", sorted(cuda.kernel_dir().glob("*.cu")), ids=lambda p: p.name)
def test_every_kernel_of_ours_waits_for_prior_grids(path):
    assert cuda.every_kernel_waits(path.read_text()), \
        f"{path.name}: a kernel does not begin with tc::wait_prior_grids()"


WAITS = '''
template <int P>  // a comment; with a semicolon
__global__ void __launch_bounds__(256) f(const float* x,  // (N,); a comment
                                         float* y)
{
    tc::wait_prior_grids();
    y[0] = x[0];
}
extern "C" __global__ void g() { tc::wait_prior_grids(); }
#define INST template __global__ void f<4>(const float*, float*);
'''


def test_every_kernel_waits_reads_definitions_not_instantiations():
    assert cuda.every_kernel_waits(WAITS)
    late = WAITS.replace("    tc::wait_prior_grids();\n    y[0] = x[0];",
                         "    y[0] = x[0];\n    tc::wait_prior_grids();")
    assert not cuda.every_kernel_waits(late)          # a write before the wait
    missing = WAITS.replace("{ tc::wait_prior_grids(); }", "{}")
    assert not cuda.every_kernel_waits(missing)       # one kernel of two never waits
    assert not cuda.every_kernel_waits("__device__ float h(float v) { return v; }")  # no kernel


def test_waits_for_prior_grids_knows_only_loaded_kernels():
    assert not cuda.waits_for_prior_grids(0)


def test_a_streams_scratch_is_dropped_when_its_owner_releases_it():
    """workspace() keeps one buffer per (device, stream); release_workspace drops a stream's
    on every device and no other stream's."""
    from types import SimpleNamespace

    from tensorconv.ops import _launch

    current = {"stream": None}
    xp = SimpleNamespace(
        empty=lambda n, dtype: np.empty(n, dtype),
        cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: 0),
                             get_current_stream=lambda: current["stream"]))
    a, b = SimpleNamespace(ptr=0xA0), SimpleNamespace(ptr=0xB0)
    before = dict(_launch._workspaces)
    try:
        current["stream"] = a
        buf = _launch.workspace(xp, 10)
        assert _launch.workspace(xp, 4) is buf and buf.size == 10   # reused: it only grows
        current["stream"] = b
        other = _launch.workspace(xp, 10)
        assert other is not buf
        _launch.release_workspace(a)
        assert (0, 0xA0) not in _launch._workspaces
        assert _launch._workspaces[(0, 0xB0)] is other
    finally:
        _launch._workspaces.clear()
        _launch._workspaces.update(before)
