// Sliding-channel convolution on the tensor cores at fp32 accuracy (3xTF32), NCHW: the
// forward pass and both gradients of scc_conv.cu as mma.sync GEMMs.
//
// The same GEMM views as scc_conv.cu's tiled kernels (filters sorted by window start; a
// tile of BM sorted filters reads one band of virtual channels v in [lo, lo + span),
// channel (lo + v) mod Cin, the weights dense-masked), OUT[m, n] = sum_q A[m, q] B[q, n]:
//
//   MODE  what            M rows              N columns          Q reduction
//   0     y               BM sorted filters   pixels (n, p)      band channels v
//   1     gx              BM input channels   pixels (n, p)      the tile's filter list
//   2     gw (partial)    BM sorted filters   band channels v    pixels (n, p)
//
// Mode 1's list (scc_tiles.data_tiles) holds every filter whose window meets one of the
// tile's channels: A[m, e] = w[k_e, (c0 + m - b_k) mod Cin] inside the window, else 0, so
// every gx value is one block's sum (no atomics); blockIdx.z shares the list and the
// shares' partial maps are added in order.  Mode 2 computes the band's dense block and
// keeps the entries inside each filter's window: every (k, u) of a pixel share is written
// by one thread, the shares added in order by conv2d_splitk_reduce.  All deterministic.
//
// A block of 256 threads (8 warps) computes a BM x BN tile, each warp (BM / WARPS_M) x
// (BN / WARPS_N) of m16n8k8 tiles.  Operands are gathered by cp.async (4 bytes, or 16 where
// P % 4 == 0 and the map is aligned: four consecutive pixels of one image) a BK = 16
// slice at a time into a STAGES-deep ring, zero-filled outside the band, the window or the
// map; fragment values are split into tf32 big and small parts as they are read and each
// product takes three passes (tc_mma.cuh): results within fp32's 1e-5 of the reference.
//
// Layouts keep the fragment reads conflict-free: A m-major in rows of BK + 4 words; B
// k-major in rows of BN + 8 (modes 0, 1) or, in mode 2, n-major like A (its loads walk the
// pixels, the reduction, for coalescing).
//
// Launch geometry, tables, tiles and checks belong to tensorconv/ops/scc_tc.py; why these
// kernels exist beside scc_conv.cu's FMA ones: docs/notes/scc_conv.md.
#include "tc_cluster.cuh"
#include "tc_common.cuh"
#include "tc_mma.cuh"

namespace scctc {
constexpr int BK = 16, THREADS = 256, STAGES = 4;
constexpr int LDK = BK + 4;   // an m-major (or n-major) row: 20 words

template <int BM, int BN>
struct Shape {
    static constexpr int WARPS_M = BM >= 32 ? 2 : 1, WARPS_N = 8 / WARPS_M;
    static constexpr int MT = BM / (16 * WARPS_M);   // m16 tiles a warp
    static constexpr int NT = BN / (8 * WARPS_N);    // n8 tiles a warp
    static constexpr int LDN = BN + 8;               // a k-major row (== 8 mod 32)
    static constexpr int NA = BM * BK / THREADS;     // A values a thread loads a slice
    static constexpr int NB = BN * BK / THREADS;     // B values (mode 2, scalar)
    static_assert(MT >= 1 && NT >= 1 && NA >= 1 && NB >= 1, "BM 16-128, BN 64 or 128");
};

// v mod Cin for 0 <= v < 3 Cin (a band starts below Cin and spans less than 2 Cin).
__device__ __forceinline__ int wrap(int v, int Cin) {
    v -= v >= Cin ? Cin : 0;
    return v - (v >= Cin ? Cin : 0);
}

// The k-major B operand of modes 0 and 1: BK rows of a (N, C, P) map's pixels q0 .. q0 +
// BN - 1, row r from a caller's channel function.  A thread keeps one column (or one run
// of four pixels: P % 4 == 0 and the map 16-byte aligned) for the whole launch, so a pixel
// is decoded once, not once a slice.
template <int BN>
struct PixelRows {
    static constexpr int LDN = BN + 8, NV = BN / 4;
    bool vec;
    int col, row, step, count;
    long long base;   // offset of this thread's pixel (run) in channel 0, -1 past the map
    __device__ __forceinline__ PixelRows(const float* src, int tid, int q0, int Q, int C, int P) {
        vec = P % 4 == 0 && reinterpret_cast<unsigned long long>(src) % 16 == 0;
        col = vec ? 4 * (tid % NV) : tid % BN;
        row = vec ? tid / NV : tid / BN;
        step = vec ? THREADS / NV : THREADS / BN;
        count = BK / step;
        const int q = q0 + col;
        const int n = q / P;
        base = q < Q ? (long long)n * C * P + (q - n * P) : -1;
    }
    // chan(r): row r's channel, or -1 for zeros.
    template <typename Chan>
    __device__ __forceinline__ void load(float* bs, const float* src, int P, Chan chan) const {
        for (int l = 0; l < count; ++l) {
            const int r = row + l * step, c = chan(r);
            const bool ok = c >= 0 && base >= 0;
            const float* at = ok ? src + base + (size_t)c * P : src;
            if (vec) tdcx::cp_async16(bs + r * LDN + col, at, ok);
            else tdcx::cp_async4(bs + r * LDN + col, at, ok);
        }
    }
};
}  // namespace scctc

template <int MODE, int BM, int BN>
__global__ void __launch_bounds__(scctc::THREADS, BM >= 128 ? 1 : 2) scc_tc(
    const float* __restrict__ a_src,     // MODE 0, 1: w (Cout, U);  MODE 2: gy (N, Cout, P)
    const float* __restrict__ b_src,     // MODE 0, 2: x (N, Cin, P);  MODE 1: gy
    const int* __restrict__ order,       // (Cout,) filters sorted by window start
    const int* __restrict__ starts,      // (Cout,) MODE 0, 2: start of each sorted filter;
                                         //   MODE 1: start of each filter (by id)
    const int* __restrict__ tile_ptr,    // MODE 1: (tiles + 1,) each channel tile's list
    const int* __restrict__ tile_k,      //   and its filters
    const float* __restrict__ bias,      // MODE 0: (Cout,) or nullptr
    float* __restrict__ out,             // MODE 0: y;  MODE 1: gx or partial maps;
                                         //   MODE 2: partial weight gradients (splits, Cout, U)
    int Cin, int Cout, int U, int P, int Q, int per_split, int relu)
{
    tc::wait_prior_grids();
    using namespace scctc;
    using Sh = Shape<BM, BN>;
    constexpr bool B_KMAJOR = MODE != 2;
    constexpr int A_WORDS = BM * LDK, B_WORDS = B_KMAJOR ? BK * Sh::LDN : BN * LDK;
    constexpr int STAGE_WORDS = A_WORDS + B_WORDS;
    const int tid = threadIdx.x;
    const int split = blockIdx.z;

    // The block's rows, columns and reduction range [r_begin, r_end).
    int i0 = 0, c0 = 0, lo = 0, span = 0, q0 = 0, v0 = 0, r_begin = 0, r_end = 0, e0 = 0;
    if (MODE == 0 || MODE == 2) {
        i0 = blockIdx.y * BM;
        lo = starts[i0];
        span = starts[min(i0 + BM, Cout) - 1] - lo + U;
    }
    if (MODE == 0) {
        q0 = blockIdx.x * BN;
        r_end = span;
    } else if (MODE == 1) {
        c0 = blockIdx.y * BM;
        q0 = blockIdx.x * BN;
        e0 = tile_ptr[blockIdx.y];
        const int len = tile_ptr[blockIdx.y + 1] - e0;
        r_begin = split * per_split;
        r_end = min(len, r_begin + per_split);
    } else {
        v0 = blockIdx.x * BN;
        if (v0 >= span) return;   // this filter tile's band is narrower than the grid's
        r_begin = split * per_split;
        r_end = min(Q, r_begin + per_split);
    }

    // A loads: consecutive threads take consecutive reduction indices q = ak of rows ml:
    // consecutive weights of a filter (mode 0) or pixels of a gy row (mode 2).
    const int ak = tid % BK;
    int a_k[Sh::NA], a_off[Sh::NA];   // per row: filter (-1 past the rows), window offset
#pragma unroll
    for (int i = 0; i < Sh::NA; ++i) {
        const int ml = (tid + i * THREADS) / BK;
        if (MODE == 1) {
            a_k[i] = c0 + ml < Cin ? 0 : -1;
            a_off[i] = c0 + ml;                         // the row's channel
        } else {
            const int si = i0 + ml;
            a_k[i] = si < Cout ? order[si] : -1;
            a_off[i] = si < Cout ? starts[si] - lo : 0;   // the window's place in the band
        }
    }
    // Mode 2, B: this thread's band columns tid / BK + 16 i (scalar copies) or tid / 4 +
    // 64 i (16-byte ones), each a channel for the launch.
    constexpr int NB2 = MODE == 2 ? Sh::NB : 1, NA4 = (BM * 4 + THREADS - 1) / THREADS;
    int b_chan[NB2], b_chan4[NB2], a_k4[NA4];   // a_k4: the filter of a 16-byte copy's row
    // Mode 2 copies 4 pixels at a time where P % 4 == 0 and both maps are 16-byte aligned.
    const bool vec2 = MODE == 2 && P % 4 == 0
        && reinterpret_cast<unsigned long long>(a_src) % 16 == 0
        && reinterpret_cast<unsigned long long>(b_src) % 16 == 0;
    if constexpr (MODE == 2) {
#pragma unroll
        for (int i = 0; i < NB2; ++i) {
            const int v = v0 + (tid + i * THREADS) / BK;
            b_chan[i] = v < span ? wrap(lo + v, Cin) : -1;
            const int c4 = tid / 4 + i * (THREADS / 4);   // a 16-byte copy's column
            const int v4 = v0 + c4;
            b_chan4[i] = c4 < BN && v4 < span ? wrap(lo + v4, Cin) : -1;
        }
#pragma unroll
        for (int i = 0; i < NA4; ++i) {
            const int si = i0 + tid / 4 + i * (THREADS / 4);
            a_k4[i] = tid / 4 + i * (THREADS / 4) < BM && si < Cout ? order[si] : -1;
        }
    }
    const scctc::PixelRows<BN> rows_b(b_src, tid, q0, Q, MODE == 0 ? Cin : Cout, P);

    extern __shared__ __align__(16) float smem[];
    auto a_stage = [&](int st) { return smem + st * STAGE_WORDS; };
    auto b_stage = [&](int st) { return smem + st * STAGE_WORDS + A_WORDS; };
    auto load = [&](int r0, int st) {
        float* as = a_stage(st);
        float* bs = b_stage(st);
        const int r = r0 + ak;
        const bool r_ok = r < r_end;
        if constexpr (MODE == 0) {
#pragma unroll
            for (int i = 0; i < Sh::NA; ++i) {
                const int u = r - a_off[i];
                const bool ok = r_ok && a_k[i] >= 0 && u >= 0 && u < U;
                tdcx::cp_async4(as + ((tid + i * THREADS) / BK) * LDK + ak,
                                ok ? a_src + (size_t)a_k[i] * U + u : a_src, ok);
            }
            rows_b.load(bs, b_src, P, [&](int kl) {
                return r0 + kl < r_end ? wrap(lo + r0 + kl, Cin) : -1;
            });
        } else if constexpr (MODE == 1) {
            int k = 0, b = 0;
            if (r_ok) { k = tile_k[e0 + r]; b = starts[k]; }
#pragma unroll
            for (int i = 0; i < Sh::NA; ++i) {
                int u = a_off[i] - b;
                u += u < 0 ? Cin : 0;
                const bool ok = r_ok && a_k[i] >= 0 && u < U;
                tdcx::cp_async4(as + ((tid + i * THREADS) / BK) * LDK + ak,
                                ok ? a_src + (size_t)k * U + u : a_src, ok);
            }
            rows_b.load(bs, b_src, P, [&](int kl) {
                return r0 + kl < r_end ? tile_k[e0 + r0 + kl] : -1;
            });
        } else if (vec2) {
            // 16-byte copies: copy c takes row c / 4 and pixels 4 (c % 4) .. + 3 of the slice
            const int g4 = tid % 4, rr = r0 + 4 * g4;   // a whole run is in or out
            long long gpix = -1, xpix = -1;
            if (rr < r_end) {
                const int n = rr / P, p = rr - n * P;
                gpix = (long long)n * Cout * P + p;
                xpix = (long long)n * Cin * P + p;
            }
#pragma unroll
            for (int i = 0; i < NA4; ++i) {
                const int m = tid / 4 + i * (THREADS / 4);
                if (m >= BM) break;
                const bool ok = gpix >= 0 && a_k4[i] >= 0;
                tdcx::cp_async16(as + m * LDK + 4 * g4,
                                 ok ? a_src + gpix + (size_t)a_k4[i] * P : a_src, ok);
            }
#pragma unroll
            for (int i = 0; i < (BN * 4 + THREADS - 1) / THREADS; ++i) {
                const int c4 = tid / 4 + i * (THREADS / 4);
                if (c4 >= BN) break;
                const bool ok = xpix >= 0 && b_chan4[i] >= 0;
                tdcx::cp_async16(bs + c4 * LDK + 4 * g4,
                                 ok ? b_src + xpix + (size_t)b_chan4[i] * P : b_src, ok);
            }
        } else {
            // one pixel a thread a slice: decoded here, shared by its A and B copies
            long long gpix = -1, xpix = -1;   // its offset in gy's and in x's channel 0
            if (r_ok) {
                const int n = r / P, p = r - n * P;
                gpix = (long long)n * Cout * P + p;
                xpix = (long long)n * Cin * P + p;
            }
#pragma unroll
            for (int i = 0; i < Sh::NA; ++i) {
                const bool ok = gpix >= 0 && a_k[i] >= 0;
                tdcx::cp_async4(as + ((tid + i * THREADS) / BK) * LDK + ak,
                                ok ? a_src + gpix + (size_t)a_k[i] * P : a_src, ok);
            }
#pragma unroll
            for (int i = 0; i < Sh::NB; ++i) {
                const bool ok = xpix >= 0 && b_chan[i] >= 0;
                tdcx::cp_async4(bs + ((tid + i * THREADS) / BK) * LDK + ak,
                                ok ? b_src + xpix + (size_t)b_chan[i] * P : b_src, ok);
            }
        }
    };

    const int warp = tid >> 5, lane = tid & 31, lg = lane >> 2, lt = lane & 3;
    const int wm = warp % Sh::WARPS_M, wn = warp / Sh::WARPS_M;
    const int wrow = wm * Sh::MT * 16, wcol = wn * Sh::NT * 8;
    float acc[Sh::MT][Sh::NT][4];
    tf32x3::zero(acc);
    const int slices = r_begin < r_end ? (r_end - r_begin + BK - 1) / BK : 0;
    tdcx::cp_async_ring<STAGES>(
        slices, [&](int it, int st) { load(r_begin + it * BK, st); },
        [&](int, int st) {
            const float* as = a_stage(st);
            const float* bs = b_stage(st);
#pragma unroll
            for (int k8 = 0; k8 < BK; k8 += 8)
                tf32x3::k8_product(
                    acc,
                    [&](int i, int e) {
                        const int m = wrow + i * 16 + lg + 8 * (e & 1);
                        return as[m * LDK + k8 + lt + 4 * (e >> 1)];
                    },
                    [&](int j, int h) {
                        const int n = wcol + j * 8 + lg, k = k8 + lt + 4 * h;
                        return B_KMAJOR ? bs[k * Sh::LDN + n] : bs[n * LDK + k];
                    });
        });

    // ---- epilogue: lane (g, t) holds rows g, g + 8 and columns 2t, 2t + 1 of each tile
    // Columns are pixels in modes 0 and 1: each thread's 2·NT pixels decoded once.
    long long pcol[Sh::NT][2];
    if constexpr (MODE != 2) {
        const int C = MODE == 0 ? Cout : Cin;
#pragma unroll
        for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int q = q0 + wcol + j * 8 + 2 * lt + e, n = q / P;
                pcol[j][e] = q < Q ? (long long)n * C * P + (q - n * P) : -1;
            }
    }
    const size_t map_size = (size_t)Q * Cin;   // mode 1: one partial map
#pragma unroll
    for (int i = 0; i < Sh::MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int ml = wrow + i * 16 + lg + 8 * h;
            if constexpr (MODE == 0) {
                const int si = i0 + ml;
                if (si >= Cout) continue;
                const int k = order[si];
                const float bk = bias != nullptr ? bias[k] : 0.f;
#pragma unroll
                for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        if (pcol[j][e] < 0) continue;
                        const size_t at = pcol[j][e] + (size_t)k * P;
                        out[at] = tc::conv_epilogue(acc[i][j][2 * h + e] + bk, nullptr, k,
                                                    nullptr, at, relu);
                    }
            } else if constexpr (MODE == 1) {
                const int c = c0 + ml;
                if (c >= Cin) continue;
                float* dst = out + split * map_size + (size_t)c * P;
#pragma unroll
                for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (pcol[j][e] >= 0) dst[pcol[j][e]] = acc[i][j][2 * h + e];
            } else {
                const int si = i0 + ml;
                if (si >= Cout) continue;
                const int k = order[si], off = starts[si] - lo;
                float* dst = out + ((size_t)split * Cout + k) * U;
#pragma unroll
                for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int u = v0 + wcol + j * 8 + 2 * lt + e - off;
                        if (u >= 0 && u < U) dst[u] = acc[i][j][2 * h + e];
                    }
            }
        }
}


// ---- scc_tc_walk<MODE, MT, NT, KC, S>: the forward (MODE 0) and the input gradient
// (MODE 1) by blocks that walk pixel tiles.  scc_tc above loads, splits and multiplies a
// tile's weights for every pixel tile, and a short band (two to eight k8 steps) leaves
// that fixed work most of a block's; here a block splits its BM rows' dense-masked weights
// once, into shared memory in fragment order (each lane's big and small parts two 16-byte
// loads a k8 step, no splitting in the loop), and then walks pixel tiles blockIdx.x, +
// gridDim.x, ..., every chunk of KC band rows (MODE 1: filter-list entries) of every
// tile one cp.async ring of S stages, so the next tile's copies fly over this tile's
// products and stores.  Four warps side by side along BN = 32·NT pixels, each MT m16 tiles
// x NT n8 tiles.  Each tile's pixel offsets are written by its last chunk's copier into
// that chunk's stage, which the epilogue reads before the stage is reused.
//
// MODE 2 is MODE 1 with the weight gradient in the same walk.  A channel tile's filter
// list holds every filter whose window meets the tile, so each (filter k, weight u) is one
// (list entry, tile channel) pair of exactly one channel tile: with the tile's BM x rows
// staged beside its gy chunks (XB buffers, one a tile, loaded with the tile's first
// chunk), a block also sums gw[k_e, c] = sum over its pixels of gy[k_e] x[c] for its
// entries e and channels c, in registers over every tile it walks (hence at most WCH
// chunks a tile).  Each warp owns one m16 tile of a chunk's entries over its own k8 steps
// of the tile's pixels; at the end the warps' sums are added in warp order and the block
// writes its walk's share, gw[blockIdx.x, k, u], for the pairs inside the windows; the
// shares are summed in order by conv2d_splitk_reduce: deterministic, and gy read once.
namespace scctc {
constexpr int WALK_THREADS = 128;
constexpr int WCH = 2;   // MODE 2: chunks a tile whose weight-gradient sums a warp holds

template <int MT, int NT, int KC, int S>
struct Walk {
    static constexpr int T = WALK_THREADS, BM = 16 * MT, BN = 32 * NT, LDN = BN + 8;
    static constexpr int NV = BN / 4, VSTEP = T / NV;                 // 16-byte copies
    static constexpr int SC = BN > T ? BN / T : 1;                    // scalar copies:
    static constexpr int SCOLS = BN > T ? T : BN, SSTEP = T / SCOLS;  // columns, row step
    static constexpr int LDX = BN + 4;   // MODE 2's x rows (== 4 mod 32: B reads conflict-free)
    // MODE 2: a warp's m16 x n8 tiles of a chunk's weight-gradient sums, at most four
    // (WCH x 4 x 4 registers): all KC / 16 m tiles where that fits, else one; the warps
    // along m (WMW) and along the tile's k8 steps (WKW)
    static constexpr int WMW = (KC / 16) * (BM / 8) <= 4 ? 1 : KC / 16, WKW = 4 / WMW;
    static constexpr int GM = KC / 16 / WMW;
    static_assert(T % NV == 0 && KC % VSTEP == 0 && KC % SSTEP == 0 && KC % 8 == 0 &&
                  BM % VSTEP == 0 && BM % SSTEP == 0 && S >= 2 && MT * NT <= 16,
                  "walking tile shapes");
    static_assert((KC == 16 || KC == 32) && GM * (BM / 8) <= 4 &&
                  4 * WCH * 16 * GM * BM <= S * KC * LDN, "MODE 2: its warps' sums fit the ring");
};
}  // namespace scctc

template <int MODE, int MT, int NT, int KC, int S>
__global__ void __launch_bounds__(scctc::WALK_THREADS, MODE == 2 ? 3 : 4) scc_tc_walk(
    const float* __restrict__ w,        // (Cout, U)
    const float* __restrict__ src,      // MODE 0: x (N, Cin, P);  MODE 1: gy (N, Cout, P)
    const int* __restrict__ order,      // (Cout,) filters sorted by window start
    const int* __restrict__ starts,     // MODE 0: start of each sorted filter
    const int* __restrict__ tile_len,   // MODES 1, 2: (tiles,) each channel tile's list
    const int* __restrict__ tile_list,  //   length, and (tiles, kmax, 2) its (filter,
                                        //   window start) pairs, (-1, 0) past the length
    const float* __restrict__ bias,     // MODE 0: (Cout,) or nullptr
    float* __restrict__ out,            // MODE 0: y (N, Cout, P);  MODE 1, 2: gx (N, Cin, P)
    const float* __restrict__ carry_src,  // another launch's split partials, carried
    float* __restrict__ carry_out,      //   (tc::carried_split_sum), or carry_splits 0
    const float* __restrict__ xin,      // MODE 2: x (N, Cin, P)
    float* __restrict__ gw,             // MODE 2: (gridDim.x, Cout, U) a walk's sums each
    int Cin, int Cout, int U, int P, int Q, int kmax, int relu, int carry_splits,
    int carry_size)
{
    tc::wait_prior_grids();
    using namespace scctc;
    using Wk = Walk<MT, NT, KC, S>;
    constexpr int BM = Wk::BM, BN = Wk::BN, LDN = Wk::LDN;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, lg = lane >> 2, lt = lane & 3;
    extern __shared__ __align__(16) float smem[];
    float4* afrag = reinterpret_cast<float4*>(smem);               // kmax / 8 · MT · 2 · 32
    float* ring = smem + kmax * BM * 2;                             // S stages of KC x LDN
    long long* pbase = reinterpret_cast<long long*>(ring + S * KC * LDN);   // S x BN
    int* rowk = reinterpret_cast<int*>(pbase + S * BN);             // BM: a row's channel
    int* rowo = rowk + BM;                                          // BM: its window's place
    float* rowb = reinterpret_cast<float*>(rowo + BM);              // BM: its bias
    int* klist = reinterpret_cast<int*>(rowb + BM);                 // MODES 1, 2: kmax, the
                                                                    //   tile's filter list
    int* kstart = klist + (MODE == 0 ? 0 : kmax);                   //   and their starts
    float* xbuf = reinterpret_cast<float*>(kstart + (MODE == 0 ? 0 : kmax));  // MODE 2:
                                                                    //   XB x BM x LDX

    // The block's rows and the depth of its reduction (band channels or list entries).
    // Every table read the fill and the first copies need is issued here at once, none
    // waiting on another (the block's start is a chain of round trips to memory: each one
    // taken out is about half a microsecond of every block, docs/notes/scc_conv.md).
    const int m0 = blockIdx.y * BM;
    const int2* list = reinterpret_cast<const int2*>(tile_list) + (long long)blockIdx.y * kmax;
    int lo = 0, depth;
    int my_k = -1, my_o = 0;             // MODE 0: row tid's sorted filter and its start
    constexpr int KL = 8;                // MODES 1, 2: list entries tid + i·T a thread
    int2 my_e[KL];                       //   reads (kmax <= KL·T: the host's plans)
    if constexpr (MODE == 0) {
        lo = starts[m0];
        depth = starts[min(m0 + BM, Cout) - 1] - lo + U;
        if (tid < BM && m0 + tid < Cout) my_k = order[m0 + tid], my_o = starts[m0 + tid];
    } else {
        depth = tile_len[blockIdx.y];
#pragma unroll
        for (int i = 0; i < KL; ++i) {
            const int v = tid + i * WALK_THREADS;
            my_e[i] = v < kmax ? __ldg(list + v) : make_int2(-1, 0);
        }
    }
    // A channel tile no window meets (Cout under the cycle) still walks one chunk of
    // zeros, so its gx is written (zero).
    const int chunks = max((depth + KC - 1) / KC, 1);
    const int Csrc = MODE == 0 ? Cin : Cout, Cdst = MODE == 0 ? Cout : Cin;
    // MODE 2: a tile's x rows stay until its last chunk is multiplied, and the tile XB
    // later loads them with its first chunk, S - 1 chunks ahead: XB tiles of chunks cover
    // that.  (The host sizes shared memory for its shortest list.)
    const int XB = 1 + (S - 2 + chunks) / chunks;

    // Staging: a thread's pixel column (a run of 4 where 16-byte copies apply), first row
    // and row step; its pixels' offsets in channel 0 found once a tile.
    const bool vec = P % 4 == 0 && reinterpret_cast<unsigned long long>(src) % 16 == 0 &&
                     (MODE != 2 || reinterpret_cast<unsigned long long>(xin) % 16 == 0);
    const int col = vec ? 4 * (tid % Wk::NV) : tid % Wk::SCOLS;
    const int row = vec ? tid / Wk::NV : tid / Wk::SCOLS;
    long long base[Wk::SC], obase[Wk::SC];   // in src's channel 0, and in out's
    // A row's channel: MODES 1 and 2 read it from the list in shared memory (klist,
    // filled before the block's first barrier, after which their copies begin).
    const auto chan = [&](int v) -> int {
        if constexpr (MODE == 0) {
            return v < depth ? wrap(lo + v, Cin) : -1;
        } else {
            return klist[v];
        }
    };
    const int pixel_tiles = (Q + BN - 1) / BN;
    const int walk = (int)blockIdx.x < pixel_tiles
        ? (pixel_tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    int ld_chunk = chunks;
    // The next tile's pixels (column col + m SCOLS), carried from tile to tile: q and its
    // (image, pixel), advanced by the walk's stride without a division.
    const int stride = (int)gridDim.x * BN, stride_n = stride / P, stride_p = stride - stride_n * P;
    int tq[Wk::SC], tn[Wk::SC], tp[Wk::SC];
#pragma unroll
    for (int m = 0; m < Wk::SC; ++m) {
        tq[m] = (int)blockIdx.x * BN + col + m * Wk::SCOLS;
        tn[m] = tq[m] / P;
        tp[m] = tq[m] - tn[m] * P;
    }
    // MODE 0's 16-byte copies: the channel of each of a thread's rows, carried from
    // chunk to chunk (+KC, wrapped) and restarted each tile from the first row's, so no
    // copy and no tile divides by Cin (steps reduced mod Cin once: one subtraction wraps).
    constexpr int VL = KC / Wk::VSTEP;
    int vch[VL];
    const int vch0 = MODE == 0 ? (lo + row) % Cin : 0;
    const int vstep = Wk::VSTEP % Cin, kcstep = KC % Cin;
    int ld_tile = -1;
    const auto load = [&](int st) {
        if (ld_chunk == chunks) {
            ld_chunk = 0;
            ++ld_tile;
            if constexpr (MODE == 0) {
                vch[0] = vch0;
#pragma unroll
                for (int l = 1; l < VL; ++l) {
                    const int c = vch[l - 1] + vstep;
                    vch[l] = c >= Cin ? c - Cin : c;
                }
            }
#pragma unroll
            for (int m = 0; m < Wk::SC; ++m) {
                base[m] = tq[m] < Q ? (long long)tn[m] * Csrc * P + tp[m] : -1;
                obase[m] = tq[m] < Q ? (long long)tn[m] * Cdst * P + tp[m] : -1;
                tq[m] += stride;
                tn[m] += stride_n;
                tp[m] += stride_p;
                if (tp[m] >= P) tp[m] -= P, ++tn[m];
            }
            if constexpr (MODE == 2) {
                // the tile's x rows (channels m0 ..), laid out as gx: obase addresses them
                float* xd = xbuf + (ld_tile % XB) * BM * Wk::LDX;
                if (vec) {
                    const bool in = obase[0] >= 0;
                    const unsigned long long px =
                        reinterpret_cast<unsigned long long>(xin) + 4ull * (in ? obase[0] : 0);
#pragma unroll
                    for (int l = 0; l < BM / Wk::VSTEP; ++l) {
                        const int r = row + l * Wk::VSTEP;
                        const bool ok = in && m0 + r < Cin;
                        const float* from = reinterpret_cast<const float*>(
                            px + 4ull * (unsigned long long)(unsigned)(m0 + r) * (unsigned)P);
                        tdcx::cp_async16(xd + r * Wk::LDX + col, ok ? from : xin, ok);
                    }
                } else {
#pragma unroll
                    for (int l = 0; l < BM / Wk::SSTEP; ++l) {
                        const int r = row + l * Wk::SSTEP;
#pragma unroll
                        for (int m = 0; m < Wk::SC; ++m) {
                            const bool ok = m0 + r < Cin && obase[m] >= 0;
                            tdcx::cp_async4(xd + r * Wk::LDX + col + m * Wk::SCOLS,
                                            ok ? xin + obase[m] + (size_t)(m0 + r) * P : xin, ok);
                        }
                    }
                }
            }
        }
        float* xs = ring + st * KC * LDN;
        const int v0 = KC * ld_chunk;
        if (vec) {
            // each copy addressed from the tile's pixel by one 64-bit multiply-add
            const bool in = base[0] >= 0;
            const unsigned long long px =
                reinterpret_cast<unsigned long long>(src) + 4ull * (in ? base[0] : 0);
            const unsigned pitch = 4u * (unsigned)P;
#pragma unroll
            for (int l = 0; l < VL; ++l) {
                const int r = row + l * Wk::VSTEP;
                int c;
                if constexpr (MODE == 0) {
                    c = v0 + r < depth ? vch[l] : -1;
                    const int next = vch[l] + kcstep;
                    vch[l] = next >= Cin ? next - Cin : next;
                } else {
                    c = chan(v0 + r);
                }
                const bool ok = in && c >= 0;
                const float* from =
                    reinterpret_cast<const float*>(px + (unsigned long long)(unsigned)c * pitch);
                tdcx::cp_async16(xs + r * LDN + col, ok ? from : src, ok);
            }
        } else {
#pragma unroll
            for (int l = 0; l < KC / Wk::SSTEP; ++l) {
                const int r = row + l * Wk::SSTEP, c = chan(v0 + r);
#pragma unroll
                for (int m = 0; m < Wk::SC; ++m) {
                    const bool ok = c >= 0 && base[m] >= 0;
                    tdcx::cp_async4(xs + r * LDN + col + m * Wk::SCOLS,
                                    ok ? src + base[m] + (size_t)c * P : src, ok);
                }
            }
        }
        if (++ld_chunk == chunks && row == 0) {
            // the tile's pixel offsets in the output's channel 0, for its epilogue
            long long* pb = pbase + st * BN;
            if (vec) {
#pragma unroll
                for (int i = 0; i < 4; ++i) pb[col + i] = obase[0] < 0 ? -1 : obase[0] + i;
            } else {
#pragma unroll
                for (int m = 0; m < Wk::SC; ++m) pb[col + m * Wk::SCOLS] = obase[m];
            }
        }
    };
    const int items = walk * chunks;
    // The first copies: MODE 0's here, under the rows' loads; the lists' after the
    // barrier, from the list in shared memory (from global memory their entries would be
    // one more round trip before the copies, and before the carried sum's loads).
    const auto prologue = [&] {
#pragma unroll
        for (int st = 0; st < S - 1; ++st) {
            if (st < items) load(st);
            tdcx::cp_async_commit();
        }
    };
    if constexpr (MODE == 0) prologue();
    // A carried split reduction (the input gradient carrying the weight gradient's shares),
    // its loads' latency under the tables'.
    if (carry_splits > 0)
        tc::carried_split_sum<Wk::T>(carry_src, carry_out, carry_splits, carry_size,
                                     blockIdx.y * gridDim.x + blockIdx.x,
                                     gridDim.x * gridDim.y);

    // The rows, then their weights split into fragment order, while the first copies fly.
    // A row's bias is read beside the fill's weights and stored after it (the main loop's
    // first barrier publishes it before any epilogue).
    static_assert(BM <= WALK_THREADS, "a thread a row");
    float my_b = 0.f;
    if (tid < BM) {
        if constexpr (MODE == 0) {
            rowk[tid] = my_k;
            rowo[tid] = m0 + tid < Cout ? my_o - lo : 0;
            if (my_k >= 0 && bias != nullptr) my_b = __ldg(bias + my_k);
        } else {
            rowk[tid] = m0 + tid < Cin ? m0 + tid : -1;
            rowo[tid] = 0;
        }
    }
    if constexpr (MODE != 0) {
#pragma unroll
        for (int i = 0; i < KL; ++i) {
            const int v = tid + i * WALK_THREADS;
            if (v < kmax) klist[v] = v < depth ? my_e[i].x : -1, kstart[v] = my_e[i].y;
        }
    }
    __syncthreads();
    if constexpr (MODE != 0) prologue();
    // Warp w fills fragments j = w, w + 4, ... (j = s·MT + i: m tile i of k8 step s); its
    // m tile is fixed (4 % MT == 0), so a lane's two rows are looked up once.  A lane's
    // four values of a fragment become one float4 of big parts and one of small parts,
    // FB fragments' loads in flight at a time (one at a time, each load's latency stood
    // alone: the fill was then a fifth of the kernel's time, a block walking few tiles),
    // one load a value (MODES 1, 2: the entry's start is the list's, in shared memory).
    static_assert(4 % MT == 0, "a warp's m tile is fixed through the fill");
    const int fi = warp % MT, frow = 16 * fi + lg;   // the lane's rows frow, frow + 8
    int fk[2], fo[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) fk[h] = rowk[frow + 8 * h], fo[h] = rowo[frow + 8 * h];
    const auto frag_value = [&](int h, int v) -> float {
        if (v >= depth || fk[h] < 0) return 0.f;
        if constexpr (MODE == 0) {
            const int u = v - fo[h];
            return u >= 0 && u < U ? __ldg(w + (size_t)fk[h] * U + u) : 0.f;
        } else {
            const int k = klist[v];   // v < depth: the entry, in shared memory since the barrier
            int u = fk[h] - kstart[v];
            u += u < 0 ? Cin : 0;
            return u < U ? __ldg(w + (size_t)k * U + u) : 0.f;
        }
    };
    constexpr int FB = MODE == 0 ? 4 : 8, FSTEP = 4 / MT;
    const int steps = chunks * KC / 8;
    for (int s0 = warp / MT; s0 < steps; s0 += FB * FSTEP) {
        float a[FB][4];
#pragma unroll
        for (int r = 0; r < FB; ++r)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                a[r][e] = s0 + r * FSTEP < steps
                    ? frag_value(e & 1, 8 * (s0 + r * FSTEP) + lt + 4 * (e >> 1)) : 0.f;
#pragma unroll
        for (int r = 0; r < FB; ++r) {
            const int st = s0 + r * FSTEP;
            if (st >= steps) break;
            float sm[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) tf32x3::split(a[r][e], sm[e]);
            afrag[(st * MT + fi) * 64 + lane] = make_float4(a[r][0], a[r][1], a[r][2], a[r][3]);
            afrag[(st * MT + fi) * 64 + 32 + lane] = make_float4(sm[0], sm[1], sm[2], sm[3]);
        }
    }

    if (tid < BM) rowb[tid] = my_b;

    float acc[MT][NT][4];
    tf32x3::zero(acc);
    // MODE 2: the weight gradient's sums, warp (wm, wk) the m16 tiles wm·GM .. of each
    // chunk's entries x the BM channels, over k8 steps wk, wk + WKW, ... of each tile
    constexpr int GW = MODE == 2 ? WCH : 1, GN = BM / 8, GM = Wk::GM;
    float gacc[GW][GM][GN][4];
#pragma unroll
    for (int c = 0; c < GW; ++c) tf32x3::zero(gacc[c]);
    const int wm = warp % Wk::WMW, wk = warp / Wk::WMW;
    const bool pair = P % 2 == 0 && reinterpret_cast<unsigned long long>(out) % 8 == 0;
    const int wcol = warp * 8 * NT;
    int cp_chunk = 0, cp_tile = 0;
    for (int it = 0; it < items; ++it) {
        tdcx::cp_async_wait<S - 2>();
        __syncthreads();   // chunk `it` is in; every warp is done with the stage reloaded next
        if (it + S - 1 < items) load((it + S - 1) % S);
        tdcx::cp_async_commit();
        const int st = it % S;
        const float* xs = ring + st * KC * LDN;
#pragma unroll
        for (int kk = 0; kk < KC / 8; ++kk) {
            unsigned bb[NT][2], bs[NT][2];
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float v = xs[(8 * kk + lt + 4 * h) * LDN + wcol + 8 * j + lg], sm;
                    tf32x3::split(v, sm);
                    bb[j][h] = __float_as_uint(v);
                    bs[j][h] = __float_as_uint(sm);
                }
            const float4* af = afrag + (cp_chunk * (KC / 8) + kk) * MT * 64 + lane;
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float4 big = af[i * 64], sml = af[i * 64 + 32];
                const unsigned ab[4] = {__float_as_uint(big.x), __float_as_uint(big.y),
                                        __float_as_uint(big.z), __float_as_uint(big.w)};
                if constexpr (tf32x3::EXACT) {
                    const unsigned as[4] = {__float_as_uint(sml.x), __float_as_uint(sml.y),
                                            __float_as_uint(sml.z), __float_as_uint(sml.w)};
#pragma unroll
                    for (int j = 0; j < NT; ++j) tf32x3::mma(acc[i][j], as, bb[j][0], bb[j][1]);
#pragma unroll
                    for (int j = 0; j < NT; ++j) tf32x3::mma(acc[i][j], ab, bs[j][0], bs[j][1]);
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) tf32x3::mma(acc[i][j], ab, bb[j][0], bb[j][1]);
            }
        }
        if constexpr (MODE == 2) {
            const float* xx = xbuf + (cp_tile % XB) * BM * Wk::LDX;
            const float* gr = xs + (16 * GM * wm + lg) * LDN + lt;
#pragma unroll
            for (int c = 0; c < WCH; ++c)
                if (c == cp_chunk) {
#pragma unroll
                    for (int t = 0; t < BN / 8 / Wk::WKW; ++t) {
                        const int k8 = 8 * (wk + t * Wk::WKW);
                        tf32x3::k8_product(
                            gacc[c],
                            [&](int i, int e) {
                                return gr[(16 * i + 8 * (e & 1)) * LDN + k8 + 4 * (e >> 1)];
                            },
                            [&](int j, int h) { return xx[(8 * j + lg) * Wk::LDX + k8 + lt + 4 * h]; });
                    }
                }
        }
        if (++cp_chunk < chunks) continue;
        cp_chunk = 0;
        ++cp_tile;
        // ---- epilogue: lane (g, t) holds rows g, g + 8 and columns 2t, 2t + 1 of each tile
        const long long* pb = pbase + st * BN;
        long long b0[NT], b1[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            b0[j] = pb[wcol + 8 * j + 2 * lt];
            b1[j] = pb[wcol + 8 * j + 2 * lt + 1];
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = 16 * i + lg + 8 * h, k = rowk[m];
                if (k >= 0) {
                    const float bk = rowb[m];
                    const size_t ro = (size_t)k * P;
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                        if constexpr (MODE == 0) {   // the gradients have no epilogue
                            v0 += bk, v1 += bk;
                            if (relu) v0 = fmaxf(v0, 0.f), v1 = fmaxf(v1, 0.f);
                        }
                        if (pair) {
                            if (b0[j] >= 0)
                                *reinterpret_cast<float2*>(out + b0[j] + ro) = make_float2(v0, v1);
                        } else {
                            if (b0[j] >= 0) out[b0[j] + ro] = v0;
                            if (b1[j] >= 0) out[b1[j] + ro] = v1;
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) acc[i][j][2 * h] = acc[i][j][2 * h + 1] = 0.f;
            }
    }
    tdcx::cp_async_wait<0>();
    if constexpr (MODE == 2) {
        // The warps' sums through the ring, added in warp order; lane (g, t) holds rows
        // g, g + 8 and columns 2t, 2t + 1 of each m16n8 tile.
        __syncthreads();                     // every warp is done with the ring
        float* red = ring;                   // [warp][chunk][16·GM][BM]
#pragma unroll
        for (int c = 0; c < WCH; ++c)
#pragma unroll
            for (int i = 0; i < GM; ++i)
#pragma unroll
                for (int j = 0; j < GN; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        *reinterpret_cast<float2*>(
                            red + ((warp * WCH + c) * 16 * GM + 16 * i + lg + 8 * h) * BM +
                            8 * j + 2 * lt) =
                            make_float2(gacc[c][i][j][2 * h], gacc[c][i][j][2 * h + 1]);
        __syncthreads();
        for (int o = tid; o < WCH * KC * BM; o += Wk::T) {
            const int c = o / (KC * BM), r = (o / BM) % KC, m = o % BM, e = c * KC + r;
            if (e >= depth || m0 + m >= Cin) continue;
            const int k = klist[e];
            int u = m0 + m - kstart[e];
            u += u < 0 ? Cin : 0;
            if (u >= U) continue;
            const int wr = r / (16 * GM), lr = r % (16 * GM);
            float sum = 0.f;
#pragma unroll
            for (int q = 0; q < Wk::WKW; ++q)
                sum += red[(((wr + q * Wk::WMW) * WCH + c) * 16 * GM + lr) * BM + m];
            gw[((size_t)blockIdx.x * Cout + k) * U + u] = sum;
        }
    }
}

// ---- scc_tc_wgrad<MT, NT, KP, S>: the weight gradient, a block of four warps over BM =
// 16·MT sorted filters x BN = 8·NT band channels and one pixel share, every warp the whole
// BM x BN tile over its own k8 steps of each KP-pixel chunk (scc_tc's mode 2 gave a
// 256-thread block of 32 x 64 outputs 16 x 16 a warp: every value split for one or two
// products).  The chunks (gy rows of the filters, x rows of the band, KP pixels each) run
// through one cp.async ring of S stages; at the end the four warps' sums are added in
// warp order through shared memory and each (filter, weight) inside the window written
// once: deterministic, the shares summed in order by conv2d_splitk_reduce.
namespace scctc {
template <int MT, int NT, int KP, int S>
struct WGrad {
    static constexpr int T = WALK_THREADS, BM = 16 * MT, BN = 8 * NT, ROWS = BM + BN;
    static constexpr int LD = KP + 4;            // a staged row (== 4 mod 32: the fragment
                                                 // reads of both operands conflict-free)
    static constexpr int RUNS = KP / 4, VROWS = T / RUNS;   // 16-byte copies of a row
    static constexpr int SROWS = T / KP;                    // 4-byte ones
    static constexpr int RING = S * ROWS * LD, RED = 4 * BM * BN;
    static_assert(KP % 32 == 0 && T % RUNS == 0 && T % KP == 0 && ROWS % VROWS == 0 &&
                  ROWS % SROWS == 0 && MT * NT <= 16, "weight-gradient tile shapes");
};
}  // namespace scctc

template <int MT, int NT, int KP, int S>
__global__ void __launch_bounds__(scctc::WALK_THREADS, 2) scc_tc_wgrad(
    const float* __restrict__ x,        // (N, Cin, P), P pixels a plane, Q = N·P
    const float* __restrict__ gy,       // (N, Cout, P)
    const int* __restrict__ order,      // (Cout,) the sorted filters' ids
    const int* __restrict__ starts,     // (Cout,) their window starts
    float* __restrict__ partial,        // (gridDim.z, Cout, U): a pixel share's sums each,
                                        //   or the gradient itself for one share
    int Cin, int Cout, int U, int P, int Q, int per_split)
{
    tc::wait_prior_grids();
    using namespace scctc;
    using G = WGrad<MT, NT, KP, S>;
    constexpr int BM = G::BM, BN = G::BN, LD = G::LD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, lg = lane >> 2, lt = lane & 3;
    const int m0 = blockIdx.y * BM, v0 = blockIdx.x * BN;
    // The band and thread tid's filter row read at once (one round trip, not two, before
    // the first copies: the block's start is a chain of them, docs/notes/scc_conv.md).
    static_assert(BM <= G::T, "a thread a filter row");
    const bool frow = tid < BM && m0 + tid < Cout;
    const int my_k = frow ? order[m0 + tid] : -1, my_s = frow ? starts[m0 + tid] : 0;
    const int lo = starts[m0], span = starts[min(m0 + BM, Cout) - 1] - lo + U;
    if (v0 >= span) return;                 // the grid covers the widest band of any tile
    const int q_begin = blockIdx.z * per_split, q_end = min(q_begin + per_split, Q);

    extern __shared__ __align__(16) float smem[];
    float* ring = smem;                                        // S x ROWS x LD (RED after)
    int* rowc = reinterpret_cast<int*>(smem + (G::RING > G::RED ? G::RING : G::RED));
    int* rowk = rowc + G::ROWS;                                // BM: each row's filter
    int* rowo = rowk + BM;                                     // BM: its window's place
    // Staged row r: gy row of sorted filter m0 + r (r < BM), else x row of band channel
    // v0 + r - BM; its channel, or -1 for zeros.
    if (tid < BM) rowc[tid] = rowk[tid] = my_k, rowo[tid] = frow ? my_s - lo : 0;
    for (int r = BM + tid; r < G::ROWS; r += G::T) {
        const int v = v0 + r - BM;
        rowc[r] = v < span ? wrap(lo + v, Cin) : -1;
    }
    __syncthreads();

    // A thread's pixel (run) of each chunk and its offsets in channel 0 of gy and x,
    // carried from chunk to chunk; the 16-byte form's rows are fixed for the launch, its
    // first BM / VROWS copies gy rows and the rest x rows (row < VROWS, which divides BM),
    // so each copy's row is one byte offset found once (the general form took about 40
    // instructions a copy, two fifths of the kernel's).
    const bool vec = P % 4 == 0 && reinterpret_cast<unsigned long long>(x) % 16 == 0 &&
                     reinterpret_cast<unsigned long long>(gy) % 16 == 0;
    const int col = vec ? 4 * (tid % G::RUNS) : tid % KP;
    const int row = vec ? tid / G::RUNS : tid / KP;
    int q = q_begin + col, n = q / P, p = q - n * P;
    long long gb = (long long)n * Cout * P + p, xb = (long long)n * Cin * P + p;
    constexpr int VC = G::ROWS / G::VROWS, VG = BM / G::VROWS;   // copies; gy ones
    static_assert(BM % G::VROWS == 0, "a 16-byte copy's row is all gy or all x");
    long long roff[VC];                    // byte offset of the copy's row, -1: zeros
#pragma unroll
    for (int l = 0; l < VC; ++l) {
        const int c = vec ? rowc[row + l * G::VROWS] : -1;
        roff[l] = c >= 0 ? 4ll * c * P : -1;
    }
    const auto load = [&](int st) {
        float* rs = ring + st * G::ROWS * LD;
        const bool in = q < q_end;
        if (vec) {
            const unsigned long long gp = reinterpret_cast<unsigned long long>(gy + gb);
            const unsigned long long xp = reinterpret_cast<unsigned long long>(x + xb);
#pragma unroll
            for (int l = 0; l < VC; ++l) {
                const bool ok = in && roff[l] >= 0;
                const float* from = reinterpret_cast<const float*>((l < VG ? gp : xp) + roff[l]);
                tdcx::cp_async16(rs + (row + l * G::VROWS) * LD + col, ok ? from : x, ok);
            }
        } else {
#pragma unroll 4
            for (int l = 0; l < G::ROWS / G::SROWS; ++l) {
                const int r = row + l * G::SROWS, c = rowc[r];
                const bool ok = in && c >= 0;
                const float* from = r < BM ? gy + gb : x + xb;
                tdcx::cp_async4(rs + r * LD + col, ok ? from + (size_t)c * P : x, ok);
            }
        }
        q += KP, p += KP, gb += KP, xb += KP;
        while (p >= P)                     // into the next image(s)
            p -= P, ++n, gb += (long long)(Cout - 1) * P, xb += (long long)(Cin - 1) * P;
    };

    float acc[MT][NT][4];
    tf32x3::zero(acc);
    const int chunks = q_begin < q_end ? (q_end - q_begin + KP - 1) / KP : 0;
    tdcx::cp_async_ring<S>(chunks, [&](int, int st) { load(st); }, [&](int, int st) {
        const float* gs = ring + st * G::ROWS * LD;
        const float* xs = gs + BM * LD;
#pragma unroll
        for (int k8 = 8 * warp; k8 < KP; k8 += 32)
            tf32x3::k8_product(
                acc,
                [&](int i, int e) { return gs[(16 * i + lg + 8 * (e & 1)) * LD + k8 + lt + 4 * (e >> 1)]; },
                [&](int j, int h) { return xs[(8 * j + lg) * LD + k8 + lt + 4 * h]; });
    });

    // The four warps' sums, added in warp order; lane (g, t) holds rows g, g + 8 and
    // columns 2t, 2t + 1 of each m16n8 tile.
    __syncthreads();                         // every warp is done with the ring
    float* red = smem;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<float2*>(red + (warp * BM + 16 * i + lg + 8 * h) * BN + 8 * j +
                                           2 * lt) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    __syncthreads();
    for (int o = tid; o < BM * BN; o += G::T) {
        const int m = o / BN, c = o - m * BN, k = rowk[m], u = v0 + c - rowo[m];
        if (k < 0 || u < 0 || u >= U) continue;
        float sum = red[o];
#pragma unroll
        for (int wq = 1; wq < 4; ++wq) sum += red[wq * BM * BN + o];
        partial[((size_t)blockIdx.z * Cout + k) * U + u] = sum;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.scc_tc.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SCC_TC(...) template __global__ void scc_tc<__VA_ARGS__>(const float*, const float*, \
    const int*, const int*, const int*, const int*, const float*, float*, int, int, int, int, int, \
    int, int);
TC_I_SCC_TC(0, 128, 128) TC_I_SCC_TC(0, 128, 64) TC_I_SCC_TC(0, 16, 128) TC_I_SCC_TC(0, 16, 64)
TC_I_SCC_TC(0, 32, 128) TC_I_SCC_TC(0, 32, 64) TC_I_SCC_TC(0, 64, 128) TC_I_SCC_TC(0, 64, 64)
TC_I_SCC_TC(1, 128, 128) TC_I_SCC_TC(1, 128, 64) TC_I_SCC_TC(1, 16, 128) TC_I_SCC_TC(1, 16, 64)
TC_I_SCC_TC(1, 32, 128) TC_I_SCC_TC(1, 32, 64) TC_I_SCC_TC(1, 64, 128) TC_I_SCC_TC(1, 64, 64)
TC_I_SCC_TC(2, 128, 128) TC_I_SCC_TC(2, 128, 64) TC_I_SCC_TC(2, 16, 128) TC_I_SCC_TC(2, 16, 64)
TC_I_SCC_TC(2, 32, 128) TC_I_SCC_TC(2, 32, 64) TC_I_SCC_TC(2, 64, 128) TC_I_SCC_TC(2, 64, 64)
#undef TC_I_SCC_TC
#define TC_I_SCC_WALK(...) template __global__ void scc_tc_walk<__VA_ARGS__>(const float*, \
    const float*, const int*, const int*, const int*, const int*, const float*, float*, \
    const float*, float*, const float*, float*, int, int, int, int, int, int, int, int, int);
TC_I_SCC_WALK(0, 1, 4, 32, 2) TC_I_SCC_WALK(0, 1, 4, 16, 4) TC_I_SCC_WALK(0, 2, 4, 32, 2)
TC_I_SCC_WALK(0, 2, 4, 16, 4) TC_I_SCC_WALK(1, 1, 4, 32, 2) TC_I_SCC_WALK(1, 1, 4, 16, 4)
TC_I_SCC_WALK(1, 2, 4, 32, 2) TC_I_SCC_WALK(1, 2, 4, 16, 4) TC_I_SCC_WALK(2, 1, 4, 32, 2)
TC_I_SCC_WALK(2, 1, 4, 16, 4) TC_I_SCC_WALK(2, 2, 4, 32, 2) TC_I_SCC_WALK(2, 2, 4, 16, 4)
#undef TC_I_SCC_WALK
#define TC_I_SCC_WGRAD(...) template __global__ void scc_tc_wgrad<__VA_ARGS__>(const float*, \
    const float*, const int*, const int*, float*, int, int, int, int, int, int);
TC_I_SCC_WGRAD(2, 8, 64, 3) TC_I_SCC_WGRAD(1, 16, 64, 3) TC_I_SCC_WGRAD(4, 4, 64, 3)
TC_I_SCC_WGRAD(1, 8, 64, 3) TC_I_SCC_WGRAD(2, 4, 32, 2)
#undef TC_I_SCC_WGRAD
#endif
