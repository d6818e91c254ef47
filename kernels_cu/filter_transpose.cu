// A grouped filter bank w (G, P, Q, T) rewritten with its two channel axes swapped:
// (G, Q, P, T), or with the taps ahead of P: (G, Q, T, P).  A data gradient's GEMM reads
// w this way (P = K/G output channels, Q = C/G input channels, T = R*S taps;
// tensorconv/ops/igemm_tf32x3.py), once per layer and step.
//
// A block stages a tile of tp x tq (p, q) pairs, all T taps, in shared memory: it reads
// the tile's tp rows of tq*T contiguous values and writes either tq rows of tp*T values
// or tq*T rows of tp values, so that loads and stores both run along contiguous memory
// (a strided element-wise copy reads 36-byte runs of a 3x3 filter).  A tile is at most
// a few values a thread, all loaded before any is stored: a filter bank is small (64 x 64
// 3x3 filters are 37 K values), so the copy is bound by how many loads are in flight.
// The op (tensorconv/ops/filter_transpose.py) sizes the tile and makes `pitch` odd, so
// that the (G, Q, T, P) stores, which read the tile down a column, hit 32 banks.
#include "tc_common.cuh"

namespace filter_transpose_detail {
constexpr int THREADS = 256, UNROLL = 4;

// x / d for 0 <= x < 2^31, with m = 0xffffffff / d: a multiply-high is x / d or one less
__device__ __forceinline__ int quot(int x, int d, unsigned m) {
    const unsigned q = __umulhi(unsigned(x), m);
    return int(q + ((q + 1) * unsigned(d) <= unsigned(x)));
}
}  // namespace filter_transpose_detail

template <bool TAPS_LAST>
__global__ void __launch_bounds__(256) filter_transpose(
    const float* __restrict__ w,   // (G, P, Q, T)
    float* __restrict__ out,       // (G, Q, P, T), or (G, Q, T, P) with TAPS_LAST
    int P, int Q, int T, int tp, int tq, int pitch,   // pitch >= tq * T: a staged row
    int tiles_p, int tiles_q)      // the grid: G * tiles_p * tiles_q blocks
{
    tc::wait_prior_grids();
    using namespace filter_transpose_detail;
    extern __shared__ float tile[];   // [tp][pitch]
    const int tiles = tiles_p * tiles_q, g = blockIdx.x / tiles, rest = blockIdx.x - g * tiles;
    const int pt = rest / tiles_q, p0 = pt * tp, q0 = (rest - pt * tiles_q) * tq;
    const int np = min(tp, P - p0), nq = min(tq, Q - q0), run = nq * T, n = np * run;
    const size_t base = (size_t)g * P * Q * T, row = (size_t)Q * T;
    const float* src = w + base + (size_t)p0 * row + (size_t)q0 * T;   // the tile's row 0
    const unsigned m_run = 0xffffffffu / unsigned(run);
    for (int e0 = threadIdx.x; e0 < n; e0 += UNROLL * THREADS) {
        float v[UNROLL];
        int at[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {   // every load issued before the first store
            const int e = e0 + u * THREADS, p = quot(e, run, m_run), j = e - p * run;
            at[u] = p * pitch + j;
            if (e < n) v[u] = src[p * row + j];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (e0 + u * THREADS < n) tile[at[u]] = v[u];
    }
    __syncthreads();
    if (TAPS_LAST) {   // out[g, q0 + q, t, p0 : p0 + np] for each tile row r = q * T + t
        float* dst = out + base + (size_t)q0 * T * P + p0;
        const unsigned m_np = 0xffffffffu / unsigned(np);
        for (int e = threadIdx.x; e < n; e += THREADS) {
            const int r = quot(e, np, m_np), p = e - r * np;
            dst[(size_t)r * P + p] = tile[p * pitch + r];
        }
    } else {           // out[g, q0 + q, p0 : p0 + np, :]: np * T values for each q
        float* dst = out + base + ((size_t)q0 * P + p0) * T;
        const int len = np * T;
        const unsigned m_len = 0xffffffffu / unsigned(len), m_t = 0xffffffffu / unsigned(T);
        for (int e = threadIdx.x; e < n; e += THREADS) {
            const int q = quot(e, len, m_len), j = e - q * len, p = quot(j, T, m_t);
            dst[(size_t)q * P * T + j] = tile[p * pitch + q * T + (j - p * T)];
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
