// A 1x1 sparse convolution unrolled for one layer's weights (any stride and padding, NCHW,
// fp32), nothing staged: each thread reads its pixel's input words straight through the L1
// at immediate channel offsets and applies the nonzeros as fma's with immediate weights.
//
// A 1x1 filter reads one input position a pixel, the same for every channel, so a word
// serves only the rows with a nonzero in its channel: staging it in shared memory (the
// tiled kernel, sparse_unrolled.cu) buys no reuse across taps, and walking a row's
// (weight, offset) table at run time (sparse_csr_pointwise in sparse_conv.cu) costs a table
// read and an address per multiply-add.  Here the host (tensorconv/ops/sparse_unrolled_1x1.py)
// writes the body, SPARSE_UNROLLED_1X1_BODY, for a given kernel matrix: a block owns RB
// output rows ("a group") and T consecutive output pixels, one a thread; for every input
// channel that any row of the group uses the thread loads its word once and adds it into
// each such row's sum, kept in a register.
//
// The body defines namespace pu: the layer's constants and group(g, xp, inside, out), which
// calls the function holding group g's code (a switch; each group a function of its own, not
// inlined, so the front end's time grows with the body's length, not faster: one function
// holding every group took nvcc minutes on a 512 x 256 layer).  A group function writes its
// rows through Out's epilogue (bias, residual, ReLU, or accumulate onto what dense blocks
// wrote).  Kernels are compiled per layer (CuPy caches them on disk by the body's path, which
// names its content's hash).
#include "tc_common.cuh"
#include "sparse_unrolled.cuh"   // SU_FMA

namespace pu {
// Where a thread writes: output (image, 0, pixel) at `at`, the epilogue's operands.
struct Out {
    float* __restrict__ y;
    const float* __restrict__ bias;
    const float* __restrict__ residual;
    size_t at;
    int accumulate, relu;
};
// Row k's sum into the output (defined below, once the body has set OH and OW).
__device__ __forceinline__ void store(const Out& o, int k, float v);
}  // namespace pu

#ifndef SPARSE_UNROLLED_1X1_BODY
#define SPARSE_UNROLLED_1X1_BODY "sparse_unrolled_1x1_example.inc"
#endif
#include SPARSE_UNROLLED_1X1_BODY

namespace pu {
// Row k's sum v (k a constant in the generated code), through the epilogue.
__device__ __forceinline__ void store(const Out& o, int k, float v) {
    const size_t at = o.at + (size_t)k * (OH * OW);
    if (o.accumulate) v += o.y[at];
    o.y[at] = tc::conv_epilogue(v, o.bias, k, o.residual, at, o.relu);
}
}  // namespace pu

// Grid: (pixel blocks of T, groups).  Block: T threads, one output pixel each.
extern "C" __global__ void __launch_bounds__(pu::T) sparse_unrolled_1x1(
    const float* __restrict__ x, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ y, int n, int accumulate,
    int relu)
{
    tc::wait_prior_grids();
    using namespace pu;
    const int p = blockIdx.x * T + threadIdx.x;
    if (p >= n * (OH * OW)) return;           // no barrier follows
    const int nn = p / (OH * OW), rem = p - nn * (OH * OW);
    const int oy = rem / OW, ox = rem - oy * OW;
    const int iy = oy * SH - PH, ix = ox * SW - PW;
    // a 1x1 tap is wholly inside the image or wholly in the padding (sums of zero)
    const bool inside = (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W;
    const float* xp = x + (size_t)nn * C * H * W + (inside ? iy * W + ix : 0);
    group(blockIdx.y, xp, inside, Out{y, bias, residual, (size_t)nn * K * (OH * OW) + rem,
                                      accumulate, relu});
}
