// 1x1 convolution (stride 1, dense) for small batches, fp32, NCHW:
//     y[n, k, p] = act(sum_c W[k, c] x[n, c, p] + bias[k] (+ residual[n, k, p]))
// At batch 1 the 1x1 convolutions of a Tucker-format ResNet-18 (C, K <= 512 on
// 7x7 to 56x56 planes) are a few million multiply-adds each: their time is
// latency, not arithmetic.  So one block owns P pixels x KB output channels of
// one sample and does the whole reduction over C itself: it issues every copy
// of its input columns and weight rows at once (cp.async), waits once, then
// each thread accumulates KB / (256 / P) channels of one pixel from shared
// memory.  No split of C, no second pass, no cluster: one round trip to L2.
// The Python op (tensorconv/ops/pointwise_conv.py) picks P and KB so the grid
// covers the GPU, checks the arguments and prepares W transposed, (C, K).
#include "tc_cluster.cuh"
#include "tc_common.cuh"

constexpr int PW_THREADS = 256;

template <int P, int KB>
__global__ void __launch_bounds__(PW_THREADS) conv1x1_pointwise(
    const float* __restrict__ x,         // (N, C, HW)
    const float* __restrict__ wt,        // (C, K): W transposed
    const float* __restrict__ bias,      // (K,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (N, K, HW)
    int C, int HW, int K, int relu)
{
    tc::wait_prior_grids();
    static_assert(PW_THREADS % P == 0 && KB % (PW_THREADS / P) == 0, "tile must fit the block");
    constexpr int KO = KB / (PW_THREADS / P);  // output channels per thread
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;          // C x P
    float* ws = smem + C * P;  // C x KB
    const int p0 = blockIdx.x * P, k0 = blockIdx.y * KB, n = blockIdx.z, tid = threadIdx.x;
    const float* xn = x + (size_t)n * C * HW;

    tdcx::stage_rows<P>(xs, xn, C, HW, p0, HW, tid, PW_THREADS);
    tdcx::stage_rows<KB>(ws, wt, C, K, k0, K, tid, PW_THREADS);
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

// What CI's nvcc build type-checks: tensorconv.ops.pointwise_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CONV1X1_POINTWISE(...) template __global__ void conv1x1_pointwise<__VA_ARGS__>( \
    const float*, const float*, const float*, const float*, float*, int, int, int, int);
TC_I_CONV1X1_POINTWISE(128, 32) TC_I_CONV1X1_POINTWISE(16, 16) TC_I_CONV1X1_POINTWISE(32, 16)
TC_I_CONV1X1_POINTWISE(32, 32) TC_I_CONV1X1_POINTWISE(64, 32) TC_I_CONV1X1_POINTWISE(64, 64)
#undef TC_I_CONV1X1_POINTWISE
#endif
