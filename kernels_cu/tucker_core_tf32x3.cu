// Tucker core convolution on the tensor cores at fp32 accuracy (3xTF32), NCHW.
//
// The convolution is an implicit GEMM per image: output pixels (M) x output
// channels (N) over input channels x filter taps (K).  A block owns a TH x TW
// pixel tile (TH * TW = WARPS_M * WM * 16) and WARPS_N * WN * 8 channels; each
// warp computes WM x WN mma.sync.m16n8k8 tiles.  Every fp32 operand is split
// into a tf32 "big" part and the tf32 rounding of its remainder, and the three
// products big*big + big*small + small*big are accumulated in fp32: the
// discarded small*small term is ~2^-22 of the product, so the result matches
// fp32 (<= 1e-5 relative), not tf32 (~3e-4).  Weights arrive split and in
// fragment order (tensorconv/ops/tucker_tf32x3.py packs them); inputs are
// split as the fragments are loaded, because the tensor pipe, not the issue
// slots, bounds this kernel.
//
// Operands stream through shared memory in chunks of CK input channels, two
// stages deep (cp.async, halo and channel padding zero-filled by the copy).
// The Python op owns tiles, launch geometry, the padded plane and checks.
#include "tc_cluster.cuh"

namespace tf32x3 {
__device__ __forceinline__ unsigned to_tf32(float v) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
    return r;
}
// d += a * b on one m16n8k8 tile (a: 4 tf32 of the 16 x 8 A tile, b: 2 of the 8 x 8 B tile).
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
}  // namespace tf32x3

template <int R, int S, int STRIDE, int WM, int WN>
__global__ void __launch_bounds__(256) tdc_core_conv_tf32x3(
    const float* __restrict__ x,      // (B, C, H, W)
    const float4* __restrict__ wpk,   // (C8, R*S, N8, 32 lanes): big b0, b1, small b0, b1
    float* __restrict__ y,            // (B, N, OH, OW)
    int C, int H, int W, int N, int OH, int OW, int pad_h, int pad_w,
    int TH, int TW, int CK, int warps_m, int tiles_w, int n_blocks, int iwp, int plane)
{
    constexpr int RS = R * S;
    extern __shared__ __align__(16) float smem[];
    const int warps = blockDim.x >> 5, warps_n = warps / warps_m;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp % warps_m, wn = warp / warps_m;
    const int bn8 = warps_n * WN;                       // 8-channel tiles per block
    const int n8_total = (N + 7) >> 3, c8_total = (C + 7) >> 3;
    const int b = blockIdx.y / n_blocks, nb0 = (blockIdx.y % n_blocks) * bn8;
    const int oh0 = (blockIdx.x / tiles_w) * TH, ow0 = (blockIdx.x % tiles_w) * TW;
    const int ih0 = oh0 * STRIDE - pad_h, iw0 = ow0 * STRIDE - pad_w;
    const int iht = (TH - 1) * STRIDE + R, iwt = (TW - 1) * STRIDE + S;
    const int ck8 = CK >> 3;
    const int in_stage = CK * plane, w_stage = ck8 * RS * bn8 * 32 * 4;
    const float* xb = x + (size_t)b * C * H * W;

    // Shared-memory offsets of this lane's pixels (rows g and g + 8 of each m tile).
    int poff[WM][2];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int p = (wm * WM + i) * 16 + g + 8 * h;
            poff[i][h] = (p / TW) * STRIDE * iwp + (p % TW) * STRIDE;
        }

    auto stage = [&](int chunk, int buf) {
        float* in = smem + buf * (in_stage + w_stage);
        float4* ws = reinterpret_cast<float4*>(in + in_stage);
        const int c0 = chunk * CK;
        for (int row = warp; row < CK * iht; row += warps) {
            const int c = row / iht, ih = ih0 + row % iht;
            const bool row_ok = c0 + c < C && ih >= 0 && ih < H;
            const float* src = xb + ((size_t)(c0 + c) * H + ih) * W;
            for (int col = lane; col < iwt; col += 32) {
                const int iw = iw0 + col;
                const bool ok = row_ok && iw >= 0 && iw < W;
                tdcx::cp_async4(in + c * plane + (row % iht) * iwp + col, ok ? src + iw : x, ok);
            }
        }
        const int w_items = ck8 * RS * bn8 * 32;
        for (int i = threadIdx.x; i < w_items; i += blockDim.x) {
            const int l = i & 31, rest = i >> 5;
            const int j = rest % bn8, krs = rest / bn8;
            const int k8 = chunk * ck8 + krs / RS, rs = krs % RS;
            const bool ok = k8 < c8_total && nb0 + j < n8_total;
            tdcx::cp_async16(reinterpret_cast<float*>(ws + i),
                             reinterpret_cast<const float*>(
                                 ok ? wpk + (((size_t)k8 * RS + rs) * n8_total + nb0 + j) * 32 + l
                                    : wpk),
                             ok);
        }
        tdcx::cp_async_commit();
    };

    float acc[WM][WN][4];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int chunks = (C + CK - 1) / CK;
    stage(0, 0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        const int buf = chunk & 1;
        if (chunk + 1 < chunks) {
            stage(chunk + 1, buf ^ 1);
            tdcx::cp_async_wait<1>();
        } else {
            tdcx::cp_async_wait<0>();
        }
        __syncthreads();
        const float* in = smem + buf * (in_stage + w_stage);
        const float4* ws = reinterpret_cast<const float4*>(in + in_stage);
        for (int k8 = 0; k8 < ck8; ++k8) {
            const float* ch = in + (k8 * 8 + t) * plane;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    unsigned bbig[WN][2], bsml[WN][2];
#pragma unroll
                    for (int j = 0; j < WN; ++j) {
                        const float4 v = ws[((k8 * RS + r * S + s) * bn8 + wn * WN + j) * 32 + lane];
                        bbig[j][0] = __float_as_uint(v.x);
                        bbig[j][1] = __float_as_uint(v.y);
                        bsml[j][0] = __float_as_uint(v.z);
                        bsml[j][1] = __float_as_uint(v.w);
                    }
#pragma unroll
                    for (int i = 0; i < WM; ++i) {
                        const float* tap = ch + r * iwp + s;
                        const float av[4] = {tap[poff[i][0]], tap[poff[i][1]],
                                             tap[4 * plane + poff[i][0]],
                                             tap[4 * plane + poff[i][1]]};
                        unsigned abig[4], asml[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            abig[e] = tf32x3::to_tf32(av[e]);
                            asml[e] = tf32x3::to_tf32(av[e] - __uint_as_float(abig[e]));
                        }
#pragma unroll
                        for (int j = 0; j < WN; ++j) {
                            tf32x3::mma(acc[i][j], asml, bbig[j][0], bbig[j][1]);
                            tf32x3::mma(acc[i][j], abig, bsml[j][0], bsml[j][1]);
                            tf32x3::mma(acc[i][j], abig, bbig[j][0], bbig[j][1]);
                        }
                    }
                }
        }
        __syncthreads();  // the next iteration's copy overwrites this buffer
    }

    // Accumulator (i, j, e): pixel row g + 8 * (e >> 1), channel 2 t + (e & 1).
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int p = (wm * WM + i) * 16 + g + 8 * h;
            const int oh = oh0 + p / TW, ow = ow0 + p % TW;
            if (oh >= OH || ow >= OW) continue;
            float* yp = y + ((size_t)b * N * OH + oh) * OW + ow;
#pragma unroll
            for (int j = 0; j < WN; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = (nb0 + wn * WN + j) * 8 + 2 * t + e;
                    if (n < N) yp[(size_t)n * OH * OW] = acc[i][j][2 * h + e];
                }
        }
}
