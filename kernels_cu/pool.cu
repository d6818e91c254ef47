// Max and average pooling over NCHW windows, padding handled in the kernel
// (tc::pool_window: max skips padded cells and propagates NaN; average counts them
// as zeros).
//
// One thread per output element (consecutive threads take consecutive output
// columns, so the window reads of a warp coalesce along a row).  The Python op
// (tensorconv/ops/pool.py) checks the arguments and sizes the grid.
#include "tc_common.cuh"

template <int AVERAGE>
__global__ void pool2d_fwd(const float* __restrict__ x,  // (N * C, H, W)
                           float* __restrict__ y,        // (N * C, OH, OW)
                           int planes, int H, int W, int OH, int OW, int KH, int KW, int SH,
                           int SW, int PH, int PW)
{
    const size_t total = (size_t)planes * OH * OW;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int ow = (int)(i % OW);
        const size_t rest = i / OW;
        const int oh = (int)(rest % OH);
        y[i] = tc::pool_window<AVERAGE>(x + (rest / OH) * H * W, H, W, oh * SH - PH,
                                        ow * SW - PW, KH, KW);
    }
}

#ifndef __CUDACC_RTC__  // offline type-check of both instantiations
template __global__ void pool2d_fwd<0>(const float*, float*, int, int, int, int, int, int, int,
                                       int, int, int, int);
template __global__ void pool2d_fwd<1>(const float*, float*, int, int, int, int, int, int, int,
                                       int, int, int, int);
#endif
