// The host drivers' files (tests/host/*_main.cpp): the command line (dir n accumulate relu
// has_bias has_residual grid_x grid_y) and the float32 arrays x, y (its start), bias and
// residual read from dir, y written back as out.bin.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <vector>

struct HostRun {
    const char* dir;
    int n, acc, relu;
    bool has_bias, has_res;
    int gx, gy;
};

inline HostRun host_args(char** argv) {
    return {argv[1], std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]),
            std::atoi(argv[5]) != 0, std::atoi(argv[6]) != 0, std::atoi(argv[7]),
            std::atoi(argv[8])};
}

// name.bin of dir, n floats (exits 2 if it is shorter)
inline std::vector<float> host_read(const HostRun& r, const char* name, size_t n) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/%s.bin", r.dir, name);
    std::vector<float> v(n);
    FILE* f = std::fopen(path, "rb");
    if (!f || std::fread(v.data(), 4, n, f) != n) { std::fprintf(stderr, "read %s\n", path); std::exit(2); }
    std::fclose(f);
    return v;
}

inline void host_write(const HostRun& r, const std::vector<float>& y) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/out.bin", r.dir);
    FILE* f = std::fopen(path, "wb");
    std::fwrite(y.data(), 4, y.size(), f);
    std::fclose(f);
}
