// The data gradient of a 1x1, padding-0 convolution of stride (sh, sw) from its compact
// GEMM: input pixel (h, w) took output pixel (h / sh, w / sw) where both divide, nothing
// elsewhere, so gx is the compact gradient (N*C, OH, OW) spread over the input's grid with
// zeros between, plus an addend (a shortcut's gradient) where one is given.
//
// One thread an output value, in order: the stores and the addend's loads run along
// contiguous memory (the phase-split implicit GEMM wrote this gradient a quarter at a
// time, every other value of a row, and each phase without a tap was a block of zeros of
// its own).  The divisions by the plane, the row and the strides go through multiply-highs
// with the op's constants, m = floor((2^32 - 1) / d) (tensorconv/ops/zero_insert.py).
#include "tc_common.cuh"

namespace zero_insert_detail {
// x / d for 0 <= x < 2^31: umulhi(x, m) is x / d or one less
__device__ __forceinline__ unsigned quot(unsigned x, unsigned d, unsigned m) {
    const unsigned q = __umulhi(x, m);
    return q + ((q + 1) * d <= x);
}
}  // namespace zero_insert_detail

extern "C" __global__ void __launch_bounds__(256) zero_insert(
    const float* __restrict__ comp,     // (planes, OH, OW)
    const float* __restrict__ addend,   // (planes, H, W), or null
    float* __restrict__ out,            // (planes, H, W)
    int total, int HW, int W, int OHW, int OW, int sh, int sw,   // total = planes * H * W
    unsigned m_hw, unsigned m_w, unsigned m_sh, unsigned m_sw)
{
    tc::wait_prior_grids();
    using zero_insert_detail::quot;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const unsigned plane = quot(i, HW, m_hw), at = i - plane * HW;
        const unsigned h = quot(at, W, m_w), w = at - h * W;
        const unsigned oh = quot(h, sh, m_sh), ow = quot(w, sw, m_sw);
        float v = oh * sh == h && ow * sw == w ? comp[plane * OHW + oh * OW + ow] : 0.f;
        if (addend != nullptr) v += addend[i];
        out[i] = v;
    }
}
