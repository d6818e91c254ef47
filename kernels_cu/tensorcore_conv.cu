// Tensor-core convolution for small batches (Sun et al., "Efficient Tensor Cores support in
// TVM for Low-Latency Deep Learning"): an implicit-im2col GEMM, fp16 in, fp32 accumulate,
// fp16 out.
//
// GEMM view: M = N·OH·OW output pixels, N = Cout, K = C·R·S.  A (M x K) is the im2col of the
// input, never built: each element is read from x where it lies (zero outside the image);
// B (K x Cout) is the packed weights w_p[Cout][K], K contiguous, in the input's order:
// NCHW k = (c, r, s), NHWC k = (r, s, c), so that consecutive k are consecutive addresses
// of x in NHWC.  Ragged M, Cout and K are predicated, never padded on the host.
//
// tc_conv<BM, BN, WM, WN, PATH, NHWC>: a block owns BM pixels x BN output channels, each
// warp WM x WN of them.  K streams through shared memory BK = 32 at a time, both operands
// K-contiguous, rows padded by 8 halves (a warp's fragment loads hit distinct banks); the
// next chunk's global loads are issued into registers before the current chunk's products
// (a two-stage register pipeline).  PATH picks the instructions: 0 = mma.sync m16n8k16
// (fragments loaded as 32-bit pairs), 1-3 = WMMA with the paper's fragment shapes
// 16x16x16, 32x8x16 and 8x32x16.  Either way the accumulators go through shared memory
// (over the operand tiles) to one epilogue.
//
// Split-K inside the launch: blockIdx.z takes a share of K; each share writes its fp32
// partial tile to a workspace, and the last share of a tile to arrive (an atomic counter
// per tile) adds the shares in a fixed order and runs the epilogue (bias, residual, ReLU,
// fp16 store); it resets the counter, so the launch replays from a CUDA graph.
//
// Launch geometry, packing and checks belong to tensorconv/ops/tensorcore_conv.py.
#include <cuda_fp16.h>
#include <mma.h>
#include "tc_common.cuh"

namespace tcc {
constexpr int BK = 32, PAD = 8, LDS = BK + PAD;   // shared row: 40 halves = 80 bytes

// The sizes and buffers of one launch.
struct Conv {
    const __half* x;         // (N, C, H, W) or (N, H, W, C)
    const __half* wp;        // (Cout, K), K in the layout's order
    const float* bias;       // (Cout,) or nullptr
    const __half* residual;  // like y, or nullptr
    __half* y;               // (N, Cout, OH, OW) or (N, OH, OW, Cout)
    float* partial;          // (splits, M, Cout) when split
    int* counters;           // one per output tile, zero between launches
    int N, C, H, W, Cout, R, S, OH, OW, sh, sw, ph, pw, relu;
    int M, K, OHW, RS;
};

// Stages a BK-wide chunk of A (implicit im2col) and B into registers, then shared memory.
// A: NCHW keeps one pixel per thread (coalesced along the image row) and walks k; NHWC
// keeps one k lane per thread (coalesced along channels) and walks pixels.  B: one k lane
// per thread, walking output channels.
template <int BM, int BN, int T, int NHWC>
struct Stager {
    static constexpr int AL = BM * BK / T, BL = BN * BK / T;
    static_assert(BM * BK % T == 0 && BN * BK % T == 0, "staging shapes");
    static_assert(T % BK == 0 && (NHWC || T % BM == 0), "a staging thread keeps one lane");
    int a_fix, a_start, a_step, b_k, b_start, m0, n0, k_end;
    int px_n = 0, px_ih = 0, px_iw = 0;
    bool px_ok = false;
    __half areg[AL], breg[BL];

    __device__ Stager(const Conv& cv, int tid, int m0_, int n0_, int k_end_)
        : a_fix(NHWC ? tid % BK : tid % BM), a_start(NHWC ? tid / BK : tid / BM),
          a_step(NHWC ? T / BK : T / BM), b_k(tid % BK), b_start(tid / BK), m0(m0_),
          n0(n0_), k_end(k_end_) {
        if (!NHWC) {
            const int m = m0 + a_fix;
            px_ok = m < cv.M;
            if (px_ok) {
                px_n = m / cv.OHW;
                const int p = m - px_n * cv.OHW, oh = p / cv.OW;
                px_ih = oh * cv.sh - cv.ph;
                px_iw = (p - oh * cv.OW) * cv.sw - cv.pw;
            }
        }
    }

    __device__ void load(const Conv& cv, int k0) {
#pragma unroll
        for (int l = 0; l < AL; ++l) {
            const int v = a_start + l * a_step;          // the walked index
            __half val = __float2half(0.f);
            if (!NHWC) {
                const int k = k0 + v;
                if (px_ok && k < k_end) {
                    const int c = k / cv.RS, rs = k - c * cv.RS, r = rs / cv.S, s = rs - r * cv.S;
                    const int ih = px_ih + r, iw = px_iw + s;
                    if (ih >= 0 && ih < cv.H && iw >= 0 && iw < cv.W)
                        val = cv.x[(((size_t)px_n * cv.C + c) * cv.H + ih) * cv.W + iw];
                }
            } else {
                const int k = k0 + a_fix, m = m0 + v;
                if (m < cv.M && k < k_end) {
                    const int rs = k / cv.C, c = k - rs * cv.C, r = rs / cv.S, s = rs - r * cv.S;
                    const int n = m / cv.OHW, p = m - n * cv.OHW, oh = p / cv.OW;
                    const int ih = oh * cv.sh - cv.ph + r, iw = (p - oh * cv.OW) * cv.sw - cv.pw + s;
                    if (ih >= 0 && ih < cv.H && iw >= 0 && iw < cv.W)
                        val = cv.x[(((size_t)n * cv.H + ih) * cv.W + iw) * cv.C + c];
                }
            }
            areg[l] = val;
        }
#pragma unroll
        for (int l = 0; l < BL; ++l) {
            const int nn = n0 + b_start + l * (T / BK), k = k0 + b_k;
            breg[l] = nn < cv.Cout && k < k_end ? cv.wp[(size_t)nn * cv.K + k]
                                                 : __float2half(0.f);
        }
    }

    __device__ void store(__half (*As)[LDS], __half (*Bs)[LDS]) const {
#pragma unroll
        for (int l = 0; l < AL; ++l) {
            const int v = a_start + l * a_step;
            if (!NHWC) As[a_fix][v] = areg[l];
            else As[v][a_fix] = areg[l];
        }
#pragma unroll
        for (int l = 0; l < BL; ++l) Bs[b_start + l * (T / BK)][b_k] = breg[l];
    }
};

__device__ __forceinline__ unsigned pair(const __half* p) {
    return *reinterpret_cast<const unsigned*>(p);
}

// mma.sync m16n8k16: a warp's WM x WN accumulators in registers.
template <int WM, int WN>
struct MmaPath {
    static constexpr int MI = WM / 16, NI = WN / 8;
    float acc[MI][NI][4] = {};

    __device__ void step(const __half (*As)[LDS], const __half (*Bs)[LDS], int wm0, int wn0,
                         int lane) {
        const int g = lane >> 2, tg = lane & 3;
#pragma unroll
        for (int kb = 0; kb < BK; kb += 16) {
            unsigned a[MI][4], b[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int row = wm0 + i * 16 + g, col = kb + tg * 2;
                a[i][0] = pair(&As[row][col]);
                a[i][1] = pair(&As[row + 8][col]);
                a[i][2] = pair(&As[row][col + 8]);
                a[i][3] = pair(&As[row + 8][col + 8]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int row = wn0 + j * 8 + g, col = kb + tg * 2;
                b[j][0] = pair(&Bs[row][col]);
                b[j][1] = pair(&Bs[row][col + 8]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]),
                          "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]),
                          "r"(b[j][0]), "r"(b[j][1]));
        }
    }

    template <int LDC>
    __device__ void dump(float (*Cs)[LDC], int wm0, int wn0, int lane) const {
        const int g = lane >> 2, tg = lane & 3;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    Cs[wm0 + i * 16 + g + (e >> 1) * 8][wn0 + j * 8 + tg * 2 + (e & 1)] =
                        acc[i][j][e];
    }
};

// WMMA with an FM x FN x 16 fragment shape (the paper's three).
template <int WM, int WN, int FM, int FN>
struct WmmaPath {
    static constexpr int MI = WM / FM, NI = WN / FN;
    static_assert(WM % FM == 0 && WN % FN == 0, "a warp tile of whole fragments");
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, FM, FN, 16, float> acc[MI][NI];

    __device__ WmmaPath() {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.f);
    }

    __device__ void step(const __half (*As)[LDS], const __half (*Bs)[LDS], int wm0, int wn0,
                         int) {
        using namespace nvcuda;
#pragma unroll
        for (int kb = 0; kb < BK; kb += 16) {
            wmma::fragment<wmma::matrix_a, FM, FN, 16, __half, wmma::row_major> a[MI];
            wmma::fragment<wmma::matrix_b, FM, FN, 16, __half, wmma::col_major> b[NI];
#pragma unroll
            for (int i = 0; i < MI; ++i) wmma::load_matrix_sync(a[i], &As[wm0 + i * FM][kb], LDS);
#pragma unroll
            for (int j = 0; j < NI; ++j) wmma::load_matrix_sync(b[j], &Bs[wn0 + j * FN][kb], LDS);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
    }

    template <int LDC>
    __device__ void dump(float (*Cs)[LDC], int wm0, int wn0, int) const {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
                nvcuda::wmma::store_matrix_sync(&Cs[wm0 + i * FM][wn0 + j * FN], acc[i][j], LDC,
                                                nvcuda::wmma::mem_row_major);
    }
};

template <int WM, int WN, int PATH> struct PathOf;
template <int WM, int WN> struct PathOf<WM, WN, 0> { using type = MmaPath<WM, WN>; };
template <int WM, int WN> struct PathOf<WM, WN, 1> { using type = WmmaPath<WM, WN, 16, 16>; };
template <int WM, int WN> struct PathOf<WM, WN, 2> { using type = WmmaPath<WM, WN, 32, 8>; };
template <int WM, int WN> struct PathOf<WM, WN, 3> { using type = WmmaPath<WM, WN, 8, 32>; };
}  // namespace tcc

template <int BM, int BN, int WM, int WN, int PATH, int NHWC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) tc_conv(
    const __half* __restrict__ x, const __half* __restrict__ wp, const float* __restrict__ bias,
    const __half* __restrict__ residual, __half* __restrict__ y, float* __restrict__ partial,
    int* __restrict__ counters, int N, int C, int H, int W, int Cout, int R, int S, int OH,
    int OW, int sh, int sw, int ph, int pw, int k_per_split, int relu)
{
    tc::wait_prior_grids();
    using namespace tcc;
    constexpr int WARPS_M = BM / WM, T = WARPS_M * (BN / WN) * 32, LDC = BN + 4;
    constexpr int AB_BYTES = (BM + BN) * LDS * 2, C_BYTES = BM * LDC * 4;
    __shared__ __align__(32) unsigned char smem[AB_BYTES > C_BYTES ? AB_BYTES : C_BYTES];
    __shared__ int s_last;
    auto As = reinterpret_cast<__half (*)[LDS]>(smem);
    auto Bs = reinterpret_cast<__half (*)[LDS]>(smem + BM * LDS * 2);
    auto Cs = reinterpret_cast<float (*)[LDC]>(smem);   // over As and Bs, after the K loop

    const Conv cv{x, wp, bias, residual, y, partial, counters, N, C, H, W, Cout, R, S, OH,
                  OW, sh, sw, ph, pw, relu, N * OH * OW, C * R * S, OH * OW, R * S};
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = min(cv.K, k_begin + k_per_split);

    Stager<BM, BN, T, NHWC> stage(cv, tid, m0, n0, k_end);
    typename PathOf<WM, WN, PATH>::type path;
    if (k_begin < k_end) stage.load(cv, k_begin);
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        stage.store(As, Bs);
        __syncthreads();
        if (k0 + BK < k_end) stage.load(cv, k0 + BK);   // flies over these products
        path.step(As, Bs, wm0, wn0, lane);
        __syncthreads();
    }
    path.dump(Cs, wm0, wn0, lane);
    __syncthreads();

    // Split-K: every share stores its partial; the last to arrive sums them in order.
    const int splits = gridDim.z;
    if (splits > 1) {
        for (int e = tid; e < BM * BN; e += T) {
            const int m = m0 + e / BN, n = n0 + e % BN;
            if (m < cv.M && n < Cout)
                partial[((size_t)blockIdx.z * cv.M + m) * Cout + n] = Cs[e / BN][e % BN];
        }
        __threadfence();
        __syncthreads();
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        if (tid == 0) s_last = atomicAdd(&counters[tile], 1) == splits - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        for (int e = tid; e < BM * BN; e += T) {
            const int m = m0 + e / BN, n = n0 + e % BN;
            float v = 0.f;
            if (m < cv.M && n < Cout)
                for (int z = 0; z < splits; ++z)   // a fixed order: deterministic
                    v += __ldcg(&partial[((size_t)z * cv.M + m) * Cout + n]);
            Cs[e / BN][e % BN] = v;
        }
        if (tid == 0) counters[tile] = 0;      // ready for the next launch
        __syncthreads();
    }
    for (int e = tid; e < BM * BN; e += T) {   // consecutive threads: consecutive addresses
        const int mm = NHWC ? e / BN : e % BM, nn = NHWC ? e % BN : e / BM;
        const int m = m0 + mm, n = n0 + nn;
        if (m >= cv.M || n >= Cout) continue;
        const int img = m / cv.OHW, p = m - img * cv.OHW;
        const size_t at = NHWC ? ((size_t)img * cv.OHW + p) * Cout + n
                               : ((size_t)img * Cout + n) * cv.OHW + p;
        float v = Cs[mm][nn];
        if (bias != nullptr) v += bias[n];
        if (residual != nullptr) v += __half2float(residual[at]);
        y[at] = __float2half(relu ? fmaxf(v, 0.f) : v);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.tensorcore_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TC_CONV(...) template __global__ void tc_conv<__VA_ARGS__>(const __half*, \
    const __half*, const float*, const __half*, __half*, float*, int*, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int);
TC_I_TC_CONV(128, 64, 64, 32, 0, 0) TC_I_TC_CONV(128, 64, 64, 32, 0, 1)
TC_I_TC_CONV(128, 64, 64, 32, 1, 0) TC_I_TC_CONV(128, 64, 64, 32, 1, 1)
TC_I_TC_CONV(128, 64, 64, 32, 2, 0) TC_I_TC_CONV(128, 64, 64, 32, 2, 1)
TC_I_TC_CONV(128, 64, 64, 32, 3, 0) TC_I_TC_CONV(128, 64, 64, 32, 3, 1)
TC_I_TC_CONV(32, 32, 16, 16, 0, 0) TC_I_TC_CONV(32, 32, 16, 16, 0, 1)
TC_I_TC_CONV(32, 32, 16, 16, 1, 0) TC_I_TC_CONV(32, 32, 16, 16, 1, 1)
TC_I_TC_CONV(64, 32, 32, 16, 0, 0) TC_I_TC_CONV(64, 32, 32, 16, 0, 1)
TC_I_TC_CONV(64, 32, 32, 16, 1, 0) TC_I_TC_CONV(64, 32, 32, 16, 1, 1)
TC_I_TC_CONV(64, 32, 32, 16, 2, 0) TC_I_TC_CONV(64, 32, 32, 16, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0, 0) TC_I_TC_CONV(64, 64, 32, 32, 0, 1)
TC_I_TC_CONV(64, 64, 32, 32, 1, 0) TC_I_TC_CONV(64, 64, 32, 32, 1, 1)
TC_I_TC_CONV(64, 64, 32, 32, 2, 0) TC_I_TC_CONV(64, 64, 32, 32, 2, 1)
TC_I_TC_CONV(64, 64, 32, 32, 3, 0) TC_I_TC_CONV(64, 64, 32, 32, 3, 1)
#undef TC_I_TC_CONV
#endif
