// Block-level pieces of the chained 1x1 kernels (pointwise_pair.cu, tucker_tail.cu):
// a block's small matrix product out of shared memory (FMA or tensor-core 3xTF32
// version), and the chain
//     y = act1(A x + a (+ r))  (a slice of the M middle channels; stored)
//     z = act2(B y + b)        (partial sums over the slice; CL > 1: cluster-reduced)
// applied to input columns already in shared memory.
#pragma once
#include "tc_cluster.cuh"
#include "tc_common.cuh"
#include "tc_mma.cuh"

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

// Row stride of a P-pixel operand of mma_product: with P a multiple of 16 the
// fragment loads of a warp (rows t, columns g) would hit 2-4 lanes per bank, so
// rows are padded by 8 floats, which spreads them over all 32 banks.
__host__ __device__ constexpr int mma_stride(int P) { return P % 16 == 0 ? P + 8 : P; }

// block_product on the tensor cores at fp32 accuracy (3xTF32, tc_mma.cuh; one pass
// and no remainders read when compiled for tf32), for P a
// multiple of 8.  wf holds W (O x K, out[o][p] = sum_k W[o][k] in[k][p]) in mma
// fragment order, (O/16, K/8, 32 lanes, 4): lane (g, t) of tile (o, k) holds
// W[o+g][k+t], W[o+g+8][k+t], W[o+g][k+t+4], W[o+g+8][k+t+4]; O a multiple of 16,
// K of 8.  big/small: the input rows (K x P at stride mma_stride(P)) already split,
// so that each is split once rather than at every load.  A warp owns 16 outputs x
// all P pixels; with fewer such strips than warps the reduction over k is split
// among ks warp groups whose partials meet in `red` (ks x O x P floats).  The three
// products go to separate accumulators (a dependent mma costs ~26 cycles).
// emit(o, p, float2) gets pixels p and p + 1.
template <int P, typename Emit>
__device__ __forceinline__ void mma_product(const float* __restrict__ wf, int O,
                                            const float* __restrict__ big,
                                            const float* __restrict__ small, int K,
                                            float* __restrict__ red, Emit emit)
{
    static_assert(P % 8 == 0, "whole n8 tiles");
    constexpr int NT = P / 8, PS = mma_stride(P), WARPS = CHAIN_THREADS / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int strips = O / 16, k8s = K / 8;
    const int ks = strips >= WARPS ? 1 : WARPS / strips;
    const int kc = (k8s + ks - 1) / ks;
    for (int w = warp; w < strips * ks; w += WARPS) {
        const int s = w / strips, o = 16 * (w - s * strips);
        const int k_end = min(k8s, (s + 1) * kc);
        float acc[3][NT][4];
#pragma unroll
        for (int q = 0; q < 3; ++q)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][n][e] = 0.f;
        const float4* wp = reinterpret_cast<const float4*>(wf) + (size_t)(o / 16) * k8s * 32 + lane;
        for (int k8 = s * kc; k8 < k_end; ++k8) {
            const float4 av = wp[k8 * 32];
            float a[4] = {av.x, av.y, av.z, av.w}, al[4];
            unsigned ab[4], as[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                tf32x3::split(a[e], al[e]);
                ab[e] = __float_as_uint(a[e]);
                as[e] = __float_as_uint(al[e]);
            }
            const int row = (k8 * 8 + t) * PS + g;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const unsigned b0 = __float_as_uint(big[row + n * 8]);
                const unsigned b1 = __float_as_uint(big[row + 4 * PS + n * 8]);
                const unsigned l0 = __float_as_uint(small[row + n * 8]);
                const unsigned l1 = __float_as_uint(small[row + 4 * PS + n * 8]);
                if constexpr (tf32x3::EXACT) {
                    tf32x3::mma(acc[2][n], as, b0, b1);
                    tf32x3::mma(acc[1][n], ab, l0, l1);
                }
                tf32x3::mma(acc[0][n], ab, b0, b1);
            }
        }
        // Accumulator (n, e): output o + g + 8 (e >> 1), pixel 8 n + 2 t + (e & 1).
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float2 v = make_float2(acc[0][n][2 * h] + (acc[1][n][2 * h] + acc[2][n][2 * h]),
                                             acc[0][n][2 * h + 1] +
                                                 (acc[1][n][2 * h + 1] + acc[2][n][2 * h + 1]));
                const int oo = o + g + 8 * h, p = 8 * n + 2 * t;
                if (ks == 1)
                    emit(oo, p, v);
                else
                    *reinterpret_cast<float2*>(red + (s * O + oo) * P + p) = v;
            }
    }
    if (ks == 1) return;
    __syncthreads();
    for (int e = threadIdx.x; e < O * (P / 2); e += CHAIN_THREADS) {
        const int o = e / (P / 2), p = 2 * (e % (P / 2));
        float2 v = make_float2(0.f, 0.f);
        for (int s = 0; s < ks; ++s) {  // in split order: deterministic
            const float2 r = *reinterpret_cast<const float2*>(red + (s * O + o) * P + p);
            v.x += r.x;
            v.y += r.y;
        }
        emit(o, p, v);
    }
}

// Split rows x P floats at stride PS in place into their tf32 parts (big) and the
// remainders (small, at the same offsets from `small`; not written when compiled for
// one tf32 pass); every thread calls it.
template <int P>
__device__ __forceinline__ void split_rows(float* big, float* small, int rows) {
    constexpr int PS = mma_stride(P);
    for (int i = threadIdx.x; i < rows * (P / 4); i += CHAIN_THREADS) {
        const int at = (i / (P / 4)) * PS + 4 * (i % (P / 4));
        float4 v = *reinterpret_cast<float4*>(big + at), l;
        tf32x3::split(v.x, l.x);
        tf32x3::split(v.y, l.y);
        tf32x3::split(v.z, l.z);
        tf32x3::split(v.w, l.w);
        *reinterpret_cast<float4*>(big + at) = v;
        if constexpr (tf32x3::EXACT) *reinterpret_cast<float4*>(small + at) = l;
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
// from shared memory: xs (C x P input columns), as (A's slice: C x MB, transposed),
// bs (B's slice: MB x JP, transposed); ys (MB x P) and red are scratch.  With MMA the
// products run on the tensor cores (mma_product): rows are mma_stride(P) apart, as and
// bs are in fragment order (MB x C and JP x MB), C is a multiple of 8, MB and JP of
// 16, and xs and ys hold twice their rows (the split parts, small after big; xs's
// are split here).  The caller committed the copies of as in its second-to-last
// cp.async group and those of bs in its last (empty when J == 0): bs lands while the
// first product runs.  J == 0 (with CL == 1) stops after y.
template <int P, int CL, bool MMA = false>
__device__ __forceinline__ void chain_1x1(float* xs, int C, const float* as, float* ys,
                                          const float* bs, int MB, float* red,
                                          tdcx::PushReduce<CL>& push, int n, int p0, int m0,
                                          const Chain& ch)
{
    constexpr int PS = MMA ? mma_stride(P) : P;
    const int tid = threadIdx.x, HW = ch.HW, M = ch.M, J = ch.J, JP = ch.JP;
    float* y = ch.y;
    float* z = ch.z;
    float* ys_small = ys + MB * PS;
    tdcx::cp_async_wait<1>();
    __syncthreads();
    if constexpr (MMA) {
        split_rows<P>(xs, xs + C * PS, C);
        __syncthreads();
    }
    // Either product: FMA tiles of 4 x 4, or mma tiles of 16 x 8.
    auto product = [&](const float* w, int O, const float* in, int K, auto emit) {
        if constexpr (MMA)
            mma_product<P>(w, O, in, in + K * PS, K, red, emit);
        else
            block_product<P>(w, O, in, K, red, emit);
    };

    // y slice: epilogue, store, and keep it (zero outside the image and past M).
    product(as, MB, xs, C, [&](int o, int p, auto v) {
        constexpr int V = sizeof(v) / sizeof(float);
        const float* vals = reinterpret_cast<const float*>(&v);
        const int m = m0 + o;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const int pix = p0 + p + i;
            float out = 0.f;
            if (m < M && pix < HW) {
                const size_t idx = ((size_t)n * M + m) * HW + pix;
                out = tc::conv_epilogue(vals[i], ch.a_bias, m, ch.residual, idx, ch.relu1);
                y[idx] = out;
            }
            if constexpr (MMA && tf32x3::EXACT) {
                tf32x3::split(out, ys_small[o * PS + p + i]);
            } else if constexpr (MMA) {
                float rest;  // 0: one tf32 pass keeps no remainders
                tf32x3::split(out, rest);
            }
            ys[o * PS + p + i] = out;
        }
    });
    if (J == 0) return;
    tdcx::cp_async_wait<0>();
    __syncthreads();

    // z: this slice's partial sums; alone (CL = 1) they are the result.
    if constexpr (CL == 1) {
        product(bs, JP, ys, MB, [&](int j, int p, auto v) {
            constexpr int V = sizeof(v) / sizeof(float);
            const float* vals = reinterpret_cast<const float*>(&v);
            if (j >= J) return;
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const int pix = p0 + p + i;
                const size_t idx = ((size_t)n * J + j) * HW + pix;
                if (pix < HW)
                    z[idx] = tc::conv_epilogue(vals[i], ch.b_bias, j, nullptr, idx, ch.relu2);
            }
        });
    } else {
        push.ready();
        product(bs, JP, ys, MB, [&](int j, int p, auto v) {
            constexpr int V = sizeof(v) / sizeof(float);
            push.template push<V>(j * P + p, reinterpret_cast<const float*>(&v));
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
