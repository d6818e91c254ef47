// The driver of sparse_unrolled_host.h: reads x (and bias, residual, y's start) from the
// files named on the command line, runs every block of the grid, writes y (host_io.h).
#include "sparse_unrolled_host.h"
#include "sparse_unrolled.cu"
#include "host_io.h"

float sm[1 << 20];

struct Args { const float *x, *bias, *residual; float* y; int n, acc, relu; int tid; };

static void* thread_main(void* p) {
    Args* a = static_cast<Args*>(p);
    threadIdx = {a->tid, 0, 0};
    sparse_unrolled<SU_VEC>(a->x, a->bias, a->residual, a->y, a->n, a->acc, a->relu);
    return nullptr;
}

int main(int argc, char** argv) {
    const HostRun r = host_args(argv);
    const size_t nx = (size_t)r.n * su::C * su::H * su::W, ny = (size_t)r.n * su::K * su::OH * su::OW;
    std::vector<float> x = host_read(r, "x", nx), y = host_read(r, "y", ny), bias, res;
    if (r.has_bias) bias = host_read(r, "bias", su::K);
    if (r.has_res) res = host_read(r, "residual", ny);
    if ((size_t)2 * su::STAGE > sizeof sm / sizeof sm[0]) return 3;
    std::vector<pthread_t> threads(su::T);
    std::vector<Args> args(su::T);
    for (int bx = 0; bx < r.gx; ++bx)
        for (int by = 0; by < r.gy; ++by) {
            blockIdx = {bx, by, 0};
            for (size_t i = 0; i < sizeof sm / sizeof sm[0]; ++i) sm[i] = NAN;
            pthread_barrier_init(&su_barrier, nullptr, su::T);
            for (int t = 0; t < su::T; ++t) {
                args[t] = {x.data(), r.has_bias ? bias.data() : nullptr,
                           r.has_res ? res.data() : nullptr, y.data(), r.n, r.acc, r.relu, t};
                pthread_create(&threads[t], nullptr, thread_main, &args[t]);
            }
            for (int t = 0; t < su::T; ++t) pthread_join(threads[t], nullptr);
            pthread_barrier_destroy(&su_barrier);
        }
    host_write(r, y);
    return 0;
}
