// Runs kernels_cu/sparse_unrolled_direct.cu on the CPU for tests/test_sparse_unrolled_direct.py:
// each CUDA thread of a block is a host thread (a split tile's shares meet at a barrier),
// shared memory one array, NaN at each block's start.  Reads x (and bias, residual, y's
// start) from the files named on the command line, writes y (host_io.h).
#include "sparse_unrolled_host.h"
template <class T> inline T __ldg(const T* p) { return *p; }
#define TC_SKIP_INSTANCES       // the one epilogue asked for, SU_EPI
#include "sparse_unrolled_direct.cu"
#include "host_io.h"

float pu_ring[1 << 16];   // the threads' rings (ring tiles) or a split's shares

struct Args { const float *x, *bias, *residual; float* y; int n, tid; };

static void* thread_main(void* p) {
    const Args* a = static_cast<const Args*>(p);
    threadIdx = {a->tid, 0, 0};
    sparse_unrolled_direct<SU_EPI>(a->x, a->bias, a->residual, a->y, a->n);
    return nullptr;
}

int main(int argc, char** argv) {
    const HostRun r = host_args(argv);
    const size_t nx = (size_t)r.n * pu::C * pu::H * pu::W, ny = (size_t)r.n * pu::K * pu::OH * pu::OW;
    std::vector<float> x = host_read(r, "x", nx), y = host_read(r, "y", ny), bias, res;
    if (r.has_bias) bias = host_read(r, "bias", pu::K);
    if (r.has_res) res = host_read(r, "residual", ny);
    if ((size_t)pu::RING * pu::T + (size_t)(pu::KS - 1) * pu::RB * pu::TP >
        sizeof pu_ring / sizeof pu_ring[0]) return 3;
    std::vector<pthread_t> threads(pu::T);
    std::vector<Args> args(pu::T);
    for (int bx = 0; bx < r.gx; ++bx)
        for (int by = 0; by < r.gy; ++by) {
            blockIdx = {bx, by, 0};
            for (float& v : pu_ring) v = NAN;
            pthread_barrier_init(&su_barrier, nullptr, pu::T);
            for (int t = 0; t < pu::T; ++t) {
                args[t] = {x.data(), r.has_bias ? bias.data() : nullptr,
                           r.has_res ? res.data() : nullptr, y.data(), r.n, t};
                pthread_create(&threads[t], nullptr, thread_main, &args[t]);
            }
            for (int t = 0; t < pu::T; ++t) pthread_join(threads[t], nullptr);
            pthread_barrier_destroy(&su_barrier);
        }
    host_write(r, y);
    return 0;
}
