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

// One pooling window of a plane (H x W) whose top-left cell is (h0, w0), possibly in
// the padding: max skips padded cells (as padding with -inf would) and propagates
// NaN, as PyTorch does; average counts padded cells as zeros (count_include_pad).
// 3 x 3 windows (every CNN stem's) load all nine cells at once: the general loop
// issues one dependent load after another, which a block with few windows per
// thread cannot hide.
template <int AVERAGE>
__device__ __forceinline__ float pool_window(const float* plane, int H, int W, int h0, int w0,
                                             int KH, int KW) {
    const float pad = AVERAGE ? 0.f : __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY)
    float acc = pad;
    if (KH == 3 && KW == 3) {
        float v[9];
#pragma unroll
        for (int i = 0; i < 9; ++i) {
            const int h = h0 + i / 3, w = w0 + i % 3;
            v[i] = (h >= 0 && h < H && w >= 0 && w < W) ? plane[(size_t)h * W + w] : pad;
        }
#pragma unroll
        for (int i = 0; i < 9; ++i) {
            if (AVERAGE)
                acc += v[i];
            else if (v[i] > acc || v[i] != v[i])
                acc = v[i];
        }
        return AVERAGE ? acc / 9 : acc;
    }
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
    return AVERAGE ? acc / (KH * KW) : acc;
}

}  // namespace tc
