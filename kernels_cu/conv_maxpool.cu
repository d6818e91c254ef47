// A convolution of few input channels followed by max pooling, in one launch (fp32, NCHW):
//     y = maxpool(act(conv(x, w) + bias))
// The ImageNet stem of ResNets and DenseNets (7x7 stride-2 conv of 3 channels, BN, ReLU,
// 3x3 stride-2 max pool) as two launches: the conv writes a 112 x 112 x 64 plane that
// only the pool reads, and its K = C R S = 147 products per output keep scalar FMA
// kernels at ~16 TFLOP/s (docs/notes/conv_maxpool.md has the times).
//
// Block (bx, by, bz) owns TPH x TPW pooled pixels of sample bz / slices and NB output
// channels (slice bz % slices).  It stages the input patch under the TH x TW conv
// outputs its pooling windows read (zero-filled outside the image: the conv's padding)
// and its slice of the weights in one round of cp.async, splits the patch once into
// tf32 parts (tc_mma.cuh), and computes those conv outputs as an implicit GEMM on the
// tensor cores at fp32 accuracy (3xTF32; one tf32 pass when compiled for it): rows =
// output channels (weights in mma fragment order, split into tf32 parts by the op),
// columns = conv pixels, k = (c, r, s) read from the patch through two offset tables,
// so no im2col matrix is built.
// Every operand comes ready in one load: the weights split by the op, the patch's two
// parts side by side.  Neighbouring blocks recompute the conv outputs their windows
// share instead of exchanging them.
// The conv outputs then go to shared memory, and each pooled output takes the max of
// its window (cells outside the conv output skipped, as pool.cu does) before the bias
// and ReLU, so the result equals the two launches', NaN included.  The Python op
// (tensorconv/ops/conv_maxpool.py) checks the arguments, packs the weights and picks the
// tile (TPH, TPW, NB).
#include "tc_chain.cuh"

constexpr int CONV_POOL_THREADS = tc::CHAIN_THREADS;  // tc::stage_flat assumes them

template <int R, int S, int SD, int PK, int PST, int TPH, int TPW, int NB>
__global__ void __launch_bounds__(CONV_POOL_THREADS) conv_maxpool(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ wf,    // (slices * NB / 16, K8 / 8, 2, 32, 4): fragments, split
    const float* __restrict__ bias,  // (M,) or nullptr
    float* __restrict__ y,           // (N, M, PH, PW)
    int C, int H, int W, int M, int OH, int OW, int PH, int PW, int pad_h, int pad_w,
    int pool_pad_h, int pool_pad_w, int slices, int relu)
{
    tc::wait_prior_grids();
    constexpr int TH = (TPH - 1) * PST + PK, TW = (TPW - 1) * PST + PK;  // conv outputs
    constexpr int IH = (TH - 1) * SD + R, IW = (TW - 1) * SD + S, PLANE = IH * IW;  // patch
    constexpr int PIX = TH * TW, NT = (PIX + 7) / 8;
    constexpr int STRIPS = NB / 16, GROUPS = 8 / STRIPS, NTW = (NT + GROUPS - 1) / GROUPS;
    static_assert(NB % 16 == 0 && STRIPS <= 8, "whole m16 strips, at most one per warp");
    const int K = C * R * S, K8S = (K + 7) / 8;
    extern __shared__ __align__(16) float smem[];
    float* ws = smem;                                   // STRIPS x K8S x (big, small) x 32 x 4
    float2* pt = reinterpret_cast<float2*>(ws + STRIPS * K8S * 256);  // C + 1 planes, then zeros
    int* koff = reinterpret_cast<int*>(pt + (C + 1) * PLANE);  // 8 K8S: k -> patch offset
    int* noff = koff + 8 * K8S;                         // 8 NT: pixel -> patch offset
    float* outs = smem;                                 // NB x PIX conv outputs, after the products

    const int tid = threadIdx.x, slice = blockIdx.z % slices, n = blockIdx.z / slices;
    const int py0 = blockIdx.y * TPH, px0 = blockIdx.x * TPW;
    const int sy0 = py0 * PST - pool_pad_h, sx0 = px0 * PST - pool_pad_w;  // conv tile origin
    const int iy0 = sy0 * SD - pad_h, ix0 = sx0 * SD - pad_w;              // patch origin

    tc::stage_flat(ws, wf + (size_t)slice * STRIPS * K8S * 256, STRIPS * K8S * 256);
    // The patch row by row (row = c IH + iy), a warp per row: its lanes copy consecutive
    // columns, and the row's coordinates are worked out once.
    const int warp = tid >> 5, lane = tid & 31;
    const float* xn = x + (size_t)n * C * H * W;
    for (int row = warp; row < C * IH; row += CONV_POOL_THREADS / 32) {
        const int c = row / IH, gy = iy0 + row - c * IH;
        const bool row_in = gy >= 0 && gy < H;
        const int at = (c * H + gy) * W + ix0;  // 32-bit offsets: a 64-bit select costs two
        for (int ix = lane; ix < IW; ix += 32) {
            const bool ok = row_in && ix0 + ix >= 0 && ix0 + ix < W;
            tdcx::cp_async4(&pt[row * IW + ix].x, xn + (ok ? at + ix : 0), ok);
        }
    }
    tdcx::cp_async_commit();
    // The K padding (weights zero there) reads the zero plane: never a non-finite value.
    for (int i = tid; i < PLANE; i += CONV_POOL_THREADS) pt[C * PLANE + i] = make_float2(0.f, 0.f);
    for (int k = tid; k < 8 * K8S; k += CONV_POOL_THREADS) {
        const int c = k / (R * S), rs = k - c * (R * S), r = rs / S;
        koff[k] = k < K ? c * PLANE + r * IW + (rs - r * S) : C * PLANE;
    }
    for (int p = tid; p < 8 * NT; p += CONV_POOL_THREADS) {
        const int a = p / TW;
        noff[p] = p < PIX ? a * SD * IW + (p - a * TW) * SD : 0;  // padding pixels: discarded
    }
    tdcx::cp_async_wait<0>();
    __syncthreads();
    // Split once, so that a B fragment's two parts are one 8-byte load.
    for (int i = tid; i < C * PLANE; i += CONV_POOL_THREADS) {
        float v = pt[i].x, rest;
        tf32x3::split(v, rest);
        if constexpr (tf32x3::EXACT)
            pt[i] = make_float2(v, rest);
        else
            pt[i].x = v;
    }
    __syncthreads();

    // Warp w: strip w % STRIPS, n8 tiles w / STRIPS + j GROUPS.
    const int g = lane >> 2, t = lane & 3;
    const int strip = warp % STRIPS, grp = warp / STRIPS;
    int col[NTW];
    // The three products of a tile go to separate accumulators: back-to-back mma into
    // one accumulator would wait for each other.
    float hi[NTW][4], mid[NTW][4], lo[NTW][4];  // big*big, small*big, big*small
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int nt = grp + j * GROUPS;
        col[j] = nt < NT ? noff[nt * 8 + g] : 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) hi[j][e] = mid[j][e] = lo[j][e] = 0.f;
    }
    const float4* wp = reinterpret_cast<const float4*>(ws) + strip * K8S * 64 + lane;
#pragma unroll 4
    for (int k8 = 0; k8 < K8S; ++k8) {
        const float4 wb = wp[k8 * 64], wl = wp[k8 * 64 + 32];  // split by the op
        const unsigned ab[4] = {__float_as_uint(wb.x), __float_as_uint(wb.y),
                                __float_as_uint(wb.z), __float_as_uint(wb.w)};
        const unsigned as[4] = {__float_as_uint(wl.x), __float_as_uint(wl.y),
                                __float_as_uint(wl.z), __float_as_uint(wl.w)};
        const float2* row0 = pt + koff[k8 * 8 + t];
        const float2* row1 = pt + koff[k8 * 8 + t + 4];
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
            if (grp + j * GROUPS >= NT) break;
            const float2 v0 = row0[col[j]], v1 = row1[col[j]];
            const unsigned b0 = __float_as_uint(v0.x), b1 = __float_as_uint(v1.x);
            tf32x3::mma(hi[j], ab, b0, b1);
            if constexpr (tf32x3::EXACT) {
                tf32x3::mma(mid[j], as, b0, b1);
                tf32x3::mma(lo[j], ab, __float_as_uint(v0.y), __float_as_uint(v1.y));
            }
        }
    }
    __syncthreads();  // the patch is dead: outs reuses its memory
    // Accumulator (j, e): channel strip 16 + g + 8 (e >> 1), pixel 8 nt + 2 t + (e & 1).
    // Cells outside the conv output (the pooling's padding) become -inf, which no window
    // takes, so pooling needs no bounds checks.
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int nt = grp + j * GROUPS;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int p = nt * 8 + 2 * t + (e & 1), a = p / TW, b = p - a * TW;
            const bool inside = sy0 + a >= 0 && sy0 + a < OH && sx0 + b >= 0 && sx0 + b < OW;
            if (nt < NT && p < PIX)
                outs[(strip * 16 + g + 8 * (e >> 1)) * PIX + p] =
                    inside ? hi[j][e] + (mid[j][e] + lo[j][e]) : __int_as_float(0xff800000);
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
        const float* cell = outs + o * PIX + ly * PST * TW + lx * PST;
        float acc = __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY)
#pragma unroll
        for (int i = 0; i < PK; ++i)
#pragma unroll
            for (int j = 0; j < PK; ++j) {
                const float v = cell[i * TW + j];
                if (relu)
                    acc = fmaxf(acc, v);
                else if (v > acc || v != v)
                    acc = v;
            }
        yn[((size_t)m * PH + py) * PW + px] = tc::conv_epilogue(acc, bias, m, nullptr, 0, relu);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.conv_maxpool.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CONV_MAXPOOL(...) template __global__ void conv_maxpool<__VA_ARGS__>(const float*, \
    const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, int);
TC_I_CONV_MAXPOOL(1, 1, 1, 3, 2, 4, 4, 32) TC_I_CONV_MAXPOOL(1, 1, 2, 3, 2, 4, 4, 32)
TC_I_CONV_MAXPOOL(3, 3, 1, 3, 2, 4, 4, 32) TC_I_CONV_MAXPOOL(3, 3, 2, 3, 2, 4, 4, 32)
TC_I_CONV_MAXPOOL(5, 5, 1, 3, 2, 4, 4, 32) TC_I_CONV_MAXPOOL(5, 5, 2, 3, 2, 4, 4, 32)
TC_I_CONV_MAXPOOL(7, 7, 1, 3, 2, 4, 4, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 2, 4, 16)
TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 2, 4, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 2, 4, 64)
TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 16, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 16, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 4, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 4, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 4, 64) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 8, 16)
TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 8, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 4, 8, 64)
TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 8, 8, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 2, 2, 8, 8, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 2, 4, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 2, 4, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 2, 4, 64) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 16, 16)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 16, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 16, 64)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 4, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 4, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 4, 64) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 8, 16)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 8, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 4, 8, 64)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 8, 8, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 8, 8, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 1, 8, 8, 64) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 2, 4, 16)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 2, 4, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 2, 4, 64)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 4, 16, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 4, 4, 16)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 4, 4, 32) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 4, 4, 64)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 4, 8, 16) TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 4, 8, 32)
TC_I_CONV_MAXPOOL(7, 7, 2, 3, 2, 8, 8, 16)
#undef TC_I_CONV_MAXPOOL
#endif
