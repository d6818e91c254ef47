// The classifier head of a CNN at inference in one launch:
//     y[n, k] = sum_c W[k, c] * mean_{h, w} x[n, c, h, w] + bias[k]
// As two launches (a global-average-pool reduction, then the linear layer as a
// 1x1 convolution) it cost 11.7 µs of a ~300 µs batch-1 ResNet-18.
//
// Block (j, n) produces outputs [32 j, 32 j + 32) of sample n.  It first
// averages all C channels of the sample into shared memory, one thread per
// channel (the plane was just written by the previous kernel and sits in L2),
// so every block repeats this cheap pass instead of waiting on a second
// launch.  Then each warp takes 4 outputs and its lanes stride over their rows
// of W (coalesced), reducing the dot products with shuffles.  Both phases keep
// 8-16 loads in flight per thread (a first version with one dependent load at
// a time took 10 µs on ResNet-18's head, this one 8.2-8.8, the two launches
// 11.5); every sum runs in a fixed order, so results are bitwise repeatable.
// The Python op (tensorconv/ops/head.py) checks the arguments and sizes the grid.
#include "tc_common.cuh"

// With many channels the two launches are faster (H100, C = 2048, HW = 49,
// K = 1000: 28 µs against 19; the same with 1024 threads and 128 outputs per
// block, and 39 when chunks of channels were first staged in shared memory by
// coalesced copies): every block averages all of x.  The engine times both
// when it tunes.
constexpr int HEAD_THREADS = 256;
constexpr int HEAD_OUTPUTS_PER_WARP = 4;  // 32 outputs per block

extern "C" __global__ void __launch_bounds__(HEAD_THREADS) gap_linear(
    const float* __restrict__ x,     // (N, C, HW)
    const float* __restrict__ w,     // (K, C)
    const float* __restrict__ bias,  // (K,) or nullptr
    float* __restrict__ y,           // (N, K)
    int C, int HW, int K)
{
    extern __shared__ float means[];  // C
    const int n = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* xn = x + (size_t)n * C * HW;
    for (int c = threadIdx.x; c < C; c += HEAD_THREADS) {
        const float* plane = xn + (size_t)c * HW;
        float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int p0 = 0; p0 < HW; p0 += 8) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (p0 + j < HW) part[j] += plane[p0 + j];
        }
        const float s = ((part[0] + part[1]) + (part[2] + part[3])) +
                        ((part[4] + part[5]) + (part[6] + part[7]));
        means[c] = s / HW;
    }
    __syncthreads();

    const int k0 = (blockIdx.x * (HEAD_THREADS / 32) + warp) * HEAD_OUTPUTS_PER_WARP;
    float s[HEAD_OUTPUTS_PER_WARP] = {};
#pragma unroll 4
    for (int c = lane; c < C; c += 32) {
        const float m = means[c];
#pragma unroll
        for (int o = 0; o < HEAD_OUTPUTS_PER_WARP; ++o)
            if (k0 + o < K) s[o] = fmaf(w[(size_t)(k0 + o) * C + c], m, s[o]);
    }
#pragma unroll
    for (int o = 0; o < HEAD_OUTPUTS_PER_WARP; ++o) {
#pragma unroll
        for (int off = 16; off > 0; off /= 2) s[o] += __shfl_xor_sync(0xffffffffu, s[o], off);
        if (lane == 0 && k0 + o < K)
            y[(size_t)n * K + k0 + o] = bias != nullptr ? s[o] + bias[k0 + o] : s[o];
    }
}
