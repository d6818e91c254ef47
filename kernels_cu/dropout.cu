// Dropout whose mask is a pure function of (seed, step, element index): counter-based, so
// the same call gives the same mask on the GPU and in NumPy (tensorconv/reference/
// dropout.py, the same integer arithmetic), a checkpoint that stores the step resumes the
// same stream, and a captured training step replays it with a fresh mask each time: the
// step is read from device memory and advanced there by dropout_step, so the graph needs no
// host value.
//
// Element i of call `step` is kept when the top 24 bits of
//     mix64(mix64(seed * GOLDEN + step) ^ ((offset + i) * ODD))
// are >= keep_from (= round(p * 2^24), made by the op), and then scaled by 1 / (1 - p).
// `offset` places the array in a larger one: a data-parallel rank's rows of a global batch
// draw the elements the one-GPU run draws for those rows.
// mix64 is SplitMix64's finaliser: every input bit moves every output bit, so consecutive
// indices and consecutive steps give unrelated draws.  The op (tensorconv/ops/dropout.py)
// checks the arguments and sizes the grid.
#include "tc_common.cuh"

namespace dropout {
constexpr unsigned long long GOLDEN = 0x9E3779B97F4A7C15ull, ODD = 0xD1B54A32D192ED03ull;

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
}  // namespace dropout

// y = x * mask * scale, mask[i] = 1 where kept (kept for the backward pass).
template <typename T>
__global__ void dropout_fwd(const T* __restrict__ x, T* __restrict__ y,
                            unsigned char* __restrict__ mask,
                            const long long* __restrict__ step,   // (1,), read only here
                            unsigned long long seed, unsigned int keep_from, T scale,
                            long long offset, long long n)
{
    tc::wait_prior_grids();
    const unsigned long long key = dropout::mix64(seed * dropout::GOLDEN
                                                  + (unsigned long long)*step);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned int draw = (unsigned int)(
            dropout::mix64(key ^ ((unsigned long long)(offset + i) * dropout::ODD)) >> 40);
        const bool keep = draw >= keep_from;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : T(0);
    }
}

// gx = gy * mask * scale.
template <typename T>
__global__ void dropout_bwd(const T* __restrict__ gy, const unsigned char* __restrict__ mask,
                            T* __restrict__ gx, T scale, long long n)
{
    tc::wait_prior_grids();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        gx[i] = mask[i] ? gy[i] * scale : T(0);
}

// The next call's step: one thread, launched after the forward kernel that read it.
extern "C" __global__ void dropout_step(long long* step)
{
    tc::wait_prior_grids();
    if (blockIdx.x == 0 && threadIdx.x == 0) *step += 1;
}

// What CI's nvcc build type-checks: tensorconv.ops.dropout.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_DROPOUT_BWD(...) template __global__ void dropout_bwd<__VA_ARGS__>( \
    const __VA_ARGS__*, const unsigned char*, __VA_ARGS__*, __VA_ARGS__, long long);
TC_I_DROPOUT_BWD(double) TC_I_DROPOUT_BWD(float)
#undef TC_I_DROPOUT_BWD
#define TC_I_DROPOUT_FWD(...) template __global__ void dropout_fwd<__VA_ARGS__>( \
    const __VA_ARGS__*, __VA_ARGS__*, unsigned char*, const long long*, unsigned long long, \
    unsigned int, __VA_ARGS__, long long, long long);
TC_I_DROPOUT_FWD(double) TC_I_DROPOUT_FWD(float)
#undef TC_I_DROPOUT_FWD
#endif
