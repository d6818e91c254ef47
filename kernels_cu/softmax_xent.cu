// Softmax cross-entropy of a batch of logits (N, C), float32, labels of type L (int or
// long long): the training step's loss in two launches forward and one backward, instead of
// a dozen element-wise and reduction passes.
//
//   xent_rows<L>  (one warp a row, 8 rows a block) -> logp (N, C) and row i's -logp[label]
//   xent_mean     (one block)                      -> the mean over the rows, summed in a
//                                                     fixed order (deterministic)
//   xent_grad<L>  (grid-stride over N x C)         -> (exp(logp) - onehot(label)) * gy / N
//
// A label outside [0, C) makes its row's loss NaN (the loss shows it; the host check that
// would raise reads the labels back, and the op leaves that to its caller).  The op
// (tensorconv/ops/softmax_xent.py) checks the arguments and sizes the grids.
#include "tc_common.cuh"

namespace xent {
constexpr int THREADS = 256, ROWS = THREADS / 32;

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
}  // namespace xent

template <typename L>
__global__ void __launch_bounds__(xent::THREADS)
xent_rows(const float* __restrict__ logits, const L* __restrict__ labels,
          float* __restrict__ logp, double* __restrict__ row_loss, int N, int C)
{
    tc::wait_prior_grids();
    const int lane = threadIdx.x % 32, i = blockIdx.x * xent::ROWS + threadIdx.x / 32;
    if (i >= N) return;
    const float* row = logits + (size_t)i * C;
    float m = -__int_as_float(0x7f800000);   // -inf
    for (int j = lane; j < C; j += 32) m = fmaxf(m, row[j]);
    m = xent::warp_max(m);
    float s = 0.f;
    for (int j = lane; j < C; j += 32) s += expf(row[j] - m);
    const float lse = logf(xent::warp_sum(s));
    float* out = logp + (size_t)i * C;
    for (int j = lane; j < C; j += 32) out[j] = (row[j] - m) - lse;
    if (lane == 0) {
        const long long label = (long long)labels[i];
        row_loss[i] = label >= 0 && label < C ? -(double)((row[label] - m) - lse)
                                              : __longlong_as_double(0x7ff8000000000000ll);
    }
}

extern "C" __global__ void __launch_bounds__(xent::THREADS)
xent_mean(const double* __restrict__ row_loss, float* __restrict__ loss, int N)
{
    tc::wait_prior_grids();
    __shared__ double part[xent::THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < N; i += xent::THREADS) s += row_loss[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = xent::THREADS / 2; half > 0; half >>= 1) {   // a fixed tree: deterministic
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] / N);
}

// gy: the loss's gradient (one value on the device, so a captured step needs no host value).
template <typename L>
__global__ void __launch_bounds__(xent::THREADS)
xent_grad(const float* __restrict__ logp, const L* __restrict__ labels,
          const float* __restrict__ gy, float* __restrict__ g, int N, int C)
{
    tc::wait_prior_grids();
    const float scale = gy[0] / (float)N;
    const size_t total = (size_t)N * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(e / C), j = (int)(e - (size_t)i * C);
        float v = expf(logp[e]);
        if ((long long)labels[i] == j) v -= 1.f;
        g[e] = v * scale;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.softmax_xent.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_XENT_GRAD(...) template __global__ void xent_grad<__VA_ARGS__>(const float*, \
    const __VA_ARGS__*, const float*, float*, int, int);
TC_I_XENT_GRAD(int) TC_I_XENT_GRAD(long long)
#undef TC_I_XENT_GRAD
#define TC_I_XENT_ROWS(...) template __global__ void xent_rows<__VA_ARGS__>(const float*, \
    const __VA_ARGS__*, float*, double*, int, int);
TC_I_XENT_ROWS(int) TC_I_XENT_ROWS(long long)
#undef TC_I_XENT_ROWS
#endif
