// Tensor-core convolution for small batches (Sun et al., "Efficient Tensor Cores support in
// TVM for Low-Latency Deep Learning"): an implicit-im2col GEMM, fp16 in, fp32 accumulate,
// fp16 out, on mma.sync m16n8k16.
//
// GEMM view: M = N·OH·OW output pixels, N = Cout, K = C·R·S.  A (M x K) is the im2col of the
// input, never built: each element is read from x where it lies (zero outside the image);
// B (K x Cout) is the packed weights w_p[Cout][K], K contiguous, in the input's order:
// NCHW k = (c, r, s), NHWC k = (r, s, c), so that consecutive k are consecutive addresses
// of x in NHWC.  Ragged M, Cout and K are predicated, never padded on the host.
//
// tc_conv<BM, BN, WM, WN, NHWC>: a block owns BM pixels x BN output channels, each warp
// WM x WN of them (WM/16 x WN/8 mma tiles).  K streams through shared memory BK = 32 at a
// time, both operands K-contiguous (a pair of halves is one 32-bit fragment register),
// rows padded by 8 halves so a warp's fragment loads hit 32 distinct banks.  The next
// chunk's global loads are issued into registers before the current chunk's mma (a
// two-stage register pipeline).
//
// Split-K inside the launch: blockIdx.z takes a share of K; each share writes its fp32
// partial tile to a workspace, and the last share of a tile to arrive (an atomic counter
// per tile) adds the shares in a fixed order and runs the epilogue (bias, residual, ReLU,
// fp16 store); it resets the counter, so the launch replays from a CUDA graph.
//
// Launch geometry, packing and checks belong to tensorconv/ops/tensorcore_conv.py.
#include <cuda_fp16.h>
#include "tc_common.cuh"

namespace tcc {
constexpr int BK = 32, PAD = 8, LDS = BK + PAD;   // shared row: 40 halves = 80 bytes

__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned pair(const __half* p) {
    return *reinterpret_cast<const unsigned*>(p);
}
}  // namespace tcc

template <int BM, int BN, int WM, int WN, int NHWC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) tc_conv(
    const __half* __restrict__ x,         // (N, C, H, W) or (N, H, W, C)
    const __half* __restrict__ wp,        // (Cout, K), K in the layout's order
    const float* __restrict__ bias,       // (Cout,) or nullptr
    const __half* __restrict__ residual,  // like y, or nullptr
    __half* __restrict__ y,               // (N, Cout, OH, OW) or (N, OH, OW, Cout)
    float* __restrict__ partial,          // (splits, M, Cout) when splits > 1
    int* __restrict__ counters,           // one per output tile, zero between launches
    int N, int C, int H, int W, int Cout, int R, int S, int OH, int OW,
    int sh, int sw, int ph, int pw, int k_per_split, int relu)
{
    tc::wait_prior_grids();
    using namespace tcc;
    constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, T = WARPS_M * WARPS_N * 32;
    constexpr int MI = WM / 16, NI = WN / 8;
    constexpr int AL = BM * BK / T, BL = BN * BK / T;   // elements each thread stages
    static_assert(BM * BK % T == 0 && BN * BK % T == 0, "staging shapes");
    static_assert(T % BK == 0 && (NHWC || T % BM == 0), "a staging thread keeps one lane");
    __shared__ __align__(16) __half As[BM][LDS];
    __shared__ __align__(16) __half Bs[BN][LDS];
    __shared__ int s_last;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN;
    const int g = lane >> 2, tg = lane & 3;
    const int M = N * OH * OW, K = C * R * S, OHW = OH * OW, RS = R * S;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = min(K, k_begin + k_per_split);

    // A staging: NCHW keeps one pixel per thread (coalesced along the image row) and walks
    // k; NHWC keeps one k lane per thread (coalesced along channels) and walks pixels.
    const int a_fix = NHWC ? tid % BK : tid % BM;
    const int a_step = NHWC ? T / BK : T / BM;
    const int a_start = NHWC ? tid / BK : tid / BM;
    int px_n = 0, px_ih = 0, px_iw = 0;
    bool px_ok = false;
    if (!NHWC) {
        const int m = m0 + a_fix;
        px_ok = m < M;
        if (px_ok) {
            px_n = m / OHW;
            const int p = m - px_n * OHW, oh = p / OW;
            px_ih = oh * sh - ph;
            px_iw = (p - oh * OW) * sw - pw;
        }
    }
    // B staging: one k lane per thread, walking output channels.
    const int b_k = tid % BK, b_start = tid / BK, b_step = T / BK;

    __half areg[AL], breg[BL];
    auto load = [&](int k0) {
#pragma unroll
        for (int l = 0; l < AL; ++l) {
            const int v = a_start + l * a_step;          // the walked index
            __half val = __float2half(0.f);
            if (!NHWC) {
                const int k = k0 + v;
                if (px_ok && k < k_end) {
                    const int c = k / RS, rs = k - c * RS, r = rs / S, s = rs - r * S;
                    const int ih = px_ih + r, iw = px_iw + s;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        val = x[(((size_t)px_n * C + c) * H + ih) * W + iw];
                }
            } else {
                const int k = k0 + a_fix, m = m0 + v;
                if (m < M && k < k_end) {
                    const int rs = k / C, c = k - rs * C, r = rs / S, s = rs - r * S;
                    const int n = m / OHW, p = m - n * OHW, oh = p / OW, ow = p - oh * OW;
                    const int ih = oh * sh - ph + r, iw = ow * sw - pw + s;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        val = x[(((size_t)n * H + ih) * W + iw) * C + c];
                }
            }
            areg[l] = val;
        }
#pragma unroll
        for (int l = 0; l < BL; ++l) {
            const int nn = n0 + b_start + l * b_step, k = k0 + b_k;
            breg[l] = nn < Cout && k < k_end ? wp[(size_t)nn * K + k] : __float2half(0.f);
        }
    };
    auto store = [&]() {
#pragma unroll
        for (int l = 0; l < AL; ++l) {
            const int v = a_start + l * a_step;
            if (!NHWC) As[a_fix][v] = areg[l];
            else As[v][a_fix] = areg[l];
        }
#pragma unroll
        for (int l = 0; l < BL; ++l) Bs[b_start + l * b_step][b_k] = breg[l];
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    if (k_begin < k_end) load(k_begin);
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        store();
        __syncthreads();
        if (k0 + BK < k_end) load(k0 + BK);    // next chunk's loads fly over these mma
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
                for (int j = 0; j < NI; ++j) tcc::mma16816(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        __syncthreads();
    }

    // Split-K: every share stores its partial; the last to arrive sums them in order.
    const int splits = gridDim.z;
    if (splits > 1) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int m = m0 + wm0 + i * 16 + g + (e >> 1) * 8;
                    const int n = n0 + wn0 + j * 8 + tg * 2 + (e & 1);
                    if (m < M && n < Cout)
                        partial[((size_t)blockIdx.z * M + m) * Cout + n] = acc[i][j][e];
                }
        __threadfence();
        __syncthreads();
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        if (tid == 0) s_last = atomicAdd(&counters[tile], 1) == splits - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int m = m0 + wm0 + i * 16 + g + (e >> 1) * 8;
                    const int n = n0 + wn0 + j * 8 + tg * 2 + (e & 1);
                    float v = 0.f;
                    if (m < M && n < Cout)
                        for (int z = 0; z < splits; ++z)   // a fixed order: deterministic
                            v += __ldcg(&partial[((size_t)z * M + m) * Cout + n]);
                    acc[i][j][e] = v;
                }
        if (tid == 0) counters[tile] = 0;      // ready for the next launch
    }

#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = m0 + wm0 + i * 16 + g + (e >> 1) * 8;
                const int n = n0 + wn0 + j * 8 + tg * 2 + (e & 1);
                if (m >= M || n >= Cout) continue;
                const int img = m / OHW, p = m - img * OHW;
                const size_t at = NHWC ? ((size_t)img * OHW + p) * Cout + n
                                       : ((size_t)img * Cout + n) * OHW + p;
                float v = acc[i][j][e];
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
TC_I_TC_CONV(128, 64, 64, 32, 0) TC_I_TC_CONV(128, 64, 64, 32, 1) TC_I_TC_CONV(32, 32, 16, 16, 0)
TC_I_TC_CONV(32, 32, 16, 16, 1) TC_I_TC_CONV(64, 32, 32, 16, 0) TC_I_TC_CONV(64, 32, 32, 16, 1)
TC_I_TC_CONV(64, 64, 32, 32, 0) TC_I_TC_CONV(64, 64, 32, 32, 1)
#undef TC_I_TC_CONV
#endif
