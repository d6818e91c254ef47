// A sparse convolution on the sparse tensor cores at one tf32 pass: mma.sp m16n8k16,
// whose A operand keeps one value of each pair of adjacent columns (1:2 sparsity), NCHW,
// fp32 in and out, any R x S filter (R S <= 64), stride and padding (groups 1, undilated).
//
//   y[n, k, p] = sum_col W[k, col] X[n, col, p]   (p an output pixel, col = c R S + r S + s,
//                                                  X the implicit im2col of the input)
//
// The GEMM's reduction is over the kernel's columns.  For a block of BM output rows the
// host lists pairs of columns such that each row has at most one nonzero in a pair
// (columns paired so that their rows rarely meet, a row's second nonzero in a pair moved
// to a later pair), eight pairs a k step; the tensor cores then do half a dense GEMM's
// products, the unused half of the 1:2 format and the rows' zeros costing nothing more.
// A k step's record (tensorconv/ops/sparse_pairs_tc.py) holds its rows' kept values in
// A-fragment order and their selectors as the metadata words each lane passes; its
// sixteen columns are listed beside it.
//
// A block of 32 * WM * WN threads owns BM = 16 * MT * WM output rows and BN = 8 * NT * WN
// consecutive pixels of the flattened (image, output pixel) axis; warp (wm, wn) MT m16
// tiles by NT n8 tiles.  The columns of the block's k steps are decoded into shared memory
// first, as (the column's input offset from a window's corner, its tap r S + s): each
// step's input copies need them (read from global memory they put an L2 round trip in
// every step).  A thread always copies the same output pixel, so it knows once which
// taps of its window lie inside the input (a bit set); the others are zero-filled (the
// padding).  U k steps' 16 im2col rows x BN pixels and records make a stage, copied by
// cp.async (16 bytes on a 1x1 filter at stride 1 without padding where a plane's pixels
// are a multiple of 4, so four pixels never straddle two images; else 4 bytes) into a
// ST-deep ring, ST - 1 stages ahead of the products.  ST is the tile's: 4, or 3, whose
// smaller ring leaves room for another block an SM or more L1 for the im2col's 4-byte
// reads (1.12-1.27x on 11 layers of 68, up to 4 % slower on 35: the tuner times both;
// rings of 8 were slower or no faster on every 1x1 layer timed: they cost blocks an SM).
// With 16-byte copies B is stored k-major, rows BN + 8 words apart (lane (g, t) reads row
// t + 4 i, column g: banks 8 t + g, all distinct).  With 4-byte copies it is stored
// pixel-major, a pixel's four rows t + 4 i side by side, so that a lane reads its fragment
// as one 16-byte word (4 shared loads a k step rather than 16; what it gained and where
// it lost: docs/notes/sparse_conv.md).
//
// CL > 1: the CL blocks of a thread-block cluster (blockIdx.z) take consecutive shares of
// the k steps, and sum their partial tiles through distributed shared memory
// (tdcx::PushReduce, in rank order: deterministic); a layer of few pixels and rows then
// still fills the GPU, each block walking a CL-th of the channels.  The tile's sums are
// stored a row of pixels at a time (coalesced), with the epilogue.
//
// Launch geometry, the records and the checks belong to tensorconv/ops/sparse_pairs_tc.py;
// what was measured: docs/notes/sparse_conv.md.
#include "tc_cluster.cuh"
#include "tc_common.cuh"

namespace sptc {
constexpr int KS = 16;           // input rows (channels) a k step
// k steps a stage: one barrier and one wait for two steps' products (the host pads each
// block's steps to a multiple of U with empty ones).
constexpr int U = 2;

// d += a b on one m16n8k16 tile with A 1:2 sparse: a the four kept tf32 values of lane's
// A fragment, e the lane's metadata word (selector 0: lanes t = 0, 1 of a quad hold it).
__device__ __forceinline__ void mma_sp(float (&d)[4], const uint4& a, const unsigned (&b)[4],
                                       unsigned e) {
    asm("mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),
          "r"(e));
}

__device__ __forceinline__ unsigned to_tf32(float v) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}
}  // namespace sptc

template <int MT, int NT, int WM, int WN, int CL, bool VEC, int ST>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(32 * WM * WN)
sparse_pairs_tc(
    const float* __restrict__ x,        // (N, C, H, W)
    const float4* __restrict__ recs,    // (steps, BM / 16 * 40) float4: A fragments, metadata
    const int* __restrict__ cols,       // (steps, 16): the kernel column of each k row
    const int2* __restrict__ segs,      // (row blocks,): first step, steps
    const float* __restrict__ bias, const float* __restrict__ residual,
    float* __restrict__ y,              // (N, K, OH, OW)
    int N, int C, int H, int W, int K, int OH, int OW, int R, int S, int SH, int SW, int PH,
    int PW, int row_blocks, int per_split, int chan_off, int red_off,
    unsigned long long fd_share, int accumulate, int relu)
{
    tc::wait_prior_grids();
    constexpr int THREADS = 32 * WM * WN, BM = 16 * MT * WM, BN = 8 * NT * WN;
    constexpr int LDB = BN + 8;                         // == 8 mod 32 for BN a multiple of 32
    constexpr int KR = sptc::KS * sptc::U;              // input rows a stage
    constexpr int BWORDS = KR * LDB;
    constexpr int AWORDS = BM * 10;                     // 16 rows: 32 lanes x (4 + 1) words x 2
    constexpr int AV = AWORDS / 4;                      // 16-byte copies of a record
    constexpr int SWORDS = BWORDS + sptc::U * AWORDS;
    constexpr int LDT = BN + 1;                         // the sums' pass through shared memory
    static_assert(BN % 32 == 0, "BN is a multiple of 32");
    static_assert(ST * SWORDS >= BM * LDT, "the ring holds the block's sums");
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / WN, wn = warp - wm * WN;
    // Row blocks fastest: the blocks that read the same pixels run together, and the
    // input is read from DRAM about once.
    const int HW = H * W, OHW = OH * OW, RS = R * S;
    const int NQ = N * OHW;                             // < 2^31 (the op checks)
    const int rblk = blockIdx.x % row_blocks, q0 = (blockIdx.x / row_blocks) * BN;
    const int2 seg = segs[rblk];
    const int s_begin = min(seg.y, (int)blockIdx.z * per_split);
    const int steps = min(seg.y, s_begin + per_split) - s_begin;
    const float4* rb = recs + (size_t)(seg.x + s_begin) * AV;
    int2* taps = reinterpret_cast<int2*>(smem + chan_off);
    const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
    tdcx::PushReduce<CL> red(smem + red_off, fd_share);
    if constexpr (CL > 1) red.begin(BM * BN);

    // The block's columns, 16 a step, decoded once (C R S < 2^31: the op checks): the
    // offset from a window's corner and the tap, as the bit of a 32-bit inside-mask where
    // the filter has at most 32 taps (one AND tests it), else its index.
    const bool one_word = RS <= 32;
    {
        const int* src = cols + (size_t)(seg.x + s_begin) * sptc::KS;
        for (int i = tid; i < sptc::KS * steps; i += THREADS) {
            const int cc = src[i];
            if (RS == 1) {                              // a 1x1 filter: no divisions
                taps[i] = make_int2(cc * HW, 1);
            } else {
                const int c = cc / RS, rs = cc - c * RS, r = rs / S;
                taps[i] = make_int2(c * HW + r * W + (rs - r * S),
                                    one_word ? (int)(1u << rs) : rs);
            }
        }
    }
    // The copies.  VEC: thread tid copies 4 pixels (col) of rows kr + j KSTEP, k-major (rows
    // LDB words apart, read one word a fragment element).  Else a warp instruction copies
    // one 8-pixel group x four k rows {c, c + 4, c + 8, c + 12} of a step (lane: pixel
    // lane & 7, row 4 (lane >> 3) + c), pixel-major: B[k][n] at word 16 n + 4 ((k & 3) ^
    // sw(n)) + (k >> 2), sw(n) = (n >> 1) & 3, so that the fragment a lane reads, rows
    // t, t + 4, t + 8, t + 12 of one pixel, is one 16-byte word; the swizzle keeps both the
    // copies' and the reads' 32 lanes on distinct banks.  Each thread always copies the
    // same pixels: their window corners and which taps lie inside are fixed for the launch.
    constexpr int PG = BN / 8, WARPS = WM * WN;
    constexpr int PPT = VEC ? 1 : (PG > WARPS ? PG / WARPS : 1);   // pixels a thread copies
    constexpr int WPG = PG >= WARPS ? 1 : WARPS / PG;              // warps a pixel group
    constexpr int UNITS = 4 * sptc::U / WPG;            // non-VEC: copies a stage a pixel
    static_assert(VEC || (PG % WARPS == 0 || WARPS % PG == 0) && 4 * sptc::U % WPG == 0,
                  "the pixel groups tile the warps");
    constexpr int PER_ROW = BN / 4;                     // VEC: 16-byte copies a k row
    constexpr int KSTEP = THREADS / PER_ROW;
    static_assert(!VEC || THREADS % PER_ROW == 0 && KR % KSTEP == 0,
                  "the block's copies tile a stage's k rows");
    constexpr int JN = VEC ? KR / KSTEP : UNITS;        // copies a stage a pixel
    // Pixel i of a thread: pix0 + PSTEP i.  Copy j of pixel i lands at byte bw(j) + BSTEP i
    // of a stage's B tile and reads column kc + cj(j) of the stage's KR.  Non-VEC, copy j
    // is unit j WPG + w2 (row group c = its low two bits, step u = the rest): bw(j) =
    // b0 + 64 BN u + xs[c - w2], the swizzled part xs kept for the four c.
    constexpr int PSTEP = 8 * WARPS, BSTEP = 4 * 16 * PSTEP;
    int pix0, kc, b0, xs[4];
    if constexpr (VEC) {
        pix0 = (tid % PER_ROW) * 4;
        kc = tid / PER_ROW;
        b0 = 4 * (kc * LDB + pix0);
    } else {
        pix0 = (warp % PG) * 8 + (lane & 7);
        const int sw = (pix0 >> 1) & 3, kq = lane >> 3, w2 = warp / PG;
        kc = 4 * kq + w2;
        b0 = 4 * (16 * pix0 + kq);
#pragma unroll
        for (int m = 0; m < 4; ++m) xs[m] = 16 * (((m + w2) & 3) ^ sw);
    }
    auto bw = [&](int j) {
        if constexpr (VEC) return b0 + 4 * j * KSTEP * LDB;
        else return b0 + 4 * sptc::KS * BN * ((j * WPG) >> 2) + xs[(j * WPG) & 3];
    };
    // column of copy j: kc + cj(j), cj a constant (VEC: rows j KSTEP apart)
    auto cj = [](int j) {
        if constexpr (VEC) return j * KSTEP;
        else return 16 * ((j * WPG) >> 2) + ((j * WPG) & 3);
    };
    // The input offset of each pixel's window corner (negative in the padding; an input
    // offset fits an int: N C H W < 2^31, the op checks) and which of its taps lie inside
    // the input (none past the last pixel; VEC, a 1x1 filter at stride 1 without padding,
    // reads inside always).
    int corner[PPT];
    unsigned in_lo[PPT], in_hi[PPT];
#pragma unroll
    for (int i = 0; i < PPT; ++i) {
        const int q = q0 + pix0 + PSTEP * i;
        const bool live = q < NQ;
        const int n_img = live ? q / OHW : 0, p = live ? q - n_img * OHW : 0;
        corner[i] = n_img * C * HW;
        unsigned long long inside = 0;
        if constexpr (VEC) {
            corner[i] += p;
            inside = live;
        } else if (live) {
            const int oh = p / OW, ow = p - oh * OW, ih0 = oh * SH - PH, iw0 = ow * SW - PW;
            corner[i] += ih0 * W + iw0;
            for (int r = 0; r < R; ++r)
                for (int s = 0; s < S; ++s)
                    if ((unsigned)(ih0 + r) < (unsigned)H && (unsigned)(iw0 + s) < (unsigned)W)
                        inside |= 1ull << (r * S + s);
        }
        in_lo[i] = (unsigned)inside;
        in_hi[i] = (unsigned)(inside >> 32);
    }

    auto stage = [&](int s, int buf) {
        const unsigned sb = base + 4u * buf * SWORDS;
        const int2* tk = taps + s * KR + kc;
        if (VEC || one_word) {
#pragma unroll
            for (int i = 0; i < PPT; ++i)
#pragma unroll
                for (int j = 0; j < JN; ++j) {
                    const int2 tp = tk[cj(j)];
                    const bool ok = VEC ? in_lo[0] != 0 : (in_lo[i] & (unsigned)tp.y) != 0;
                    const float* src = x + (ok ? corner[i] + tp.x : 0);
                    const unsigned dst = sb + bw(j) + BSTEP * i;
                    if constexpr (VEC) tdcx::cp_async16(dst, src, ok);
                    else tdcx::cp_async4(dst, src, ok);
                }
        } else {                                        // more than 32 taps: not VEC
#pragma unroll
            for (int i = 0; i < PPT; ++i)
#pragma unroll
                for (int j = 0; j < JN; ++j) {
                    const int2 tp = tk[cj(j)];
                    const bool ok = ((tp.y < 32 ? in_lo[i] : in_hi[i]) >> (tp.y & 31)) & 1;
                    const float* src = x + (ok ? corner[i] + tp.x : 0);
                    tdcx::cp_async4(sb + bw(j) + BSTEP * i, src, ok);
                }
        }
        const float4* r = rb + (size_t)s * sptc::U * AV;
        for (int i = tid; i < sptc::U * AV; i += THREADS)
            tdcx::cp_async16(sb + 4u * (BWORDS + 4 * i), reinterpret_cast<const float*>(r + i),
                             true);
    };

    // (not tf32x3::zero: tc_mma.cuh would make the build follow tensorconv.precision,
    // and this kernel has one tf32 pass only)
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.f;

    __syncthreads();                                    // the taps are decoded
    const int nst = steps / sptc::U;                    // stages (steps: a multiple of U)
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < nst) stage(s, s);
        tdcx::cp_async_commit();
    }
    for (int s = 0; s < nst; ++s) {
        tdcx::cp_async_wait<ST - 2>();
        __syncthreads();
        // The slot refilled here was read by every warp in stage s - 1, before the barrier.
        if (s + ST - 1 < nst)
            stage(s + ST - 1, (s + ST - 1) % ST);
        tdcx::cp_async_commit();
        const float* st = smem + (s % ST) * SWORDS;
#pragma unroll
        for (int u = 0; u < sptc::U; ++u) {
            unsigned b[NT][4];
            if constexpr (VEC) {
                const float* bs = st + u * sptc::KS * LDB + wn * NT * 8 + g;
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        b[j][i] = sptc::to_tf32(bs[(t + 4 * i) * LDB + 8 * j]);
            } else {
                // pixel n = wn NT 8 + 8 j + g: sw(n) = (g >> 1) & 3
                const float* bs = st + u * sptc::KS * BN + 16 * (wn * NT * 8 + g) +
                                  4 * (t ^ ((g >> 1) & 3));
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const float4 v = *reinterpret_cast<const float4*>(bs + 128 * j);
                    b[j][0] = sptc::to_tf32(v.x); b[j][1] = sptc::to_tf32(v.y);
                    b[j][2] = sptc::to_tf32(v.z); b[j][3] = sptc::to_tf32(v.w);
                }
            }
            const float* as = st + BWORDS + u * AWORDS;
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const int mf = wm * MT + m;
                const uint4 a = *reinterpret_cast<const uint4*>(as + (mf * 32 + lane) * 4);
                const unsigned e = __float_as_uint(as[BM * 8 + mf * 32 + lane]);
#pragma unroll
                for (int j = 0; j < NT; ++j) sptc::mma_sp(acc[m][j], a, b[j], e);
            }
        }
    }
    tdcx::cp_async_wait<0>();

    // The tile's sums, element (row, pixel) at row * BN + pixel: pushed to their owners in
    // the cluster (a whole number of rows each), or through shared memory; then stored a
    // row of pixels at a time, each thread always the same pixel.
    const int r_w = wm * MT * 16, c_w = wn * NT * 8;
    int rows_owned = BM, row_first = 0;
    if constexpr (CL > 1) {
        red.ready();
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    red.template push<2>((r_w + 16 * m + g + 8 * h) * BN + c_w + 8 * j + 2 * t,
                                         &acc[m][j][2 * h]);
        red.wait();
        rows_owned = red.count(BM * BN) / BN;
        row_first = red.rank * (red.share / BN);
    } else {
        __syncthreads();                                 // every warp is done with the ring
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    smem[(r_w + 16 * m + g + 8 * (e >> 1)) * LDT + c_w + 8 * j + 2 * t +
                         (e & 1)] = acc[m][j][e];
        __syncthreads();
    }
    static_assert(THREADS % BN == 0, "a thread stores one pixel of every few rows");
    const int c = tid % BN, qc = q0 + c;
    if (qc >= NQ) return;
    const int n = qc / OHW;
    const size_t ybase = (size_t)n * K * OHW + (qc - n * OHW);
    for (int r = tid / BN; r < rows_owned; r += THREADS / BN) {
        const int k = rblk * BM + row_first + r;
        if (k >= K) break;
        float v;
        if constexpr (CL > 1) v = red.sum(r * BN + c);
        else v = smem[r * LDT + c];
        const size_t at = ybase + (size_t)k * OHW;
        if (accumulate) v += y[at];
        y[at] = tc::conv_epilogue(v, bias, k, residual, at, relu);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.sparse_pairs_tc.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SPARSE_PAIRS_TC(...) template __global__ void sparse_pairs_tc<__VA_ARGS__>( \
    const float*, const float4*, const int*, const int2*, const float*, const float*, float*, int, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, \
    unsigned long long, int, int);
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 1, false, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 1, true, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 2, false, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 2, true, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 4, false, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 4, true, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 8, false, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 8, true, 3) TC_I_SPARSE_PAIRS_TC(1, 4, 2, 2, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 1, false, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 1, true, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 2, false, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 2, true, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 4, false, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 4, true, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 8, false, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 8, true, 3) TC_I_SPARSE_PAIRS_TC(2, 2, 2, 2, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 1, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 1, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 2, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 2, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 4, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 4, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 8, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 8, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 2, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 1, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 1, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 2, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 2, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 4, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 4, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 8, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 8, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 2, 4, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 1, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 1, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 2, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 2, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 4, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 4, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 8, false, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 8, true, 3) TC_I_SPARSE_PAIRS_TC(2, 4, 4, 2, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 1, false, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 1, true, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 2, false, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 2, true, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 4, false, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 4, true, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 8, false, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 8, true, 3) TC_I_SPARSE_PAIRS_TC(4, 2, 2, 2, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 1, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 1, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 2, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 2, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 4, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 4, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 8, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 8, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 1, 4, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 1, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 1, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 2, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 2, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 4, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 4, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 8, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 8, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 2, 8, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 1, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 1, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 1, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 1, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 2, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 2, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 2, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 2, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 4, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 4, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 4, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 4, true, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 8, false, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 8, false, 4)
TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 8, true, 3) TC_I_SPARSE_PAIRS_TC(4, 4, 2, 4, 8, true, 4)
#undef TC_I_SPARSE_PAIRS_TC
#endif
