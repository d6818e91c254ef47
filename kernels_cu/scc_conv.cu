// Sliding-channel convolution (DSXplore's SCC, Wang et al., IPDPS'21), fp32, NCHW.
//
// Filter k reads the U input channels (b_k + u) mod Cin, b_k = (k * stride) mod Cin.  After
// `cycle` filters the windows repeat, so the filters fall into `cycle` window groups:
// group j holds filters j, j + cycle, j + 2 cycle, ... and all of them read window b_j.
// Every kernel here works on a window group at a time, which is the paper's
// channel-cyclic reuse: a group's window is staged once for all of its filters.
//
// scc_fwd: a tile of BK filters of one group x BP pixels of one image per block, the
//   window streamed through shared memory UC channels at a time (wrapping past Cin), the
//   weights beside it; each thread 2 filters x 4 pixels; bias and ReLU fused.
// scc_bwd_data: the input-centric gradient, one thread per (input channel, pixel): it
//   walks the (filter, weight) pairs whose window holds its channel (the channel map, a
//   CSR table) and writes its value once: no atomics, deterministic.
// scc_bwd_data_atomic: the output-centric variant ("Var"): one thread per (filter,
//   pixel) adds w[k, u] * gy[k, p] into each of its window's channels with atomicAdd.
// scc_bwd_filter: the weight gradient without atomics: a block reduces a tile of BK
//   filters of one group x UC window offsets over its share of the pixels into a partial
//   sum; scc_reduce_splits adds the shares in a fixed order.
//
// Launch geometry, tables and checks belong to tensorconv/ops/scc_conv.py.
#include "tc_common.cuh"

namespace scc {
constexpr int BK = 32, BP = 64, UC = 32, THREADS = 256;
}

__global__ void __launch_bounds__(scc::THREADS) scc_fwd(
    const float* __restrict__ x,      // (N, Cin, P)
    const float* __restrict__ w,      // (Cout, U)
    const float* __restrict__ bias,   // (Cout,) or nullptr
    float* __restrict__ y,            // (N, Cout, P)
    int Cin, int Cout, int U, int stride, int cycle, int P, int p_tiles, int k_tiles,
    int relu)
{
    using namespace scc;
    tc::wait_prior_grids();
    __shared__ float xs[UC][BP];
    __shared__ float ws[BK][UC + 1];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int n = blockIdx.x / p_tiles, p0 = (blockIdx.x - n * p_tiles) * BP;
    const int j = blockIdx.y / k_tiles, t0 = (blockIdx.y - j * k_tiles) * BK;
    const int start = (int)(((long long)j * stride) % Cin);
    const float* xn = x + (size_t)n * Cin * P;
    float acc[2][4] = {};
    for (int u0 = 0; u0 < U; u0 += UC) {
        for (int e = tid; e < UC * BP; e += THREADS) {
            const int u = e / BP, p = e - u * BP;
            int c = start + u0 + u;
            c -= c >= Cin ? Cin : 0;   // start < Cin and u0 + u < U <= Cin: one wrap at most
            xs[u][p] = u0 + u < U && p0 + p < P ? xn[(size_t)c * P + p0 + p] : 0.f;
        }
        for (int e = tid; e < BK * UC; e += THREADS) {
            const int kk = e / UC, u = e - kk * UC;
            const int k = j + (t0 + kk) * cycle;
            ws[kk][u] = k < Cout && u0 + u < U ? w[(size_t)k * U + u0 + u] : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int u = 0; u < UC; ++u) {
            const float a0 = ws[2 * ty][u], a1 = ws[2 * ty + 1][u];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float b = xs[u][tx + 16 * i];
                acc[0][i] = fmaf(a0, b, acc[0][i]);
                acc[1][i] = fmaf(a1, b, acc[1][i]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int k = j + (t0 + 2 * ty + r) * cycle;
        if (k >= Cout) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int p = p0 + tx + 16 * i;
            if (p >= P) continue;
            const size_t at = ((size_t)n * Cout + k) * P + p;
            y[at] = tc::conv_epilogue(acc[r][i], bias, k, nullptr, at, relu);
        }
    }
}

__global__ void __launch_bounds__(scc::THREADS) scc_bwd_data(
    const float* __restrict__ gy,      // (N, Cout, P)
    const float* __restrict__ w,       // (Cout, U)
    const int* __restrict__ map_ptr,   // (Cin + 1,): channel c's pairs
    const int* __restrict__ map_k,     // the filter of each pair
    const int* __restrict__ map_w,     // its weight's index k * U + u
    float* __restrict__ gx,            // (N, Cin, P)
    int Cin, int Cout, int P, int p_tiles)
{
    tc::wait_prior_grids();
    const int n = blockIdx.x / p_tiles;
    const int p = (blockIdx.x - n * p_tiles) * scc::THREADS + threadIdx.x, c = blockIdx.y;
    if (p >= P) return;
    const float* g = gy + (size_t)n * Cout * P + p;
    float acc = 0.f;
    const int end = map_ptr[c + 1];
#pragma unroll 4
    for (int e = map_ptr[c]; e < end; ++e) acc = fmaf(w[map_w[e]], g[(size_t)map_k[e] * P], acc);
    gx[((size_t)n * Cin + c) * P + p] = acc;
}

__global__ void __launch_bounds__(scc::THREADS) scc_bwd_data_atomic(
    const float* __restrict__ gy,      // (N, Cout, P)
    const float* __restrict__ w,       // (Cout, U)
    float* __restrict__ gx,            // (N, Cin, P), zeroed first
    int Cin, int Cout, int U, int stride, int P, int p_tiles)
{
    tc::wait_prior_grids();
    const int n = blockIdx.x / p_tiles;
    const int p = (blockIdx.x - n * p_tiles) * scc::THREADS + threadIdx.x, k = blockIdx.y;
    if (p >= P) return;
    const float g = gy[((size_t)n * Cout + k) * P + p];
    const int start = (int)(((long long)k * stride) % Cin);
    float* out = gx + (size_t)n * Cin * P + p;
    for (int u = 0; u < U; ++u) {
        int c = start + u;
        c -= c >= Cin ? Cin : 0;
        atomicAdd(out + (size_t)c * P, w[(size_t)k * U + u] * g);
    }
}

__global__ void __launch_bounds__(scc::THREADS) scc_bwd_filter(
    const float* __restrict__ x,       // (N, Cin, P)
    const float* __restrict__ gy,      // (N, Cout, P)
    float* __restrict__ partial,       // (splits, Cout, U)
    int N, int Cin, int Cout, int U, int stride, int cycle, int P, int k_tiles, int u_tiles,
    int per_split)
{
    using namespace scc;
    tc::wait_prior_grids();
    __shared__ float gs[BK][BP + 1];
    __shared__ float xs[UC][BP + 1];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int j = blockIdx.x / k_tiles, t0 = (blockIdx.x - j * k_tiles) * BK;
    const int u0 = blockIdx.y * UC, split = blockIdx.z;
    const int start = (int)(((long long)j * stride) % Cin);
    const long long total = (long long)N * P;
    const long long q_begin = (long long)split * per_split;
    const long long q_end = q_begin + per_split < total ? q_begin + per_split : total;
    float acc[2][2] = {};
    for (long long q0 = q_begin; q0 < q_end; q0 += BP) {
        for (int e = tid; e < BK * BP; e += THREADS) {
            const int kk = e / BP, pp = e - kk * BP;
            const long long q = q0 + pp;
            const int k = j + (t0 + kk) * cycle;
            float v = 0.f;
            if (q < q_end && k < Cout) {
                const long long n = q / P, p = q - n * P;
                v = gy[((size_t)n * Cout + k) * P + p];
            }
            gs[kk][pp] = v;
        }
        for (int e = tid; e < UC * BP; e += THREADS) {
            const int uu = e / BP, pp = e - uu * BP;
            const long long q = q0 + pp;
            float v = 0.f;
            if (q < q_end && u0 + uu < U) {
                const long long n = q / P, p = q - n * P;
                int c = start + u0 + uu;
                c -= c >= Cin ? Cin : 0;
                v = x[((size_t)n * Cin + c) * P + p];
            }
            xs[uu][pp] = v;
        }
        __syncthreads();
#pragma unroll 8
        for (int pp = 0; pp < BP; ++pp) {
            const float g0 = gs[2 * ty][pp], g1 = gs[2 * ty + 1][pp];
            const float x0 = xs[2 * tx][pp], x1 = xs[2 * tx + 1][pp];
            acc[0][0] = fmaf(g0, x0, acc[0][0]);
            acc[0][1] = fmaf(g0, x1, acc[0][1]);
            acc[1][0] = fmaf(g1, x0, acc[1][0]);
            acc[1][1] = fmaf(g1, x1, acc[1][1]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int k = j + (t0 + 2 * ty + r) * cycle;
        if (k >= Cout) continue;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int u = u0 + 2 * tx + s;
            if (u < U) partial[((size_t)split * Cout + k) * U + u] = acc[r][s];
        }
    }
}

__global__ void scc_reduce_splits(const float* __restrict__ partial, float* __restrict__ gw,
                                  int splits, int size)
{
    tc::wait_prior_grids();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size) return;
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += partial[(size_t)s * size + i];   // a fixed order
    gw[i] = v;
}
