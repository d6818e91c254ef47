"""Which kernels may start before the kernel ahead of them has finished (CPU checks)."""

from __future__ import annotations

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

