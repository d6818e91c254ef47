// Shared device helpers for every tensorconv kernel family.
#pragma once

namespace tc {

// Programmatic dependent launch (sm_90): in the inference engine's CUDA graph a kernel is
// launched as the blocks of the kernel before it exit, not after that kernel has finished
// and flushed (tensorconv/graph.py), so every kernel calls this before it reads or writes
// any global memory that earlier kernels write or read.  It returns once every earlier
// kernel of the graph has finished and its writes are visible; in an ordinary launch it
// returns at once.  No kernel lets its dependents launch earlier still (launch_dependents
// right after this wait): the engines were slower that way (docs/notes/graph.md).
__device__ __forceinline__ void wait_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

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
