// Two chained 1x1 convolutions (stride 1, dense, fp32, NCHW) in one launch:
//     y[n, m, p] = act1(sum_c A[m, c] x[n, c, p] + a[m] (+ r[n, m, p]))   (stored)
//     z[n, j, p] = act2(sum_m B[j, m] y[n, m, p] + b[j])
// In a Tucker-format CNN one layer's last 1x1 (D2 -> N, BN, residual, ReLU) feeds
// the next layer's first 1x1 (N -> D1); at batch 1 each is a few microseconds of
// latency, so the pair costs two launches for little arithmetic.  Here a block
// owns P pixels of one sample and a 1/CL slice of the M middle channels: it stages
// its input columns and both weight slices with cp.async (the B slice lands while
// the first product runs), computes its slice of y (stored, and kept in shared
// memory), then its slice's partial sums of z.  The CL blocks of a cluster (one per
// slice) add their partials of z by pushes into the owners' shared memory
// (tdcx::PushReduce, rank order: deterministic).  CL = 1 needs no cluster.
// The Python op (tensorconv/ops/pointwise_pair.py) checks the arguments, picks the
// tile and prepares the weights: A transposed (C, CL * MB) and B transposed
// (CL * MB, JP), both zero-padded, MB = the slice (a multiple of 4), JP = J
// rounded up to 4.
#include "tc_cluster.cuh"
#include "tc_common.cuh"

constexpr int PP_THREADS = 256;

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
    const int ks = tiles >= PP_THREADS ? 1 : PP_THREADS / tiles;
    const int kc = (K + ks - 1) / ks;
    for (int t = tid; t < tiles * ks; t += PP_THREADS) {
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
    for (int e = tid; e < O * PQ; e += PP_THREADS) {
        const int o = e / PQ, p = 4 * (e % PQ);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = 0; s < ks; ++s) {  // in split order: deterministic
            const float4 r = *reinterpret_cast<const float4*>(red + (s * O + o) * P + p);
            v.x += r.x; v.y += r.y; v.z += r.z; v.w += r.w;
        }
        emit(o, p, v);
    }
}

template <int P, int CL>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(PP_THREADS) conv1x1_pair(
    const float* __restrict__ x,         // (N, C, HW)
    const float* __restrict__ at,        // (C, CL * MB): A transposed, padded
    const float* __restrict__ a_bias,    // (M,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (N, M, HW)
    const float* __restrict__ bt,        // (CL * MB, JP): B transposed, padded
    const float* __restrict__ b_bias,    // (J,) or nullptr
    float* __restrict__ z,               // (N, J, HW)
    int C, int HW, int M, int MB, int J, int JP, int relu1, int relu2,
    int slots_off, unsigned long long fd_share)
{
    static_assert(P % 4 == 0, "pixel runs of 4");
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;              // C x P
    float* as = xs + C * P;        // C x MB
    float* ys = as + C * MB;       // MB x P
    float* bs = ys + MB * P;       // MB x JP
    float* red = bs + MB * JP;     // split-reduction partials (block_product)
    const int p0 = blockIdx.x * P, n = blockIdx.y, slice = blockIdx.z, tid = threadIdx.x;
    const int m0 = slice * MB;
    tdcx::PushReduce<CL> push(smem + slots_off, fd_share);
    if constexpr (CL > 1) push.begin(JP * P);

    // Group 0: the input columns and the A slice; group 1: the B slice, which is
    // only needed after the first product.
    const float* xn = x + (size_t)n * C * HW;
    tdcx::stage_rows<P>(xs, xn, C, HW, p0, HW, tid, PP_THREADS);
    for (int i = tid; i < C * (MB / 4); i += PP_THREADS) {
        const int c = i / (MB / 4), j = 4 * (i % (MB / 4));
        tdcx::cp_async16(as + c * MB + j, at + (size_t)c * CL * MB + m0 + j, true);
    }
    tdcx::cp_async_commit();
    const float* bslice = bt + (size_t)m0 * JP;
    for (int i = 4 * tid; i < MB * JP; i += 4 * PP_THREADS)
        tdcx::cp_async16(bs + i, bslice + i, true);
    tdcx::cp_async_commit();
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
                out = tc::conv_epilogue(vals[i], a_bias, m, residual, idx, relu1);
                y[idx] = out;
            }
            ys[o * P + p + i] = out;
        }
    });
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
                if (pix < HW) z[idx] = tc::conv_epilogue(vals[i], b_bias, j, nullptr, idx, relu2);
            }
        });
    } else {
        push.ready();
        block_product<P>(bs, JP, ys, MB, red, [&](int j, int p, float4 v) {
            push.template push<4>(j * P + p, reinterpret_cast<const float*>(&v));
        });
        push.wait();
        const int owned = push.count(JP * P), base = push.rank * push.share;
        for (int e = tid; e < owned; e += PP_THREADS) {
            const int idx = base + e, j = idx / P, pix = p0 + idx % P;
            const size_t at_z = ((size_t)n * J + j) * HW + pix;
            if (j < J && pix < HW)
                z[at_z] = tc::conv_epilogue(push.sum(e), b_bias, j, nullptr, at_z, relu2);
        }
    }
}

#ifndef __CUDACC_RTC__  // offline type-check of the instantiations the op uses
#define TC_PAIR(P, CL)                                                                    \
    template __global__ void conv1x1_pair<P, CL>(const float*, const float*, const float*, \
        const float*, float*, const float*, const float*, float*, int, int, int, int, int,  \
        int, int, int, int, unsigned long long);
#define TC_PAIR_P(P) TC_PAIR(P, 1) TC_PAIR(P, 2) TC_PAIR(P, 4) TC_PAIR(P, 8)
TC_PAIR_P(4) TC_PAIR_P(8) TC_PAIR_P(16) TC_PAIR_P(32) TC_PAIR_P(64)
#endif
