// Tucker core convolution on the tensor cores at fp32 accuracy (3xTF32), NCHW.
//
// The convolution is an implicit GEMM per image: output pixels (M) x output
// channels (N) over input channels x filter taps (K).  A block owns a TH x TW
// pixel tile (TH * TW = WARPS_M * WM * 16) and WARPS_N * WN * 8 channels; each
// warp computes WM x WN mma.sync.m16n8k8 tiles.  Every fp32 operand is split
// into a tf32 "big" part and its remainder and three products are accumulated
// (tc_mma.cuh), so the result matches fp32 (<= 1e-5 relative), not tf32 (~3e-4);
// compiled for one tf32 pass (tensorconv.precision) it takes big * big alone.
// Weights arrive split and in fragment order (tensorconv/ops/tucker_core_tf32x3.py
// packs them).  Inputs are split once per staged element, in shared memory:
// splitting at every fragment load cost more instructions than the mma's
// themselves (the kernel was issue-bound; docs/notes/tucker_core_tf32x3.md).
//
// Operands stream through shared memory in chunks of CK input channels, two
// stages deep (cp.async, halo and channel padding zero-filled by the copy).
// The Python op owns tiles, launch geometry, the padded plane and checks.
#include "tc_cluster.cuh"
#include "tc_common.cuh"
#include "tc_mma.cuh"

template <int R, int S, int STRIDE, int WM, int WN, int CL>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(256, 1) tdc_core_conv_tf32x3(
    const float* __restrict__ x,      // (B, C, H, W)
    const float4* __restrict__ wpk,   // (N8, C8, R*S, 32 lanes): big b0, b1, small b0, b1
    float* __restrict__ y,            // (B, N, OH, OW)
    const float* __restrict__ bias,   // (N,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    int relu,
    int C, int H, int W, int N, int OH, int OW, int pad_h, int pad_w,
    int TH, int CK, int iwp, int plane, int lead, int vec, int chunks, int per_split,
    int red_off,
    // Divisors as the host's FastDiv constants (tensorconv.cuda.fast_div): pixel
    // tiles per row, channel blocks, warps_m, TW, staged cube, staged row, pixels
    // per block, outputs per cluster rank.
    unsigned long long fd_tiles_w, unsigned long long fd_n_blocks, unsigned long long fd_warps_m,
    unsigned long long fd_tw, unsigned long long fd_cube, unsigned long long fd_row,
    unsigned long long fd_pixels, unsigned long long fd_share)
{
    tc::wait_prior_grids();
    constexpr int RS = R * S;
    extern __shared__ __align__(16) float smem[];
    const tdcx::FastDiv by_tiles_w = tdcx::FastDiv::of(fd_tiles_w);
    const tdcx::FastDiv by_n_blocks = tdcx::FastDiv::of(fd_n_blocks);
    const tdcx::FastDiv by_warps_m = tdcx::FastDiv::of(fd_warps_m);
    const tdcx::FastDiv by_tw = tdcx::FastDiv::of(fd_tw);
    const int TW = by_tw.d, warps_m = by_warps_m.d, n_blocks = by_n_blocks.d;
    const int warps = blockDim.x >> 5, warps_n = warps / warps_m;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wn = by_warps_m.div(warp), wm = warp - wn * warps_m;
    const int bn8 = warps_n * WN;                       // 8-channel tiles per block
    const int n8_total = (N + 7) >> 3, c8_total = (C + 7) >> 3;
    const int b = by_n_blocks.div(blockIdx.y), nb0 = (blockIdx.y - b * n_blocks) * bn8;
    const int th_i = by_tiles_w.div(blockIdx.x);
    const int oh0 = th_i * TH, ow0 = (blockIdx.x - th_i * (int)by_tiles_w.d) * TW;
    const int ih0 = oh0 * STRIDE - pad_h, iw0 = ow0 * STRIDE - pad_w;
    const int iht = (TH - 1) * STRIDE + R, iwt = (TW - 1) * STRIDE + S;
    const int ck8 = CK >> 3;
    // A stage: the cube's big parts, its small parts, the weights.
    const int cube_words = CK * plane, w_stage = ck8 * RS * bn8 * 32 * 4;
    const int in_stage = 2 * cube_words;
    const float* xb = x + (size_t)b * C * H * W;
    // Shared-memory offsets of this lane's pixels (rows g and g + 8 of each m tile).
    int poff[WM][2];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int p = (wm * WM + i) * 16 + g + 8 * h;
            const int row = by_tw.div(p);
            poff[i][h] = row * STRIDE * iwp + (p - row * TW) * STRIDE + lead;
        }

    // Staging costs instructions that a block with few warps cannot hide, so the
    // copy loops carry no per-element division: the input cube is indexed through
    // multiply-shift divisions, and each channel tile's weights of a chunk are one
    // contiguous run of the packed (N8, C8, R*S, 32) array.  With vec (W % 4 == 0)
    // rows are copied 16 bytes at a time from the aligned column iw0 - lead, each
    // 4-column group wholly inside or outside the image; else word by word.
    const int width = vec ? 4 : 1, cols = vec ? iwp >> 2 : iwt;
    const int iw0a = iw0 - lead, cube = CK * iht * cols, w_run = ck8 * RS * 32;
    const tdcx::FastDiv div_cube = tdcx::FastDiv::of(fd_cube), div_row = tdcx::FastDiv::of(fd_row);
    auto stage = [&](int chunk, int buf) {
        float* in = smem + buf * (in_stage + w_stage);
        float4* ws = reinterpret_cast<float4*>(in + in_stage);
        const int c0 = chunk * CK;
        for (int i = threadIdx.x; i < cube; i += blockDim.x) {
            const int c = div_cube.div(i), rem = i - c * iht * cols;
            const int row = div_row.div(rem), col = (rem - row * cols) * width;
            const int ih = ih0 + row, iw = iw0a + col;
            const bool ok = c0 + c < C && ih >= 0 && ih < H && iw >= 0 && iw < W;
            float* dst = in + c * plane + row * iwp + col;
            const float* src = ok ? xb + ((size_t)(c0 + c) * H + ih) * W + iw : x;
            if (vec)
                tdcx::cp_async16(dst, src, ok);
            else
                tdcx::cp_async4(dst, src, ok);
        }
        const int c8_left = (c8_total - chunk * ck8) * RS * 32;  // items before C8 ends
        for (int j = 0; j < bn8; ++j) {
            const bool tile_ok = nb0 + j < n8_total;
            const float4* src = wpk + ((size_t)(nb0 + j) * c8_total + chunk * ck8) * RS * 32;
            for (int i = threadIdx.x; i < w_run; i += blockDim.x) {
                const bool ok = tile_ok && i < c8_left;
                tdcx::cp_async16(reinterpret_cast<float*>(ws + j * w_run + i),
                                 reinterpret_cast<const float*>(ok ? src + i : wpk), ok);
            }
        }
        tdcx::cp_async_commit();
    };

    // The three products of a k step go to SETS independent accumulators: a dependent
    // mma costs ~26 cycles, and small warp tiles have too few tiles to hide that.
    constexpr int SETS = WM * WN <= 2 ? 3 : (WM * WN <= 4 ? 2 : 1);
    float acc[SETS][WM][WN][4];
#pragma unroll
    for (int q = 0; q < SETS; ++q)
#pragma unroll
        for (int i = 0; i < WM; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][i][j][e] = 0.f;

    // Split blockIdx.z of the cluster takes its share of the input-channel chunks.
    const tdcx::FastDiv by_pixels = tdcx::FastDiv::of(fd_pixels);
    const int pixels = by_pixels.d, total = bn8 * 8 * pixels;
    tdcx::PushReduce<CL> red(smem + red_off, fd_share);
    if constexpr (CL > 1) red.begin(total);
    const int first = blockIdx.z * per_split, last = min(chunks, first + per_split);
    if (first < last) stage(first, 0);
    for (int chunk = first; chunk < last; ++chunk) {
        const int buf = (chunk - first) & 1;
        if (chunk + 1 < last) {
            stage(chunk + 1, buf ^ 1);
            tdcx::cp_async_wait<1>();
        } else {
            tdcx::cp_async_wait<0>();
        }
        __syncthreads();
        float* in = smem + buf * (in_stage + w_stage);
        // Split the staged cube, four words at a time; the plane padding is split too
        // (never read), which keeps the loop free of index arithmetic.
        for (int i = threadIdx.x * 4; i < cube_words; i += blockDim.x * 4) {
            float4 v = *reinterpret_cast<float4*>(in + i), lo;
            tf32x3::split(v.x, lo.x);
            tf32x3::split(v.y, lo.y);
            tf32x3::split(v.z, lo.z);
            tf32x3::split(v.w, lo.w);
            *reinterpret_cast<float4*>(in + i) = v;
            if constexpr (tf32x3::EXACT) *reinterpret_cast<float4*>(in + cube_words + i) = lo;
        }
        __syncthreads();
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
                        const float4 v = ws[((wn * WN + j) * ck8 * RS + k8 * RS + r * S + s) * 32
                                            + lane];
                        bbig[j][0] = __float_as_uint(v.x);
                        bbig[j][1] = __float_as_uint(v.y);
                        bsml[j][0] = __float_as_uint(v.z);
                        bsml[j][1] = __float_as_uint(v.w);
                    }
                    // All A fragments first, then the products grouped by kind, so that
                    // consecutive mma's update different accumulators.
                    const float* tap = ch + r * iwp + s;
                    unsigned abig[WM][4], asml[WM][4];
#pragma unroll
                    for (int i = 0; i < WM; ++i) {
                        const int off[4] = {poff[i][0], poff[i][1], 4 * plane + poff[i][0],
                                            4 * plane + poff[i][1]};
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            abig[i][e] = __float_as_uint(tap[off[e]]);
                            asml[i][e] = __float_as_uint(tap[cube_words + off[e]]);
                        }
                    }
                    if constexpr (tf32x3::EXACT) {
#pragma unroll
                        for (int i = 0; i < WM; ++i)
#pragma unroll
                            for (int j = 0; j < WN; ++j)
                                tf32x3::mma(acc[2 % SETS][i][j], asml[i], bbig[j][0], bbig[j][1]);
#pragma unroll
                        for (int i = 0; i < WM; ++i)
#pragma unroll
                            for (int j = 0; j < WN; ++j)
                                tf32x3::mma(acc[1 % SETS][i][j], abig[i], bsml[j][0], bsml[j][1]);
                    }
#pragma unroll
                    for (int i = 0; i < WM; ++i)
#pragma unroll
                        for (int j = 0; j < WN; ++j)
                            tf32x3::mma(acc[0][i][j], abig[i], bbig[j][0], bbig[j][1]);
                }
        }
        __syncthreads();  // the next iteration's copy overwrites this buffer
    }

    // Accumulator (i, j, e): pixel row g + 8 * (e >> 1), channel 2 t + (e & 1).
    if constexpr (CL == 1) {
#pragma unroll
        for (int i = 0; i < WM; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int p = (wm * WM + i) * 16 + g + 8 * h;
                const int ph = by_tw.div(p), oh = oh0 + ph, ow = ow0 + p - ph * TW;
                if (oh >= OH || ow >= OW) continue;
                const size_t at0 = ((size_t)b * N * OH + oh) * OW + ow;
#pragma unroll
                for (int j = 0; j < WN; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int n = (nb0 + wn * WN + j) * 8 + 2 * t + e;
                        float v = acc[0][i][j][2 * h + e];
#pragma unroll
                        for (int q = 1; q < SETS; ++q) v += acc[q][i][j][2 * h + e];
                        const size_t at = at0 + (size_t)n * OH * OW;
                        if (n < N) y[at] = tc::conv_epilogue(v, bias, n, residual, at, relu);
                    }
            }
        return;
    }
    // Every block pushes its partial sums (channel-major: output channel n of the
    // block, pixel p -> n * pixels + p) to their owners, then adds the partials of
    // the outputs it owns and stores pixel-consecutive runs.
    red.ready();
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int j = 0; j < WN; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float v = acc[0][i][j][2 * h + e];
#pragma unroll
                    for (int q = 1; q < SETS; ++q) v += acc[q][i][j][2 * h + e];
                    red.template push<1>(((wn * WN + j) * 8 + 2 * t + e) * pixels + (wm * WM + i) * 16 + g
                                + 8 * h, &v);
                }
    red.wait();
    const int owned = red.count(total), base = red.rank * red.share;
    for (int e = threadIdx.x; e < owned; e += blockDim.x) {
        const int idx = base + e, nl = by_pixels.div(idx), p = idx - nl * pixels;
        const int ph = by_tw.div(p);
        const int n = nb0 * 8 + nl, oh = oh0 + ph, ow = ow0 + p - ph * TW;
        const size_t at = (((size_t)b * N + n) * OH + oh) * OW + ow;
        if (n < N && oh < OH && ow < OW)
            y[at] = tc::conv_epilogue(red.sum(e), bias, n, residual, at, relu);
    }
}

// Offline type-check of a few instantiations (NVRTC instantiates only the one
// the Python op requests, through name_expressions).

// What CI's nvcc build type-checks: tensorconv.ops.tucker_core_tf32x3.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TDC_CORE_CONV_TF32X3(...) template __global__ void tdc_core_conv_tf32x3<__VA_ARGS__>( \
    const float*, const float4*, float*, const float*, const float*, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int, unsigned long long, \
    unsigned long long, unsigned long long, unsigned long long, unsigned long long, \
    unsigned long long, unsigned long long, unsigned long long);
TC_I_TDC_CORE_CONV_TF32X3(1, 1, 1, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(1, 1, 2, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(1, 3, 1, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(1, 3, 2, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(1, 7, 1, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(1, 7, 2, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(2, 2, 1, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(2, 2, 2, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 1, 1, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(3, 1, 2, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 1, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 1, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 1, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 1, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 2, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 2, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 2, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 4, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 4, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 4, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 1, 4, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 1, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 1, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 1, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 1, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 2, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 2, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 2, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 4, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 4, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 4, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 2, 4, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 1, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 1, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 1, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 1, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 2, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 2, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 2, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 4, 1) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 4, 4) TC_I_TDC_CORE_CONV_TF32X3(3, 3, 1, 4, 4, 8)
TC_I_TDC_CORE_CONV_TF32X3(3, 3, 2, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(4, 4, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(4, 4, 2, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(5, 5, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(5, 5, 2, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(6, 6, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(6, 6, 2, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(7, 1, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(7, 1, 2, 2, 2, 2) TC_I_TDC_CORE_CONV_TF32X3(7, 7, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_TF32X3(7, 7, 2, 2, 2, 2)
#undef TC_I_TDC_CORE_CONV_TF32X3
#endif
