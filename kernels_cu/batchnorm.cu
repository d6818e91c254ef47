// Training-mode batch normalisation over (N, H, W) per channel of an NCHW
// tensor, in a few launches instead of a dozen element-wise passes.
//
// Forward:  bn_partial_sums  (grid C x chunks)  -> per-chunk sum and sum of squares
//           bn_finalize      (one thread/channel) -> mean, invstd, running stats
//           bn_apply         (grid-stride)        -> y = (x - mean) * invstd * gamma + beta
// Backward: bn_backward_sums (grid C x chunks)  -> per-chunk sum(gy), sum(gy * xhat)
//           bn_backward_data (grid C x chunks)  -> gx; chunk 0 also writes dgamma, dbeta
// A ReLU after the normalisation is fused: bn_apply takes `relu`, and the
// backward kernels take the forward output `y` and drop gy where y <= 0.
// Partial sums are in double and combined in a fixed order: the result does not
// depend on scheduling (no atomics), and large means do not cancel.
#include "tc_common.cuh"

namespace bn {
constexpr int THREADS = 256;

// Block-wide sum of two doubles; returns the totals in thread 0.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
    __shared__ double sa[THREADS / 32], sb[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, off);
        b += __shfl_down_sync(0xffffffffu, b, off);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { sa[warp] = a; sb[warp] = b; }
    __syncthreads();
    if (warp == 0) {
        a = lane < THREADS / 32 ? sa[lane] : 0.0;
        b = lane < THREADS / 32 ? sb[lane] : 0.0;
        for (int off = 16; off > 0; off >>= 1) {
            a += __shfl_down_sync(0xffffffffu, a, off);
            b += __shfl_down_sync(0xffffffffu, b, off);
        }
    }
}
}  // namespace bn

// Chunk j of channel c covers images [j * per_chunk, (j + 1) * per_chunk).
extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_partial_sums(const float* __restrict__ x, double* __restrict__ partial,  // (chunks, C, 2)
                int N, int C, int HW, int per_chunk)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x, chunk = blockIdx.y;
    const int n0 = chunk * per_chunk, n1 = min(N, n0 + per_chunk);
    double s = 0.0, ss = 0.0;
    for (int n = n0; n < n1; ++n) {
        const float* p = x + ((size_t)n * C + c) * HW;
        for (int i = threadIdx.x; i < HW; i += bn::THREADS) {
            const double v = p[i];
            s += v;
            ss += v * v;
        }
    }
    bn::block_sum2(s, ss);
    if (threadIdx.x == 0) {
        partial[((size_t)chunk * C + c) * 2] = s;
        partial[((size_t)chunk * C + c) * 2 + 1] = ss;
    }
}

extern "C" __global__ void bn_finalize(
    const double* __restrict__ partial, int chunks, int C, int count,
    float* __restrict__ mean, float* __restrict__ invstd,
    float* __restrict__ running_mean, float* __restrict__ running_var,
    float momentum, float eps)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0, ss = 0.0;
    for (int j = 0; j < chunks; ++j) {
        s += partial[((size_t)j * C + c) * 2];
        ss += partial[((size_t)j * C + c) * 2 + 1];
    }
    const double m = s / count;
    const double var = fmax(ss / count - m * m, 0.0);  // biased: what normalises the batch
    mean[c] = (float)m;
    invstd[c] = (float)(1.0 / sqrt(var + eps));
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * m);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] +
                             momentum * var * count / (count - 1));
}

// Also the inference engine's stand-alone BN (+ ReLU) where BN cannot be folded
// into a neighbouring convolution (DenseNet's pre-activation layers).
extern "C" __global__ void bn_apply(
    const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ invstd, const float* __restrict__ gamma,
    const float* __restrict__ beta, float* __restrict__ y, int C, int HW, size_t total,
    int relu)
{
    tc::wait_prior_grids();
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)((e / HW) % C);
        const float v = (x[e] - mean[c]) * invstd[c] * gamma[c] + beta[c];
        y[e] = relu ? fmaxf(v, 0.f) : v;
    }
}

extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_backward_sums(const float* __restrict__ x, const float* __restrict__ gy,
                 const float* __restrict__ y,  // ReLU output to mask gy with, or nullptr
                 const float* __restrict__ mean, const float* __restrict__ invstd,
                 double* __restrict__ partial,  // (chunks, C, 2): sum gy, sum gy * xhat
                 int N, int C, int HW, int per_chunk)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x, chunk = blockIdx.y;
    const int n0 = chunk * per_chunk, n1 = min(N, n0 + per_chunk);
    const float m = mean[c], is = invstd[c];
    double s = 0.0, sx = 0.0;
    for (int n = n0; n < n1; ++n) {
        const size_t base = ((size_t)n * C + c) * HW;
        for (int i = threadIdx.x; i < HW; i += bn::THREADS) {
            const float g = (y == nullptr || y[base + i] > 0.f) ? gy[base + i] : 0.f;
            s += g;
            sx += (double)g * ((x[base + i] - m) * is);
        }
    }
    bn::block_sum2(s, sx);
    if (threadIdx.x == 0) {
        partial[((size_t)chunk * C + c) * 2] = s;
        partial[((size_t)chunk * C + c) * 2 + 1] = sx;
    }
}

extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_backward_data(const float* __restrict__ x, const float* __restrict__ gy,
                 const float* __restrict__ y,  // ReLU output to mask gy with, or nullptr
                 const float* __restrict__ mean, const float* __restrict__ invstd,
                 const float* __restrict__ gamma, const double* __restrict__ partial,
                 int chunks, float* __restrict__ gx, float* __restrict__ dgamma,
                 float* __restrict__ dbeta, int N, int C, int HW, int per_chunk)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x, chunk = blockIdx.y;
    double s = 0.0, sx = 0.0;  // every block re-adds the few partials of its channel
    for (int j = 0; j < chunks; ++j) {
        s += partial[((size_t)j * C + c) * 2];
        sx += partial[((size_t)j * C + c) * 2 + 1];
    }
    const float count = (float)N * HW;
    const float mg = (float)(s / count), mgx = (float)(sx / count);
    const float m = mean[c], is = invstd[c], scale = gamma[c] * is;
    if (chunk == 0 && threadIdx.x == 0) {
        dgamma[c] = (float)sx;
        dbeta[c] = (float)s;
    }
    const int n0 = chunk * per_chunk, n1 = min(N, n0 + per_chunk);
    for (int n = n0; n < n1; ++n) {
        const size_t base = ((size_t)n * C + c) * HW;
        for (int i = threadIdx.x; i < HW; i += bn::THREADS) {
            const float xhat = (x[base + i] - m) * is;
            const float g = (y == nullptr || y[base + i] > 0.f) ? gy[base + i] : 0.f;
            gx[base + i] = scale * (g - mg - xhat * mgx);
        }
    }
}
