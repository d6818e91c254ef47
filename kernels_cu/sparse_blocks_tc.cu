// The block table of the sparse convolution (sparse_conv.cu's sparse_block_table) on the
// tensor cores: the same items, slots, arguments and results, each item's GEMM
//     out[slot + m, q] = sum over its columns j of values[m, j] * X[tab[j], q]
// (X the implicit im2col of the input, gathered through the block's column table) on
// mma.sync m16n8k8 tiles at fp32 accuracy (3xTF32, tc_mma.cuh), or in one tf32 pass
// under tensorconv.precision "tf32".
//
// A thread block (256 threads, 8 warps as 2 x 4, or 1 x 8 at BM = 16) computes BM rows x
// 128 pixels of one item.  Both operands go from global to shared memory by 4-byte
// cp.async copies (zero-filled past the item's rows and columns and outside the image) a
// BK = 16 column slice at a time, into a STAGES-deep ring, STAGES - 1 slices ahead of the
// multiplication: the gather's latency, which bounds the SIMT kernel, hides behind the
// tensor cores.  The layouts are igemm_tf32x3.cu's (conflict-free fragment reads): A
// m-major in rows of BK + 4 words, B k-major in rows of 128 + 8 words.
//
// B's gather: each thread owns pixels bc + 32 j (j < 4; a warp's lanes take 32
// consecutive pixels, so the copies coalesce) and slice rows 2 br, 2 br + 1.  A pixel's
// image, corner (ih0, iw0) and base offset are decoded once; a slice row's column table
// entry (c·H·W + r·W + s, r, s) is read once per row, and each copy costs two adds, a
// bounds test and the copy.
//
// The item split, the slots and the reduction belong to tensorconv/ops/sparse_blocks.py;
// this kernel's tiles to tensorconv/ops/sparse_blocks_tc.py.
#include "tc_cluster.cuh"
#include "tc_common.cuh"
#include "tc_mma.cuh"

namespace sbtc {
constexpr int BN = 128, BK = 16, THREADS = 256, STAGES = 4;
constexpr int LDK = BK + 4;   // an m-major A row: 20 words
constexpr int LDN = BN + 8;   // a k-major B row: 136 words (== 8 mod 32)

template <int BM>
struct Shape {
    static constexpr int WARPS_M = BM >= 32 ? 2 : 1, WARPS_N = 8 / WARPS_M;
    static constexpr int MT = BM / (16 * WARPS_M);   // m16 tiles per warp
    static constexpr int NT = BN / (8 * WARPS_N);    // n8 tiles per warp
    static constexpr int NA = BM * BK / THREADS;     // A values each thread copies per slice
    static_assert(MT >= 1 && NA >= 1 && BM * BK % THREADS == 0, "BM is 16, 32, 64 or 128");
};
}  // namespace sbtc

template <int BM>
__global__ void __launch_bounds__(sbtc::THREADS, BM >= 128 ? 1 : 2) sparse_block_table_tc(
    const float* __restrict__ x,           // (N, C, H, W)
    const float* __restrict__ values_all,  // every block's (rows, cols) values in turn
    const int4* __restrict__ tabs,         // every block's column table in turn
    const int4* __restrict__ items,        // (items, 2): values offset, ld, table offset,
                                           //   rows; first column, end column, slot, 0
    const int* __restrict__ slot_rows,     // (slots,) output channels, or nullptr
    float* __restrict__ out,               // (slots, Q) partial sums, or y (N, K, OH, OW)
    int CHW, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw, int Q)
{
    tc::wait_prior_grids();
    using namespace sbtc;
    using Sh = Shape<BM>;
    constexpr int A_WORDS = BM * LDK, STAGE_WORDS = A_WORDS + BK * LDN;
    const int4 ia = items[2 * blockIdx.y], ib = items[2 * blockIdx.y + 1];
    const float* __restrict__ values = values_all + ia.x;
    const int4* __restrict__ tab = tabs + ia.z;
    const int ncols = ia.y, nrows = ia.w, kbeg = ib.x, kend = ib.y;
    const int tid = threadIdx.x;
    const int q0 = blockIdx.x * BN;
    const int OHW = OH * OW;

    constexpr int B_COLS = 4;
    const int bc = tid % 32, br = tid / 32;
    int cih[B_COLS], ciw[B_COLS], cbase[B_COLS];
#pragma unroll
    for (int j = 0; j < B_COLS; ++j) {
        const int q = q0 + bc + 32 * j;
        const int n = q / OHW, p = q - n * OHW, oh = p / OW, ow = p - oh * OW;
        cih[j] = q < Q ? oh * sh - ph : -(1 << 28);   // no tap brings it in bounds
        ciw[j] = ow * sw - pw;
        cbase[j] = n * CHW + cih[j] * W + ciw[j];
    }
    const int ak = tid % BK;

    extern __shared__ __align__(16) float smem[];
    auto load = [&](int k0, int st) {
        float* as = smem + st * STAGE_WORDS;
        float* bs = as + A_WORDS;
        const int ka = k0 + ak;
#pragma unroll
        for (int i = 0; i < Sh::NA; ++i) {
            const int m = tid / BK + i * (THREADS / BK);
            const bool ok = m < nrows && ka < kend;
            tdcx::cp_async4(as + m * LDK + ak, ok ? values + (size_t)m * ncols + ka : values, ok);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int kl = 2 * br + h, k = k0 + kl;
            const bool k_ok = k < kend;
            const int4 t = k_ok ? tab[k] : make_int4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < B_COLS; ++j) {
                const int ih = cih[j] + t.y, iw = ciw[j] + t.z;
                const bool ok = k_ok && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                tdcx::cp_async4(bs + kl * LDN + bc + 32 * j, ok ? x + cbase[j] + t.x : x, ok);
            }
        }
    };

    const int warp = tid >> 5, lane = tid & 31, lg = lane >> 2, lt = lane & 3;
    const int wm = warp % Sh::WARPS_M, wn = warp / Sh::WARPS_M;
    const int wrow = wm * Sh::MT * 16, wcol = wn * Sh::NT * 8;
    float acc[Sh::MT][Sh::NT][4];
#pragma unroll
    for (int i = 0; i < Sh::MT; ++i)
#pragma unroll
        for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int slices = kbeg < kend ? (kend - kbeg + BK - 1) / BK : 0;
    tdcx::cp_async_ring<STAGES>(
        slices, [&](int it, int st) { load(kbeg + it * BK, st); },
        [&](int, int st) {
            const float* as = smem + st * STAGE_WORDS;
            const float* bs = as + A_WORDS;
#pragma unroll
            for (int k8 = 0; k8 < BK; k8 += 8)
                tf32x3::k8_product(
                    acc,
                    [&](int i, int e) {
                        const int m = wrow + i * 16 + lg + 8 * (e & 1);
                        return as[m * LDK + k8 + lt + 4 * (e >> 1)];
                    },
                    [&](int j, int h) { return bs[(k8 + lt + 4 * h) * LDN + wcol + j * 8 + lg]; });
        });

    // Lane (g, t) holds rows g, g + 8 and pixels 2t, 2t + 1 of each m16n8 tile.
#pragma unroll
    for (int i = 0; i < Sh::MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = wrow + i * 16 + lg + 8 * h;
            if (m >= nrows) continue;
            if (slot_rows == nullptr) {
                float* row = out + (size_t)(ib.z + m) * Q;
#pragma unroll
                for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int q = q0 + wcol + j * 8 + 2 * lt + e;
                        if (q < Q) row[q] = acc[i][j][2 * h + e];
                    }
            } else {
                const size_t krow = (size_t)slot_rows[ib.z + m] * OHW;
#pragma unroll
                for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int q = q0 + wcol + j * 8 + 2 * lt + e;
                        if (q >= Q) continue;
                        const int n = q / OHW, p = q - n * OHW;
                        out[(size_t)n * K * OHW + krow + p] = acc[i][j][2 * h + e];
                    }
            }
        }
}

// What CI's nvcc build type-checks: tensorconv.ops.sparse_blocks_tc.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SPARSE_BLOCK_TABLE_TC(...) template __global__ void sparse_block_table_tc<__VA_ARGS__>( \
    const float*, const float*, const int4*, const int4*, const int*, float*, int, int, int, \
    int, int, int, int, int, int, int, int);
TC_I_SPARSE_BLOCK_TABLE_TC(128) TC_I_SPARSE_BLOCK_TABLE_TC(16) TC_I_SPARSE_BLOCK_TABLE_TC(32)
TC_I_SPARSE_BLOCK_TABLE_TC(64)
#undef TC_I_SPARSE_BLOCK_TABLE_TC
#endif
