// The driver of sparse_unrolled_host.h: reads x (and bias, residual, y's start) from the
// files named on the command line, runs every block of the grid, writes y.
#include "sparse_unrolled_host.h"
#include "sparse_unrolled.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>

float sm[1 << 20];

static std::vector<float> read(const char* path, size_t n) {
    std::vector<float> v(n);
    FILE* f = std::fopen(path, "rb");
    if (!f || std::fread(v.data(), 4, n, f) != n) { std::fprintf(stderr, "read %s\n", path); std::exit(2); }
    std::fclose(f);
    return v;
}

struct Args { const float *x, *bias, *residual; float* y; int n, acc, relu; int tid; };

static void* thread_main(void* p) {
    Args* a = static_cast<Args*>(p);
    threadIdx = {a->tid, 0, 0};
    sparse_unrolled<SU_VEC>(a->x, a->bias, a->residual, a->y, a->n, a->acc, a->relu);
    return nullptr;
}

int main(int argc, char** argv) {
    // argv: dir n accumulate relu has_bias has_residual grid_x grid_y
    const char* dir = argv[1];
    const int n = std::atoi(argv[2]), acc = std::atoi(argv[3]), relu = std::atoi(argv[4]);
    const bool has_bias = std::atoi(argv[5]), has_res = std::atoi(argv[6]);
    const int gx = std::atoi(argv[7]), gy = std::atoi(argv[8]);
    char path[4096];
    const size_t nx = (size_t)n * su::C * su::H * su::W, ny = (size_t)n * su::K * su::OH * su::OW;
    std::snprintf(path, sizeof path, "%s/x.bin", dir);
    std::vector<float> x = read(path, nx);
    std::snprintf(path, sizeof path, "%s/y.bin", dir);
    std::vector<float> y = read(path, ny);
    std::vector<float> bias, res;
    if (has_bias) { std::snprintf(path, sizeof path, "%s/bias.bin", dir); bias = read(path, su::K); }
    if (has_res) { std::snprintf(path, sizeof path, "%s/residual.bin", dir); res = read(path, ny); }
    if ((size_t)2 * su::STAGE > sizeof sm / sizeof sm[0]) return 3;
    std::vector<pthread_t> threads(su::T);
    std::vector<Args> args(su::T);
    for (int bx = 0; bx < gx; ++bx)
        for (int by = 0; by < gy; ++by) {
            blockIdx = {bx, by, 0};
            for (size_t i = 0; i < sizeof sm / sizeof sm[0]; ++i) sm[i] = NAN;
            pthread_barrier_init(&su_barrier, nullptr, su::T);
            for (int t = 0; t < su::T; ++t) {
                args[t] = {x.data(), has_bias ? bias.data() : nullptr,
                           has_res ? res.data() : nullptr, y.data(), n, acc, relu, t};
                pthread_create(&threads[t], nullptr, thread_main, &args[t]);
            }
            for (int t = 0; t < su::T; ++t) pthread_join(threads[t], nullptr);
            pthread_barrier_destroy(&su_barrier);
        }
    std::snprintf(path, sizeof path, "%s/out.bin", dir);
    FILE* f = std::fopen(path, "wb");
    std::fwrite(y.data(), 4, ny, f);
    std::fclose(f);
    return 0;
}
