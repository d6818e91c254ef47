// The remainder of a sparse convolution (every nonzero outside dense blocks) on the tensor
// cores: mma.sync m16n8k8, 3xTF32 (fp32 accuracy) or one tf32 pass under
// tensorconv.precision "tf32" (tc_mma.cuh's TC_MMA_PASSES).
//
// A warp owns MT groups of 16 output rows (the mma's M) and NT tiles of 8 output pixels (its
// N).  The reduction walks, chunk by chunk of CK input channels, the columns (c, r, s) that
// any of the warp's rows uses, eight a k step, padded with zero columns: the host packs each
// k step as a record (tensorconv/ops/sparse_tc_remainder.py): the A fragments of its rows in
// lane order (the tf32 "big" parts, then at fp32 accuracy the remainders), then the eight
// columns' byte offsets in a staged chunk as (t, t + 4) pairs.  The tensor cores multiply
// the zeros for free; at 8x the rows of a group share about one column in eight.
//
// The B values are gathered from the staged input chunk at column offset + pixel word.
// Lanes t = 0..3 read four columns whose word offsets differ mod 4 (the host packs columns
// by residue), lanes g = 0..7 eight pixels whose words are distinct mod 32 within one
// residue class mod 4 (the host partitions the tile's pixels so, and pads the staged
// lines, channels and images for it): the gathers fall on 32 distinct banks.
//
// The records are read from global memory (L2, and the L1 for the block's other pixel
// warps) one k step ahead, not staged: shared memory holds two input stages only, so
// more blocks run an SM (measured faster: docs/notes/sparse_conv.md).  Where the blocks
// alone leave a wave of the GPU short, shares of the channel chunks sum into partial
// outputs laid out like the output, which sparse_tc_remainder_sum adds in a fixed order
// with the epilogue: an elementwise pass (the prototype's took 7.1 µs where
// conv2d_splitk_reduce, which transposes, took 10.9 on one layer's 4 shares).  The results
// pass through shared memory so that a warp stores 32 consecutive pixels of one row.
#include "tc_cluster.cuh"
#include "tc_common.cuh"
#include "tc_mma.cuh"

template <int NT, int MT, int WR, int WP>
__global__ void __launch_bounds__(32 * WR * WP)
sparse_tc_remainder(
    const float* __restrict__ x,          // (N, C, H, W)
    const float4* __restrict__ recs,      // the k steps, by (chunk, row group, k step)
    const int2* __restrict__ segs,        // (chunks, groups): first record, k steps
    const int* __restrict__ pixtab,       // (2, WP * NT * 8): a lane's pixel byte offset in
                                          // a stage, then the tile pixel of each n column
    const int* __restrict__ row_of,       // (groups * 16 * MT,): a slot's row, or -1
    const float* __restrict__ bias, const float* __restrict__ residual,
    float* __restrict__ y,                // (N, K, OH, OW)
    float* __restrict__ partial,          // (shares, N, K, OH, OW), or nullptr: one share
    int N, int C, int H, int W, int K, int OH, int OW, int ph, int pw,
    int CK, int CH, int IMG, int PITCH, int IHT, int IWT, int NB, int lth, int ltw,
    int tiles_w, int tiles_h, int chunks, int per_share, int groups, int stage_words,
    int ldp, int sh, int sw, int accumulate, int relu)
{
    tc::wait_prior_grids();
    constexpr bool EXACT = tf32x3::EXACT;
    constexpr int AREC = 32 * MT * (EXACT ? 2 : 1), REC = AREC + 2, RG = 16 * MT;
    constexpr int WARPS = WR * WP, PT = 8 * NT * WP;
    extern __shared__ __align__(16) float xs[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wr = warp / WP, wp = warp - wr * WP;
    const int TH = 1 << lth, TW = 1 << ltw;
    const int per_img = tiles_w * tiles_h;
    const int grp = blockIdx.x / per_img, rem = blockIdx.x - grp * per_img;
    const int th_i = rem / tiles_w, tw_i = rem - th_i * tiles_w;
    const int n0 = grp * NB, oh0 = th_i * TH, ow0 = tw_i * TW;
    const int ih0 = oh0 * sh - ph, iw0 = ow0 * sw - pw;
    const int share = blockIdx.z;
    const int c_begin = share * per_share, c_end = min(chunks, c_begin + per_share);
    const int g0 = blockIdx.y * WR;

    int pix[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) pix[j] = pixtab[(wp * NT + j) * 8 + g];

    // The stages' gaps (line, channel and image padding) feed no product, but a padding
    // column's zero weight times a stale word could be NaN: both stages start zeroed.
    for (int i = tid; i < 2 * stage_words; i += blockDim.x) xs[i] = 0.f;
    // The block's staged lines (image b, channel c, line li), made once: the source row's
    // offset from the chunk's first channel (-1 outside the batch or the image) and the
    // line's first word in a stage.  A chunk's copies then walk (line, column) flat.
    const int lines = NB * CK * IHT, HW = H * W, items = lines * IWT;
    int2* lt = reinterpret_cast<int2*>(xs + 2 * stage_words);
    for (int l = tid; l < lines; l += blockDim.x) {
        const int b = l / (CK * IHT), r2 = l - b * CK * IHT, c = r2 / IHT, li = r2 - c * IHT;
        const int n = n0 + b, ih = ih0 + li;
        const bool ok = n < N && ih >= 0 && ih < H;
        lt[l] = make_int2(ok ? (n * C + c) * HW + ih * W : -1, b * IMG + c * CH + li * PITCH);
    }
    __syncthreads();
    const tdcx::FastDiv by_iwt((unsigned)IWT);
    auto stage = [&](int chunk, int buf) {
        const int c0 = chunk * CK;
        const float* src = x + (size_t)c0 * HW;
        float* dst = xs + buf * stage_words;
        const bool full = c0 + CK <= C;
        for (int e = tid; e < items; e += blockDim.x) {
            const int l = by_iwt.div(e), col = e - l * IWT;
            const int2 t2 = lt[l];
            const int iw = iw0 + col;
            bool ok = t2.x >= 0 && iw >= 0 && iw < W;
            if (!full) ok = ok && c0 + (t2.y % IMG) / CH < C;
            tdcx::cp_async4(dst + t2.y + col, ok ? src + t2.x + iw : x, ok);
        }
        tdcx::cp_async_commit();
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.f;

    const bool has_group = g0 + wr < groups;
    stage(c_begin, c_begin & 1);
    for (int chunk = c_begin; chunk < c_end; ++chunk) {
        if (chunk + 1 < c_end) stage(chunk + 1, (chunk + 1) & 1);
        else tdcx::cp_async_commit();                    // an empty group: wait<1> below
        tdcx::cp_async_wait<1>();
        __syncthreads();
        const int2 seg = has_group ? segs[chunk * groups + g0 + wr] : make_int2(0, 0);
        const char* cur = reinterpret_cast<const char*>(xs + (chunk & 1) * stage_words);
        const float4* rb = recs + (size_t)seg.x * REC;
        float4 na[MT], ns[MT];
        int2 noff = make_int2(0, 0);
        auto fetch = [&](const float4* r) {
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                na[m] = __ldg(r + 32 * m + lane);
                if constexpr (EXACT) ns[m] = __ldg(r + 32 * MT + 32 * m + lane);
            }
            noff = __ldg(reinterpret_cast<const int2*>(r + AREC) + t);
        };
        if (seg.y > 0) fetch(rb);
        for (int ks = 0; ks < seg.y; ++ks, rb += REC) {
            unsigned a[MT][4], as[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                a[m][0] = __float_as_uint(na[m].x); a[m][1] = __float_as_uint(na[m].y);
                a[m][2] = __float_as_uint(na[m].z); a[m][3] = __float_as_uint(na[m].w);
                if constexpr (EXACT) {
                    as[m][0] = __float_as_uint(ns[m].x); as[m][1] = __float_as_uint(ns[m].y);
                    as[m][2] = __float_as_uint(ns[m].z); as[m][3] = __float_as_uint(ns[m].w);
                }
            }
            const char* p0 = cur + noff.x;               // byte offsets
            const char* p1 = cur + noff.y;
            if (ks + 1 < seg.y) fetch(rb + REC);         // the next k step's, in flight
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                float v0 = *reinterpret_cast<const float*>(p0 + pix[j]);
                float v1 = *reinterpret_cast<const float*>(p1 + pix[j]);
                float s0, s1;
                tf32x3::split(v0, s0);
                tf32x3::split(v1, s1);
                const unsigned b0 = __float_as_uint(v0), b1 = __float_as_uint(v1);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    if constexpr (EXACT) {
                        tf32x3::mma(acc[m][j], as[m], b0, b1);
                        tf32x3::mma(acc[m][j], a[m], __float_as_uint(s0), __float_as_uint(s1));
                    }
                    tf32x3::mma(acc[m][j], a[m], b0, b1);
                }
            }
        }
        __syncthreads();                                 // before the next copies reuse it
    }
    tdcx::cp_async_wait<0>();
    __syncthreads();

    // Through shared memory, [slot][tile pixel] (ldp == 1 mod 32), then 32 consecutive
    // pixels of one row a warp store.
    const int* pixq = pixtab + PT;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = wr * RG + 16 * m + g + 8 * (e >> 1);
                xs[row * ldp + pixq[(wp * NT + j) * 8 + 2 * t + (e & 1)]] = acc[m][j][e];
            }
    __syncthreads();
    const size_t q_all = (size_t)N * OH * OW;
    for (int i = warp; i < RG * WR; i += WARPS) {
        const int k = g0 * RG + i < groups * RG ? row_of[g0 * RG + i] : -1;
        if (k < 0) continue;
        for (int q = lane; q < PT; q += 32) {
            const int n = n0 + (q >> (lth + ltw)), oh = oh0 + ((q >> ltw) & (TH - 1));
            const int ow = ow0 + (q & (TW - 1));
            if (n >= N || oh >= OH || ow >= OW) continue;
            const size_t at = (((size_t)n * K + k) * OH + oh) * OW + ow;
            float v = xs[i * ldp + q];
            if (accumulate && share == 0) v += y[at];
            if (partial != nullptr)
                partial[(size_t)share * K * q_all + at] = v;
            else
                y[at] = tc::conv_epilogue(v, bias, k, residual, at, relu);
        }
    }
}

// y = relu?(sum of the `shares` partial outputs in share order + bias + residual), every
// output value of y (N, K, OH, OW) (`size` of them, `plane` = OH·OW) by a grid-stride loop.
__global__ void sparse_tc_remainder_sum(const float* __restrict__ partial,
                                        const float* __restrict__ bias,
                                        const float* __restrict__ residual, float* __restrict__ y,
                                        int shares, long long size, int plane, int K, int relu)
{
    tc::wait_prior_grids();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < size;
         i += (long long)gridDim.x * blockDim.x) {
        float v = 0.f;
        for (int z = 0; z < shares; ++z) v += partial[z * size + i];
        y[i] = tc::conv_epilogue(v, bias, (int)(i / plane % K), residual, (size_t)i, relu);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.sparse_tc_remainder.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SPARSE_TC_REMAINDER(...) template __global__ void sparse_tc_remainder<__VA_ARGS__>( \
    const float*, const float4*, const int2*, const int*, const int*, const float*, const float*, \
    float*, float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_SPARSE_TC_REMAINDER(4, 2, 4, 2) TC_I_SPARSE_TC_REMAINDER(8, 1, 4, 2)
TC_I_SPARSE_TC_REMAINDER(8, 1, 8, 1) TC_I_SPARSE_TC_REMAINDER(8, 2, 4, 2)
#undef TC_I_SPARSE_TC_REMAINDER
#endif
