// Max and average pooling over NCHW windows, padding handled in the kernel.
//
// One thread per output element (consecutive threads take consecutive output
// columns, so the window reads of a warp coalesce along a row).  Max pooling
// skips padded cells (as padding with -inf would) and propagates NaN, as
// PyTorch does; average pooling counts padded cells as zeros in the divisor
// (count_include_pad).  The Python op (tensorconv/ops/pool.py) checks the
// arguments and sizes the grid.
#include "tc_common.cuh"

template <int AVERAGE>
__global__ void pool2d_fwd(const float* __restrict__ x,  // (N * C, H, W)
                           float* __restrict__ y,        // (N * C, OH, OW)
                           int planes, int H, int W, int OH, int OW, int KH, int KW, int SH,
                           int SW, int PH, int PW)
{
    tc::wait_prior_grids();
    const size_t total = (size_t)planes * OH * OW;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int ow = (int)(i % OW);
        const size_t rest = i / OW;
        const int oh = (int)(rest % OH);
        const float* plane = x + (rest / OH) * H * W;
        const int h0 = oh * SH - PH, w0 = ow * SW - PW;
        float acc = AVERAGE ? 0.f : __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY)
        for (int r = max(0, -h0); r < min(KH, H - h0); ++r) {
            const float* row = plane + (size_t)(h0 + r) * W + w0;
            for (int s = max(0, -w0); s < min(KW, W - w0); ++s) {
                const float v = row[s];
                if (AVERAGE)
                    acc += v;
                else if (v > acc || v != v)  // NaN wins, and stays
                    acc = v;
            }
        }
        y[i] = AVERAGE ? acc / (KH * KW) : acc;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.pool.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_POOL2D_FWD(...) template __global__ void pool2d_fwd<__VA_ARGS__>(const float*, \
    float*, int, int, int, int, int, int, int, int, int, int, int);
TC_I_POOL2D_FWD(0) TC_I_POOL2D_FWD(1)
#undef TC_I_POOL2D_FWD
#endif
