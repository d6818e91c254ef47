// Depthwise fp32 convolution, NCHW (groups == C: each input channel c feeds its own
// M = K / C filters, k = c * M + j): forward, data gradient and weight gradient.
//
// A depthwise layer does R*S multiply-adds per value it moves, so all three passes are
// bound by memory, not arithmetic: each thread owns one value (an output pixel, an input
// pixel, or one pixel's share of a filter's gradient) and reads its R x S neighbours
// straight from global memory, where the neighbouring threads' reads of the same rows
// hit L1.  No shared-memory staging, no block synchronisation: a GEMM tiling (the
// implicit GEMM the other convolutions use) has one-row groups here and idles most of
// each tile.  Flat indices are split with FastDiv (multiply-high) divisors computed on
// the host (tensorconv.cuda.fast_div), so the index arithmetic stays a few instructions.
//
// Launch geometry and the split of the weight gradient belong to
// tensorconv/ops/depthwise_conv.py; this file holds device code only.
#include "tc_common.cuh"
#include "tc_cluster.cuh"

namespace dwc {
constexpr int THREADS = 256;
}

// y[n, k, oh, ow] = sum_{r,s} w[k, 0, r, s] * x[n, k / M, oh*sh - ph + r*dh, ow*sw - pw + s*dw]
// (+ bias[k], + res, ReLU).  One thread per output value, grid-stride over all of them.
template <int KR, int KS>
__global__ void __launch_bounds__(dwc::THREADS) dw_conv_fwd(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ w,     // (K, 1, KR, KS)
    const float* __restrict__ bias,  // (K,) or nullptr
    const float* __restrict__ res,   // (N, K, OH, OW) or nullptr: added before the ReLU
    float* __restrict__ y,           // (N, K, OH, OW)
    int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int dh, int dw, int total,
    unsigned long long fd_ohw, unsigned long long fd_ow, unsigned long long fd_k,
    unsigned long long fd_m, int relu)
{
    tc::wait_prior_grids();
    const tdcx::FastDiv by_ohw = tdcx::FastDiv::of(fd_ohw), by_ow = tdcx::FastDiv::of(fd_ow),
                        by_k = tdcx::FastDiv::of(fd_k), by_m = tdcx::FastDiv::of(fd_m);
    const int OHW = OH * OW;
    for (int e = blockIdx.x * dwc::THREADS + threadIdx.x; e < total;
         e += gridDim.x * dwc::THREADS) {
        const int plane = by_ohw.div(e), p = e - plane * OHW;
        const int oh = by_ow.div(p), ow = p - oh * OW;
        const int n = by_k.div(plane), k = plane - n * K;
        const float* xp = x + ((size_t)n * C + by_m.div(k)) * H * W;
        const float* wp = w + k * (KR * KS);
        const int ih0 = oh * sh - ph, iw0 = ow * sw - pw;
        float acc = 0.f;
#pragma unroll
        for (int r = 0; r < KR; ++r) {
            const int ih = ih0 + r * dh;
            if ((unsigned)ih >= (unsigned)H) continue;
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                const int iw = iw0 + s * dw;
                if ((unsigned)iw < (unsigned)W)
                    acc = fmaf(__ldg(wp + r * KS + s), __ldg(xp + ih * W + iw), acc);
            }
        }
        y[e] = tc::conv_epilogue(acc, bias, k, res, (size_t)e, relu);
    }
}

// gx[n, c, h, w] = sum_{j < M} sum_{r,s} w[c*M + j, 0, r, s] * gy[n, c*M + j, oh, ow]
// over the (oh, ow) with oh*sh - ph + r*dh = h (and likewise for w).  One thread per input
// value: every value is written once (no atomics).  UNIT: both strides are 1, so each tap
// has exactly one source pixel and no divisibility test.
template <int KR, int KS, bool UNIT>
__global__ void __launch_bounds__(dwc::THREADS) dw_conv_bwd_data(
    const float* __restrict__ gy,    // (N, K, OH, OW)
    const float* __restrict__ w,     // (K, 1, KR, KS)
    float* __restrict__ gx,          // (N, C, H, W)
    int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int dh, int dw, int total,
    unsigned long long fd_hw, unsigned long long fd_w, unsigned long long fd_c,
    unsigned long long fd_sh, unsigned long long fd_sw)
{
    tc::wait_prior_grids();
    const tdcx::FastDiv by_hw = tdcx::FastDiv::of(fd_hw), by_w = tdcx::FastDiv::of(fd_w),
                        by_c = tdcx::FastDiv::of(fd_c), by_sh = tdcx::FastDiv::of(fd_sh),
                        by_sw = tdcx::FastDiv::of(fd_sw);
    const int HW = H * W, M = K / C, OHW = OH * OW;
    for (int e = blockIdx.x * dwc::THREADS + threadIdx.x; e < total;
         e += gridDim.x * dwc::THREADS) {
        const int plane = by_hw.div(e), p = e - plane * HW;
        const int h = by_w.div(p), wi = p - h * W;
        const int n = by_c.div(plane), c = plane - n * C;
        // the output row / column each tap reads, -1 where none does
        int oh[KR], ow[KS];
#pragma unroll
        for (int r = 0; r < KR; ++r) {
            const int t = h + ph - r * dh;
            int o = -1;
            if (UNIT) {
                o = t < OH ? t : -1;     // t < 0 stays negative
            } else if (t >= 0) {
                const int q = by_sh.div(t);
                o = (q * sh == t && q < OH) ? q : -1;
            }
            oh[r] = o;
        }
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            const int t = wi + pw - s * dw;
            int o = -1;
            if (UNIT) {
                o = t < OW ? t : -1;
            } else if (t >= 0) {
                const int q = by_sw.div(t);
                o = (q * sw == t && q < OW) ? q : -1;
            }
            ow[s] = o;
        }
        float acc = 0.f;
        for (int j = 0; j < M; ++j) {
            const int k = c * M + j;
            const float* gp = gy + ((size_t)n * K + k) * OHW;
            const float* wp = w + k * (KR * KS);
#pragma unroll
            for (int r = 0; r < KR; ++r) {
                if (oh[r] < 0) continue;
#pragma unroll
                for (int s = 0; s < KS; ++s)
                    if (ow[s] >= 0)
                        acc = fmaf(__ldg(wp + r * KS + s), __ldg(gp + oh[r] * OW + ow[s]), acc);
            }
        }
        gx[e] = acc;
    }
}

// gw[k, 0, r, s] = sum over (n, oh, ow) of gy[n, k, oh, ow] * x[n, k / M, ih, iw].
// Block (k, split) sums its split's share of the N*OH*OW pixels of filter k: each thread
// keeps the KR*KS sums of its pixels in registers, the block adds them up in a fixed
// order, and writes them to out (one split) or to partial[split][k][tap] for
// conv2d_splitk_reduce (direct_conv.cu) to add in split order: deterministic, no atomics.
template <int KR, int KS>
__global__ void __launch_bounds__(dwc::THREADS) dw_conv_bwd_weight(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ gy,    // (N, K, OH, OW)
    float* __restrict__ out,         // (K, 1, KR, KS) when one split, else (splits, K, KR*KS)
    int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int dh, int dw, int pixels, int per_split,
    unsigned long long fd_ohw, unsigned long long fd_ow, unsigned long long fd_m)
{
    tc::wait_prior_grids();
    constexpr int TAPS = KR * KS, WARPS = dwc::THREADS / 32;
    __shared__ float red[WARPS][TAPS];
    const tdcx::FastDiv by_ohw = tdcx::FastDiv::of(fd_ohw), by_ow = tdcx::FastDiv::of(fd_ow);
    const int k = blockIdx.x, split = blockIdx.y;
    const int c = tdcx::FastDiv::of(fd_m).div(k), OHW = OH * OW;
    const int q0 = split * per_split, q1 = min(pixels, q0 + per_split);
    float acc[TAPS];
#pragma unroll
    for (int t = 0; t < TAPS; ++t) acc[t] = 0.f;
    for (int q = q0 + threadIdx.x; q < q1; q += dwc::THREADS) {
        const int n = by_ohw.div(q), p = q - n * OHW;
        const int oh = by_ow.div(p), ow = p - oh * OW;
        const float g = __ldg(gy + ((size_t)n * K + k) * OHW + p);
        const float* xp = x + ((size_t)n * C + c) * H * W;
        const int ih0 = oh * sh - ph, iw0 = ow * sw - pw;
#pragma unroll
        for (int r = 0; r < KR; ++r) {
            const int ih = ih0 + r * dh;
            const bool row = (unsigned)ih < (unsigned)H;
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                const int iw = iw0 + s * dw;
                if (row && (unsigned)iw < (unsigned)W)
                    acc[r * KS + s] = fmaf(g, __ldg(xp + ih * W + iw), acc[r * KS + s]);
            }
        }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int t = 0; t < TAPS; ++t) {
        float v = acc[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) red[warp][t] = v;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < TAPS; t += dwc::THREADS) {
        float v = 0.f;
#pragma unroll
        for (int i = 0; i < WARPS; ++i) v += red[i][t];
        out[((size_t)split * K + k) * TAPS + t] = v;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.depthwise_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_DW_CONV_BWD_DATA(...) template __global__ void dw_conv_bwd_data<__VA_ARGS__>( \
    const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, unsigned long long, unsigned long long, unsigned long long, unsigned long long, \
    unsigned long long);
TC_I_DW_CONV_BWD_DATA(1, 1, false) TC_I_DW_CONV_BWD_DATA(1, 1, true)
TC_I_DW_CONV_BWD_DATA(3, 3, false) TC_I_DW_CONV_BWD_DATA(3, 3, true)
TC_I_DW_CONV_BWD_DATA(5, 5, false) TC_I_DW_CONV_BWD_DATA(5, 5, true)
TC_I_DW_CONV_BWD_DATA(7, 7, false) TC_I_DW_CONV_BWD_DATA(7, 7, true)
#undef TC_I_DW_CONV_BWD_DATA
#define TC_I_DW_CONV_BWD_WEIGHT(...) template __global__ void dw_conv_bwd_weight<__VA_ARGS__>( \
    const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, int, unsigned long long, unsigned long long, unsigned long long);
TC_I_DW_CONV_BWD_WEIGHT(1, 1) TC_I_DW_CONV_BWD_WEIGHT(3, 3) TC_I_DW_CONV_BWD_WEIGHT(5, 5)
TC_I_DW_CONV_BWD_WEIGHT(7, 7)
#undef TC_I_DW_CONV_BWD_WEIGHT
#define TC_I_DW_CONV_FWD(...) template __global__ void dw_conv_fwd<__VA_ARGS__>(const float*, \
    const float*, const float*, const float*, float*, int, int, int, int, int, int, int, int, int, \
    int, int, int, int, unsigned long long, unsigned long long, unsigned long long, \
    unsigned long long, int);
TC_I_DW_CONV_FWD(1, 1) TC_I_DW_CONV_FWD(3, 3) TC_I_DW_CONV_FWD(5, 5) TC_I_DW_CONV_FWD(7, 7)
#undef TC_I_DW_CONV_FWD
#endif
