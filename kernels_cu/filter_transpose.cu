// A grouped filter bank w (G, P, Q, T) rewritten with its two channel axes swapped:
// (G, Q, P, T), or with the taps ahead of P: (G, Q, T, P).  A data gradient's GEMM reads
// w this way (P = K/G output channels, Q = C/G input channels, T = R*S taps;
// tensorconv/ops/igemm_tf32x3.py), once per layer and step.
//
// A block stages a tile of tp x tq (p, q) pairs, all T taps, in shared memory: it reads
// the tile's tp rows of tq*T contiguous values and writes either tq rows of tp*T values
// or tq*T rows of tp values, so that loads and stores both run along contiguous memory
// (a strided element-wise copy reads 36-byte runs of a 3x3 filter and moves about a third
// of the memory's bandwidth).  The op (tensorconv/ops/filter_transpose.py) sizes the tile
// and makes `pitch` odd, so that the (G, Q, T, P) stores, which read the tile down a
// column, hit 32 different banks.
#include "tc_common.cuh"

template <bool TAPS_LAST>
__global__ void __launch_bounds__(256) filter_transpose(
    const float* __restrict__ w,   // (G, P, Q, T)
    float* __restrict__ out,       // (G, Q, P, T), or (G, Q, T, P) with TAPS_LAST
    int P, int Q, int T, int tp, int tq, int pitch,   // pitch >= tq * T: a staged row
    int tiles_p, int tiles_q)      // the grid: G * tiles_p * tiles_q blocks
{
    tc::wait_prior_grids();
    extern __shared__ float tile[];   // [tp][pitch]
    const int b = blockIdx.x, g = b / (tiles_p * tiles_q), rest = b - g * tiles_p * tiles_q;
    const int p0 = (rest / tiles_q) * tp, q0 = (rest % tiles_q) * tq;
    const int np = min(tp, P - p0), nq = min(tq, Q - q0);
    const size_t base = (size_t)g * P * Q * T;
    const int run = nq * T;           // w[g, p0 + p, q0 : q0 + nq, :] is contiguous
    for (int p = threadIdx.y; p < np; p += blockDim.y) {
        const float* src = w + base + ((size_t)(p0 + p) * Q + q0) * T;
        for (int j = threadIdx.x; j < run; j += blockDim.x) tile[p * pitch + j] = src[j];
    }
    __syncthreads();
    if (TAPS_LAST) {                  // out[g, q, t, p0 : p0 + np] for each r = q * T + t
        for (int r = threadIdx.y; r < run; r += blockDim.y) {
            float* dst = out + base + ((size_t)q0 * T + r) * P + p0;
            for (int p = threadIdx.x; p < np; p += blockDim.x) dst[p] = tile[p * pitch + r];
        }
    } else {                          // out[g, q, p0 : p0 + np, :] for each q
        const int len = np * T;
        for (int q = threadIdx.y; q < nq; q += blockDim.y) {
            float* dst = out + base + ((size_t)(q0 + q) * P + p0) * T;
            for (int j = threadIdx.x; j < len; j += blockDim.x) {
                const int p = j / T;
                dst[j] = tile[p * pitch + q * T + (j - p * T)];
            }
        }
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.filter_transpose.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_FILTER_TRANSPOSE(...) template __global__ void filter_transpose<__VA_ARGS__>( \
    const float*, float*, int, int, int, int, int, int, int, int);
TC_I_FILTER_TRANSPOSE(false) TC_I_FILTER_TRANSPOSE(true)
#undef TC_I_FILTER_TRANSPOSE
#endif
