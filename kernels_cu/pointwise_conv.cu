// 1x1 convolution (stride 1, dense) for small batches, fp32, NCHW:
//     y[n, k, p] = act(sum_c W[k, c] x[n, c, p] + bias[k] (+ residual[n, k, p]))
// At batch 1 the 1x1 convolutions of a Tucker-format ResNet-18 (C, K <= 512 on
// 7x7 to 56x56 planes) are a few million multiply-adds each: their time is
// latency, not arithmetic.  So one block owns P pixels x KB output channels of
// one sample and does the whole reduction over C itself: it issues every copy
// of its input columns and weight rows at once (cp.async), waits once, then
// each thread accumulates KB / (256 / P) channels of one pixel from shared
// memory.  No split of C, no second pass, no cluster: one round trip to L2.
// With POOL (1 max, 2 average) the input columns are pooling windows of src, a
// (N, C, H0, W0) plane, computed while staging (tc::pool_window) and also stored
// to x by the blocks of the first channel tile: a CNN's stem pool and the 1x1 that
// reads it in one launch.
// The Python op (tensorconv/ops/pointwise.py) picks P and KB so the grid
// covers the GPU, checks the arguments and prepares W transposed, (C, K).
#include "tc_cluster.cuh"
#include "tc_common.cuh"

constexpr int PW_THREADS = 256;

template <int P, int KB, int POOL>
__global__ void __launch_bounds__(PW_THREADS) conv1x1_pointwise(
    const float* __restrict__ x,         // (N, C, HW); unused with POOL
    const float* __restrict__ wt,        // (C, K): W transposed
    const float* __restrict__ bias,      // (K,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (N, K, HW)
    int C, int HW, int K, int relu,
    // POOL > 0: the input's source, its pooled copy (written) and the windows
    const float* __restrict__ src,       // (N, C, H0, W0)
    float* __restrict__ pooled,          // (N, C, HW)
    int H0, int W0, int OW, int KH, int KW, int SH, int SW, int PH, int PW)
{
    static_assert(PW_THREADS % P == 0 && KB % (PW_THREADS / P) == 0, "tile must fit the block");
    constexpr int KO = KB / (PW_THREADS / P);  // output channels per thread
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;          // C x P
    float* ws = smem + C * P;  // C x KB
    const int p0 = blockIdx.x * P, k0 = blockIdx.y * KB, n = blockIdx.z, tid = threadIdx.x;
    const float* xn = x + (size_t)n * C * HW;

    tdcx::stage_rows<KB>(ws, wt, C, K, k0, K, tid, PW_THREADS);
    if constexpr (POOL > 0) {  // a thread pools one pixel's windows: its coordinates once
        const int p = tid % P, pix = p0 + p, oy = pix / OW, ox = pix - oy * OW;
        const size_t plane = (size_t)H0 * W0;
        const float* sn = src + (size_t)n * C * plane;
#pragma unroll 2
        for (int c = tid / P; c < C; c += PW_THREADS / P) {
            float v = 0.f;
            if (pix < HW) {
                v = tc::pool_window<POOL == 2>(sn + c * plane, H0, W0, oy * SH - PH,
                                               ox * SW - PW, KH, KW);
                if (blockIdx.y == 0) pooled[((size_t)n * C + c) * HW + pix] = v;
            }
            xs[c * P + p] = v;
        }
    } else {
        tdcx::stage_rows<P>(xs, xn, C, HW, p0, HW, tid, PW_THREADS);
    }
    tdcx::cp_async_commit();
    tdcx::cp_async_wait<0>();
    __syncthreads();

    const int p = tid % P, kg = (tid / P) * KO;
    float acc[KO];
#pragma unroll
    for (int j = 0; j < KO; ++j) acc[j] = 0.f;
#pragma unroll 4
    for (int c = 0; c < C; ++c) {
        const float v = xs[c * P + p];
        const float* wc = ws + c * KB + kg;
        if constexpr (KO % 4 == 0) {
#pragma unroll
            for (int j = 0; j < KO; j += 4) {
                const float4 w4 = *reinterpret_cast<const float4*>(wc + j);
                acc[j] = fmaf(v, w4.x, acc[j]);
                acc[j + 1] = fmaf(v, w4.y, acc[j + 1]);
                acc[j + 2] = fmaf(v, w4.z, acc[j + 2]);
                acc[j + 3] = fmaf(v, w4.w, acc[j + 3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < KO; ++j) acc[j] = fmaf(v, wc[j], acc[j]);
        }
    }
    if (p0 + p >= HW) return;
#pragma unroll
    for (int j = 0; j < KO; ++j) {
        const int k = k0 + kg + j;
        if (k >= K) break;
        const size_t at = ((size_t)n * K + k) * HW + p0 + p;
        y[at] = tc::conv_epilogue(acc[j], bias, k, residual, at, relu);
    }
}

#ifndef __CUDACC_RTC__  // offline type-check of the instantiations the op uses
#define TC_PW1(P, KB, POOL)                                                                  \
    template __global__ void conv1x1_pointwise<P, KB, POOL>(const float*, const float*,         \
        const float*, const float*, float*, int, int, int, int, const float*, float*, int,   \
        int, int, int, int, int, int, int, int);
#define TC_PW(P, KB) TC_PW1(P, KB, 0) TC_PW1(P, KB, 1) TC_PW1(P, KB, 2)
TC_PW(16, 16) TC_PW(32, 16) TC_PW(32, 32) TC_PW(64, 32) TC_PW(64, 64) TC_PW(128, 32)
#endif
