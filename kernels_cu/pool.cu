// Max and average pooling, padding handled in the kernel: fp32 NCHW (pool2d_fwd) and
// fp16 NHWC (pool2d_nhwc_half, the fp16 inference engine's; fp32 arithmetic); training's
// max pooling: pool2d_fwd<0> keeping the taps of the maxima, and max_pool2d_train_bwd.
//
// One thread per output element (consecutive threads take consecutive output
// columns in NCHW, consecutive channels in NHWC, so the window reads of a warp
// coalesce).  Max pooling
// skips padded cells (as padding with -inf would) and propagates NaN, as
// PyTorch does; average pooling counts padded cells as zeros in the divisor
// (count_include_pad).  The Python op (tensorconv/ops/pool.py) checks the
// arguments and sizes the grid.
#include <cuda_fp16.h>
#include "tc_common.cuh"

namespace pool {
// Element i of a (planes, rows, cols) array: its plane, row and column.
struct At {
    size_t plane;
    int row, col;
    __device__ At(size_t i, int rows, int cols)
        : plane(i / cols / rows), row((int)((i / cols) % rows)), col((int)(i % cols)) {}
};
}  // namespace pool

// taps (max pooling in training, else nullptr): the window tap r * KW + s of each maximum,
// the first of equal values, the first NaN (the argmax of the CuPy path it replaced), for
// max_pool2d_train_bwd.
template <int AVERAGE>
__global__ void pool2d_fwd(const float* __restrict__ x,       // (N * C, H, W)
                           float* __restrict__ y,             // (N * C, OH, OW)
                           unsigned char* __restrict__ taps,  // (N * C, OH, OW) or nullptr
                           int planes, int H, int W, int OH, int OW, int KH, int KW, int SH,
                           int SW, int PH, int PW)
{
    tc::wait_prior_grids();
    const size_t total = (size_t)planes * OH * OW;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const pool::At o(i, OH, OW);
        const float* plane = x + o.plane * H * W;
        const int h0 = o.row * SH - PH, w0 = o.col * SW - PW;
        float acc = AVERAGE ? 0.f : __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY)
        int tap = -1;
        for (int r = max(0, -h0); r < min(KH, H - h0); ++r) {
            const float* row = plane + (size_t)(h0 + r) * W + w0;
            for (int s = max(0, -w0); s < min(KW, W - w0); ++s) {
                const float v = row[s];
                if (AVERAGE) {
                    acc += v;
                } else if (tap < 0 || (v != v ? acc == acc : v > acc)) {  // NaN wins, stays
                    acc = v;
                    tap = r * KW + s;
                }
            }
        }
        y[i] = AVERAGE ? acc / (KH * KW) : acc;
        if (!AVERAGE && taps != nullptr) taps[i] = (unsigned char)tap;
    }
}

template <int AVERAGE>
__global__ void pool2d_nhwc_half(const __half* __restrict__ x,  // (N, H, W, C)
                                 __half* __restrict__ y,        // (N, OH, OW, C)
                                 int N, int C, int H, int W, int OH, int OW, int KH, int KW,
                                 int SH, int SW, int PH, int PW)
{
    tc::wait_prior_grids();
    const size_t total = (size_t)N * OH * OW * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        size_t rest = i / C;
        const int ow = (int)(rest % OW);
        rest /= OW;
        const int oh = (int)(rest % OH);
        const __half* image = x + (rest / OH) * H * W * C + c;
        const int h0 = oh * SH - PH, w0 = ow * SW - PW;
        float acc = AVERAGE ? 0.f : __int_as_float(0xff800000);  // -inf
        for (int r = max(0, -h0); r < min(KH, H - h0); ++r)
            for (int s = max(0, -w0); s < min(KW, W - w0); ++s) {
                const float v = __half2float(image[((size_t)(h0 + r) * W + w0 + s) * C]);
                if (AVERAGE)
                    acc += v;
                else if (v > acc || v != v)  // NaN wins, and stays
                    acc = v;
            }
        y[i] = __float2half(AVERAGE ? acc / (KH * KW) : acc);
    }
}

// Training max pooling, backward: gx[h, w] = sum of gy over the windows whose maximum
// came from (h, w).  One thread per input value, every value written once (no atomics,
// overlapping windows included).
extern "C" __global__ void max_pool2d_train_bwd(
    const float* __restrict__ gy,            // (N * C, OH, OW)
    const unsigned char* __restrict__ taps,  // (N * C, OH, OW)
    float* __restrict__ gx,                  // (N * C, H, W)
    int planes, int H, int W, int OH, int OW, int KH, int KW, int SH, int SW, int PH, int PW)
{
    tc::wait_prior_grids();
    const size_t total = (size_t)planes * H * W;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const pool::At in(i, H, W);
        const int h = in.row, w = in.col;
        const size_t plane = in.plane * OH * OW;
        // the windows holding (h, w): oh * SH - PH <= h < oh * SH - PH + KH
        const int th = h + PH, tw = w + PW;
        const int oh0 = th < KH ? 0 : (th - KH) / SH + 1, oh1 = min(OH - 1, th / SH);
        const int ow0 = tw < KW ? 0 : (tw - KW) / SW + 1, ow1 = min(OW - 1, tw / SW);
        float acc = 0.f;
        for (int oh = oh0; oh <= oh1; ++oh)
            for (int ow = ow0; ow <= ow1; ++ow) {
                const size_t o = plane + (size_t)oh * OW + ow;
                if (taps[o] == (th - oh * SH) * KW + (tw - ow * SW)) acc += gy[o];
            }
        gx[i] = acc;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.pool.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_POOL2D_FWD(...) template __global__ void pool2d_fwd<__VA_ARGS__>(const float*, \
    float*, unsigned char*, int, int, int, int, int, int, int, int, int, int, int);
TC_I_POOL2D_FWD(0) TC_I_POOL2D_FWD(1)
#undef TC_I_POOL2D_FWD
#define TC_I_POOL2D_NHWC_HALF(...) template __global__ void pool2d_nhwc_half<__VA_ARGS__>( \
    const __half*, __half*, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_POOL2D_NHWC_HALF(0) TC_I_POOL2D_NHWC_HALF(1)
#undef TC_I_POOL2D_NHWC_HALF
#endif
