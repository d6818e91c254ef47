// The weight gradient of a thin convolution on the FMA pipes, NCHW, fp32 (ungrouped):
//     gw[k, c, r, s] = sum_{n, oy, ox} gy[n, k, oy, ox] * x[n, c, oy*sh - ph + r*dh, ox*sw - pw + s*dw]
//
// Why not the implicit GEMM: a 16- to 64-channel layer's weight gradient is a GEMM of a few
// dozen rows and a few hundred columns over N*OH*OW (131,072 for ResNet-20's first stage at
// batch 128).  The implicit GEMM gathers every x value once per tap into its column tiles
// and, with 16 rows, fills a quarter of a 64-row wgmma; here a block stages a chunk of x
// (its rows with their halo, zeros outside the image) and of gy in shared memory once, by
// cp.async into two stages (the next chunk lands while this one is multiplied), and
// each thread keeps TK filters x TC channels x R*S taps of sums in registers, reading x
// from the staged chunk at every tap.  The products are plain fp32 FMAs: exact fp32, no
// split operands.
//
// A block: 256 threads, BK = 16 filters x BC = 16 channels (a warp is 4 filter groups x 8
// channel groups; its 8 warps take every 8th output column of each row), a run of chunks
// (one image's `rows` output rows each).  The warps' sums meet in shared memory in warp
// order, then the block writes its 16 x 16 x R x S values: to the output when the pixels
// are not split, else to its split's slice of a workspace that a second kernel sums in
// split order (deterministic: no atomics).
//
// Launch geometry (rows, splits, the staged planes' strides) belongs to
// tensorconv/ops/direct_wgrad.py; this file holds device code only.
#include "tc_common.cuh"
#include "tc_cluster.cuh"

namespace dwg {
constexpr int THREADS = 256, WARPS = 8;
constexpr int TK = 4, TC = 2;              // a thread's filters and channels
constexpr int BK = 4 * TK, BC = 8 * TC;    // a block's: 16 x 16
}

// UNIT: stride 1 and dilation 1 along rows (sw == dw == 1), which the sliding window
// below needs.  grid (cdiv(K, BK), cdiv(C, BC), splits); dynamic shared memory
// max(2 * (BC * xplane + BK * gplane), BK * BC * R * S) floats (two stages), xplane >=
// in_rows * in_w and gplane >= rows * OW both odd (the lanes of a load hit distinct banks).
template <int R, int S, bool UNIT>
__global__ void __launch_bounds__(dwg::THREADS) conv2d_wgrad_direct(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ gy,    // (N, K, OH, OW)
    float* __restrict__ out,         // (K, C, R, S), or (splits, K, C, R, S) partial sums
    int N, int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int dh, int dw, int rows, int row_blocks, int chunks_per_split, int in_rows, int in_w,
    int xplane, int gplane)
{
    tc::wait_prior_grids();
    using namespace dwg;
    constexpr int RS = R * S;
    extern __shared__ float smem[];   // two stages of [BC][xplane] x, then [BK][gplane] gy
    const int k0 = blockIdx.x * BK, c0 = blockIdx.y * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kg = lane / 8, cg = lane % 8;
    const int q0 = blockIdx.z * chunks_per_split;
    const int q1 = min(N * row_blocks, q0 + chunks_per_split);

    float acc[TK][TC][RS];
#pragma unroll
    for (int j = 0; j < TK; ++j)
#pragma unroll
        for (int i = 0; i < TC; ++i)
#pragma unroll
            for (int t = 0; t < RS; ++t) acc[j][i][t] = 0.f;

    // Chunk q0 + i lands in stage i % 2 by cp.async (zeros outside the image and past K
    // and C) while the warps multiply chunk q0 + i - 1 out of the other stage.
    const int stage_floats = BC * xplane + BK * gplane;
    auto load = [&](int i, int st) {
        const int q = q0 + i, n = q / row_blocks, oy0 = (q - n * row_blocks) * rows;
        const int rows_here = min(rows, OH - oy0), iy0 = oy0 * sh - ph;
        float* xs = smem + st * stage_floats;
        float* gs = xs + BC * xplane;
        for (int row = warp; row < BC * in_rows; row += WARPS) {   // one staged x row a warp
            const int c = row / in_rows, iy = row - c * in_rows, yy = iy0 + iy;
            const bool live = c0 + c < C && (unsigned)yy < (unsigned)H;
            const float* src = x + (((size_t)n * C + (live ? c0 + c : 0)) * H + (live ? yy : 0)) * W;
            for (int ix = lane; ix < in_w; ix += 32) {
                const int xx = ix - pw;
                const bool ok = live && (unsigned)xx < (unsigned)W;
                tdcx::cp_async4(xs + c * xplane + iy * in_w + ix, ok ? src + xx : x, ok);
            }
        }
        const int pixels = rows_here * OW;
        for (int k = warp; k < BK; k += WARPS) {                  // one filter's rows a warp
            const bool live = k0 + k < K;
            const float* src = gy + (((size_t)n * K + (live ? k0 + k : 0)) * OH + oy0) * OW;
            for (int p = lane; p < pixels; p += 32)
                tdcx::cp_async4(gs + k * gplane + p, live ? src + p : gy, live);
        }
    };
    auto compute = [&](int i, int st) {
        const int q = q0 + i, n = q / row_blocks, oy0 = (q - n * row_blocks) * rows;
        const int rows_here = min(rows, OH - oy0);
        const float* xs = smem + st * stage_floats;
        const float* gs = xs + BC * xplane;
        if constexpr (UNIT) {
            // A warp walks whole rows; each new pixel loads one column of its window (R
            // values a channel) and reuses the S - 1 columns before it, which sit in
            // registers at compile-time slots (the loop is unrolled by S).
            for (int oy = warp; oy < rows_here; oy += WARPS) {
                const float* row[TC];
#pragma unroll
                for (int i2 = 0; i2 < TC; ++i2)
                    row[i2] = xs + (cg * TC + i2) * xplane + oy * sh * in_w;
                const float* grow = gs + kg * TK * gplane + oy * OW;
                float win[TC][R][S];
#pragma unroll
                for (int i2 = 0; i2 < TC; ++i2)
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int s = 0; s + 1 < S; ++s) win[i2][r][s] = row[i2][r * dh * in_w + s];
                for (int ox0 = 0; ox0 < OW; ox0 += S) {
#pragma unroll
                    for (int u = 0; u < S; ++u) {
                        const int ox = ox0 + u;
                        if (ox >= OW) break;
#pragma unroll
                        for (int i2 = 0; i2 < TC; ++i2)
#pragma unroll
                            for (int r = 0; r < R; ++r)
                                win[i2][r][(u + S - 1) % S] = row[i2][r * dh * in_w + ox + S - 1];
                        float g[TK];
#pragma unroll
                        for (int j = 0; j < TK; ++j) g[j] = grow[j * gplane + ox];
#pragma unroll
                        for (int i2 = 0; i2 < TC; ++i2)
#pragma unroll
                            for (int r = 0; r < R; ++r)
#pragma unroll
                                for (int s = 0; s < S; ++s)
#pragma unroll
                                    for (int j = 0; j < TK; ++j)
                                        acc[j][i2][r * S + s] = fmaf(
                                            g[j], win[i2][r][(u + s) % S], acc[j][i2][r * S + s]);
                    }
                }
            }
        } else {   // any stride: a warp takes every 8th column of each row
            for (int oy = 0; oy < rows_here; ++oy) {
                for (int ox = warp; ox < OW; ox += WARPS) {
                    const int p = oy * OW + ox, xb = oy * sh * in_w + ox * sw;
                    float g[TK];
#pragma unroll
                    for (int j = 0; j < TK; ++j) g[j] = gs[(kg * TK + j) * gplane + p];
#pragma unroll
                    for (int i2 = 0; i2 < TC; ++i2) {
                        const float* xc = xs + (cg * TC + i2) * xplane + xb;
#pragma unroll
                        for (int r = 0; r < R; ++r)
#pragma unroll
                            for (int s = 0; s < S; ++s) {
                                const float v = xc[r * dh * in_w + s * dw];
#pragma unroll
                                for (int j = 0; j < TK; ++j)
                                    acc[j][i2][r * S + s] = fmaf(g[j], v, acc[j][i2][r * S + s]);
                            }
                    }
                }
            }
        }
    };
    tdcx::cp_async_ring<2>(max(0, q1 - q0), load, compute);

    // The warps' sums, added in warp order into the staging space (deterministic).
    __syncthreads();   // every warp is done with the last chunk
    float* red = smem;   // [BK][BC][RS]
    for (int w = 0; w < WARPS; ++w) {
        if (warp == w) {
#pragma unroll
            for (int j = 0; j < TK; ++j)
#pragma unroll
                for (int i = 0; i < TC; ++i)
#pragma unroll
                    for (int t = 0; t < RS; ++t) {
                        const int at = ((kg * TK + j) * BC + cg * TC + i) * RS + t;
                        red[at] = w == 0 ? acc[j][i][t] : red[at] + acc[j][i][t];
                    }
        }
        __syncthreads();
    }
    float* dst = out + (size_t)blockIdx.z * K * C * RS;
    for (int e = threadIdx.x; e < BK * BC * RS; e += THREADS) {
        const int k = e / (BC * RS), rem = e - k * (BC * RS), c = rem / RS, t = rem - c * RS;
        if (k0 + k < K && c0 + c < C)
            dst[((size_t)(k0 + k) * C + c0 + c) * RS + t] = red[e];
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.direct_wgrad.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CONV2D_WGRAD_DIRECT(...) template __global__ void conv2d_wgrad_direct<__VA_ARGS__>( \
    const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int);
TC_I_CONV2D_WGRAD_DIRECT(1, 1, false) TC_I_CONV2D_WGRAD_DIRECT(1, 1, true)
TC_I_CONV2D_WGRAD_DIRECT(3, 3, false) TC_I_CONV2D_WGRAD_DIRECT(3, 3, true)
#undef TC_I_CONV2D_WGRAD_DIRECT
#endif
