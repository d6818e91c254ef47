// Runs kernels_cu/sparse_unrolled_direct.cu on the CPU for tests/test_sparse_unrolled_direct.py:
// the kernel has no barrier and no shared memory, so every thread of the grid runs in turn.
// Reads x (and bias, residual, y's start) from the files named on the command line, writes y
// (host_io.h).
#include "sparse_unrolled_host.h"
template <class T> inline T __ldg(const T* p) { return *p; }
#define TC_SKIP_INSTANCES       // the one epilogue asked for, SU_EPI
#include "sparse_unrolled_direct.cu"
#include "host_io.h"

float pu_ring[1 << 16];   // the threads' rings (ring tiles), NaN until copied into

int main(int argc, char** argv) {
    const HostRun r = host_args(argv);
    const size_t nx = (size_t)r.n * pu::C * pu::H * pu::W, ny = (size_t)r.n * pu::K * pu::OH * pu::OW;
    std::vector<float> x = host_read(r, "x", nx), y = host_read(r, "y", ny), bias, res;
    if (r.has_bias) bias = host_read(r, "bias", pu::K);
    if (r.has_res) res = host_read(r, "residual", ny);
    if ((size_t)pu::RING * pu::T > sizeof pu_ring / sizeof pu_ring[0]) return 3;
    for (float& v : pu_ring) v = NAN;
    for (int bx = 0; bx < r.gx; ++bx)
        for (int by = 0; by < r.gy; ++by) {
            blockIdx = {bx, by, 0};
            for (int t = 0; t < pu::T; ++t) {
                threadIdx = {t, 0, 0};
                sparse_unrolled_direct<SU_EPI>(x.data(), r.has_bias ? bias.data() : nullptr,
                                            r.has_res ? res.data() : nullptr, y.data(), r.n);
            }
        }
    host_write(r, y);
    return 0;
}
