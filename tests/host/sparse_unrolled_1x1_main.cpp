// Runs kernels_cu/sparse_unrolled_1x1.cu on the CPU for tests/test_sparse_unrolled_1x1.py:
// the kernel has no barrier and no shared memory, so every thread of the grid runs in turn.
// Reads x (and bias, residual, y's start) from the files named on the command line, writes y.
#include "sparse_unrolled_host.h"
template <class T> inline T __ldg(const T* p) { return *p; }
#include "sparse_unrolled_1x1.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>

static std::vector<float> read(const char* path, size_t n) {
    std::vector<float> v(n);
    FILE* f = std::fopen(path, "rb");
    if (!f || std::fread(v.data(), 4, n, f) != n) { std::fprintf(stderr, "read %s\n", path); std::exit(2); }
    std::fclose(f);
    return v;
}

int main(int argc, char** argv) {
    // argv: dir n accumulate relu has_bias has_residual grid_x grid_y
    const char* dir = argv[1];
    const int n = std::atoi(argv[2]), acc = std::atoi(argv[3]), relu = std::atoi(argv[4]);
    const bool has_bias = std::atoi(argv[5]), has_res = std::atoi(argv[6]);
    const int gx = std::atoi(argv[7]), gy = std::atoi(argv[8]);
    char path[4096];
    const size_t nx = (size_t)n * pu::C * pu::H * pu::W, ny = (size_t)n * pu::K * pu::OH * pu::OW;
    std::snprintf(path, sizeof path, "%s/x.bin", dir);
    std::vector<float> x = read(path, nx);
    std::snprintf(path, sizeof path, "%s/y.bin", dir);
    std::vector<float> y = read(path, ny);
    std::vector<float> bias, res;
    if (has_bias) { std::snprintf(path, sizeof path, "%s/bias.bin", dir); bias = read(path, pu::K); }
    if (has_res) { std::snprintf(path, sizeof path, "%s/residual.bin", dir); res = read(path, ny); }
    for (int bx = 0; bx < gx; ++bx)
        for (int by = 0; by < gy; ++by) {
            blockIdx = {bx, by, 0};
            for (int t = 0; t < pu::T; ++t) {
                threadIdx = {t, 0, 0};
                sparse_unrolled_1x1(x.data(), has_bias ? bias.data() : nullptr,
                                    has_res ? res.data() : nullptr, y.data(), n, acc, relu);
            }
        }
    std::snprintf(path, sizeof path, "%s/out.bin", dir);
    FILE* f = std::fopen(path, "wb");
    std::fwrite(y.data(), 4, ny, f);
    std::fclose(f);
    return 0;
}
