// A convolution of few input channels followed by max pooling, in one launch (fp32, NCHW):
//     y = maxpool(act(conv(x, w) + bias))
// The ImageNet stem of ResNets and DenseNets (7x7 stride-2 conv of 3 channels, BN, ReLU,
// 3x3 stride-2 max pool) as two launches cost 18 µs of a ~240 µs batch-1 Tucker
// ResNet-18: the conv writes a 112 x 112 x 64 plane that only the pool reads, and its
// K = C R S = 147 products per output keep scalar FMA kernels at ~16 TFLOP/s.
//
// Block (bx, by, bz) owns TPH x TPW pooled pixels of sample bz / slices and NB output
// channels (slice bz % slices).  It stages the input patch under the TH x TW conv
// outputs its pooling windows read (zero-filled outside the image: the conv's padding)
// and its slice of the weights in one round of cp.async, splits the patch once into
// tf32 parts (tc_mma.cuh), and computes those conv outputs as an implicit GEMM on the
// tensor cores at fp32 accuracy (3xTF32): rows = conv pixels, columns = output
// channels (weights as mma B fragments, split into tf32 parts by the op), k = (c, r,
// s) read from the patch through two offset tables, so no im2col matrix is built.
// The loop is issue-bound: with the weights as the A operand (a first version) a
// patch value fed only 3 mma and each mma cost ~6 instructions (15 µs for the ResNet
// stem), so here the pixels are A, reused over every channel tile.  Neighbouring
// blocks recompute the conv outputs their windows share instead of exchanging them.
// The conv outputs then go to shared memory, and each pooled output takes the max of
// its window (cells outside the conv output skipped, as pool.cu does) before the bias
// and ReLU, so the result equals the two launches', NaN included.  The Python op
// (tensorconv/ops/conv_pool.py) checks the arguments, packs the weights and picks the
// tile (TPH, TPW, NB).
#include "tc_chain.cuh"

constexpr int CONV_POOL_THREADS = tc::CHAIN_THREADS;  // tc::stage_flat assumes them

template <int R, int S, int SD, int PK, int PST, int TPH, int TPW, int NB>
__global__ void __launch_bounds__(CONV_POOL_THREADS) conv_maxpool(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ wf,    // (slices * NB / 8, K8 / 8, 32, 4): B fragments, split
    const float* __restrict__ bias,  // (M,) or nullptr
    float* __restrict__ y,           // (N, M, PH, PW)
    int C, int H, int W, int M, int OH, int OW, int PH, int PW, int pad_h, int pad_w,
    int pool_pad_h, int pool_pad_w, int slices, int relu)
{
    constexpr int TH = (TPH - 1) * PST + PK, TW = (TPW - 1) * PST + PK;  // conv outputs
    constexpr int IH = (TH - 1) * SD + R, IW = (TW - 1) * SD + S, PLANE = IH * IW;  // patch
    constexpr int PIX = TH * TW, MS = (PIX + 15) / 16, NTS = NB / 8;  // m16 strips, n8 tiles
    static_assert(NB % 8 == 0, "whole n8 tiles");
    const int K = C * R * S, K8S = (K + 7) / 8;
    extern __shared__ __align__(16) float smem[];
    float* ws = smem;                                   // NTS x K8S x 32 x 4 weight fragments
    float* outs = ws + NTS * K8S * 128;                 // NB x PIX conv outputs
    float2* pt = reinterpret_cast<float2*>(outs + NB * PIX);  // C + 1 planes, then zeros
    int* koff = reinterpret_cast<int*>(pt + (C + 1) * PLANE);  // 8 K8S: k -> patch offset
    int* noff = koff + 8 * K8S;                         // 16 MS: pixel -> patch offset

    const int tid = threadIdx.x, slice = blockIdx.z % slices, n = blockIdx.z / slices;
    const int py0 = blockIdx.y * TPH, px0 = blockIdx.x * TPW;
    const int sy0 = py0 * PST - pool_pad_h, sx0 = px0 * PST - pool_pad_w;  // conv tile origin
    const int iy0 = sy0 * SD - pad_h, ix0 = sx0 * SD - pad_w;              // patch origin

    tc::stage_flat(ws, wf + (size_t)slice * NTS * K8S * 128, NTS * K8S * 128);
    // The patch row by row (row = c IH + iy), a warp per row: its lanes copy consecutive
    // columns, and the row's coordinates are worked out once.
    const int warp = tid >> 5, lane = tid & 31;
    const float* xn = x + (size_t)n * C * H * W;
    for (int row = warp; row < C * IH; row += CONV_POOL_THREADS / 32) {
        const int c = row / IH, gy = iy0 + row - c * IH;
        const bool row_in = gy >= 0 && gy < H;
        const float* src = xn + (c * H + (row_in ? gy : 0)) * W;
        for (int ix = lane; ix < IW; ix += 32) {
            const int gx = ix0 + ix;
            const bool ok = row_in && gx >= 0 && gx < W;
            tdcx::cp_async4(&pt[row * IW + ix].x, ok ? src + gx : xn, ok);
        }
    }
    tdcx::cp_async_commit();
    // The K padding (weights zero there) reads the zero plane: never a non-finite value.
    for (int i = tid; i < PLANE; i += CONV_POOL_THREADS) pt[C * PLANE + i] = make_float2(0.f, 0.f);
    for (int k = tid; k < 8 * K8S; k += CONV_POOL_THREADS) {
        const int c = k / (R * S), rs = k - c * (R * S), r = rs / S;
        koff[k] = k < K ? c * PLANE + r * IW + (rs - r * S) : C * PLANE;
    }
    for (int p = tid; p < 16 * MS; p += CONV_POOL_THREADS) {
        const int a = p / TW;
        noff[p] = p < PIX ? a * SD * IW + (p - a * TW) * SD : 0;  // padding pixels: discarded
    }
    tdcx::cp_async_wait<0>();
    __syncthreads();
    // Split once, so that an A fragment element's two parts are one 8-byte load.
    for (int i = tid; i < C * PLANE; i += CONV_POOL_THREADS) {
        float v = pt[i].x, rest;
        tf32x3::split(v, rest);
        pt[i] = make_float2(v, rest);
    }
    __syncthreads();

    // Warp w computes pixel strips w, w + 8, ... for all NB channels: a strip's A
    // fragment (4 patch values, each with its remainder) feeds 3 NTS mma, and the weight
    // fragments come as the mma's B operands, ready split (one 16-byte load per tile).
    const int g = lane >> 2, t = lane & 3;
    for (int ms = warp; ms < MS; ms += CONV_POOL_THREADS / 32) {
        const int pa = noff[16 * ms + g], pb = noff[16 * ms + g + 8];
        float hi[NTS][4], lo[NTS][4];  // big*big; small*big + big*small
#pragma unroll
        for (int j = 0; j < NTS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) hi[j][e] = lo[j][e] = 0.f;
        const float4* wq = reinterpret_cast<const float4*>(ws) + lane;
#pragma unroll 2
        for (int k8 = 0; k8 < K8S; ++k8) {
            const float2* row0 = pt + koff[k8 * 8 + t];
            const float2* row1 = pt + koff[k8 * 8 + t + 4];
            const float2 a0 = row0[pa], a1 = row0[pb], a2 = row1[pa], a3 = row1[pb];
            const unsigned ab[4] = {__float_as_uint(a0.x), __float_as_uint(a1.x),
                                    __float_as_uint(a2.x), __float_as_uint(a3.x)};
            const unsigned as[4] = {__float_as_uint(a0.y), __float_as_uint(a1.y),
                                    __float_as_uint(a2.y), __float_as_uint(a3.y)};
#pragma unroll
            for (int j = 0; j < NTS; ++j) {
                const float4 b = wq[(j * K8S + k8) * 32];  // big b0, b1; small b0, b1
                const unsigned bb0 = __float_as_uint(b.x), bb1 = __float_as_uint(b.y);
                tf32x3::mma(hi[j], ab, bb0, bb1);
                tf32x3::mma(lo[j], as, bb0, bb1);
                tf32x3::mma(lo[j], ab, __float_as_uint(b.z), __float_as_uint(b.w));
            }
        }
        // Accumulator (j, e): pixel 16 ms + g + 8 (e >> 1), channel 8 j + 2 t + (e & 1).
#pragma unroll
        for (int j = 0; j < NTS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int p = 16 * ms + g + 8 * (e >> 1);
                if (p < PIX) outs[(8 * j + 2 * t + (e & 1)) * PIX + p] = hi[j][e] + lo[j][e];
            }
    }
    __syncthreads();

    // Max commutes with adding the channel's bias and with ReLU, so the epilogue runs once
    // per pooled output.  With ReLU a NaN cell would have become 0 and so cannot win:
    // fmaxf skips it (an all-NaN window gives relu(-inf) = 0); without, NaN wins.
    float* yn = y + (size_t)n * M * PH * PW;
    for (int it = tid; it < NB * TPH * TPW; it += CONV_POOL_THREADS) {
        const int o = it / (TPH * TPW), q = it - o * (TPH * TPW), ly = q / TPW, lx = q - ly * TPW;
        const int m = slice * NB + o, py = py0 + ly, px = px0 + lx;
        if (m >= M || py >= PH || px >= PW) continue;
        const int sy = sy0 + ly * PST, sx = sx0 + lx * PST;  // the window's first conv cell
        const float* cell = outs + o * PIX + ly * PST * TW + lx * PST;
        unsigned cols = 0;  // columns inside the conv output (the rest is pooling padding)
#pragma unroll
        for (int j = 0; j < PK; ++j) cols |= (unsigned)(sx + j >= 0 && sx + j < OW) << j;
        float acc = __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY)
#pragma unroll
        for (int i = 0; i < PK; ++i) {
            if (sy + i < 0 || sy + i >= OH) continue;
#pragma unroll
            for (int j = 0; j < PK; ++j) {
                const float v = cell[i * TW + j];
                if (!(cols >> j & 1u)) continue;
                if (relu)
                    acc = fmaxf(acc, v);
                else if (v > acc || v != v)
                    acc = v;
            }
        }
        yn[((size_t)m * PH + py) * PW + px] = tc::conv_epilogue(acc, bias, m, nullptr, 0, relu);
    }
}

#ifndef __CUDACC_RTC__  // offline type-check of the ImageNet stem's tiles
#define TC_STEM(TPH, TPW, NB)                                                                   \
    template __global__ void conv_maxpool<7, 7, 2, 3, 2, TPH, TPW, NB>(                         \
        const float*, const float*, const float*, float*, int, int, int, int, int, int, int, int, \
        int, int, int, int, int, int);
TC_STEM(4, 4, 16) TC_STEM(4, 4, 32) TC_STEM(4, 4, 64)
TC_STEM(4, 6, 16) TC_STEM(4, 6, 32) TC_STEM(4, 6, 64)
TC_STEM(2, 12, 16) TC_STEM(2, 12, 32) TC_STEM(2, 12, 64)
TC_STEM(4, 8, 16) TC_STEM(4, 8, 32) TC_STEM(4, 8, 64)
TC_STEM(8, 8, 16) TC_STEM(8, 8, 32) TC_STEM(8, 8, 64)
#endif
