// TDC core convolution (Xiang et al., PPoPP'23, section 5.2 and Listing 2), fp32 NCHW:
// the paper's scheme, the "tdc" variant of tensorconv.ops.core_conv.
//
// A block owns a TH x TW output tile of one image and TC of the C input
// channels; it has one thread per output channel n.  The input cube under the
// tile (TC x IHT x IWT) is staged in shared memory once, with the block's only
// barrier; then every thread walks the TC channels, reading its R x S weights
// from the CRSN-ordered kernel (consecutive threads, consecutive n: coalesced)
// and accumulating its TH x TW outputs in registers; all threads read the same
// cube element at a time (a shared-memory broadcast).  Partial sums of the
// C / TC channel tiles are combined with atomicAdd into the zeroed output
// (plain stores when TC covers C).  The Python op (tensorconv/ops/tucker_core_tdc.py)
// owns tiles, launch geometry and checks.
#include "tc_common.cuh"

template <int TH, int TW, int R, int S>
__global__ void tdc_core_conv(
    const float* __restrict__ x,       // (B, C, H, W)
    const float* __restrict__ w_crsn,  // (C, R, S, N)
    float* __restrict__ y,             // (B, N, OH, OW)
    int C, int H, int W, int N, int OH, int OW, int stride_h, int stride_w,
    int pad_h, int pad_w, int TC, int tiles_w, int tiles_hw, int atomic)
{
    tc::wait_prior_grids();
    extern __shared__ float cube[];  // [TC][IHT][IWT]
    const int IHT = (TH - 1) * stride_h + R, IWT = (TW - 1) * stride_w + S;
    const int b = blockIdx.y;
    const int tile = blockIdx.x % tiles_hw, ct = blockIdx.x / tiles_hw;
    const int oh0 = (tile / tiles_w) * TH, ow0 = (tile % tiles_w) * TW;
    const int c0 = ct * TC, cn = min(TC, C - c0);
    const int ih0 = oh0 * stride_h - pad_h, iw0 = ow0 * stride_w - pad_w;
    const int plane = IHT * IWT;

    const float* xb = x + ((size_t)b * C + c0) * H * W;
    for (int i = threadIdx.x; i < cn * plane; i += blockDim.x) {
        const int c = i / plane, p = i % plane;
        const int ih = ih0 + p / IWT, iw = iw0 + p % IWT;
        cube[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? xb[((size_t)c * H + ih) * W + iw] : 0.f;
    }
    __syncthreads();
    const int n = threadIdx.x;
    if (n >= N) return;  // after the block's only barrier

    float acc[TH][TW];
#pragma unroll
    for (int i = 0; i < TH; ++i)
#pragma unroll
        for (int j = 0; j < TW; ++j) acc[i][j] = 0.f;

    for (int c = 0; c < cn; ++c) {
        float k[R][S];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int s = 0; s < S; ++s)
                k[r][s] = w_crsn[(((size_t)(c0 + c) * R + r) * S + s) * N + n];
        const float* cc = cube + c * plane;
#pragma unroll
        for (int i = 0; i < TH; ++i)
#pragma unroll
            for (int j = 0; j < TW; ++j)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int s = 0; s < S; ++s)
                        acc[i][j] += cc[(i * stride_h + r) * IWT + j * stride_w + s] * k[r][s];
    }

#pragma unroll
    for (int i = 0; i < TH; ++i)
#pragma unroll
        for (int j = 0; j < TW; ++j) {
            const int oh = oh0 + i, ow = ow0 + j;
            if (oh < OH && ow < OW) {
                float* dst = y + (((size_t)b * N + n) * OH + oh) * OW + ow;
                if (atomic) atomicAdd(dst, acc[i][j]);
                else *dst = acc[i][j];
            }
        }
}

// What CI's nvcc build type-checks: tensorconv.ops.tucker_core_tdc.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TDC_CORE_CONV(...) template __global__ void tdc_core_conv<__VA_ARGS__>(const float*, \
    const float*, float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_TDC_CORE_CONV(1, 1, 3, 3) TC_I_TDC_CORE_CONV(1, 2, 3, 3) TC_I_TDC_CORE_CONV(1, 4, 3, 3)
TC_I_TDC_CORE_CONV(1, 7, 3, 3) TC_I_TDC_CORE_CONV(1, 8, 3, 3) TC_I_TDC_CORE_CONV(2, 1, 3, 3)
TC_I_TDC_CORE_CONV(2, 2, 3, 3) TC_I_TDC_CORE_CONV(2, 4, 3, 3) TC_I_TDC_CORE_CONV(2, 7, 3, 3)
TC_I_TDC_CORE_CONV(2, 8, 3, 3) TC_I_TDC_CORE_CONV(4, 1, 3, 3) TC_I_TDC_CORE_CONV(4, 2, 3, 3)
TC_I_TDC_CORE_CONV(4, 4, 3, 3) TC_I_TDC_CORE_CONV(4, 7, 3, 3) TC_I_TDC_CORE_CONV(4, 8, 3, 3)
TC_I_TDC_CORE_CONV(7, 1, 3, 3) TC_I_TDC_CORE_CONV(7, 2, 3, 3) TC_I_TDC_CORE_CONV(7, 4, 3, 3)
TC_I_TDC_CORE_CONV(8, 1, 3, 3) TC_I_TDC_CORE_CONV(8, 2, 3, 3) TC_I_TDC_CORE_CONV(8, 4, 3, 3)
#undef TC_I_TDC_CORE_CONV
#endif
