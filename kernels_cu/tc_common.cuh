// Shared device helpers for every tensorconv kernel family.
#pragma once

namespace tc {

// Integer ceil-division, used for tile counts that must cover a ragged edge.
__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

// A convolution's epilogue on output value v of channel `channel` at flat index
// `at`: + bias[channel], + residual[at] (laid out like the output), then ReLU;
// bias and residual may be null.
__device__ __forceinline__ float conv_epilogue(float v, const float* bias, int channel,
                                               const float* residual, size_t at, int relu) {
    if (bias != nullptr) v += bias[channel];
    if (residual != nullptr) v += residual[at];
    return relu ? fmaxf(v, 0.f) : v;
}

}  // namespace tc
