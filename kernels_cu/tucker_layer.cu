// A whole Tucker-format layer in one launch (fp32, NCHW):
//     y = act(U3 · core(U1 · x) + bias [+ residual])
// with U1 the first 1x1 (C -> D1), core the R x S convolution (D1 -> D2, stride,
// padding) and U3 the last 1x1 (D2 -> N, BN folded into it and the bias).
//
// At batch 1 the three convolutions of a Tucker layer are each too small to
// fill the GPU, and as three launches their latencies add up.  Here the CL
// blocks of a thread-block cluster own one TH x TW output tile and split every
// stage's output channels among themselves:
//   A. block q computes its D1 / CL channels of z1 = U1 x on the tile's input
//      halo (zero outside the image: the core's zero padding);
//   B. after a cluster barrier each block gathers all of z1 from its peers'
//      shared memory (distributed shared memory) and computes its D2 / CL
//      channels of z2 = core(z1) on the tile;
//   C. likewise for z2, then its N / CL output channels of U3 z2, with the bias,
//      residual and ReLU epilogue, written pixel-fastest.
// The intermediates never leave the cluster.  Each thread owns up to IT items
// of 4 channels x 1 pixel per stage, accumulated in registers while the stage's
// operands stream through shared memory in chunks (CKA input channels, CKB core
// input channels, CKC core output channels): all 256 threads issue 16-byte
// cp.async copies at once, so the weight stream is bandwidth-bound, not bound
// by one thread's load latency (the first version, reading weights straight
// from L2 inside the multiply-add loops, was 2-8x slower than three launches).
// Weights come in channel-last layouts the Python op prepares once, zero-padded
// to 4 * CL channels per stage (tensorconv/ops/tucker_layer.py owns the
// layouts, tiles, chunk sizes and checks).
#include "tc_cluster.cuh"
#include "tc_common.cuh"

namespace tlf {
constexpr int THREADS = 256;

__device__ __forceinline__ void fma4(float4& acc, float v, const float4& w) {
    acc.x = fmaf(v, w.x, acc.x);
    acc.y = fmaf(v, w.y, acc.y);
    acc.z = fmaf(v, w.z, acc.z);
    acc.w = fmaf(v, w.w, acc.w);
}

__device__ __forceinline__ void store4(float* rows, int pitch, int p, const float4& v) {
    rows[p] = v.x;
    rows[pitch + p] = v.y;
    rows[2 * pitch + p] = v.z;
    rows[3 * pitch + p] = v.w;
}

// rows x cols floats (cols a multiple of 4, 16-byte aligned rows) from global
// rows of pitch `pitch` into contiguous shared memory; commits the copy group.
__device__ __forceinline__ void stage_rows(float* dst, const float* src, int rows, int cols,
                                           int pitch) {
    const int c4 = cols / 4;
    const tdcx::FastDiv by_c4(c4);
    for (int i = threadIdx.x; i < rows * c4; i += THREADS) {
        const int r = by_c4.div(i), k = i - r * c4;
        tdcx::cp_async16(dst + r * cols + 4 * k, src + (size_t)r * pitch + 4 * k, true);
    }
}

__device__ __forceinline__ void land() {
    tdcx::cp_async_commit();
    tdcx::cp_async_wait<0>();
    __syncthreads();
}

// A stage's register items (4 channels x 1 position each, item = group * pitch +
// position) into this block's slice `mine` (rows x pitch), then every block's
// slice into `all`, in rank order, through distributed shared memory.
template <int CL, int IT>
__device__ __forceinline__ void publish(const float4 (&acc)[IT], int items, float* mine,
                                        float* all, int pitch, int rows,
                                        const tdcx::FastDiv& by_pitch) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
        const int it = threadIdx.x + k * THREADS;
        if (it < items) {
            const int g = by_pitch.div(it);
            store4(mine + 4 * g * pitch, pitch, it - g * pitch, acc[k]);
        }
    }
    if constexpr (CL > 1) {
        tdcx::cluster_sync();
        const int n4 = rows * pitch / 4;  // slices are whole float4s: rows come in fours
        for (int r = 0; r < CL; ++r) {
            float4* dst = reinterpret_cast<float4*>(all + r * rows * pitch);
            for (int i = threadIdx.x; i < n4; i += THREADS) dst[i] = tdcx::ld_peer4(mine + 4 * i, r);
        }
    }
    __syncthreads();
}
}  // namespace tlf

template <int R, int S, int STRIDE, int CL, int IT>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(tlf::THREADS) tucker_layer_fused(
    const float* __restrict__ x,         // (B, C, H, W)
    const float* __restrict__ u1t,       // (C, D1p): U1 transposed, D1p = CL * D1c
    const float* __restrict__ core,      // (D1p, R, S, D2p)
    const float* __restrict__ u3t,       // (D2p, Np): U3 (BN folded) transposed
    const float* __restrict__ bias,      // (Np,)
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (B, N, OH, OW)
    int C, int H, int W, int N, int OH, int OW, int pad_h, int pad_w,
    int D1c, int D2c, int Nc, int TH, int TW, int tiles_w, int CKA, int CKB, int CKC, int relu)
{
    tc::wait_prior_grids();
    using namespace tlf;
    extern __shared__ __align__(16) float smem[];
    const int D1p = D1c * CL, D2p = D2c * CL, Np = Nc * CL;
    const int IHT = (TH - 1) * STRIDE + R, IWT = (TW - 1) * STRIDE + S;
    const int PA = IHT * IWT, PO = TH * TW, PA4 = (PA + 3) / 4 * 4;
    float* z1_mine = smem;                  // D1c x PA
    float* z2_mine = z1_mine + D1c * PA;    // D2c x PO
    float* z1_all = z2_mine + D2c * PO;     // D1p x PA (a cluster of one reads z1_mine)
    float* z2_all = z1_all + (CL > 1 ? D1p * PA : 0);  // D2p x PO
    float* stage = z2_all + (CL > 1 ? D2p * PO : 0);   // the chunk being streamed
    const float* z1 = CL > 1 ? z1_all : z1_mine;
    const float* z2 = CL > 1 ? z2_all : z2_mine;

    const int q = blockIdx.z, b = blockIdx.y, tid = threadIdx.x;
    const int oh0 = (blockIdx.x / tiles_w) * TH, ow0 = (blockIdx.x % tiles_w) * TW;
    const int ih0 = oh0 * STRIDE - pad_h, iw0 = ow0 * STRIDE - pad_w;
    const size_t plane = (size_t)H * W;
    const float* xb = x + (size_t)b * C * plane;
    float4 acc[IT];

    // A: z1 = U1 x on the halo, channels [q D1c, (q + 1) D1c).  Chunks of CKA
    // input channels: the halo cube (zero outside the image) and U1's rows.
    {
        const int items = (D1c / 4) * PA;
        const tdcx::FastDiv by_pa(PA), by_iwt(IWT);
#pragma unroll
        for (int k = 0; k < IT; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        float* xs = stage;              // CKA x PA4
        float* ws = stage + CKA * PA4;  // CKA x D1c
        for (int c0 = 0; c0 < C; c0 += CKA) {
            const int cn = min(CKA, C - c0);
            for (int i = tid; i < cn * PA; i += THREADS) {
                const int c = by_pa.div(i), p = i - c * PA;
                const int hr = by_iwt.div(p);
                const int ih = ih0 + hr, iw = iw0 + p - hr * IWT;
                const bool ok = ih >= 0 && ih < H && iw >= 0 && iw < W;
                tdcx::cp_async4(xs + c * PA4 + p, ok ? xb + (c0 + c) * plane + ih * W + iw : xb, ok);
            }
            stage_rows(ws, u1t + (size_t)c0 * D1p + q * D1c, cn, D1c, D1p);
            land();
#pragma unroll
            for (int k = 0; k < IT; ++k) {
                const int it = tid + k * THREADS;
                if (it < items) {
                    const int g = by_pa.div(it), p = it - g * PA;
                    for (int c = 0; c < cn; ++c)
                        fma4(acc[k], xs[c * PA4 + p], reinterpret_cast<const float4*>(ws + c * D1c)[g]);
                }
            }
            __syncthreads();  // the next chunk overwrites the stage
        }
        publish<CL>(acc, items, z1_mine, z1_all, PA, D1c, by_pa);
    }

    // B: z2 = core(z1) on the tile, channels [q D2c, (q + 1) D2c).  Chunks of CKB
    // core input channels: their R x S x D2c weights.
    {
        const int items = (D2c / 4) * PO;
        const tdcx::FastDiv by_po(PO), by_tw(TW);
#pragma unroll
        for (int k = 0; k < IT; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int d0 = 0; d0 < D1p; d0 += CKB) {
            const int dn = min(CKB, D1p - d0);
            stage_rows(stage, core + (size_t)d0 * R * S * D2p + q * D2c, dn * R * S, D2c, D2p);
            land();
#pragma unroll
            for (int k = 0; k < IT; ++k) {
                const int it = tid + k * THREADS;
                if (it < items) {
                    const int g = by_po.div(it), o = it - g * PO;
                    const int orow = by_tw.div(o), ocol = o - orow * TW;
                    const float* zb = z1 + d0 * PA + orow * STRIDE * IWT + ocol * STRIDE;
                    const float4* wg = reinterpret_cast<const float4*>(stage) + g;
                    const int wpitch = D2c / 4;
                    for (int d = 0; d < dn; ++d) {
#pragma unroll
                        for (int r = 0; r < R; ++r)
#pragma unroll
                            for (int s = 0; s < S; ++s)
                                fma4(acc[k], zb[d * PA + r * IWT + s], wg[((d * R + r) * S + s) * wpitch]);
                    }
                }
            }
            __syncthreads();
        }
        publish<CL>(acc, items, z2_mine, z2_all, PO, D2c, by_po);
    }

    // C: y = U3 z2 + bias (+ residual), ReLU; channels [q Nc, (q + 1) Nc).  Chunks
    // of CKC core output channels: U3's rows.
    {
        const int items = (Nc / 4) * PO;
        const tdcx::FastDiv by_po(PO), by_tw(TW);
#pragma unroll
        for (int k = 0; k < IT; ++k) {
            const int it = tid + k * THREADS;
            acc[k] = it < items ? reinterpret_cast<const float4*>(bias + q * Nc)[by_po.div(it)]
                                : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        for (int e0 = 0; e0 < D2p; e0 += CKC) {
            const int en = min(CKC, D2p - e0);
            stage_rows(stage, u3t + (size_t)e0 * Np + q * Nc, en, Nc, Np);
            land();
#pragma unroll
            for (int k = 0; k < IT; ++k) {
                const int it = tid + k * THREADS;
                if (it < items) {
                    const int g = by_po.div(it), o = it - g * PO;
                    const float4* wg = reinterpret_cast<const float4*>(stage) + g;
                    for (int e = 0; e < en; ++e) fma4(acc[k], z2[(e0 + e) * PO + o], wg[e * (Nc / 4)]);
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int k = 0; k < IT; ++k) {
            const int it = tid + k * THREADS;
            if (it >= items) continue;
            const int g = by_po.div(it), o = it - g * PO;
            const int orow = by_tw.div(o);
            const int oh = oh0 + orow, ow = ow0 + o - orow * TW;
            if (oh >= OH || ow >= OW) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int n = q * Nc + 4 * g + j;
                if (n >= N) break;
                const size_t at = (((size_t)b * N + n) * OH + oh) * OW + ow;
                float out = j == 0 ? acc[k].x : j == 1 ? acc[k].y : j == 2 ? acc[k].z : acc[k].w;
                if (residual != nullptr) out += residual[at];
                if (relu) out = fmaxf(out, 0.f);
                y[at] = out;
            }
        }
    }
    if constexpr (CL > 1) tdcx::cluster_exit_sync();  // peers may still be reading z1_mine / z2_mine
}

// What CI's nvcc build type-checks: tensorconv.ops.tucker_layer.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TUCKER_LAYER_FUSED(...) template __global__ void tucker_layer_fused<__VA_ARGS__>( \
    const float*, const float*, const float*, const float*, const float*, const float*, float*, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_TUCKER_LAYER_FUSED(1, 1, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(1, 1, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(1, 3, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(1, 3, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(1, 7, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(1, 7, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(2, 2, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(2, 2, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(3, 1, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(3, 1, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 1, 1) TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 1, 2)
TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 1, 4) TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 2, 1)
TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 2, 4)
TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 4, 1) TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 4, 2)
TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 4, 4) TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 8, 1)
TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 8, 2) TC_I_TUCKER_LAYER_FUSED(3, 3, 1, 8, 4)
TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 1, 1) TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 1, 2)
TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 1, 4) TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 2, 1)
TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 2, 2) TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 2, 4)
TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 4, 1) TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 4, 2)
TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 4, 4) TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 8, 1)
TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 8, 2) TC_I_TUCKER_LAYER_FUSED(3, 3, 2, 8, 4)
TC_I_TUCKER_LAYER_FUSED(4, 4, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(4, 4, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(5, 5, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(5, 5, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(6, 6, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(6, 6, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(7, 1, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(7, 1, 2, 2, 2)
TC_I_TUCKER_LAYER_FUSED(7, 7, 1, 2, 2) TC_I_TUCKER_LAYER_FUSED(7, 7, 2, 2, 2)
#undef TC_I_TUCKER_LAYER_FUSED
#endif
