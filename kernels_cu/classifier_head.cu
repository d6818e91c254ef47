// The classifier head of a CNN at inference in one launch:
//     y[n, k] = sum_c W[k, c] * mean_{h, w} x[n, c, h, w] + bias[k]
// As two launches: a global-average-pool reduction, then the linear layer as a 1x1
// convolution (docs/notes/classifier_head.md has the times).
//
// Block (j, n, r) produces outputs [OPW * 8 (j CL + r), ... + OPW * 8) of sample n.
// It first needs the C channel means of the sample.  Alone (CL = 1) a block
// averages all of them, one thread per channel (the plane was just written by the
// previous kernel and sits in L2), so every block repeats this pass instead of
// waiting on a second launch: with many channels that pass dominates.  So the CL blocks of a
// thread-block cluster (sm_90) each average a 1/CL share of the channels and read
// the others' shares from their shared memory (DSMEM) after one cluster barrier.
// Then each warp takes OPW outputs and its lanes stride over their rows of W
// (coalesced), reducing the dot products with shuffles.  Both phases keep 16 loads
// in flight per thread (one dependent load at a time left it latency-bound); every sum
// runs in a fixed order, so results are bitwise repeatable.  The Python op
// (tensorconv/ops/classifier_head.py) checks the arguments,
// sizes the grid and picks (CL, OPW).
#include "tc_cluster.cuh"
#include "tc_common.cuh"

constexpr int HEAD_THREADS = 256;

template <int CL, int OPW>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(HEAD_THREADS) gap_linear(
    const float* __restrict__ x,     // (N, C, HW)
    const float* __restrict__ w,     // (K, C)
    const float* __restrict__ bias,  // (K,) or nullptr
    float* __restrict__ y,           // (N, K)
    int C, int HW, int K, int share)  // share: channels per cluster rank, a multiple of 4
{
    tc::wait_prior_grids();
    extern __shared__ __align__(16) float means[];  // CL * share >= C
    const int n = blockIdx.y, rank = blockIdx.z, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* xn = x + (size_t)n * C * HW;
    // TPC lanes (a power of two) share a channel when the share leaves threads over, and
    // every thread keeps 16 loads in flight: one thread per channel in rounds of 8 loads
    // left ResNet-18's head (128 channels per rank, 49 pixels) waiting on 7 round trips.
    int tpc = 1;
    while (tpc < 32 && share * tpc * 2 <= HEAD_THREADS) tpc *= 2;
    const int sub = threadIdx.x & (tpc - 1), groups = HEAD_THREADS / tpc;
    const int c_begin = rank * share, c_end = min(C, (rank + 1) * share);
    for (int c0 = c_begin; c0 < c_end; c0 += groups) {  // uniform trip count: whole warps shuffle
        const int c = c0 + threadIdx.x / tpc;
        const float* plane = xn + (size_t)min(c, C - 1) * HW;
        float part[16] = {};
        for (int p0 = sub; c < c_end && p0 < HW; p0 += 16 * tpc) {
#pragma unroll
            for (int j = 0; j < 16; ++j)
                if (p0 + j * tpc < HW) part[j] += plane[p0 + j * tpc];
        }
#pragma unroll
        for (int w = 8; w > 0; w /= 2)
#pragma unroll
            for (int j = 0; j < w; ++j) part[j] += part[j + w];
        float s = part[0];
        for (int off = tpc / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (sub == 0 && c < c_end) means[c] = s / HW;
    }
    if constexpr (CL > 1) {
        tdcx::cluster_sync();  // every rank's share written and visible
        for (int i = 4 * threadIdx.x; i < CL * share; i += 4 * HEAD_THREADS) {
            const int owner = i / share;
            if (owner != rank)
                *reinterpret_cast<float4*>(means + i) = tdcx::ld_peer4(means + i, owner);
        }
        tdcx::cluster_exit_sync();  // peers keep their shares until every read is done
    }
    __syncthreads();

    const int k0 = ((blockIdx.x * CL + rank) * (HEAD_THREADS / 32) + warp) * OPW;
    float s[OPW] = {};
#pragma unroll 8
    for (int c = lane; c < C; c += 32) {
        const float m = means[c];
#pragma unroll
        for (int o = 0; o < OPW; ++o)
            if (k0 + o < K) s[o] = fmaf(w[(size_t)(k0 + o) * C + c], m, s[o]);
    }
#pragma unroll
    for (int o = 0; o < OPW; ++o) {
#pragma unroll
        for (int off = 16; off > 0; off /= 2) s[o] += __shfl_xor_sync(0xffffffffu, s[o], off);
        if (lane == 0 && k0 + o < K)
            y[(size_t)n * K + k0 + o] = bias != nullptr ? s[o] + bias[k0 + o] : s[o];
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.classifier_head.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_GAP_LINEAR(...) template __global__ void gap_linear<__VA_ARGS__>(const float*, \
    const float*, const float*, float*, int, int, int, int);
TC_I_GAP_LINEAR(1, 1) TC_I_GAP_LINEAR(1, 4) TC_I_GAP_LINEAR(2, 1) TC_I_GAP_LINEAR(2, 4)
TC_I_GAP_LINEAR(4, 1) TC_I_GAP_LINEAR(4, 4) TC_I_GAP_LINEAR(8, 1) TC_I_GAP_LINEAR(8, 4)
#undef TC_I_GAP_LINEAR
#endif
