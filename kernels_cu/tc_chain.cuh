// Block-level pieces of the chained 1x1 kernels (pointwise_pair.cu, tucker_tail.cu):
// a block's small matrix product out of shared memory, and the chain
//     y = act1(A x + a (+ r))  (a slice of the M middle channels; stored)
//     z = act2(B y + b)        (partial sums over the slice; CL > 1: cluster-reduced)
// applied to input columns already in shared memory.
#pragma once
#include "tc_cluster.cuh"
#include "tc_common.cuh"

namespace tc {

constexpr int CHAIN_THREADS = 256;

// Stage `count` contiguous floats (a multiple of 4, both ends 16-byte aligned) with
// cp.async; every thread of the block calls it.
__device__ __forceinline__ void stage_flat(float* dst, const float* src, int count) {
    for (int i = 4 * threadIdx.x; i < count; i += 4 * CHAIN_THREADS)
        tdcx::cp_async16(dst + i, src + i, true);
}

// One block's product out[o][p] = sum_k wt[k][o] in[k][p] for o < O, p < P (both
// multiples of 4; wt rows of O floats, in rows of P), handed to emit(o, p, float4)
// as runs of 4 pixels.  Each thread computes 4 outputs x 4 pixels (two 16-byte
// shared loads per 16 FMAs); with fewer such tiles than threads the reduction over
// k is split among `ks` thread groups whose partials meet in `red` (ks x O x P
// floats), so that small slices still keep every thread busy.  Ends with the block
// in step only when ks > 1: the caller synchronises before reusing `red` or `in`.
template <int P, typename Emit>
__device__ __forceinline__ void block_product(const float* __restrict__ wt, int O,
                                              const float* __restrict__ in, int K,
                                              float* __restrict__ red, Emit emit)
{
    constexpr int PQ = P / 4;
    const int tiles = (O / 4) * PQ, tid = threadIdx.x;
    const int ks = tiles >= CHAIN_THREADS ? 1 : CHAIN_THREADS / tiles;
    const int kc = (K + ks - 1) / ks;
    for (int t = tid; t < tiles * ks; t += CHAIN_THREADS) {
        const int s = t / tiles, tile = t - s * tiles;
        const int o = 4 * (tile / PQ), p = 4 * (tile % PQ);
        const int k_end = min(K, (s + 1) * kc);
        float acc[4][4] = {};
#pragma unroll 4
        for (int k = s * kc; k < k_end; ++k) {
            const float4 w4 = *reinterpret_cast<const float4*>(wt + k * O + o);
            const float4 v4 = *reinterpret_cast<const float4*>(in + k * P + p);
            const float wv[4] = {w4.x, w4.y, w4.z, w4.w}, xv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(wv[i], xv[j], acc[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 v = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            if (ks == 1)
                emit(o + i, p, v);
            else
                *reinterpret_cast<float4*>(red + (s * O + o + i) * P + p) = v;
        }
    }
    if (ks == 1) return;
    __syncthreads();
    for (int e = tid; e < O * PQ; e += CHAIN_THREADS) {
        const int o = e / PQ, p = 4 * (e % PQ);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = 0; s < ks; ++s) {  // in split order: deterministic
            const float4 r = *reinterpret_cast<const float4*>(red + (s * O + o) * P + p);
            v.x += r.x; v.y += r.y; v.z += r.z; v.w += r.w;
        }
        emit(o, p, v);
    }
}

// Where the chain's epilogues read and write (global memory), per launch.
struct Chain {
    const float* a_bias;    // (M,) or nullptr
    const float* residual;  // like y, or nullptr
    float* y;               // (N, M, HW)
    const float* b_bias;    // (J,) or nullptr
    float* z;               // (N, J, HW); unused when J == 0
    int HW, M, J, JP, relu1, relu2;
};

// The chain for sample n, pixels p0 .. p0 + P - 1 and middle channels m0 .. m0 + MB - 1,
// from shared memory: xs (C x P input columns), as (C x MB, A's slice transposed), bs
// (MB x JP, B's slice transposed); ys (MB x P) and red are scratch.  The caller
// committed the copies of as in its second-to-last cp.async group and those of bs in
// its last (empty when J == 0): bs lands while the first product runs.  J == 0 (with
// CL == 1) stops after y.
template <int P, int CL>
__device__ __forceinline__ void chain_1x1(const float* xs, int C, const float* as, float* ys,
                                          const float* bs, int MB, float* red,
                                          tdcx::PushReduce<CL>& push, int n, int p0, int m0,
                                          const Chain& ch)
{
    const int tid = threadIdx.x, HW = ch.HW, M = ch.M, J = ch.J, JP = ch.JP;
    float* y = ch.y;
    float* z = ch.z;
    tdcx::cp_async_wait<1>();
    __syncthreads();

    // y slice: epilogue, store, and keep it (zero outside the image and past M).
    block_product<P>(as, MB, xs, C, red, [&](int o, int p, float4 v) {
        const int m = m0 + o;
        float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int pix = p0 + p + i;
            float out = 0.f;
            if (m < M && pix < HW) {
                const size_t idx = ((size_t)n * M + m) * HW + pix;
                out = tc::conv_epilogue(vals[i], ch.a_bias, m, ch.residual, idx, ch.relu1);
                y[idx] = out;
            }
            ys[o * P + p + i] = out;
        }
    });
    if (J == 0) return;
    tdcx::cp_async_wait<0>();
    __syncthreads();

    // z: this slice's partial sums; alone (CL = 1) they are the result.
    if constexpr (CL == 1) {
        block_product<P>(bs, JP, ys, MB, red, [&](int j, int p, float4 v) {
            if (j >= J) return;
            const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int pix = p0 + p + i;
                const size_t idx = ((size_t)n * J + j) * HW + pix;
                if (pix < HW)
                    z[idx] = tc::conv_epilogue(vals[i], ch.b_bias, j, nullptr, idx, ch.relu2);
            }
        });
    } else {
        push.ready();
        block_product<P>(bs, JP, ys, MB, red, [&](int j, int p, float4 v) {
            push.template push<4>(j * P + p, reinterpret_cast<const float*>(&v));
        });
        push.wait();
        const int owned = push.count(JP * P), base = push.rank * push.share;
        for (int e = tid; e < owned; e += CHAIN_THREADS) {
            const int idx = base + e, j = idx / P, pix = p0 + idx % P;
            const size_t at_z = ((size_t)n * J + j) * HW + pix;
            if (j < J && pix < HW)
                z[at_z] = tc::conv_epilogue(push.sum(e), ch.b_bias, j, nullptr, at_z, ch.relu2);
        }
    }
}

}  // namespace tc
