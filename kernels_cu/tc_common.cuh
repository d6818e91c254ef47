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

// Another launch's split reduction, carried by this launch's blocks before their own work
// (which saves the reduction a launch of its own): dst[v] = the sum of the `splits` arrays
// of `size` floats laid end to end in `src`, values [b·per, (b+1)·per) in block b of
// `blocks`, per = ceil(size / blocks) <= T (one pass; the caller checks).  A value's
// `lanes` threads (a power of two up to 32, as many as fit) each add every lanes-th split
// in order, then meet in a fixed xor tree, and its first thread writes it: the same order
// every launch of the same grid.  Called by every thread of the block (shuffles).
template <int T>
__device__ __forceinline__ void carried_split_sum(const float* __restrict__ src,
                                                  float* __restrict__ dst, int splits,
                                                  int size, int block, int blocks) {
    const int per = (size + blocks - 1) / blocks;
    int lanes = 1;
    while (lanes < 32 && 2 * lanes * per <= T) lanes *= 2;
    const int li = threadIdx.x % lanes, v = block * per + threadIdx.x / lanes;
    const bool mine = threadIdx.x / lanes < per && v < size;
    float s = 0.f;
    if (mine) {
#pragma unroll 8
        for (int z = li; z < splits; z += lanes) s += src[(size_t)z * size + v];
    }
    for (int o = lanes / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (mine && li == 0) dst[v] = s;
}

// `p`, with its provenance hidden from the compiler.  Given a pointer computed from
// run-time offsets (x + n·C·HW) and then indexed by 32-bit offsets, nvcc folds the whole
// sum into every access as 64-bit integer arithmetic (four to six instructions an
// address); from an opaque base an unsigned 32-bit offset costs one wide multiply-add.
template <class T>
__device__ __forceinline__ T* opaque(T* p) {
    unsigned long long v;
    asm("mov.b64 %0, %1;" : "=l"(v) : "l"(reinterpret_cast<unsigned long long>(p)));
    return reinterpret_cast<T*>(v);
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
