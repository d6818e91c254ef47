#include "tc_common.cuh"

// An empty kernel: its launch time is the floor every tiny kernel pays
// (measured by tensorconv.bench.launch_floor, eagerly and inside a CUDA graph).
extern "C" __global__ void empty_kernel() { tc::wait_prior_grids(); }

// A layer boundary at its cheapest: every block reads a value another block wrote in the
// step before.  One step per launch (dependent launches in a CUDA graph) ...
extern "C" __global__ void dependent_step(float* buf, int step)
{
    tc::wait_prior_grids();
    const int nb = gridDim.x;
    if (threadIdx.x == 0)
        buf[((step + 1) & 1) * nb + blockIdx.x] = buf[(step & 1) * nb + (blockIdx.x + 1) % nb] + 1.f;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// ... or all steps in one persistent kernel, separated by grid-wide barriers.  Every block
// must be resident at once (the caller launches one per SM).  The last block to arrive
// resets the counter and bumps the generation the others wait on, so the barrier needs no
// reset between launches.
extern "C" __global__ void barrier_steps(float* buf, unsigned* count, unsigned* gen, int steps)
{
    tc::wait_prior_grids();
    const int nb = gridDim.x;
    for (int s = 0; s < steps; ++s) {
        if (threadIdx.x == 0) {
            const float v = *(volatile float*)(buf + (s & 1) * nb + (blockIdx.x + 1) % nb);
            buf[((s + 1) & 1) * nb + blockIdx.x] = v + 1.f;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned g = ld_acquire(gen);  // before arriving: the last arrival bumps it
            __threadfence();
            if (atomicAdd(count, 1u) == nb - 1) {
                atomicExch(count, 0u);
                __threadfence();
                atomicAdd(gen, 1u);
            } else {
                while (ld_acquire(gen) == g) {}
            }
        }
        __syncthreads();
    }
}
