// Tensor-core convolution for small batches (Sun et al., "Efficient Tensor Cores support in
// TVM for Low-Latency Deep Learning"): an implicit-im2col GEMM, fp16 in, fp32 accumulate,
// fp16 out; or the same in bf16 (MODE bit 2).  bf16 moves through the same 16-bit lanes
// as fp16 (loads, rings and ldmatrix copy bits, so every buffer is typed __half): only the
// products and the epilogue's conversions tell the two apart.
//
// GEMM view: M = N·OH·OW output pixels, N = Cout, K = C·R·S.  A (M x K) is the im2col of the
// input, never built: each element is read from x where it lies (zero outside the image);
// B (K x Cout) is the packed weights w_p[Cout][K], K contiguous, k = (r, s, c) in both
// layouts, so that consecutive k are consecutive addresses of x in NHWC (tc_frag and
// tc_halo read them in mma fragment order instead, below).  Ragged M, Cout and K are
// predicated, never padded on the host.
//
// tc_conv<BM, BN, WM, WN, PATH, MODE, STAGES>: a block owns BM pixels x BN output channels,
// each warp WM x WN of them.  K streams through a STAGES-deep ring of shared-memory chunks,
// BK = 32 wide.  MODE says how operands arrive (bit 0: NHWC; bit 1: vector loads; bit 2
// makes every element bf16):
//   - vector B: 16-byte cp.async of 8 consecutive k (needs K % 8 == 0);
//   - vector A (NHWC with C % 8 == 0): 16-byte cp.async of 8 consecutive channels of one
//     pixel at one filter tap, each thread's pixels decoded once per launch;
//   - scalar A (NCHW, or a stem with 3 channels): one half per load, a warp's lanes on
//     consecutive pixels (coalesced in NCHW), the k -> (offset, r, s) map read from a table
//     the host built once per layer (each block copies its slice into shared memory first,
//     vector A reads its taps there too), so no division runs per element; loaded into
//     registers a chunk ahead and stored after the current chunk's products.  Those tiles
//     are kept k-major (pixels contiguous: conflict-free stores) and read with
//     ldmatrix.trans.
// PATH picks the instructions: 0 = mma.sync m16n8k16 with ldmatrix, 1-3 = WMMA with the
// paper's fragment shapes 16x16x16, 32x8x16 and 8x32x16.  Either way the accumulators go
// through shared memory (over the operand ring) to one epilogue.
//
// Split-K inside the launch: blockIdx.z takes a share of K.  With CL > 1 (sm_90) the CL
// shares of a tile form a thread-block cluster and reduce through distributed shared
// memory: each block owns 1/CL of the tile, receives every share's partials of it by
// st.async (tdcx::PushReduce), adds them in rank order and runs the epilogue on its part.
// With CL = 1 and gridDim.z > 1, each share writes its fp32 partial tile to a workspace,
// and the last share of a tile to arrive (an atomic counter per tile) adds the shares in a
// fixed order and runs the epilogue; it resets the counter, so the launch replays from a
// CUDA graph.  Either way deterministic.  The epilogue: bias, residual, ReLU, fp16 store.
// The output may be a channel slice of a wider map (a concatenation written in place): y
// points at the slice's first channel and ldy is the wider map's channel count (Cout when
// the output stands alone); the residual is always a whole (.., Cout) map.
//
// 1x1 filters without padding also run on tc_frag (below, the Python side's path 4), which
// skips the ring: operands go from global memory straight into mma fragments; and NCHW
// layers with C % 4 == 0 on tc_halo (path 5), which copies a block's input rows into shared
// memory once, pixel-major, and reads every tap's operand from there.
//
// Launch geometry, packing, the k table and checks belong to tensorconv/ops/tensorcore_conv.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include "tc_cluster.cuh"
#include "tc_common.cuh"

namespace tcc {
constexpr int BK = 32, PAD = 8, LDS = BK + PAD;   // an m-major or n-major row: 80 bytes

// The sizes and buffers of one launch.
struct Conv {
    const __half* x;         // (N, C, H, W) or (N, H, W, C)
    const __half* wp;        // (Cout, K), K in the layout's order
    const int2* ktab;        // (K,): {offset of tap k from a pixel's corner, r << 16 | s}
    int N, C, H, W, Cout, R, S, OH, OW, sh, sw, ph, pw;
    int M, K, OHW;
};

// An element's value, and a value as an element, fp16 or (BF) bf16 bits in a __half.
template <bool BF> __device__ __forceinline__ float to_float(__half v) {
    if constexpr (BF) return __bfloat162float(__ushort_as_bfloat16(__half_as_ushort(v)));
    else return __half2float(v);
}
template <bool BF> __device__ __forceinline__ __half from_float(float v) {
    if constexpr (BF) return __ushort_as_half(__bfloat16_as_ushort(__float2bfloat16(v)));
    else return __float2half(v);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; zero-filled when !pred (src then unread).
__device__ __forceinline__ void cp16(void* dst, const void* src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// The per-stage operand tiles: A as [BM][LDS] (k contiguous) or, k-major, [BK][BM + PAD]
// (pixels contiguous); B as [BN][LDS].
template <int BM, int BN, bool A_KM>
struct Ring {
    static constexpr int LDA = A_KM ? BM + PAD : LDS;
    static constexpr int A_HALVES = A_KM ? BK * LDA : BM * LDS, B_HALVES = BN * LDS;
    static constexpr int STAGE = A_HALVES + B_HALVES;   // halves; a multiple of 8
    __half* base;
    __device__ __half* a(int s) const { return base + s * STAGE; }
    __device__ __half* b(int s) const { return base + s * STAGE + A_HALVES; }
};

// Loads one BK-chunk of A and B.  Vector operands go straight to shared memory (cp.async);
// scalar ones into a ring of S register slots (issue() S - 1 chunks ahead, store() into
// shared memory just before the chunk is needed), so their latency overlaps S - 2 chunks
// of products as cp.async's does.  Slots must be compile-time after unrolling.
// Whether T threads' `copies` 16-byte copies of a chunk fall in whole rows of 4 copies each
// (a function, so that `copies < t` divides by nothing the front end would warn about).
__host__ __device__ constexpr bool whole_runs(int copies, int t) {
    return copies >= t && copies % t == 0 && 4 % (copies / t) == 0;
}

template <int BM, int BN, int T, bool NHWC, bool VEC_A, bool VEC_B, bool A_KM, int S>
struct Loader {
    // vector A: 4 copies of 8 halves per pixel row; a thread keeps column tid % 4.
    static constexpr int A_COPIES = BM * BK / 8, A_PER = (A_COPIES + T - 1) / T;
    static constexpr int B_COPIES = BN * BK / 8, B_PER = (B_COPIES + T - 1) / T;
    // Whole runs: every thread's copies fall in one row (a row is BK / 8 = 4 copies).
    static constexpr bool RUN_A = whole_runs(A_COPIES, T);
    static constexpr bool RUN_B = whole_runs(B_COPIES, T);
    // scalar A: a thread keeps pixel tid % BM and walks k; scalar B: lane k = tid % BK.
    static constexpr int AL = VEC_A ? 1 : BM * BK / T, BL = VEC_B ? 1 : BN * BK / T;
    static_assert(VEC_A || (T % BM == 0 && BM * BK % T == 0), "scalar A staging");
    static_assert(VEC_B || (T % BK == 0 && BN * BK % T == 0), "scalar B staging");

    int tid, m0, n0, k_begin, k_end;
    const int2* tab;   // the block's slice of the tap table in shared memory, from k_begin
    // vector A: per copy row its pixel's corner (ih0, iw0) (ih0 far out of the image for
    // rows past M) and the corner's offset in x, to which the table adds the tap's
    int v_ih[A_PER], v_iw[A_PER], v_at[A_PER];
    // vector A with C % BK == 0: the tap (r, s) and channel c of the next chunk, walked
    // chunk by chunk (issue() runs in k order), so no table is read at all
    int w_r = 0, w_s = 0, w_c = 0;
    // scalar A: this thread's pixel corner (ih0, iw0) and its offset in x, to which the
    // table adds tap k's offset (NCHW: c·H·W + r·W + s; NHWC: (r·W + s)·C + c)
    int s_ih = 0, s_iw = 0, s_base = 0;
    bool s_ok = false;
    __half areg[S][AL], breg[S][BL];

    __device__ Loader(const Conv& cv, int tid_, int m0_, int n0_, int k_begin_, int k_end_,
                      const int2* tab_)
        : tid(tid_), m0(m0_), n0(n0_), k_begin(k_begin_), k_end(k_end_), tab(tab_) {
        if (VEC_A) {
            const int rs = k_begin / cv.C;
            w_c = k_begin - rs * cv.C;
            w_r = rs / cv.S;
            w_s = rs - w_r * cv.S;
#pragma unroll
            for (int j = 0; j < A_PER; ++j) {
                const int m = m0 + (RUN_A ? tid * A_PER / 4 : (tid + j * T) / 4);
                v_ih[j] = -(1 << 24), v_iw[j] = 0, v_at[j] = 0;
                if (m < cv.M) {
                    const int n = m / cv.OHW, p = m - n * cv.OHW, oh = p / cv.OW;
                    v_ih[j] = oh * cv.sh - cv.ph;
                    v_iw[j] = (p - oh * cv.OW) * cv.sw - cv.pw;
                    v_at[j] = ((n * cv.H + v_ih[j]) * cv.W + v_iw[j]) * cv.C;
                }
            }
        } else {
            const int m = m0 + tid % BM;
            s_ok = m < cv.M;
            if (s_ok) {
                const int n = m / cv.OHW, p = m - n * cv.OHW, oh = p / cv.OW;
                s_ih = oh * cv.sh - cv.ph;
                s_iw = (p - oh * cv.OW) * cv.sw - cv.pw;
                s_base = NHWC ? ((n * cv.H + s_ih) * cv.W + s_iw) * cv.C
                              : n * cv.C * cv.H * cv.W + s_ih * cv.W + s_iw;
            }
        }
    }

    // Issue chunk k0 into stage buffers (a, b): cp.async for vector operands, register
    // loads for scalar ones.
    __device__ void issue(const Conv& cv, int k0, __half* a, __half* b, int slot) {
        if (VEC_A) {   // 8 channels of one tap: the table gives the tap, k its channel
            const int col0 = RUN_A ? tid * A_PER % 4 : tid % 4;
            if (RUN_A && cv.C % BK == 0) {   // the chunk is one tap: one check per row
                const int row = tid * A_PER / 4;
                const int ih = v_ih[0] + w_r, iw = v_iw[0] + w_s;
                const bool ok = k0 < k_end && (unsigned)ih < (unsigned)cv.H &&
                                (unsigned)iw < (unsigned)cv.W;
                const __half* src = cv.x + v_at[0] + (w_r * cv.W + w_s) * cv.C + w_c + col0 * 8;
#pragma unroll
                for (int j = 0; j < A_PER; ++j)
                    cp16(a + row * LDS + (col0 + j) * 8, ok ? src + j * 8 : cv.x, ok);
                w_c += BK;
                if (w_c == cv.C) {
                    w_c = 0;
                    if (++w_s == cv.S) w_s = 0, ++w_r;
                }
            } else {
#pragma unroll
            for (int j = 0; j < A_PER; ++j) {
                const int row = RUN_A ? tid * A_PER / 4 : (tid + j * T) / 4;
                const int col = RUN_A ? col0 + j : col0, rj = RUN_A ? 0 : j;
                if (A_COPIES % T != 0 && tid + j * T >= A_COPIES) break;   // compile-time when even
                const int k = k0 + col * 8;
                const bool k_ok = k < k_end;
                const int2 e = k_ok ? tab[k - k_begin] : make_int2(0, 0);
                const int ih = v_ih[rj] + (e.y >> 16), iw = v_iw[rj] + (e.y & 0xffff);
                const bool ok = k_ok && (unsigned)ih < (unsigned)cv.H &&
                                (unsigned)iw < (unsigned)cv.W;
                cp16(a + row * LDS + col * 8, ok ? cv.x + v_at[rj] + e.x : cv.x, ok);
            }
            }
        } else if (!NHWC && cv.R == 1 && cv.S == 1 && cv.ph == 0 && cv.pw == 0) {
            // an unpadded 1x1 in NCHW: tap k is channel k, always inside the image
            const int kl = tid / BM, hw = cv.H * cv.W;
#pragma unroll
            for (int l = 0; l < AL; ++l) {
                const int k = k0 + kl + l * (T / BM);
                areg[slot][l] = s_ok && k < k_end ? cv.x[s_base + k * hw] : __float2half(0.f);
            }
        } else {
            const int kl = tid / BM;
#pragma unroll
            for (int l = 0; l < AL; ++l) {
                const int k = k0 + kl + l * (T / BM);
                __half v = __float2half(0.f);
                if (s_ok && k < k_end) {
                    const int2 e = tab[k - k_begin];
                    const int ih = s_ih + (e.y >> 16), iw = s_iw + (e.y & 0xffff);
                    if (ih >= 0 && ih < cv.H && iw >= 0 && iw < cv.W)
                        v = cv.x[s_base + e.x];
                }
                areg[slot][l] = v;
            }
        }
        if (VEC_B) {
            // RUN_B: a thread's copies are consecutive columns of one weight row
            const int brow = RUN_B ? tid * B_PER / 4 : 0, bcol0 = RUN_B ? tid * B_PER % 4 : 0;
            const __half* wrow = cv.wp + (size_t)(n0 + brow) * cv.K + k0;
            const bool nn_ok = n0 + brow < cv.Cout;
#pragma unroll
            for (int j = 0; j < B_PER; ++j) {
                const int i = tid + j * T;
                if (B_COPIES % T != 0 && i >= B_COPIES) break;
                const int row = RUN_B ? brow : i / 4, col = RUN_B ? bcol0 + j : i % 4;
                const int nn = n0 + row, k = k0 + col * 8;
                const bool ok = (RUN_B ? nn_ok : nn < cv.Cout) && k < k_end;
                const __half* src = RUN_B ? wrow + col * 8 : cv.wp + (size_t)nn * cv.K + k;
                cp16(b + row * LDS + col * 8, ok ? src : cv.wp, ok);
            }
        } else {
#pragma unroll
            for (int l = 0; l < BL; ++l) {
                const int nn = n0 + tid / BK + l * (T / BK), k = k0 + tid % BK;
                breg[slot][l] = nn < cv.Cout && k < k_end ? cv.wp[(size_t)nn * cv.K + k]
                                                     : __float2half(0.f);
            }
        }
    }

    // Store the scalar operands held in registers into stage buffers (a, b).
    __device__ void store(__half* a, __half* b, int slot) const {
        if (!VEC_A) {
            const int m = tid % BM, kl = tid / BM;
#pragma unroll
            for (int l = 0; l < AL; ++l) {
                const int k = kl + l * (T / BM);
                if (A_KM) a[k * (BM + PAD) + m] = areg[slot][l];
                else a[m * LDS + k] = areg[slot][l];
            }
        }
        if (!VEC_B) {
#pragma unroll
            for (int l = 0; l < BL; ++l)
                b[(tid / BK + l * (T / BK)) * LDS + tid % BK] = breg[slot][l];
        }
    }
};

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// mma.sync m16n8k16: a warp's WM x WN accumulators in registers, fragments by ldmatrix.
// d += a · b on one m16n8k16 tile, fp16 or (BF) bf16 operands, fp32 accumulators.
template <bool BF>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
    if constexpr (BF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int WM, int WN, int BM, bool A_KM, bool BF>
struct MmaPath {
    static constexpr int MI = WM / 16, NI = WN / 8;
    static_assert(WM % 16 == 0 && WN % 16 == 0, "ldmatrix.x4 reads two n8 blocks");
    float acc[MI][NI][4] = {};

    // Every fragment of the chunk first, then every product: the ldmatrix and mma asm
    // statements are volatile (kept in order), so interleaving them would expose each
    // ldmatrix's latency to the products that wait on it.
    __device__ void step(const __half* As, const __half* Bs, int wm0, int wn0, int lane) {
        constexpr int KB = BK / 16;
        unsigned a[KB][MI][4], b[KB][NI][2];
#pragma unroll
        for (int h = 0; h < KB; ++h) {
            const int kb = h * 16;
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                if (A_KM) {   // k-major: four 8x8 blocks, transposed on the way
                    const int k = kb + (lane & 7) + ((lane >> 4) & 1) * 8;
                    const int m = wm0 + i * 16 + ((lane >> 3) & 1) * 8;
                    ldsm_x4_t(a[h][i], As + k * (BM + PAD) + m);
                } else {
                    ldsm_x4(a[h][i], As + (wm0 + i * 16 + (lane & 15)) * LDS + kb + (lane >> 4) * 8);
                }
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                unsigned r[4];
                const int n = wn0 + j * 8 + (lane & 7) + ((lane >> 4) & 1) * 8;
                ldsm_x4(r, Bs + n * LDS + kb + ((lane >> 3) & 1) * 8);
                b[h][j][0] = r[0]; b[h][j][1] = r[1]; b[h][j + 1][0] = r[2]; b[h][j + 1][1] = r[3];
            }
        }
#pragma unroll
        for (int h = 0; h < KB; ++h)
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma(acc[i][j], a[h][i], b[h][j]);
    }

    static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4],
                                               const unsigned (&b)[2]) {
        mma16816<BF>(d, a, b[0], b[1]);
    }

    template <int LDC>
    __device__ void dump(float* Cs, int wm0, int wn0, int lane) const {
        const int g = lane >> 2, tg = lane & 3;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    *reinterpret_cast<float2*>(
                        &Cs[(wm0 + i * 16 + g + h * 8) * LDC + wn0 + j * 8 + tg * 2]) =
                        make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    }
};

// A's WMMA layout: k-major tiles are column-major A (NVRTC has no <type_traits>); the
// fragments' element type.
template <bool A_KM> struct ALayoutOf { using type = nvcuda::wmma::row_major; };
template <> struct ALayoutOf<true> { using type = nvcuda::wmma::col_major; };
template <bool BF> struct ElemOf { using type = __half; };
template <> struct ElemOf<true> { using type = __nv_bfloat16; };

// WMMA with an FM x FN x 16 fragment shape (the paper's three).
template <int WM, int WN, int FM, int FN, int BM, bool A_KM, bool BF>
struct WmmaPath {
    static constexpr int MI = WM / FM, NI = WN / FN;
    static_assert(WM % FM == 0 && WN % FN == 0, "a warp tile of whole fragments");
    using ALayout = typename ALayoutOf<A_KM>::type;
    using E = typename ElemOf<BF>::type;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, FM, FN, 16, float> acc[MI][NI];

    __device__ WmmaPath() {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.f);
    }

    __device__ void step(const __half* As_, const __half* Bs_, int wm0, int wn0, int) {
        using namespace nvcuda;
        const E* As = reinterpret_cast<const E*>(As_);
        const E* Bs = reinterpret_cast<const E*>(Bs_);
#pragma unroll
        for (int kb = 0; kb < BK; kb += 16) {
            wmma::fragment<wmma::matrix_a, FM, FN, 16, E, ALayout> a[MI];
            wmma::fragment<wmma::matrix_b, FM, FN, 16, E, wmma::col_major> b[NI];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                if (A_KM) wmma::load_matrix_sync(a[i], As + kb * (BM + PAD) + wm0 + i * FM,
                                                 BM + PAD);
                else wmma::load_matrix_sync(a[i], As + (wm0 + i * FM) * LDS + kb, LDS);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j)
                wmma::load_matrix_sync(b[j], Bs + (wn0 + j * FN) * LDS + kb, LDS);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
    }

    template <int LDC>
    __device__ void dump(float* Cs, int wm0, int wn0, int) const {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
                nvcuda::wmma::store_matrix_sync(&Cs[(wm0 + i * FM) * LDC + wn0 + j * FN],
                                                acc[i][j], LDC, nvcuda::wmma::mem_row_major);
    }
};

// k-major A tiles for scalar loads, except under 8x32 WMMA fragments, whose 8-pixel
// column offsets would break WMMA's 32-byte pointer alignment there.
template <int PATH, bool VEC_A> struct AKm { static constexpr bool value = !VEC_A && PATH != 3; };

template <int WM, int WN, int BM, int PATH, bool A_KM, bool BF> struct PathOf;
template <int WM, int WN, int BM, bool K, bool BF> struct PathOf<WM, WN, BM, 0, K, BF> {
    using type = MmaPath<WM, WN, BM, K, BF>; };
template <int WM, int WN, int BM, bool K, bool BF> struct PathOf<WM, WN, BM, 1, K, BF> {
    using type = WmmaPath<WM, WN, 16, 16, BM, K, BF>; };
template <int WM, int WN, int BM, bool K, bool BF> struct PathOf<WM, WN, BM, 2, K, BF> {
    using type = WmmaPath<WM, WN, 32, 8, BM, K, BF>; };
template <int WM, int WN, int BM, bool K, bool BF> struct PathOf<WM, WN, BM, 3, K, BF> {
    using type = WmmaPath<WM, WN, 8, 32, BM, K, BF>; };
}  // namespace tcc

// MODE: bit 0 = NHWC, bit 1 = vector loads (B always; A where NHWC), bit 2 = bf16.  CL:
// the cluster
// of split shares (1: none).  The push slots of a cluster start at byte slots_at.
template <int BM, int BN, int WM, int WN, int PATH, int MODE, int STAGES, int CL>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__((BM / WM) * (BN / WN) * 32) tc_conv(
    const __half* __restrict__ x, const __half* __restrict__ wp, const int2* __restrict__ ktab,
    const float* __restrict__ bias, const __half* __restrict__ residual,
    __half* __restrict__ y, float* __restrict__ partial, int* __restrict__ counters, int N,
    int C, int H, int W, int Cout, int R, int S, int OH, int OW, int sh, int sw, int ph,
    int pw, int k_per_split, int relu, int vec_out, int table_at, int slots_at,
    unsigned long long share_div, int ldy)
{
    tc::wait_prior_grids();
    using namespace tcc;
    constexpr bool NHWC = MODE & 1, VEC_B = (MODE >> 1) & 1, VEC_A = VEC_B && NHWC;
    constexpr bool BF = (MODE >> 2) & 1;
    constexpr bool A_KM = AKm<PATH, VEC_A>::value;
    constexpr int WARPS_M = BM / WM, T = WARPS_M * (BN / WN) * 32, LDC = BN + 4;
    using R_ = Ring<BM, BN, A_KM>;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int s_last;
    const R_ ring{reinterpret_cast<__half*>(smem)};
    float* Cs = reinterpret_cast<float*>(smem);   // over the ring, after the K loop

    const Conv cv{x, wp, ktab, N, C, H, W, Cout, R, S, OH, OW, sh, sw, ph, pw, N * OH * OW,
                  C * R * S, OH * OW};
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = min(cv.K, k_begin + k_per_split);
    const int chunks = k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0;

    int2* tab = reinterpret_cast<int2*>(smem + table_at);
    Loader<BM, BN, T, NHWC, VEC_A, VEC_B, A_KM, STAGES> ld(cv, tid, m0, n0, k_begin, k_end, tab);
    typename PathOf<WM, WN, BM, PATH, A_KM, BF>::type path;
    tdcx::PushReduce<CL> red(reinterpret_cast<float*>(smem + slots_at), share_div);
    if constexpr (CL > 1) red.begin(BM * BN);
    // The block's taps, once: a table read in the load path would put a global latency
    // before every chunk's loads.  Vector A on whole-chunk taps walks them instead, and an
    // unpadded NCHW 1x1 needs none.
    const bool walked = VEC_A && Loader<BM, BN, T, NHWC, VEC_A, VEC_B, A_KM, STAGES>::RUN_A &&
                        C % BK == 0;
    const bool pointwise = !NHWC && R == 1 && S == 1 && ph == 0 && pw == 0;
    if (!walked && !pointwise) {
        for (int i = tid; i < k_end - k_begin; i += T) tab[i] = __ldg(&ktab[k_begin + i]);
        __syncthreads();
    }

    // Prologue: chunks 0..STAGES-2 in flight, chunk 0's scalar operands stored.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < chunks) ld.issue(cv, k_begin + s * BK, ring.a(s), ring.b(s), s);
        cp_commit();
    }
    if (chunks > 0) ld.store(ring.a(0), ring.b(0), 0);
    // Unrolled by STAGES so that every ring slot (u, u + STAGES - 1, u + 1 mod STAGES) is
    // a constant.
    for (int kt0 = 0; kt0 < chunks; kt0 += STAGES) {
#pragma unroll
        for (int u = 0; u < STAGES; ++u) {
            const int kt = kt0 + u;
            if (kt >= chunks) break;
            cp_wait<STAGES - 2>();
            __syncthreads();   // chunk kt landed; every warp is done with chunk kt - 1
            const int ns = (u + STAGES - 1) % STAGES, fs = (u + 1) % STAGES;
            if (kt + STAGES - 1 < chunks)
                ld.issue(cv, k_begin + (kt + STAGES - 1) * BK, ring.a(ns), ring.b(ns), ns);
            cp_commit();
            path.step(ring.a(u), ring.b(u), wm0, wn0, lane);
            if (kt + 1 < chunks) ld.store(ring.a(fs), ring.b(fs), fs);   // needed next
        }
    }
    cp_wait<0>();
    __syncthreads();
    path.template dump<LDC>(Cs, wm0, wn0, lane);
    __syncthreads();

    const int M = cv.M, OHW = cv.OHW;
    // Output (m0 + mm, n0 + nn) of value v through the epilogue.
    auto put = [&](int mm, int nn, float v) {
        const int m = m0 + mm, n = n0 + nn;
        if (m >= M || n >= Cout) return;
        const int img = m / OHW, p = m - img * OHW;
        const size_t at = NHWC ? (size_t)m * Cout + n : ((size_t)img * Cout + n) * OHW + p;
        const size_t yat = NHWC ? (size_t)m * ldy + n : ((size_t)img * ldy + n) * OHW + p;
        if (bias != nullptr) v += bias[n];
        if (residual != nullptr) v += to_float<BF>(residual[at]);
        y[yat] = from_float<BF>(relu ? fmaxf(v, 0.f) : v);
    };
    if constexpr (CL > 1) {
        // Tile order along the output's contiguous dimension: channels in NHWC, pixels in
        // NCHW, so that a block's owned run stores coalesced.
        red.ready();
        for (int i = tid * 4; i < BM * BN; i += T * 4) {
            float v[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int idx = i + q;
                v[q] = NHWC ? Cs[(idx / BN) * LDC + idx % BN] : Cs[(idx % BM) * LDC + idx / BM];
            }
            red.template push<4>(i, v);
        }
        red.wait();
        const int owned = red.count(BM * BN), base = red.rank * red.share;
        for (int e = tid; e < owned; e += T) {
            const int idx = base + e;
            if (NHWC) put(idx / BN, idx % BN, red.sum(e));
            else put(idx % BM, idx / BM, red.sum(e));
        }
        return;
    }
    // Split-K: every share stores its partial tile; the last to arrive sums them in order.
    const int splits = gridDim.z;
    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x, tiles = gridDim.x * gridDim.y;
        constexpr int Q = BM * BN / 4;   // float4s per tile
        float4* mine = reinterpret_cast<float4*>(partial) + ((size_t)blockIdx.z * tiles + tile) * Q;
        for (int e = tid; e < Q; e += T) {
            const int mm = e / (BN / 4), nn = (e % (BN / 4)) * 4;
            mine[e] = *reinterpret_cast<const float4*>(&Cs[mm * LDC + nn]);
        }
        __threadfence();
        __syncthreads();
        if (tid == 0) s_last = atomicAdd(&counters[tile], 1) == splits - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        // A thread's float4s of the tile, up to 8 at a time, every share's loads in
        // flight together (the sum still runs share by share: deterministic).
        constexpr int QT = (Q + T - 1) / T, G = QT < 8 ? QT : 8;
        const float4* all = reinterpret_cast<const float4*>(partial) + (size_t)tile * Q;
        for (int q0 = 0; q0 < QT; q0 += G) {
            float4 v[G];
#pragma unroll
            for (int q = 0; q < G; ++q) v[q] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
            for (int z = 0; z < splits; ++z) {
#pragma unroll
                for (int q = 0; q < G; ++q) {
                    const int e = tid + (q0 + q) * T;
                    if (Q % T == 0 || e < Q) {
                        const float4 u = __ldcg(all + (size_t)z * tiles * Q + e);
                        v[q].x += u.x; v[q].y += u.y; v[q].z += u.z; v[q].w += u.w;
                    }
                }
            }
#pragma unroll
            for (int q = 0; q < G; ++q) {
                const int e = tid + (q0 + q) * T;
                if (Q % T == 0 || e < Q)
                    *reinterpret_cast<float4*>(&Cs[(e / (BN / 4)) * LDC + (e % (BN / 4)) * 4]) =
                        v[q];
            }
        }
        if (tid == 0) counters[tile] = 0;      // ready for the next launch
        __syncthreads();
    }
    if (NHWC && vec_out) {   // Cout % 8 == 0, aligned: 8 channels per 16-byte store
        for (int e = tid; e < BM * BN / 8; e += T) {
            const int mm = e / (BN / 8), nn = (e % (BN / 8)) * 8, m = m0 + mm, n = n0 + nn;
            if (m >= M || n >= Cout) continue;
            const size_t at = (size_t)m * Cout + n;
            float v[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) v[q] = Cs[mm * LDC + nn + q];
            if (bias != nullptr) {
#pragma unroll
                for (int q = 0; q < 8; ++q) v[q] += bias[n + q];
            }
            if (residual != nullptr) {
                const uint4 rr = *reinterpret_cast<const uint4*>(residual + at);
                const __half* rh = reinterpret_cast<const __half*>(&rr);
#pragma unroll
                for (int q = 0; q < 8; ++q) v[q] += to_float<BF>(rh[q]);
            }
            uint4 out;
            __half* oh = reinterpret_cast<__half*>(&out);
#pragma unroll
            for (int q = 0; q < 8; ++q) oh[q] = from_float<BF>(relu ? fmaxf(v[q], 0.f) : v[q]);
            *reinterpret_cast<uint4*>(y + (size_t)m * ldy + n) = out;
        }
        return;
    }
    if (!NHWC) {   // a thread keeps one pixel (T % BM == 0): its image and offset once
        static_assert(T % BM == 0, "an NCHW epilogue thread keeps one pixel");
        const int mm = tid % BM, m = m0 + mm;
        if (m >= M) return;
        const int img = m / OHW;
        const size_t pix = (size_t)img * Cout * OHW + (m - img * OHW);
        __half* out = y + (size_t)img * ldy * OHW + (m - img * OHW);
        const __half* res = residual == nullptr ? nullptr : residual + pix;
        for (int nn = tid / BM; nn < BN && n0 + nn < Cout; nn += T / BM) {
            const int n = n0 + nn;
            float v = Cs[mm * LDC + nn];
            if (bias != nullptr) v += bias[n];
            if (res != nullptr) v += to_float<BF>(res[(size_t)n * OHW]);
            out[(size_t)n * OHW] = from_float<BF>(relu ? fmaxf(v, 0.f) : v);
        }
    } else {
        for (int e = tid; e < BM * BN; e += T) {   // consecutive threads: consecutive addresses
            const int mm = e / BN, nn = e % BN;
            put(mm, nn, Cs[mm * LDC + nn]);
        }
    }
}

// tc_frag<MT, NT, WC, WP, KS, U, MODE>: a 1x1 convolution without padding (any stride) on
// the "fragments" path (Tile.path 4).  At batch 1 a 1x1 layer is a few k-steps, and its
// time is the chain of latencies a block walks: the ring kernel's tap table, stages,
// ldmatrix and barriers are longer than the products.  Here each warp loads its mma
// operands from global memory straight into fragment registers, U k-steps at a time with
// every load of a group issued before its products, and the block's KS warps of each
// output tile take K in KS shares, added in shared memory in share order (deterministic)
// by the epilogue.  A warp owns 16·MT output channels x 8·NT pixels, a share WC x WP warps.
//
// The order of k inside a 16-wide step is free if A and B agree, so the lane that holds
// fragment columns {2t, 2t+1, 2t+8, 2t+9} takes channels 4t..4t+3 of the step: in NHWC
// one 8-byte load of a pixel gives b0 and b1 (NCHW: four halves from four channel planes).
// The weights come packed in that fragment order (pack_weights for a fragments tile): a
// lane's a0..a3 of a step are 16 contiguous bytes, a warp's 512, where rows would take two
// 8-byte loads from 16 rows (0.5-1.8 µs a layer more, measured).  So C % 4 == 0, NHWC
// rows 8-byte aligned and the packed weights 16, which the host checks.  MODE: bit 0 NHWC,
// bit 2 bf16.
namespace tcc {
template <int MT, int NT, int WC, int WP, int KS>
struct Frag {
    static constexpr int CO = 16 * MT * WC, PX = 8 * NT * WP, T = 32 * WC * WP * KS;
    // The fp32 partial tiles of the KS shares: [KS][CO][PX + 4] (NCHW: a thread's epilogue
    // walks channels of one pixel) or [KS][PX][CO + 4] (NHWC: consecutive channels).
    static constexpr int LDN = PX + 4, LDH = CO + 4;

    // A warp's fp32 accumulators (share `share`, channel warp wc, pixel warp wpx) into its
    // share's partial tile; the caller synchronises before (red may alias the operands)
    // and after.
    template <bool NHWC>
    static __device__ __forceinline__ void store_share(float* red, const float (&acc)[MT][NT][4],
                                                       int share, int wc, int wpx, int lane) {
        const int g = lane >> 2, t = lane & 3, r0 = wc * 16 * MT, c0 = wpx * 8 * NT;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = r0 + 16 * i + g + 8 * (e >> 1);
                    const int col = c0 + 8 * j + 2 * t + (e & 1);
                    red[NHWC ? (share * PX + col) * LDH + row : (share * CO + row) * LDN + col] =
                        acc[i][j][e];
                }
    }

    // NCHW: the outputs of tile pixel `col` (out and res point at its first channel),
    // channels cb + threadIdx.x / PX, + T / PX, ... below Cout: the shares added in share
    // order (deterministic), then bias, residual, ReLU.  At batch 1 this loop is a large
    // part of a 1x1 block's instructions, so its offsets are 32-bit and move by additions
    // (an image's channels span less than 2^32 elements of the output).
    template <bool BF>
    static __device__ __forceinline__ void epilogue_nchw(const float* red, int col, int cb,
                                                         int Cout, int OHW, __half* out,
                                                         const __half* res, const float* bias,
                                                         int relu) {
        constexpr int STEP = T / PX;
        const int row0 = threadIdx.x / PX, rows = min(CO, Cout - cb);
        const unsigned step = (unsigned)STEP * OHW;
        unsigned o = (unsigned)(cb + row0) * OHW;
        out = tc::opaque(out);
        if (res != nullptr) res = tc::opaque(res);
        const float* r = red + row0 * LDN + col;
        for (int row = row0; row < rows; row += STEP, o += step, r += STEP * LDN) {
            float v = 0.f;
#pragma unroll
            for (int q = 0; q < KS; ++q) v += r[q * CO * LDN];
            if (bias != nullptr) v += bias[cb + row];
            if (res != nullptr) v += to_float<BF>(__ldg(res + o));
            out[o] = from_float<BF>(relu ? fmaxf(v, 0.f) : v);
        }
    }
};
}  // namespace tcc

template <int MT, int NT, int WC, int WP, int KS, int U, int MODE>
__global__ void __launch_bounds__(32 * WC * WP * KS) tc_frag(
    const __half* __restrict__ x, const __half* __restrict__ wp, const float* __restrict__ bias,
    const __half* __restrict__ residual, __half* __restrict__ y, int N, int C, int H, int W,
    int Cout, int OH, int OW, int sh, int sw, int relu, int ldy)
{
    tc::wait_prior_grids();
    using F = tcc::Frag<MT, NT, WC, WP, KS>;
    constexpr bool NHWC = MODE & 1, BF = (MODE >> 2) & 1;
    static_assert(F::T % F::PX == 0, "an NCHW epilogue thread keeps one pixel");
    extern __shared__ __align__(128) unsigned char smem[];
    float* red = reinterpret_cast<float*>(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int share = warp % KS, wc = (warp / KS) % WC, wpx = warp / (KS * WC);
    const int g = lane >> 2, t = lane & 3;
    const int OHW = OH * OW, M = N * OHW, HW = H * W;
    const int co0 = blockIdx.y * F::CO + wc * 16 * MT;      // the warp's first channel
    const int px0 = blockIdx.x * F::PX + wpx * 8 * NT;      // and first pixel

    // Lane g's pixel of each n-tile: where its channels 4t.. start in x (once).
    const unsigned short* xs = reinterpret_cast<const unsigned short*>(x);
    int xo[NT];
    bool pv[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int m = px0 + 8 * j + g;
        pv[j] = m < M;
        const int n = m / OHW, p = m - n * OHW, oh = p / OW, ow = p - oh * OW;
        const int at = (oh * sh) * W + ow * sw;
        xo[j] = !pv[j] ? 0 : NHWC ? (n * HW + at) * C + 4 * t : n * C * HW + at + 4 * t * HW;
    }
    // Lane's A fragments of channel tile co0 / 16 + i at step 0, 16 bytes a step in the
    // packed fragment order (-1: a tile past Cout).
    const uint4* wf = reinterpret_cast<const uint4*>(wp);
    const int steps = (C + 15) / 16, mtiles = (Cout + 15) / 16;
    int wo[MT];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        const int mt = co0 / 16 + i;
        wo[i] = mt < mtiles ? mt * steps * 32 + lane : -1;
    }

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
    const int s_end = (share + 1) * steps / KS;
    for (int s0 = share * steps / KS; s0 < s_end; s0 += U) {
        unsigned a[U][MT][4], b[U][NT][2];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int s = s0 + u;
            const bool sv = s < s_end, kv = sv && 16 * s + 4 * t < C;   // all four or none
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const bool v = kv && pv[j];
                if constexpr (NHWC) {
                    const uint2 q = v ? __ldg(reinterpret_cast<const uint2*>(xs + xo[j] + 16 * s))
                                      : make_uint2(0u, 0u);
                    b[u][j][0] = q.x;
                    b[u][j][1] = q.y;
                } else {
                    const unsigned short* q = xs + xo[j] + 16 * s * HW;
                    const unsigned h0 = v ? __ldg(q) : 0u, h1 = v ? __ldg(q + HW) : 0u;
                    const unsigned h2 = v ? __ldg(q + 2 * HW) : 0u;
                    const unsigned h3 = v ? __ldg(q + 3 * HW) : 0u;
                    b[u][j][0] = h0 | (h1 << 16);
                    b[u][j][1] = h2 | (h3 << 16);
                }
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const uint4 q = sv && wo[i] >= 0 ? __ldg(wf + wo[i] + 32 * s)
                                                 : make_uint4(0u, 0u, 0u, 0u);
                a[u][i][0] = q.x, a[u][i][1] = q.y, a[u][i][2] = q.z, a[u][i][3] = q.w;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    tcc::mma16816<BF>(acc[i][j], a[u][i], b[u][j][0], b[u][j][1]);
    }

    // The share's partial tile into shared memory, then every share's sum per output.
    F::template store_share<NHWC>(red, acc, share, wc, wpx, lane);
    __syncthreads();
    const int cb = blockIdx.y * F::CO, mb = blockIdx.x * F::PX;
    if constexpr (NHWC) {   // consecutive threads: consecutive channels of a pixel
        for (int e = threadIdx.x; e < F::CO * F::PX; e += F::T) {
            const int row = e % F::CO, col = e / F::CO, co = cb + row, m = mb + col;
            if (co >= Cout || m >= M) continue;
            float v = 0.f;
#pragma unroll
            for (int q = 0; q < KS; ++q) v += red[(q * F::PX + col) * F::LDH + row];
            if (bias != nullptr) v += bias[co];
            if (residual != nullptr) v += tcc::to_float<BF>(residual[(size_t)m * Cout + co]);
            y[(size_t)m * ldy + co] = tcc::from_float<BF>(relu ? fmaxf(v, 0.f) : v);
        }
    } else {                // a thread keeps one pixel: its image and offset once
        const int col = threadIdx.x % F::PX, m = mb + col;
        if (m >= M) return;
        const int n = M == OHW ? 0 : m / OHW, p = m - n * OHW;   // batch 1: no division
        const __half* res = residual == nullptr ? nullptr : residual + (size_t)n * Cout * OHW + p;
        F::template epilogue_nchw<BF>(red, col, cb, Cout, OHW, y + (size_t)n * ldy * OHW + p, res,
                                      bias, relu);
    }
}

// tc_halo<MT, NT, WC, WP, KS, U, MODE>: an NCHW convolution (any filter, stride and padding,
// C % 4 == 0) whose block first copies the input it reads into shared memory, once, laid
// out pixel-major: the Python side's path 5.  In NCHW the im2col's k runs across channel
// planes, so the ring kernel reads its operand one half at a time, R·S times per input
// element; here the block's input rows (every channel, every column, zeros where the
// filter overhangs the image) are read once, coalesced along the rows, and stored with
// the channels of a pixel contiguous, so each k-step's operand is one ldmatrix.x4 per two
// n-tiles at the tap's offset.  The block's pixels are consecutive output pixels of one
// image (their input rows a band of the plane).  K = (tap, 16-channel step) pairs, split
// in KS contiguous shares among a block's warps and added in shared memory as tc_frag's
// are; the weights, packed in fragment order as tc_frag's (k-steps ordered tap, channel
// step), go straight from global memory into A fragments (channels 4t..4t+3 of a step to
// lane t), and the copy stores each channel pair where that order puts it.  A warp owns 16·MT output
// channels x 8·NT pixels; MODE bit 2: bf16.
#ifndef HALO_BATCH
#define HALO_BATCH 4   // items (a pixel's 16-channel step) a thread of tc_halo loads, then stores
#endif
namespace tcc {
// The shared-memory word (in halves, within a pixel's row) of channel c: channels
// 16h + 4t .. + 3 sit at 16h + 2t, + 1, + 8, + 9, the order of the m16n8k16 fragments'
// columns {2t, 2t + 1, 2t + 8, 2t + 9} that lane t holds.
__device__ __forceinline__ int halo_slot(int c) {
    return (c & ~15) + 8 * ((c >> 1) & 1) + 2 * ((c >> 2) & 3) + (c & 1);
}
}  // namespace tcc

template <int MT, int NT, int WC, int WP, int KS, int U, int MODE>
__global__ void __launch_bounds__(32 * WC * WP * KS) tc_halo(
    const __half* __restrict__ x, const __half* __restrict__ wp, const float* __restrict__ bias,
    const __half* __restrict__ residual, __half* __restrict__ y, int C, int H, int W,
    int Cout, int R, int S, int OH, int OW, int sh, int sw, int ph, int pw, int relu, int ldy,
    int cols, int ldc)
{
    tc::wait_prior_grids();
    using F = tcc::Frag<MT, NT, WC, WP, KS>;
    constexpr bool BF = (MODE >> 2) & 1;
    static_assert(!(MODE & 1), "tc_halo reads NCHW inputs");
    static_assert(NT % 2 == 0, "ldmatrix.x4 reads the operands of two n-tiles");
    static_assert(F::T % F::PX == 0, "an epilogue thread keeps one pixel");
    extern __shared__ __align__(128) unsigned char smem[];
    __half* halo = reinterpret_cast<__half*>(smem);
    float* red = reinterpret_cast<float*>(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int share = warp % KS, wc = (warp / KS) % WC, wpx = warp / (KS * WC);
    const int OHW = OH * OW, HW = H * W, tiles = (OHW + F::PX - 1) / F::PX;
    const int n = blockIdx.x / tiles, p0 = (blockIdx.x - n * tiles) * F::PX;
    const int pend = min(p0 + F::PX, OHW), oh0 = p0 / OW;
    const int rows = ((pend - 1) / OW - oh0) * sh + R, ih0 = oh0 * sh - ph;

    // Lane's A fragments of channel tile co0 / 16 + i at step 0, 16 bytes a step in the
    // packed fragment order (-1: a tile past Cout).  k-step f = (tap r·S + s, channel
    // step cs); the share's range is [f, f_end).  A group of U steps' A is loaded a group
    // ahead of its products (the first before the copy): the weights' latency then
    // overlaps the copy and the previous group's products instead of following them.
    const int co0 = blockIdx.y * F::CO + wc * 16 * MT, mtiles = (Cout + 15) / 16;
    const int csteps = (C + 15) / 16, steps = R * S * csteps;
    const int f_end = (share + 1) * steps / KS;
    const uint4* wf = reinterpret_cast<const uint4*>(wp);
    int wo[MT];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        const int mt = co0 / 16 + i;
        wo[i] = mt < mtiles ? mt * steps * 32 + lane : -1;
    }
    auto load_a = [&](unsigned (&dst)[U][MT][4], int f0) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const uint4 q = f0 + u < f_end && wo[i] >= 0 ? __ldg(wf + wo[i] + 32 * (f0 + u))
                                                             : make_uint4(0u, 0u, 0u, 0u);
                dst[u][i][0] = q.x, dst[u][i][1] = q.y, dst[u][i][2] = q.z, dst[u][i][3] = q.w;
            }
    };
    int f = share * steps / KS;
    unsigned an[U][MT][4];
    load_a(an, f);

    // The copy: region pixel (i, j) is input (ih0 + i, j - pw).  A thread moves the 16
    // channels of k-step cs of region pixels tid, tid + T, ... (cs advancing as the pixels
    // wrap): a warp's loads are 64 consecutive bytes of a plane (whole sectors), and its
    // stores two 16-byte words a pixel (tcc::halo_slot puts channels {0, 1, 4, 5, 8, 9,
    // 12, 13} of a step in its first eight slots, the rest in the next eight; 16-byte
    // stores at an odd 16-byte pitch are conflict-free).  The copy is most of a halo
    // block's instructions, so an item is a whole step, the walk carries at most once per
    // item (T region pixels = dq planes + di rows + dj columns), and the offsets are
    // 32-bit from the image's address.
    {
        const unsigned short* xs =
            tc::opaque(reinterpret_cast<const unsigned short*>(x + (size_t)n * C * HW));
        uint4* hw128 = reinterpret_cast<uint4*>(halo);
        const int npx = rows * cols, csteps16 = (ldc - 8) / 16;
        const int dq = F::T / npx, di = (F::T - dq * npx) / cols;
        const int dj = F::T - dq * npx - di * cols;
        int cs = threadIdx.x / npx, i = (threadIdx.x - cs * npx) / cols;
        int j = threadIdx.x - cs * npx - i * cols;
        while (cs < csteps16) {
            uint4 v[HALO_BATCH][2];
            int at[HALO_BATCH];
#pragma unroll
            for (int u = 0; u < HALO_BATCH; ++u) at[u] = -1;
#pragma unroll
            for (int u = 0; u < HALO_BATCH; ++u) {
                if (cs >= csteps16) break;   // the thread's last items: no dead loads
                const int ih = ih0 + i, iw = j - pw;
                const bool ok = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                // unsigned: one wide multiply-add an address (o wraps only where !ok)
                const unsigned o = 16u * cs * HW + ih * W + iw;
                unsigned h[16];
#pragma unroll
                for (int e = 0; e < 16; ++e)   // four channels at a time exist (C % 4 == 0)
                    h[e] = ok && 16 * cs + (e & ~3) < C ? __ldg(xs + (o + e * (unsigned)HW))
                                                        : 0u;
                v[u][0] = make_uint4(h[0] | (h[1] << 16), h[4] | (h[5] << 16),
                                     h[8] | (h[9] << 16), h[12] | (h[13] << 16));
                v[u][1] = make_uint4(h[2] | (h[3] << 16), h[6] | (h[7] << 16),
                                     h[10] | (h[11] << 16), h[14] | (h[15] << 16));
                at[u] = ((i * cols + j) * ldc + 16 * cs) / 8;
                j += dj, i += di, cs += dq;
                if (j >= cols) j -= cols, ++i;
                if (i >= rows) i -= rows, ++cs;
            }
#pragma unroll
            for (int u = 0; u < HALO_BATCH; ++u)
                if (at[u] >= 0) hw128[at[u]] = v[u][0], hw128[at[u] + 1] = v[u][1];
        }
    }
    __syncthreads();

    // Lane l's ldmatrix row: pixel 8(2jj + l / 16) + l % 8 of the warp's, its 8 channel
    // slots from 8 · (l / 8 % 2); a pixel past the tile reads region pixel 0.
    unsigned bo[NT / 2];
#pragma unroll
    for (int jj = 0; jj < NT / 2; ++jj) {
        const int p = p0 + wpx * 8 * NT + 8 * (2 * jj + (lane >> 4)) + (lane & 7);
        int at = 0;
        if (p < pend) {
            const int oh = p / OW;
            at = (oh - oh0) * sh * cols + (p - oh * OW) * sw;
        }
        bo[jj] = tcc::smem_addr(halo + at * ldc + 8 * ((lane >> 3) & 1));
    }
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
    // The share walks its steps with (s, cs) and the shared-memory byte offset tb of step
    // (r, s, cs), 2((r·cols + s)·ldc + 16cs), moved on by additions.
    int cs, s;
    unsigned tb;
    {
        const int tap = f / csteps, r = tap / S;
        cs = f - tap * csteps, s = tap - r * S;
        tb = 2u * ((r * cols + s) * ldc + 16 * cs);
    }
    const unsigned next_s = 2u * (ldc - 16 * csteps), next_r = 2u * (cols - S) * ldc;
    // One group: the next group's A into nx, then this group's B and products.  Groups
    // alternate between two A buffers (a copy from one to the other cost 4·MT moves a step).
    auto group = [&](const unsigned (&a)[U][MT][4], unsigned (&nx)[U][MT][4]) {
        load_a(nx, f + U);
        unsigned b[U][NT][2];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const unsigned tap_b = f + u < f_end ? tb : 0u;
#pragma unroll
            for (int jj = 0; jj < NT / 2; ++jj) {
                unsigned q[4];
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                             : "=r"(q[0]), "=r"(q[1]), "=r"(q[2]), "=r"(q[3])
                             : "r"(bo[jj] + tap_b));
                b[u][2 * jj][0] = q[0];
                b[u][2 * jj][1] = q[1];
                b[u][2 * jj + 1][0] = q[2];
                b[u][2 * jj + 1][1] = q[3];
            }
            tb += 32u;
            if (++cs == csteps) {
                cs = 0, tb += next_s;
                if (++s == S) s = 0, tb += next_r;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    tcc::mma16816<BF>(acc[i][j], a[u][i], b[u][j][0], b[u][j][1]);
        f += U;
    };
    unsigned an2[U][MT][4];
    while (f < f_end) {
        group(an, an2);
        if (f >= f_end) break;
        group(an2, an);
    }
    __syncthreads();   // the partial tiles reuse the copy's shared memory
    F::template store_share<false>(red, acc, share, wc, wpx, lane);
    __syncthreads();
    const int col = threadIdx.x % F::PX, p = p0 + col;
    if (p >= pend) return;
    const __half* res = residual == nullptr ? nullptr : residual + (size_t)n * Cout * OHW + p;
    F::template epilogue_nchw<BF>(red, col, blockIdx.y * F::CO, Cout, OHW,
                                  y + (size_t)n * ldy * OHW + p, res, bias, relu);
}

// What CI's nvcc build type-checks: tensorconv.ops.tensorcore_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TC_CONV(...) template __global__ void tc_conv<__VA_ARGS__>(const __half*, \
    const __half*, const int2*, const float*, const __half*, __half*, float*, int*, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, unsigned long long, \
    int);
TC_I_TC_CONV(128, 64, 32, 32, 0, 0, 2, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 1, 2, 1)
TC_I_TC_CONV(128, 64, 32, 32, 0, 2, 2, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 2, 3, 1)
TC_I_TC_CONV(128, 64, 32, 32, 0, 2, 4, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 3, 2, 1)
TC_I_TC_CONV(128, 64, 32, 32, 0, 3, 3, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 3, 4, 1)
TC_I_TC_CONV(128, 64, 32, 32, 0, 3, 6, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 3, 8, 1)
TC_I_TC_CONV(128, 64, 32, 32, 0, 6, 3, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 6, 4, 1)
TC_I_TC_CONV(128, 64, 32, 32, 0, 7, 3, 1) TC_I_TC_CONV(128, 64, 32, 32, 0, 7, 4, 1)
TC_I_TC_CONV(128, 64, 64, 32, 0, 2, 2, 1) TC_I_TC_CONV(128, 64, 64, 32, 0, 3, 2, 1)
TC_I_TC_CONV(128, 64, 64, 32, 0, 3, 3, 1) TC_I_TC_CONV(128, 64, 64, 32, 0, 3, 4, 1)
TC_I_TC_CONV(128, 64, 64, 32, 0, 3, 6, 1) TC_I_TC_CONV(128, 64, 64, 32, 0, 3, 8, 1)
TC_I_TC_CONV(128, 64, 64, 32, 0, 7, 3, 1) TC_I_TC_CONV(128, 64, 64, 32, 0, 7, 4, 1)
TC_I_TC_CONV(128, 64, 64, 32, 1, 2, 2, 1) TC_I_TC_CONV(128, 64, 64, 32, 1, 3, 2, 1)
TC_I_TC_CONV(128, 64, 64, 32, 2, 2, 2, 1) TC_I_TC_CONV(128, 64, 64, 32, 2, 3, 2, 1)
TC_I_TC_CONV(128, 64, 64, 32, 3, 2, 2, 1) TC_I_TC_CONV(128, 64, 64, 32, 3, 3, 2, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 0, 2, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 0, 3, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 1, 2, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 1, 3, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 2, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 3, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 3, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 3, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 3, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 4, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 4, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 4, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 4, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 6, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 6, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 6, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 6, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 2, 8, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 2, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 3, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 3, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 3, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 3, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 4, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 4, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 4, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 4, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 6, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 6, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 6, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 6, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 3, 8, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 4, 3, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 5, 3, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 6, 3, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 6, 3, 2)
TC_I_TC_CONV(16, 64, 16, 16, 0, 6, 3, 4) TC_I_TC_CONV(16, 64, 16, 16, 0, 6, 3, 8)
TC_I_TC_CONV(16, 64, 16, 16, 0, 6, 4, 1) TC_I_TC_CONV(16, 64, 16, 16, 0, 7, 3, 1)
TC_I_TC_CONV(16, 64, 16, 16, 0, 7, 3, 2) TC_I_TC_CONV(16, 64, 16, 16, 0, 7, 3, 4)
TC_I_TC_CONV(16, 64, 16, 16, 0, 7, 3, 8) TC_I_TC_CONV(16, 64, 16, 16, 0, 7, 4, 1)
TC_I_TC_CONV(16, 64, 16, 16, 1, 0, 2, 1) TC_I_TC_CONV(16, 64, 16, 16, 1, 1, 2, 1)
TC_I_TC_CONV(16, 64, 16, 16, 1, 2, 2, 1) TC_I_TC_CONV(16, 64, 16, 16, 1, 3, 2, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 0, 2, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 0, 3, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 0, 4, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 1, 2, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 1, 3, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 1, 4, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 2, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 3, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 3, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 3, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 3, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 4, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 4, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 4, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 4, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 6, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 6, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 6, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 6, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 2, 8, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 2, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 3, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 3, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 3, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 3, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 4, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 4, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 4, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 4, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 6, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 6, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 6, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 6, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 3, 8, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 4, 3, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 4, 4, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 5, 3, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 5, 4, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 6, 3, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 6, 3, 2)
TC_I_TC_CONV(32, 32, 16, 16, 0, 6, 3, 4) TC_I_TC_CONV(32, 32, 16, 16, 0, 6, 3, 8)
TC_I_TC_CONV(32, 32, 16, 16, 0, 6, 4, 1) TC_I_TC_CONV(32, 32, 16, 16, 0, 7, 3, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 7, 3, 2) TC_I_TC_CONV(32, 32, 16, 16, 0, 7, 3, 4)
TC_I_TC_CONV(32, 32, 16, 16, 0, 7, 3, 8) TC_I_TC_CONV(32, 32, 16, 16, 0, 7, 4, 1)
TC_I_TC_CONV(32, 32, 16, 16, 1, 0, 2, 1) TC_I_TC_CONV(32, 32, 16, 16, 1, 1, 2, 1)
TC_I_TC_CONV(32, 32, 16, 16, 1, 2, 2, 1) TC_I_TC_CONV(32, 32, 16, 16, 1, 3, 2, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 0, 2, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 0, 3, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 0, 4, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 1, 2, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 1, 3, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 1, 4, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 2, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 3, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 3, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 3, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 3, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 4, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 4, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 4, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 4, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 6, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 6, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 6, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 6, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 2, 8, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 2, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 3, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 3, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 3, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 3, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 4, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 4, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 4, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 4, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 6, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 6, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 6, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 6, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 3, 8, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 4, 3, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 4, 4, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 5, 3, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 5, 4, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 6, 3, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 6, 3, 2)
TC_I_TC_CONV(32, 64, 16, 16, 0, 6, 3, 4) TC_I_TC_CONV(32, 64, 16, 16, 0, 6, 3, 8)
TC_I_TC_CONV(32, 64, 16, 16, 0, 6, 4, 1) TC_I_TC_CONV(32, 64, 16, 16, 0, 7, 3, 1)
TC_I_TC_CONV(32, 64, 16, 16, 0, 7, 3, 2) TC_I_TC_CONV(32, 64, 16, 16, 0, 7, 3, 4)
TC_I_TC_CONV(32, 64, 16, 16, 0, 7, 3, 8) TC_I_TC_CONV(32, 64, 16, 16, 0, 7, 4, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 0, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 0, 1, 2, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 3, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 3, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 3, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 3, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 4, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 4, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 4, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 4, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 6, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 6, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 6, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 6, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 2, 8, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 3, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 3, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 3, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 3, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 4, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 4, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 4, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 4, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 6, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 6, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 6, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 6, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 3, 8, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 6, 3, 1) TC_I_TC_CONV(32, 64, 16, 32, 0, 6, 3, 2)
TC_I_TC_CONV(32, 64, 16, 32, 0, 6, 3, 4) TC_I_TC_CONV(32, 64, 16, 32, 0, 6, 3, 8)
TC_I_TC_CONV(32, 64, 16, 32, 0, 6, 4, 1) TC_I_TC_CONV(32, 64, 16, 32, 0, 7, 3, 1)
TC_I_TC_CONV(32, 64, 16, 32, 0, 7, 3, 2) TC_I_TC_CONV(32, 64, 16, 32, 0, 7, 3, 4)
TC_I_TC_CONV(32, 64, 16, 32, 0, 7, 3, 8) TC_I_TC_CONV(32, 64, 16, 32, 0, 7, 4, 1)
TC_I_TC_CONV(32, 64, 16, 32, 1, 0, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 1, 1, 2, 1)
TC_I_TC_CONV(32, 64, 16, 32, 1, 2, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 1, 3, 2, 1)
TC_I_TC_CONV(32, 64, 16, 32, 3, 0, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 3, 1, 2, 1)
TC_I_TC_CONV(32, 64, 16, 32, 3, 2, 2, 1) TC_I_TC_CONV(32, 64, 16, 32, 3, 3, 2, 1)
TC_I_TC_CONV(64, 128, 32, 64, 0, 2, 2, 1) TC_I_TC_CONV(64, 128, 32, 64, 0, 2, 3, 1)
TC_I_TC_CONV(64, 128, 32, 64, 0, 2, 4, 1) TC_I_TC_CONV(64, 128, 32, 64, 0, 3, 2, 1)
TC_I_TC_CONV(64, 128, 32, 64, 0, 3, 3, 1) TC_I_TC_CONV(64, 128, 32, 64, 0, 3, 4, 1)
TC_I_TC_CONV(64, 128, 32, 64, 0, 3, 6, 1) TC_I_TC_CONV(64, 128, 32, 64, 0, 3, 8, 1)
TC_I_TC_CONV(64, 128, 32, 64, 0, 6, 3, 1) TC_I_TC_CONV(64, 128, 32, 64, 0, 6, 4, 1)
TC_I_TC_CONV(64, 128, 32, 64, 0, 7, 3, 1) TC_I_TC_CONV(64, 128, 32, 64, 0, 7, 4, 1)
TC_I_TC_CONV(64, 128, 32, 64, 1, 2, 2, 1) TC_I_TC_CONV(64, 128, 32, 64, 1, 3, 2, 1)
TC_I_TC_CONV(64, 128, 32, 64, 2, 2, 2, 1) TC_I_TC_CONV(64, 128, 32, 64, 2, 3, 2, 1)
TC_I_TC_CONV(64, 128, 32, 64, 3, 2, 2, 1) TC_I_TC_CONV(64, 128, 32, 64, 3, 3, 2, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 0, 2, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 0, 3, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 0, 4, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 1, 2, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 1, 3, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 1, 4, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 2, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 3, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 3, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 3, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 3, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 4, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 4, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 4, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 4, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 6, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 6, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 6, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 6, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 2, 8, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 2, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 3, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 3, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 3, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 3, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 4, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 4, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 4, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 4, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 6, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 6, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 6, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 6, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 3, 8, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 4, 3, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 4, 4, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 5, 3, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 5, 4, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 6, 3, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 6, 3, 2)
TC_I_TC_CONV(64, 32, 16, 16, 0, 6, 3, 4) TC_I_TC_CONV(64, 32, 16, 16, 0, 6, 3, 8)
TC_I_TC_CONV(64, 32, 16, 16, 0, 6, 4, 1) TC_I_TC_CONV(64, 32, 16, 16, 0, 7, 3, 1)
TC_I_TC_CONV(64, 32, 16, 16, 0, 7, 3, 2) TC_I_TC_CONV(64, 32, 16, 16, 0, 7, 3, 4)
TC_I_TC_CONV(64, 32, 16, 16, 0, 7, 3, 8) TC_I_TC_CONV(64, 32, 16, 16, 0, 7, 4, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 0, 2, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 1, 2, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 2, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 3, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 3, 2) TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 3, 4)
TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 3, 8) TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 4, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 4, 2) TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 4, 4)
TC_I_TC_CONV(64, 32, 32, 16, 0, 2, 4, 8) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 2, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 3, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 3, 2)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 3, 4) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 3, 8)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 4, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 4, 2)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 4, 4) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 4, 8)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 6, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 6, 2)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 6, 4) TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 6, 8)
TC_I_TC_CONV(64, 32, 32, 16, 0, 3, 8, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 6, 3, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 6, 3, 2) TC_I_TC_CONV(64, 32, 32, 16, 0, 6, 3, 4)
TC_I_TC_CONV(64, 32, 32, 16, 0, 6, 3, 8) TC_I_TC_CONV(64, 32, 32, 16, 0, 6, 4, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 7, 3, 1) TC_I_TC_CONV(64, 32, 32, 16, 0, 7, 3, 2)
TC_I_TC_CONV(64, 32, 32, 16, 0, 7, 3, 4) TC_I_TC_CONV(64, 32, 32, 16, 0, 7, 3, 8)
TC_I_TC_CONV(64, 32, 32, 16, 0, 7, 4, 1) TC_I_TC_CONV(64, 32, 32, 16, 1, 0, 2, 1)
TC_I_TC_CONV(64, 32, 32, 16, 1, 1, 2, 1) TC_I_TC_CONV(64, 32, 32, 16, 1, 2, 2, 1)
TC_I_TC_CONV(64, 32, 32, 16, 1, 3, 2, 1) TC_I_TC_CONV(64, 32, 32, 16, 2, 0, 2, 1)
TC_I_TC_CONV(64, 32, 32, 16, 2, 1, 2, 1) TC_I_TC_CONV(64, 32, 32, 16, 2, 2, 2, 1)
TC_I_TC_CONV(64, 32, 32, 16, 2, 3, 2, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 0, 2, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 0, 3, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 0, 4, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 1, 2, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 1, 3, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 1, 4, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 2, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 3, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 3, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 3, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 3, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 4, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 4, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 4, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 4, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 6, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 6, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 6, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 6, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 2, 8, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 2, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 3, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 3, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 3, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 3, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 4, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 4, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 4, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 4, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 6, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 6, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 6, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 6, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 3, 8, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 4, 3, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 4, 4, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 5, 3, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 5, 4, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 6, 3, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 6, 3, 2) TC_I_TC_CONV(64, 64, 32, 16, 0, 6, 3, 4)
TC_I_TC_CONV(64, 64, 32, 16, 0, 6, 3, 8) TC_I_TC_CONV(64, 64, 32, 16, 0, 6, 4, 1)
TC_I_TC_CONV(64, 64, 32, 16, 0, 7, 3, 1) TC_I_TC_CONV(64, 64, 32, 16, 0, 7, 3, 2)
TC_I_TC_CONV(64, 64, 32, 16, 0, 7, 3, 4) TC_I_TC_CONV(64, 64, 32, 16, 0, 7, 3, 8)
TC_I_TC_CONV(64, 64, 32, 16, 0, 7, 4, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 0, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 1, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 3, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 3, 2)
TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 3, 4) TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 3, 8)
TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 4, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 4, 2)
TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 4, 4) TC_I_TC_CONV(64, 64, 32, 32, 0, 2, 4, 8)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 3, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 3, 2) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 3, 4)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 3, 8) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 4, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 4, 2) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 4, 4)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 4, 8) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 6, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 6, 2) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 6, 4)
TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 6, 8) TC_I_TC_CONV(64, 64, 32, 32, 0, 3, 8, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 6, 3, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 6, 3, 2)
TC_I_TC_CONV(64, 64, 32, 32, 0, 6, 3, 4) TC_I_TC_CONV(64, 64, 32, 32, 0, 6, 3, 8)
TC_I_TC_CONV(64, 64, 32, 32, 0, 6, 4, 1) TC_I_TC_CONV(64, 64, 32, 32, 0, 7, 3, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 7, 3, 2) TC_I_TC_CONV(64, 64, 32, 32, 0, 7, 3, 4)
TC_I_TC_CONV(64, 64, 32, 32, 0, 7, 3, 8) TC_I_TC_CONV(64, 64, 32, 32, 0, 7, 4, 1)
TC_I_TC_CONV(64, 64, 32, 32, 1, 0, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 1, 1, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 1, 2, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 1, 3, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 2, 0, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 2, 1, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 2, 2, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 2, 3, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 3, 0, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 3, 1, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 3, 2, 2, 1) TC_I_TC_CONV(64, 64, 32, 32, 3, 3, 2, 1)
#undef TC_I_TC_CONV
#define TC_I_TC_FRAG(...) template __global__ void tc_frag<__VA_ARGS__>(const __half*, \
    const __half*, const float*, const __half*, __half*, int, int, int, int, int, int, int, int, \
    int, int, int);
TC_I_TC_FRAG(1, 2, 2, 2, 1, 4, 0) TC_I_TC_FRAG(1, 2, 2, 2, 1, 4, 1)
TC_I_TC_FRAG(1, 2, 2, 2, 1, 4, 4) TC_I_TC_FRAG(1, 2, 2, 2, 1, 4, 5)
TC_I_TC_FRAG(1, 2, 2, 2, 2, 4, 0) TC_I_TC_FRAG(1, 2, 2, 2, 2, 4, 1)
TC_I_TC_FRAG(1, 2, 2, 2, 2, 4, 4) TC_I_TC_FRAG(1, 2, 2, 2, 2, 4, 5)
TC_I_TC_FRAG(1, 2, 2, 2, 4, 4, 0) TC_I_TC_FRAG(1, 2, 2, 2, 4, 4, 1)
TC_I_TC_FRAG(1, 2, 2, 2, 4, 4, 4) TC_I_TC_FRAG(1, 2, 2, 2, 4, 4, 5)
TC_I_TC_FRAG(1, 2, 2, 2, 8, 4, 0) TC_I_TC_FRAG(1, 2, 2, 2, 8, 4, 1)
TC_I_TC_FRAG(1, 2, 2, 2, 8, 4, 4) TC_I_TC_FRAG(1, 2, 2, 2, 8, 4, 5)
TC_I_TC_FRAG(2, 1, 1, 2, 1, 4, 0) TC_I_TC_FRAG(2, 1, 1, 2, 1, 4, 1)
TC_I_TC_FRAG(2, 1, 1, 2, 1, 4, 4) TC_I_TC_FRAG(2, 1, 1, 2, 1, 4, 5)
TC_I_TC_FRAG(2, 1, 1, 2, 2, 4, 0) TC_I_TC_FRAG(2, 1, 1, 2, 2, 4, 1)
TC_I_TC_FRAG(2, 1, 1, 2, 2, 4, 4) TC_I_TC_FRAG(2, 1, 1, 2, 2, 4, 5)
TC_I_TC_FRAG(2, 1, 1, 2, 4, 4, 0) TC_I_TC_FRAG(2, 1, 1, 2, 4, 4, 1)
TC_I_TC_FRAG(2, 1, 1, 2, 4, 4, 4) TC_I_TC_FRAG(2, 1, 1, 2, 4, 4, 5)
TC_I_TC_FRAG(2, 1, 1, 2, 8, 4, 0) TC_I_TC_FRAG(2, 1, 1, 2, 8, 4, 1)
TC_I_TC_FRAG(2, 1, 1, 2, 8, 4, 4) TC_I_TC_FRAG(2, 1, 1, 2, 8, 4, 5)
TC_I_TC_FRAG(2, 2, 1, 2, 1, 2, 0) TC_I_TC_FRAG(2, 2, 1, 2, 1, 2, 1)
TC_I_TC_FRAG(2, 2, 1, 2, 1, 2, 4) TC_I_TC_FRAG(2, 2, 1, 2, 1, 2, 5)
TC_I_TC_FRAG(2, 2, 1, 2, 2, 2, 0) TC_I_TC_FRAG(2, 2, 1, 2, 2, 2, 1)
TC_I_TC_FRAG(2, 2, 1, 2, 2, 2, 4) TC_I_TC_FRAG(2, 2, 1, 2, 2, 2, 5)
TC_I_TC_FRAG(2, 2, 1, 2, 4, 2, 0) TC_I_TC_FRAG(2, 2, 1, 2, 4, 2, 1)
TC_I_TC_FRAG(2, 2, 1, 2, 4, 2, 4) TC_I_TC_FRAG(2, 2, 1, 2, 4, 2, 5)
TC_I_TC_FRAG(2, 2, 1, 2, 8, 2, 0) TC_I_TC_FRAG(2, 2, 1, 2, 8, 2, 1)
TC_I_TC_FRAG(2, 2, 1, 2, 8, 2, 4) TC_I_TC_FRAG(2, 2, 1, 2, 8, 2, 5)
TC_I_TC_FRAG(2, 4, 1, 4, 1, 2, 0) TC_I_TC_FRAG(2, 4, 1, 4, 1, 2, 1)
TC_I_TC_FRAG(2, 4, 1, 4, 1, 2, 4) TC_I_TC_FRAG(2, 4, 1, 4, 1, 2, 5)
TC_I_TC_FRAG(2, 4, 1, 4, 2, 2, 0) TC_I_TC_FRAG(2, 4, 1, 4, 2, 2, 1)
TC_I_TC_FRAG(2, 4, 1, 4, 2, 2, 4) TC_I_TC_FRAG(2, 4, 1, 4, 2, 2, 5)
TC_I_TC_FRAG(2, 4, 1, 4, 4, 2, 0) TC_I_TC_FRAG(2, 4, 1, 4, 4, 2, 1)
TC_I_TC_FRAG(2, 4, 1, 4, 4, 2, 4) TC_I_TC_FRAG(2, 4, 1, 4, 4, 2, 5)
TC_I_TC_FRAG(2, 4, 2, 2, 1, 2, 0) TC_I_TC_FRAG(2, 4, 2, 2, 1, 2, 1)
TC_I_TC_FRAG(2, 4, 2, 2, 1, 2, 4) TC_I_TC_FRAG(2, 4, 2, 2, 1, 2, 5)
TC_I_TC_FRAG(2, 4, 2, 2, 2, 2, 0) TC_I_TC_FRAG(2, 4, 2, 2, 2, 2, 1)
TC_I_TC_FRAG(2, 4, 2, 2, 2, 2, 4) TC_I_TC_FRAG(2, 4, 2, 2, 2, 2, 5)
TC_I_TC_FRAG(2, 4, 2, 2, 4, 2, 0) TC_I_TC_FRAG(2, 4, 2, 2, 4, 2, 1)
TC_I_TC_FRAG(2, 4, 2, 2, 4, 2, 4) TC_I_TC_FRAG(2, 4, 2, 2, 4, 2, 5)
#undef TC_I_TC_FRAG
#define TC_I_TC_HALO(...) template __global__ void tc_halo<__VA_ARGS__>(const __half*, \
    const __half*, const float*, const __half*, __half*, int, int, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int);
TC_I_TC_HALO(1, 2, 1, 1, 1, 4, 0) TC_I_TC_HALO(1, 2, 1, 1, 1, 4, 4)
TC_I_TC_HALO(1, 2, 1, 1, 2, 4, 0) TC_I_TC_HALO(1, 2, 1, 1, 2, 4, 4)
TC_I_TC_HALO(1, 2, 1, 1, 4, 4, 0) TC_I_TC_HALO(1, 2, 1, 1, 4, 4, 4)
TC_I_TC_HALO(1, 2, 1, 1, 8, 4, 0) TC_I_TC_HALO(1, 2, 1, 1, 8, 4, 4)
TC_I_TC_HALO(1, 2, 1, 2, 1, 4, 0) TC_I_TC_HALO(1, 2, 1, 2, 1, 4, 4)
TC_I_TC_HALO(1, 2, 1, 2, 2, 4, 0) TC_I_TC_HALO(1, 2, 1, 2, 2, 4, 4)
TC_I_TC_HALO(1, 2, 1, 2, 4, 4, 0) TC_I_TC_HALO(1, 2, 1, 2, 4, 4, 4)
TC_I_TC_HALO(1, 2, 1, 2, 8, 4, 0) TC_I_TC_HALO(1, 2, 1, 2, 8, 4, 4)
TC_I_TC_HALO(1, 2, 2, 1, 1, 4, 0) TC_I_TC_HALO(1, 2, 2, 1, 1, 4, 4)
TC_I_TC_HALO(1, 2, 2, 1, 2, 4, 0) TC_I_TC_HALO(1, 2, 2, 1, 2, 4, 4)
TC_I_TC_HALO(1, 2, 2, 1, 4, 4, 0) TC_I_TC_HALO(1, 2, 2, 1, 4, 4, 4)
TC_I_TC_HALO(1, 2, 2, 1, 8, 4, 0) TC_I_TC_HALO(1, 2, 2, 1, 8, 4, 4)
TC_I_TC_HALO(1, 2, 2, 2, 1, 4, 0) TC_I_TC_HALO(1, 2, 2, 2, 1, 4, 4)
TC_I_TC_HALO(1, 2, 2, 2, 2, 4, 0) TC_I_TC_HALO(1, 2, 2, 2, 2, 4, 4)
TC_I_TC_HALO(1, 2, 2, 2, 4, 4, 0) TC_I_TC_HALO(1, 2, 2, 2, 4, 4, 4)
TC_I_TC_HALO(1, 4, 2, 2, 1, 2, 0) TC_I_TC_HALO(1, 4, 2, 2, 1, 2, 4)
TC_I_TC_HALO(1, 4, 2, 2, 2, 2, 0) TC_I_TC_HALO(1, 4, 2, 2, 2, 2, 4)
TC_I_TC_HALO(1, 4, 2, 2, 4, 2, 0) TC_I_TC_HALO(1, 4, 2, 2, 4, 2, 4)
TC_I_TC_HALO(2, 2, 2, 1, 1, 2, 0) TC_I_TC_HALO(2, 2, 2, 1, 1, 2, 4)
TC_I_TC_HALO(2, 2, 2, 1, 2, 2, 0) TC_I_TC_HALO(2, 2, 2, 1, 2, 2, 4)
TC_I_TC_HALO(2, 2, 2, 1, 4, 2, 0) TC_I_TC_HALO(2, 2, 2, 1, 4, 2, 4)
TC_I_TC_HALO(2, 2, 2, 1, 8, 2, 0) TC_I_TC_HALO(2, 2, 2, 1, 8, 2, 4)
TC_I_TC_HALO(2, 2, 2, 2, 1, 2, 0) TC_I_TC_HALO(2, 2, 2, 2, 1, 2, 4)
TC_I_TC_HALO(2, 2, 2, 2, 2, 2, 0) TC_I_TC_HALO(2, 2, 2, 2, 2, 2, 4)
TC_I_TC_HALO(2, 2, 2, 2, 4, 2, 0) TC_I_TC_HALO(2, 2, 2, 2, 4, 2, 4)
TC_I_TC_HALO(2, 4, 2, 2, 1, 2, 0) TC_I_TC_HALO(2, 4, 2, 2, 1, 2, 4)
TC_I_TC_HALO(2, 4, 2, 2, 2, 2, 0) TC_I_TC_HALO(2, 4, 2, 2, 2, 2, 4)
TC_I_TC_HALO(2, 4, 2, 2, 4, 2, 0) TC_I_TC_HALO(2, 4, 2, 2, 4, 2, 4)
TC_I_TC_HALO(2, 4, 2, 4, 1, 2, 0) TC_I_TC_HALO(2, 4, 2, 4, 1, 2, 4)
TC_I_TC_HALO(2, 4, 2, 4, 2, 2, 0) TC_I_TC_HALO(2, 4, 2, 4, 2, 2, 4)
#undef TC_I_TC_HALO
#endif
