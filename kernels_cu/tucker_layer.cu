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
// The intermediates never leave the cluster.  Each thread computes 4 channels
// of one pixel per item, reading the weights as float4 from channel-last
// layouts the Python op prepares once, zero-padded to 4 * CL channels per
// stage (tensorconv/ops/tucker_layer.py owns the layouts, tiles and checks).
#include "tc_cluster.cuh"

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

// Every block's `mine` slice (rows_per_block x pitch floats) into `all`, in rank order.
template <int CL>
__device__ __forceinline__ void gather(float* all, const float* mine, int slice) {
    const int n4 = slice / 4;  // slices are whole float4s: rows come in fours
    for (int r = 0; r < CL; ++r) {
        float4* dst = reinterpret_cast<float4*>(all + r * slice);
        for (int i = threadIdx.x; i < n4; i += THREADS) dst[i] = tdcx::ld_peer4(mine + 4 * i, r);
    }
}
}  // namespace tlf

template <int R, int S, int STRIDE, int CL>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(tlf::THREADS) tucker_layer_fused(
    const float* __restrict__ x,         // (B, C, H, W)
    const float* __restrict__ u1t,       // (C, D1p): U1 transposed, D1p = CL * D1c
    const float* __restrict__ core,      // (D1p, R, S, D2p)
    const float* __restrict__ u3t,       // (D2p, Np): U3 (BN folded) transposed
    const float* __restrict__ bias,      // (Np,)
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (B, N, OH, OW)
    int C, int H, int W, int N, int OH, int OW, int pad_h, int pad_w,
    int D1c, int D2c, int Nc, int TH, int TW, int tiles_w, int relu)
{
    using namespace tlf;
    extern __shared__ __align__(16) float smem[];
    const int D1p = D1c * CL, D2p = D2c * CL, Np = Nc * CL;
    const int IHT = (TH - 1) * STRIDE + R, IWT = (TW - 1) * STRIDE + S;
    const int PA = IHT * IWT, PO = TH * TW;
    float* z1_mine = smem;                  // D1c x PA
    float* z2_mine = z1_mine + D1c * PA;    // D2c x PO
    float* z1_all = z2_mine + D2c * PO;     // D1p x PA (a cluster of one reads z1_mine)
    float* z2_all = z1_all + (CL > 1 ? D1p * PA : 0);  // D2p x PO
    const float* z1 = CL > 1 ? z1_all : z1_mine;
    const float* z2 = CL > 1 ? z2_all : z2_mine;

    const int q = blockIdx.z, b = blockIdx.y, tid = threadIdx.x;
    const int oh0 = (blockIdx.x / tiles_w) * TH, ow0 = (blockIdx.x % tiles_w) * TW;
    const int ih0 = oh0 * STRIDE - pad_h, iw0 = ow0 * STRIDE - pad_w;
    const size_t plane = (size_t)H * W;
    const float* xb = x + (size_t)b * C * plane;

    // A: z1 = U1 x on the halo, channels [q D1c, (q + 1) D1c)
    {
        const tdcx::FastDiv by_pa(PA), by_iwt(IWT);
        const float4* w = reinterpret_cast<const float4*>(u1t + q * D1c);
        const int wpitch = D1p / 4;
        for (int it = tid; it < (D1c / 4) * PA; it += THREADS) {
            const int g = by_pa.div(it), p = it - g * PA;
            const int hr = by_iwt.div(p);
            const int ih = ih0 + hr, iw = iw0 + p - hr * IWT;
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                const float* xp = xb + (size_t)ih * W + iw;
                const float4* wg = w + g;
#pragma unroll 4
                for (int c = 0; c < C; ++c) fma4(acc, __ldg(xp + c * plane), __ldg(wg + c * wpitch));
            }
            store4(z1_mine + 4 * g * PA, PA, p, acc);
        }
    }
    if constexpr (CL > 1) {
        tdcx::cluster_sync();
        gather<CL>(z1_all, z1_mine, D1c * PA);
    }
    __syncthreads();

    // B: z2 = core(z1) on the tile, channels [q D2c, (q + 1) D2c)
    {
        const tdcx::FastDiv by_po(PO), by_tw(TW);
        const float4* w = reinterpret_cast<const float4*>(core + q * D2c);
        const int wpitch = D2p / 4;
        for (int it = tid; it < (D2c / 4) * PO; it += THREADS) {
            const int g = by_po.div(it), o = it - g * PO;
            const int orow = by_tw.div(o), ocol = o - orow * TW;
            const float* zb = z1 + orow * STRIDE * IWT + ocol * STRIDE;
            const float4* wg = w + g;
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int d = 0; d < D1p; ++d) {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int s = 0; s < S; ++s)
                        fma4(acc, zb[d * PA + r * IWT + s], __ldg(wg + ((d * R + r) * S + s) * wpitch));
            }
            store4(z2_mine + 4 * g * PO, PO, o, acc);
        }
    }
    if constexpr (CL > 1) {
        tdcx::cluster_sync();
        gather<CL>(z2_all, z2_mine, D2c * PO);
    }
    __syncthreads();

    // C: y = U3 z2 + bias (+ residual), ReLU; channels [q Nc, (q + 1) Nc)
    {
        const tdcx::FastDiv by_po(PO), by_tw(TW);
        const float4* w = reinterpret_cast<const float4*>(u3t + q * Nc);
        const int wpitch = Np / 4;
        for (int it = tid; it < (Nc / 4) * PO; it += THREADS) {
            const int g = by_po.div(it), o = it - g * PO;
            const int orow = by_tw.div(o);
            const int oh = oh0 + orow, ow = ow0 + o - orow * TW;
            if (oh >= OH || ow >= OW) continue;
            const float4* wg = w + g;
            float4 acc = reinterpret_cast<const float4*>(bias + q * Nc)[g];
#pragma unroll 4
            for (int e = 0; e < D2p; ++e) fma4(acc, z2[e * PO + o], __ldg(wg + e * wpitch));
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int n = q * Nc + 4 * g + k;
                if (n >= N) break;
                const size_t at = (((size_t)b * N + n) * OH + oh) * OW + ow;
                float out = k == 0 ? acc.x : k == 1 ? acc.y : k == 2 ? acc.z : acc.w;
                if (residual != nullptr) out += residual[at];
                if (relu) out = fmaxf(out, 0.f);
                y[at] = out;
            }
        }
    }
    if constexpr (CL > 1) tdcx::cluster_sync();  // peers may still be reading z1_mine / z2_mine
}

#ifndef __CUDACC_RTC__  // offline type-check of a few instantiations
#define TC_TLF(R, S, ST, CL)                                                                   \
    template __global__ void tucker_layer_fused<R, S, ST, CL>(                                 \
        const float*, const float*, const float*, const float*, const float*, const float*,    \
        float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_TLF(3, 3, 1, 1) TC_TLF(3, 3, 1, 4) TC_TLF(3, 3, 2, 8) TC_TLF(1, 1, 1, 2) TC_TLF(5, 5, 2, 2)
#endif
