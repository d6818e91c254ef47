// Direct fp32 convolution, NCHW, any stride / padding / dilation / groups.
//
// One block computes a TH x TW tile of output pixels (one pixel per thread)
// for TK output channels of one group and one image.  The block walks the
// group's input channels CC at a time: the input patch under its tile and the
// TK x CC x R x S weights are staged in shared memory, then every thread runs
// its R x S x CC multiply-adds out of shared memory with TK accumulators held
// in registers.  Weights are stored k-fastest in shared memory so that a warp
// reads the same TK values (a broadcast) while it reads distinct inputs.
//
// Launch geometry, tile sizes and argument checks belong to
// tensorconv/ops/direct_conv.py; this file holds device code only.
#include "tc_common.cuh"

// TK: output channels per thread.  KR, KS: filter size fixed at compile time
// (so the R x S loops unroll), or 0 to take R, S at run time.
template <int TK, int KR, int KS>
__global__ void conv2d_direct_fwd(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ w,     // (K, C / groups, R, S)
    const float* __restrict__ bias,  // (K,) or nullptr
    const float* __restrict__ res,   // (N, K, OH, OW) or nullptr: added before the ReLU
    float* __restrict__ y,           // (N, K, OH, OW)
    int C, int H, int W, int K, int OH, int OW, int R, int S,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    int groups, int tiles_w, int k_tiles, int cc, int relu)
{
    tc::wait_prior_grids();
    if (KR > 0) R = KR;
    if (KS > 0) S = KS;
    extern __shared__ float smem[];
    const int TW = blockDim.x, TH = blockDim.y;
    const int tid = threadIdx.y * TW + threadIdx.x;
    const int nthreads = TW * TH;

    const int Cg = C / groups, Kg = K / groups;
    const int g = blockIdx.y / k_tiles;
    const int k0 = (blockIdx.y % k_tiles) * TK;  // first output channel within the group
    const int n = blockIdx.z;
    const int oh0 = (blockIdx.x / tiles_w) * TH;
    const int ow0 = (blockIdx.x % tiles_w) * TW;

    // Input patch that the output tile reads (with dilation and stride).
    const int IHT = (TH - 1) * stride_h + (R - 1) * dil_h + 1;
    const int IWT = (TW - 1) * stride_w + (S - 1) * dil_w + 1;
    const int ih0 = oh0 * stride_h - pad_h;
    const int iw0 = ow0 * stride_w - pad_w;
    const int RS = R * S;

    // Weights first: their float4 reads need 16-byte alignment, which the
    // input patch's arbitrary size would break if it came first.
    float* sw = smem;                      // [cc][R*S][TK]
    float* sx = smem + cc * RS * TK;       // [cc][IHT][IWT]

    float acc[TK];
#pragma unroll
    for (int k = 0; k < TK; ++k) acc[k] = 0.f;

    const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
    const float* wg = w + (size_t)g * Kg * Cg * RS;

    for (int c0 = 0; c0 < Cg; c0 += cc) {
        const int cn = min(cc, Cg - c0);
        // Stage the input patch; out-of-image and past-the-group entries are zeros.
        const int patch = IHT * IWT;
        for (int i = tid; i < cc * patch; i += nthreads) {
            const int c = i / patch, p = i % patch;
            const int ih = ih0 + p / IWT, iw = iw0 + p % IWT;
            float v = 0.f;
            if (c < cn && ih >= 0 && ih < H && iw >= 0 && iw < W)
                v = xg[((size_t)(c0 + c) * H + ih) * W + iw];
            sx[i] = v;
        }
        // Stage the weights k-fastest; channels past Kg are zeros.
        for (int i = tid; i < cc * RS * TK; i += nthreads) {
            const int k = i % TK, crs = i / TK;
            const int c = crs / RS, rs = crs % RS;
            float v = 0.f;
            if (c < cn && k0 + k < Kg)
                v = wg[((size_t)(k0 + k) * Cg + c0 + c) * RS + rs];
            sw[i] = v;
        }
        __syncthreads();

        for (int c = 0; c < cn; ++c) {
            const float* sxc = sx + c * patch + threadIdx.y * stride_h * IWT + threadIdx.x * stride_w;
            const float* swc = sw + c * RS * TK;
#pragma unroll
            for (int r = 0; r < (KR > 0 ? KR : R); ++r) {
#pragma unroll
                for (int s = 0; s < (KS > 0 ? KS : S); ++s) {
                    const float xv = sxc[r * dil_h * IWT + s * dil_w];
                    const float* wv = swc + (r * S + s) * TK;
                    if constexpr (TK % 4 == 0) {
#pragma unroll
                        for (int k = 0; k < TK; k += 4) {
                            const float4 q = *reinterpret_cast<const float4*>(wv + k);
                            acc[k] += xv * q.x;
                            acc[k + 1] += xv * q.y;
                            acc[k + 2] += xv * q.z;
                            acc[k + 3] += xv * q.w;
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < TK; ++k) acc[k] += xv * wv[k];
                    }
                }
            }
        }
        __syncthreads();
    }

    const int oh = oh0 + threadIdx.y, ow = ow0 + threadIdx.x;
    if (oh >= OH || ow >= OW) return;
#pragma unroll
    for (int k = 0; k < TK; ++k) {
        const int kk = g * Kg + k0 + k;
        if (k0 + k < Kg) {
            const size_t o = (((size_t)n * K + kk) * OH + oh) * OW + ow;
            float v = acc[k] + (bias != nullptr ? bias[kk] : 0.f);
            if (res != nullptr) v += res[o];
            if (relu) v = fmaxf(v, 0.f);
            y[o] = v;
        }
    }
}

// Explicit instantiations of every variant the Python op may pick, so that an
// offline nvcc build (CI) type-checks them all.  NVRTC skips them: the loader
// instantiates the one variant it needs through name_expressions, and
// compiling all of them would multiply every run-time compile.

// ---------------------------------------------------------------------------
// Implicit-GEMM convolution, forward and both gradients, as one GEMM
//     OUT[m, p] = sum_q A[m, q] * B[q, p]
// whose operands are gathered from the tensors on the fly (never materialised):
//
//   MODE  what                M rows            P columns            Q reduction
//   0     y = conv(x, w)      k of the group    (n, oh, ow)          (c, r, s)
//   1     gx = dgrad(gy, w)   c of the group    (n, h, w)            (k, r, s)
//   2     gw = wgrad(x, gy)   k of the group    (c, r, s)            (n, oh, ow)
//
// A block computes a BM x BN tile of OUT with 256 threads, each holding a TM x 4
// register tile (BM = 16 * TM: TM = 1 or 2 keeps thin layers, 16 or 32
// channels, from wasting most of a 64-row tile).  The reduction walks BK-slices: the A tile (transposed to
// BK x BM) and the B tile (BK x BN) are staged in shared memory, then each
// thread does BK rank-1 updates from float4 loads.  blockIdx.z splits the
// reduction: with splits > 1 each split writes its partial tile to `partial`
// ([split][Mtot][Ptot]) and conv2d_splitk_reduce sums them and runs the
// epilogue; with one split the epilogue (bias, residual, ReLU: forward only)
// is fused here.
namespace igemm {
constexpr int BN = 64, BK = 16, TN = 4, THREADS = 256;
constexpr int PAD = 4;  // keeps rows 16-byte aligned and staggers banks on the transposed store

__device__ __forceinline__ void rank1_update(float (&row)[TN], float a, const float4& b) {
    row[0] += a * b.x;
    row[1] += a * b.y;
    row[2] += a * b.z;
    row[3] += a * b.w;
}
}  // namespace igemm

// KR, KS: the filter size fixed at compile time (0: taken at run time), which
// turns the index arithmetic's divisions by R*S and S into multiplications.
// __launch_bounds__(256, 3) caps registers at 80 so that three blocks fit an
// SM: left free, ptxas gives the weight-gradient mode 95 registers (two blocks)
// and the others up to 109 when the bound has no minimum.
template <int MODE, int KR, int KS, int TM>
__global__ void __launch_bounds__(igemm::THREADS, 3) conv2d_igemm(
    const float* __restrict__ a_src,     // MODE 0, 1: w;  MODE 2: gy
    const float* __restrict__ b_src,     // MODE 0: x;  MODE 1: gy;  MODE 2: x
    const float* __restrict__ bias,      // (K,) or nullptr (MODE 0 only)
    const float* __restrict__ residual,  // like y, or nullptr (MODE 0 only)
    float* __restrict__ out,             // MODE 0: y;  MODE 1: gx;  MODE 2: gw
    float* __restrict__ partial,         // (splits, Mtot, Ptot) when splits > 1
    int N, int C, int H, int W, int K, int OH, int OW, int R, int S,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    int groups, int m_tiles, int q_per_split, int relu)
{
    tc::wait_prior_grids();
    using namespace igemm;
    constexpr int BM = 16 * TM;
    __shared__ __align__(16) float As[BK][BM + PAD];
    __shared__ __align__(16) float Bs[BK][BN + PAD];

    if (KR > 0) R = KR;
    if (KS > 0) S = KS;
    const int Cg = C / groups, Kg = K / groups;
    const int RS = R * S, OHW = OH * OW, HW = H * W;
    // GEMM sizes of this mode (per group)
    const int M = MODE == 1 ? Cg : Kg;
    const int P = MODE == 0 ? N * OHW : MODE == 1 ? N * HW : Cg * RS;
    const int Q = MODE == 0 ? Cg * RS : MODE == 1 ? Kg * RS : N * OHW;
    const int Mtot = MODE == 1 ? C : K;

    const int g = blockIdx.y / m_tiles;
    const int m0 = (blockIdx.y % m_tiles) * BM;
    const int p0 = blockIdx.x * BN;
    const int q_begin = blockIdx.z * q_per_split;
    const int q_end = min(Q, q_begin + q_per_split);
    const int tid = threadIdx.x;

    // B loads.  Modes 0 and 1: each thread owns one pixel column (consecutive
    // threads, consecutive pixels: coalesced).  Mode 2: each thread owns one
    // reduction row kk and walks columns (consecutive threads, consecutive
    // output pixels of the reduction: coalesced reads of x along ow).
    const int bn = tid % BN, bk0 = tid / BN;
    int img = 0, pa = 0, pb = 0;  // modes 0/1: image and the pixel's base row / column
    const int pcol = p0 + bn;
    if (MODE != 2 && pcol < P) {
        const int plane = MODE == 0 ? OHW : HW, width = MODE == 0 ? OW : W;
        img = pcol / plane;
        const int rem = pcol % plane;
        pa = rem / width;
        pb = rem % width;
        if (MODE == 0) { pa = pa * stride_h - pad_h; pb = pb * stride_w - pad_w; }
        else { pa += pad_h; pb += pad_w; }
    }

    const int ty = tid / (BN / TN), tx = tid % (BN / TN);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    // Global loads go to registers first (fetch) and to shared memory after the
    // previous slice's multiply-adds (stash): the next slice's loads are in
    // flight while the current one is computed.
    constexpr int NA = BM * BK / THREADS, NB = BN * BK / THREADS;
    float ra[NA], rb[NB];
    auto fetch = [&](int q0) {
        // A: consecutive threads read consecutive q of one row m
#pragma unroll
        for (int i = 0; i < NA; ++i) {
            const int idx = tid + i * THREADS;
            const int m = m0 + idx / BK, q = q0 + idx % BK;
            float v = 0.f;
            if (m < M && q < q_end) {
                if (MODE == 0) {
                    v = a_src[((size_t)(g * Kg + m)) * Q + q];
                } else if (MODE == 1) {
                    const int k = q / RS, rs = q % RS;
                    v = a_src[(((size_t)(g * Kg + k)) * Cg + m) * RS + rs];
                } else {
                    const int n = q / OHW, rem = q % OHW;
                    v = a_src[((size_t)n * K + g * Kg + m) * OHW + rem];
                }
            }
            ra[i] = v;
        }
        // B: modes 0/1 gather this thread's pixel column; mode 2 one reduction row
#pragma unroll
        for (int i = 0; i < NB; ++i) {
            float v = 0.f;
            if (MODE == 0) {
                const int q = q0 + bk0 + i * (THREADS / BN);
                if (pcol < P && q < q_end) {
                    const int c = q / RS, rs = q % RS;
                    const int ih = pa + (rs / S) * dil_h, iw = pb + (rs % S) * dil_w;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        v = b_src[(((size_t)img * C + g * Cg + c) * H + ih) * W + iw];
                }
            } else if (MODE == 1) {
                const int q = q0 + bk0 + i * (THREADS / BN);
                if (pcol < P && q < q_end) {
                    const int k = q / RS, rs = q % RS;
                    const int th = pa - (rs / S) * dil_h, tw = pb - (rs % S) * dil_w;
                    if (th >= 0 && tw >= 0 && th % stride_h == 0 && tw % stride_w == 0) {
                        const int oh = th / stride_h, ow = tw / stride_w;
                        if (oh < OH && ow < OW)
                            v = b_src[(((size_t)img * K + g * Kg + k) * OH + oh) * OW + ow];
                    }
                }
            } else {
                const int idx = tid + i * THREADS;
                const int q = q0 + idx % BK, pc = p0 + idx / BK;
                if (pc < P && q < q_end) {
                    const int c = pc / RS, rs = pc % RS;
                    const int n = q / OHW, rem = q % OHW;
                    const int ih = (rem / OW) * stride_h - pad_h + (rs / S) * dil_h;
                    const int iw = (rem % OW) * stride_w - pad_w + (rs % S) * dil_w;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        v = b_src[(((size_t)n * C + g * Cg + c) * H + ih) * W + iw];
                }
            }
            rb[i] = v;
        }
    };
    auto stash = [&]() {
#pragma unroll
        for (int i = 0; i < NA; ++i) {
            const int idx = tid + i * THREADS;
            As[idx % BK][idx / BK] = ra[i];
        }
#pragma unroll
        for (int i = 0; i < NB; ++i) {
            if (MODE == 2) {
                const int idx = tid + i * THREADS;
                Bs[idx % BK][idx / BK] = rb[i];
            } else {
                Bs[bk0 + i * (THREADS / BN)][bn] = rb[i];
            }
        }
    };

    if (q_begin < q_end) fetch(q_begin);
    for (int q0 = q_begin; q0 < q_end; q0 += BK) {
        stash();
        __syncthreads();
        if (q0 + BK < q_end) fetch(q0 + BK);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 b = *reinterpret_cast<const float4*>(&Bs[kk][tx * TN]);
            if constexpr (TM == 4) {
                const float4 a = *reinterpret_cast<const float4*>(&As[kk][ty * TM]);
                rank1_update(acc[0], a.x, b);
                rank1_update(acc[1], a.y, b);
                rank1_update(acc[2], a.z, b);
                rank1_update(acc[3], a.w, b);
            } else {
#pragma unroll
                for (int i = 0; i < TM; ++i) rank1_update(acc[i], As[kk][ty * TM + i], b);
            }
        }
        __syncthreads();
    }

    // ---- epilogue: row = channel index in the full tensor, p = GEMM column
    const bool split = gridDim.z > 1;
    const int plane = MODE == 0 ? OHW : MODE == 1 ? HW : P;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
        if (m >= M) continue;
        const int row = (MODE == 1 ? g * Cg : g * Kg) + m;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int p = p0 + tx * TN + j;
            if (p >= P) continue;
            if (split) {
                partial[((size_t)blockIdx.z * Mtot + row) * P + p] = acc[i][j];
            } else {
                const size_t o = ((size_t)(p / plane) * Mtot + row) * plane + p % plane;
                out[o] = MODE == 0 ? tc::conv_epilogue(acc[i][j], bias, row, residual, o, relu)
                                   : acc[i][j];
            }
        }
    }
}

// Sums the split-reduction partials of conv2d_igemm, adds bias and residual,
// applies ReLU, and writes `out` with row `r` of column `p` at
// ((p / plane) * rows + r) * plane + p % plane (NCHW for the convolution
// outputs, row-major for the weight gradient).  Consecutive threads take
// consecutive p, so the partial reads and the output writes coalesce.  With
// SHARE_SPLITS or more splits (a weight gradient: few values, many shares) the
// 8 warps of a 256-thread block share each value's splits, L lanes of a warp a
// value (32 / L values a block): warp w's lane L·v + l adds splits Lw + l,
// Lw + l + 8L, ... of value v; the L lanes of a value meet by shuffles, then
// warp 0 adds the warps' sums.  L is 4 where the launch has more blocks than
// 32-value blocks would need (reduce_blocks in tensorconv/ops/_igemm.py does so
// for the thin weight gradients, long streams over few values: 8 values a block,
// each warp load 32-byte runs of 4 split rows), else 1 (32 values a block: on
// many values, fewer block iterations and barriers).  A fixed order for a given
// launch, so the same every run.  Fewer than SHARE_SPLITS: one thread adds all
// of a value's splits, in order.
namespace igemm {
constexpr int SHARE_SPLITS = 16, SHARE_WARPS = 8;

// One thread a value (below SHARE_SPLITS, fewer than 2^31 values): 32-bit index
// arithmetic, since a 64-bit division is a long software routine that bound the
// 2-split reductions of small-plane layers (3x the memory time); four consecutive
// values a thread where rows and planes hold whole, aligned float4s.  The same
// additions in the same order as one value a thread, so the same bits.
__device__ __forceinline__ void reduce_each(
    const float* __restrict__ partial, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ out,
    int splits, int rows, int P, int plane, int relu)
{
    const unsigned total = (unsigned)rows * (unsigned)P, uP = P, upl = plane;
    const unsigned first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
    auto at = [&](unsigned e, unsigned& r) {   // e's output index and row
        r = e / uP;
        const unsigned p = e - r * uP, n = p / upl;
        return (n * (unsigned)rows + r) * upl + (p - n * upl);
    };
    auto aligned = [](const float* q) { return ((size_t)q & 15) == 0; };
    if (P % 4 == 0 && plane % 4 == 0 && aligned(partial) && aligned(out)
        && (residual == nullptr || aligned(residual))) {
        for (unsigned e = 4 * first; e < total; e += 4 * step) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
            for (int s = 0; s < splits; ++s) {
                const float4 t = *reinterpret_cast<const float4*>(partial + (size_t)s * total + e);
                v.x += t.x; v.y += t.y; v.z += t.z; v.w += t.w;
            }
            unsigned r;
            const unsigned o = at(e, r);
            if (bias != nullptr) {
                const float b = bias[r];
                v.x += b; v.y += b; v.z += b; v.w += b;
            }
            if (residual != nullptr) {
                const float4 t = *reinterpret_cast<const float4*>(residual + o);
                v.x += t.x; v.y += t.y; v.z += t.z; v.w += t.w;
            }
            if (relu) {
                v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f);
                v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
            }
            *reinterpret_cast<float4*>(out + o) = v;
        }
        return;
    }
    for (unsigned e = first; e < total; e += step) {
        float v = 0.f;
#pragma unroll 4
        for (int s = 0; s < splits; ++s) v += partial[(size_t)s * total + e];
        unsigned r;
        const unsigned o = at(e, r);
        out[o] = tc::conv_epilogue(v, bias, r, residual, o, relu);
    }
}
}  // namespace igemm
__global__ void conv2d_splitk_reduce(
    const float* __restrict__ partial,   // (splits, rows, P)
    const float* __restrict__ bias,      // (rows,) or nullptr
    const float* __restrict__ residual,  // like out, or nullptr
    float* __restrict__ out,
    int splits, int rows, int P, int plane, int relu)
{
    tc::wait_prior_grids();
    const size_t total = (size_t)rows * P;
    auto finish = [&](size_t e, float v) {
        const int r = (int)(e / P), p = (int)(e % P);
        if (bias != nullptr) v += bias[r];
        const size_t o = ((size_t)(p / plane) * rows + r) * plane + p % plane;
        if (residual != nullptr) v += residual[o];
        out[o] = relu ? fmaxf(v, 0.f) : v;
    };
    if (splits >= igemm::SHARE_SPLITS) {
        constexpr int W = igemm::SHARE_WARPS;
        __shared__ float sums[W][32];
        const int L = gridDim.x > (total + 31) / 32 ? 4 : 1, V = 32 / L;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int vi = lane / L, sl = lane % L;
        for (size_t e0 = blockIdx.x * (size_t)V; e0 < total; e0 += (size_t)gridDim.x * V) {
            const size_t e = e0 + vi;
            float v = 0.f;
            if (e < total) {
#pragma unroll 4
                for (int s = warp * L + sl; s < splits; s += W * L) v += partial[(size_t)s * total + e];
            }
            for (int o = L / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o, L);
            if (sl == 0) sums[warp][vi] = v;
            __syncthreads();
            if (warp == 0 && lane < V && e0 + lane < total) {
                float t = sums[0][lane];
#pragma unroll
                for (int k = 1; k < W; ++k) t += sums[k][lane];
                finish(e0 + lane, t);
            }
            __syncthreads();
        }
        return;
    }
    if (total <= 0x7fffffffu) {
        igemm::reduce_each(partial, bias, residual, out, splits, rows, P, plane, relu);
        return;
    }
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        float v = 0.f;
        for (int s = 0; s < splits; ++s) v += partial[(size_t)s * total + e];
        finish(e, v);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.direct_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CONV2D_DIRECT_FWD(...) template __global__ void conv2d_direct_fwd<__VA_ARGS__>( \
    const float*, const float*, const float*, const float*, float*, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_CONV2D_DIRECT_FWD(1, 0, 0) TC_I_CONV2D_DIRECT_FWD(1, 1, 1) TC_I_CONV2D_DIRECT_FWD(1, 3, 3)
TC_I_CONV2D_DIRECT_FWD(16, 0, 0) TC_I_CONV2D_DIRECT_FWD(16, 1, 1) TC_I_CONV2D_DIRECT_FWD(16, 3, 3)
TC_I_CONV2D_DIRECT_FWD(2, 0, 0) TC_I_CONV2D_DIRECT_FWD(2, 1, 1) TC_I_CONV2D_DIRECT_FWD(2, 3, 3)
TC_I_CONV2D_DIRECT_FWD(4, 0, 0) TC_I_CONV2D_DIRECT_FWD(4, 1, 1) TC_I_CONV2D_DIRECT_FWD(4, 3, 3)
TC_I_CONV2D_DIRECT_FWD(8, 0, 0) TC_I_CONV2D_DIRECT_FWD(8, 1, 1) TC_I_CONV2D_DIRECT_FWD(8, 3, 3)
#undef TC_I_CONV2D_DIRECT_FWD
#define TC_I_CONV2D_IGEMM(...) template __global__ void conv2d_igemm<__VA_ARGS__>(const float*, \
    const float*, const float*, const float*, float*, float*, int, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_CONV2D_IGEMM(0, 0, 0, 1) TC_I_CONV2D_IGEMM(0, 0, 0, 2) TC_I_CONV2D_IGEMM(0, 0, 0, 4)
TC_I_CONV2D_IGEMM(0, 1, 1, 1) TC_I_CONV2D_IGEMM(0, 1, 1, 2) TC_I_CONV2D_IGEMM(0, 1, 1, 4)
TC_I_CONV2D_IGEMM(0, 3, 3, 1) TC_I_CONV2D_IGEMM(0, 3, 3, 2) TC_I_CONV2D_IGEMM(0, 3, 3, 4)
TC_I_CONV2D_IGEMM(1, 0, 0, 1) TC_I_CONV2D_IGEMM(1, 0, 0, 2) TC_I_CONV2D_IGEMM(1, 0, 0, 4)
TC_I_CONV2D_IGEMM(1, 1, 1, 1) TC_I_CONV2D_IGEMM(1, 1, 1, 2) TC_I_CONV2D_IGEMM(1, 1, 1, 4)
TC_I_CONV2D_IGEMM(1, 3, 3, 1) TC_I_CONV2D_IGEMM(1, 3, 3, 2) TC_I_CONV2D_IGEMM(1, 3, 3, 4)
TC_I_CONV2D_IGEMM(2, 0, 0, 1) TC_I_CONV2D_IGEMM(2, 0, 0, 2) TC_I_CONV2D_IGEMM(2, 0, 0, 4)
TC_I_CONV2D_IGEMM(2, 1, 1, 1) TC_I_CONV2D_IGEMM(2, 1, 1, 2) TC_I_CONV2D_IGEMM(2, 1, 1, 4)
TC_I_CONV2D_IGEMM(2, 3, 3, 1) TC_I_CONV2D_IGEMM(2, 3, 3, 2) TC_I_CONV2D_IGEMM(2, 3, 3, 4)
#undef TC_I_CONV2D_IGEMM
#endif
