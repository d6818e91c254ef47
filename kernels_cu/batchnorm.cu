// Training-mode batch normalisation over (N, H, W) per channel of an NCHW
// tensor, in a few launches instead of a dozen element-wise passes.
//
// Forward:  bn_partial_sums  (grid C x chunks)  -> per-chunk sum and sum of squares
//           bn_normalize     (grid C x chunks)  -> y = (x - mean) * invstd * gamma + beta
//                                                  (+ residual: a residual block's sum);
//                                                  every block adds its channel's few
//                                                  partials itself, chunk 0's also writes
//                                                  mean, invstd and the running statistics
// bn_apply (grid-stride) is the same map with the statistics given (the inference engine).
// Backward: bn_backward_sums (grid C x chunks)  -> per-chunk sum(gy), sum(gy * xhat)
//           bn_backward_data (grid C x chunks)  -> gx; chunk 0 also writes dgamma, dbeta
// A channel's N x HW values are walked as one flat run of units (4 values, a float4, where
// HW is a multiple of 4 and the arrays are 16-byte aligned; else 1), split into chunks of
// equal length: a 4x4 map keeps every thread of a block busy as a 32x32 one does.
// A ReLU after the normalisation is fused: the forward kernels take `relu`, and the
// backward kernels drop gy where the forward output y <= 0: read from `y`, or, without a
// residual, recomputed from x and `beta` (one pass of reading y fewer; see bn::Mask).  So is a residual
// block's shortcut sum before that ReLU: the forward adds `residual`, and bn_backward_data
// writes the masked gy (the shortcut's gradient) where asked, so that neither the sum nor
// the mask is a pass of its own.
// Partial sums are in double and combined in a fixed order: the result does not
// depend on scheduling (no atomics), and large means do not cancel.
#include "tc_common.cuh"
#include "tc_cluster.cuh"

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

// The units of one channel: unit u is values [i * V, i * V + V) of image n's plane, with
// n = u / U, i = u % U (U = HW / V units per plane).  fd_u: the host's FastDiv constants
// of U, or 0 where U is too large for them.
struct Units {
    int U;
    tdcx::FastDiv by_u;
    bool fast;
    __device__ Units(int units, unsigned long long fd_u)
        : U(units), by_u(tdcx::FastDiv::of(fd_u)), fast(fd_u != 0ull) {}
    // The flat offset of unit u of channel c (V values per unit) in an (N, C, HW) array.
    template <bool FAST>
    __device__ __forceinline__ size_t offset(int u, int C, int HW, int c, int V) const {
        const int n = FAST ? by_u.div(u) : u / U;
        return ((size_t)n * C + c) * HW + (size_t)(u - n * U) * V;
    }
};

// For each of this thread's units of channel c in [u0, u1), in order: use(at, load(at)),
// `at` the unit's flat offset.  Four units are loaded before any is used: one at a time
// (ptxas did not hoist the next load above the last one's sums, even unrolled), a thread
// kept one load in flight, and planes of scalar units (HW not a multiple of 4) ran 1.3x
// slower.  The order of a thread's units is kept, so its sums have the same bits.
template <bool FAST, class Load, class Use>
__device__ __forceinline__ void for_units_by(const Units& un, int C, int HW, int c, int V,
                                             int u0, int u1, Load&& load, Use&& use) {
    constexpr int K = 4;
    for (int u = u0 + (int)threadIdx.x; u < u1; u += K * THREADS) {
        size_t at[K];
        decltype(load(size_t(0))) d[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {   // past u1: the last unit again (no branch, no use)
            at[k] = un.offset<FAST>(min(u + k * THREADS, u1 - 1), C, HW, c, V);
            d[k] = load(at[k]);
        }
#pragma unroll
        for (int k = 0; k < K; ++k)
            if (u + k * THREADS < u1) use(at[k], d[k]);
    }
}

template <int V, class Load, class Use>
__device__ __forceinline__ void for_units(const Units& un, int C, int HW, int c, int u0,
                                          int u1, Load&& load, Use&& use) {
    if (un.fast)   // the divider is chosen once, outside the loop
        for_units_by<true>(un, C, HW, c, V, u0, u1, load, use);
    else
        for_units_by<false>(un, C, HW, c, V, u0, u1, load, use);
}

template <int V>
__device__ __forceinline__ void load(const float* __restrict__ p, float (&v)[V]) {
    if constexpr (V == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else {
        v[0] = __ldg(p);
    }
}

// Channel c's affine map y = fmaf(x, a, b), each product and difference rounded as
// written (nothing left to the compiler's contraction): the forward kernels and Mask's
// recomputation make the same bits from the same mean, invstd, gamma and beta.
__device__ __forceinline__ void coefficients(float is, float gamma, float beta, float mean,
                                             float& a, float& b) {
    a = __fmul_rn(is, gamma);
    b = __fsub_rn(beta, __fmul_rn(mean, a));
}

// Where the backward kernels drop gy, as the forward's fused ReLU did: nowhere (no y, not
// from_x); where its output y <= 0; or, from_x (a ReLU without a residual), where its
// input fmaf(x, a, b) <= 0, recomputed with the forward's coefficients: the same test on
// the same bits, without a pass over y.
struct Mask {
    const float* y;
    bool from_x;
    float a, b;
};

// x and gy at `at`, gy dropped where `mask` says the ReLU did.
template <int V>
__device__ __forceinline__ void load_grad(const float* __restrict__ x,
                                          const float* __restrict__ gy, const Mask& mask,
                                          size_t at, float (&xv)[V], float (&g)[V]) {
    load<V>(x + at, xv);
    load<V>(gy + at, g);
    if (mask.y != nullptr) {
        float yv[V];
        load<V>(mask.y + at, yv);
#pragma unroll
        for (int j = 0; j < V; ++j) g[j] = yv[j] > 0.f ? g[j] : 0.f;
    } else if (mask.from_x) {
#pragma unroll
        for (int j = 0; j < V; ++j) g[j] = fmaf(xv[j], mask.a, mask.b) > 0.f ? g[j] : 0.f;
    }
}

// The Mask of channel c: y (or nullptr), or from x where beta is given.
__device__ __forceinline__ Mask mask_of(const float* y, const float* gamma, const float* beta,
                                        int c, float m, float is) {
    Mask mask{y, y == nullptr && beta != nullptr, 0.f, 0.f};
    if (mask.from_x) coefficients(is, gamma[c], beta[c], m, mask.a, mask.b);
    return mask;
}

template <int V>
__device__ __forceinline__ void store(float* __restrict__ p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        p[0] = v[0];
    }
}

// A unit's values of A arrays (what for_units' load returns).
template <int V, int A>
struct Vals {
    float v[A][V];
};

// Sum and sum of squares of channel c's units [u0, u1), in thread 0.
template <int V>
__device__ void partial_sums(const float* __restrict__ x, int C, int HW, int c, int u0, int u1,
                             const Units& un, double& s, double& ss) {
    for_units<V>(
        un, C, HW, c, u0, u1,
        [&](size_t at) {
            Vals<V, 1> d;
            load<V>(x + at, d.v[0]);
            return d;
        },
        [&](size_t, const Vals<V, 1>& d) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
                s += d.v[0][j];
                ss += (double)d.v[0][j] * d.v[0][j];
            }
        });
    block_sum2(s, ss);
}

// Sum of gy and of gy * xhat over channel c's units [u0, u1) (gy masked by `mask`).
template <int V>
__device__ void backward_sums(const float* __restrict__ x, const float* __restrict__ gy,
                              const Mask& mask, float m, float is, int C, int HW,
                              int c, int u0, int u1, const Units& un, double& s, double& sx) {
    for_units<V>(
        un, C, HW, c, u0, u1,
        [&](size_t at) {
            Vals<V, 2> d;
            load_grad<V>(x, gy, mask, at, d.v[0], d.v[1]);
            return d;
        },
        [&](size_t, const Vals<V, 2>& d) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
                s += d.v[1][j];
                sx += (double)d.v[1][j] * ((d.v[0][j] - m) * is);
            }
        });
    block_sum2(s, sx);
}

template <int V>
__device__ void backward_data(const float* __restrict__ x, const float* __restrict__ gy,
                              const Mask& mask, float* __restrict__ gx,
                              float* __restrict__ gy_out, float m, float is, float scale,
                              float mg, float mgx, int C, int HW, int c, int u0, int u1,
                              const Units& un) {
    for_units<V>(
        un, C, HW, c, u0, u1,
        [&](size_t at) {
            Vals<V, 2> d;
            load_grad<V>(x, gy, mask, at, d.v[0], d.v[1]);
            return d;
        },
        [&](size_t at, const Vals<V, 2>& d) {
            float out[V];
#pragma unroll
            for (int j = 0; j < V; ++j)
                out[j] = scale * (d.v[1][j] - mg - (d.v[0][j] - m) * is * mgx);
            store<V>(gx + at, out);
            if (gy_out != nullptr) store<V>(gy_out + at, d.v[1]);
        });
}

// y = relu?(x * a + b + r) on V values (r: the residual's, when there is one).
template <int V>
__device__ __forceinline__ void affine(float (&v)[V], const float (&r)[V], bool residual,
                                       float a, float b, int relu) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
        float t = fmaf(v[j], a, b);
        if (residual) t += r[j];
        v[j] = relu ? fmaxf(t, 0.f) : t;
    }
}

// Channel c's mean and invstd from its chunks' (sum, sum of squares), added in chunk order.
__device__ __forceinline__ void statistics(const double* __restrict__ partial, int chunks,
                                           int C, int c, int count, float eps, double& m,
                                           double& var) {
    double s = 0.0, ss = 0.0;
    for (int j = 0; j < chunks; ++j) {
        s += partial[((size_t)j * C + c) * 2];
        ss += partial[((size_t)j * C + c) * 2 + 1];
    }
    m = s / count;
    var = fmax(ss / count - m * m, 0.0);  // biased: what normalises the batch
}

// Channel c's units [u0, u1) through the affine map (a, b), the residual and the ReLU.
template <int V>
__device__ void normalize(const float* __restrict__ x, const float* __restrict__ residual,
                          float* __restrict__ y, float a, float b, int relu, int C, int HW,
                          int c, int u0, int u1, const Units& un) {
    for_units<V>(
        un, C, HW, c, u0, u1,
        [&](size_t at) {
            Vals<V, 2> d;
            load<V>(x + at, d.v[0]);
            if (residual != nullptr) load<V>(residual + at, d.v[1]);
            return d;
        },
        [&](size_t at, Vals<V, 2> d) {
            affine<V>(d.v[0], d.v[1], residual != nullptr, a, b, relu);
            store<V>(y + at, d.v[0]);
        });
}

template <int V>
__device__ void apply(const float* __restrict__ x, const float* __restrict__ mean,
                      const float* __restrict__ invstd, const float* __restrict__ gamma,
                      const float* __restrict__ beta, const float* __restrict__ residual,
                      float* __restrict__ y, int C, int HW, size_t units, int relu) {
    const int U = HW / V;
    const bool narrow = units < (1ull << 31);   // 32-bit index arithmetic
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < units;
         e += (size_t)gridDim.x * blockDim.x) {
        const int c = narrow ? (int)(((unsigned)e / (unsigned)U) % (unsigned)C)
                             : (int)((e / U) % C);
        float a, b;
        coefficients(invstd[c], gamma[c], beta[c], mean[c], a, b);
        float v[V], r[V];
        load<V>(x + e * V, v);
        if (residual != nullptr) load<V>(residual + e * V, r);
        affine<V>(v, r, residual != nullptr, a, b, relu);
        store<V>(y + e * V, v);
    }
}
}  // namespace bn

// Chunk j of channel c covers its units [j * per_chunk, (j + 1) * per_chunk).
extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_partial_sums(const float* __restrict__ x, double* __restrict__ partial,  // (chunks, C, 2)
                int N, int C, int HW, int vec, int per_chunk, unsigned long long fd_u)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x, chunk = blockIdx.y;
    const bn::Units un(HW / vec, fd_u);
    const int u0 = chunk * per_chunk, u1 = min(N * un.U, u0 + per_chunk);
    double s = 0.0, ss = 0.0;
    if (vec == 4) bn::partial_sums<4>(x, C, HW, c, u0, u1, un, s, ss);
    else bn::partial_sums<1>(x, C, HW, c, u0, u1, un, s, ss);
    if (threadIdx.x == 0) {
        partial[((size_t)chunk * C + c) * 2] = s;
        partial[((size_t)chunk * C + c) * 2 + 1] = ss;
    }
}

// The forward's second launch, on the partials of the first (summed across ranks first
// when synchronised): mean, invstd and the running statistics (chunk 0's block), then the
// block's units normalised.
extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_normalize(const float* __restrict__ x, const double* __restrict__ partial, int chunks,
             int count, const float* __restrict__ gamma, const float* __restrict__ beta,
             const float* __restrict__ residual,  // added before the ReLU, or nullptr
             float* __restrict__ mean, float* __restrict__ invstd,
             float* __restrict__ running_mean, float* __restrict__ running_var,
             float momentum, float eps, float* __restrict__ y, int relu, int N, int C, int HW,
             int vec, int per_chunk, unsigned long long fd_u)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x, chunk = blockIdx.y;
    double m, var;
    bn::statistics(partial, chunks, C, c, count, eps, m, var);
    const float mf = (float)m, is = (float)(1.0 / sqrt(var + eps));
    if (chunk == 0 && threadIdx.x == 0) {
        mean[c] = mf;
        invstd[c] = is;
        running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * m);
        running_var[c] = (float)((1.0 - momentum) * running_var[c] +
                                 momentum * var * count / (count - 1));
    }
    float a, b;
    bn::coefficients(is, gamma[c], beta[c], mf, a, b);
    const bn::Units un(HW / vec, fd_u);
    const int u0 = chunk * per_chunk, u1 = min(N * un.U, u0 + per_chunk);
    if (vec == 4) bn::normalize<4>(x, residual, y, a, b, relu, C, HW, c, u0, u1, un);
    else bn::normalize<1>(x, residual, y, a, b, relu, C, HW, c, u0, u1, un);
}

// Also the inference engine's stand-alone BN (+ ReLU) where BN cannot be folded
// into a neighbouring convolution (DenseNet's pre-activation layers).
extern "C" __global__ void bn_apply(
    const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ invstd, const float* __restrict__ gamma,
    const float* __restrict__ beta,
    const float* __restrict__ residual,  // added before the ReLU, or nullptr
    float* __restrict__ y, int C, int HW, int vec, size_t units, int relu)
{
    tc::wait_prior_grids();
    if (vec == 4) bn::apply<4>(x, mean, invstd, gamma, beta, residual, y, C, HW, units, relu);
    else bn::apply<1>(x, mean, invstd, gamma, beta, residual, y, C, HW, units, relu);
}

extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_backward_sums(const float* __restrict__ x, const float* __restrict__ gy,
                 const float* __restrict__ y,  // ReLU output to mask gy with, or nullptr
                 const float* __restrict__ beta,  // without y: the ReLU's mask from x, or nullptr
                 const float* __restrict__ mean, const float* __restrict__ invstd,
                 const float* __restrict__ gamma,
                 double* __restrict__ partial,  // (chunks, C, 2): sum gy, sum gy * xhat
                 int N, int C, int HW, int vec, int per_chunk, unsigned long long fd_u)
{
    tc::wait_prior_grids();
    const int c = blockIdx.x, chunk = blockIdx.y;
    const bn::Units un(HW / vec, fd_u);
    const int u0 = chunk * per_chunk, u1 = min(N * un.U, u0 + per_chunk);
    const float m = mean[c], is = invstd[c];
    const bn::Mask mask = bn::mask_of(y, gamma, beta, c, m, is);
    double s = 0.0, sx = 0.0;
    if (vec == 4) bn::backward_sums<4>(x, gy, mask, m, is, C, HW, c, u0, u1, un, s, sx);
    else bn::backward_sums<1>(x, gy, mask, m, is, C, HW, c, u0, u1, un, s, sx);
    if (threadIdx.x == 0) {
        partial[((size_t)chunk * C + c) * 2] = s;
        partial[((size_t)chunk * C + c) * 2 + 1] = sx;
    }
}

extern "C" __global__ void __launch_bounds__(bn::THREADS)
bn_backward_data(const float* __restrict__ x, const float* __restrict__ gy,
                 const float* __restrict__ y,  // ReLU output to mask gy with, or nullptr
                 const float* __restrict__ beta,  // without y: the ReLU's mask from x, or nullptr
                 const float* __restrict__ mean, const float* __restrict__ invstd,
                 const float* __restrict__ gamma, const double* __restrict__ partial,
                 int chunks, float* __restrict__ gx, float* __restrict__ dgamma,
                 float* __restrict__ dbeta,
                 float* __restrict__ gy_out,  // the masked gy (a shortcut's gradient), or nullptr
                 int N, int C, int HW, int vec, int per_chunk, unsigned long long fd_u)
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
    const bn::Mask mask = bn::mask_of(y, gamma, beta, c, m, is);
    const bn::Units un(HW / vec, fd_u);
    const int u0 = chunk * per_chunk, u1 = min(N * un.U, u0 + per_chunk);
    if (vec == 4)
        bn::backward_data<4>(x, gy, mask, gx, gy_out, m, is, scale, mg, mgx, C, HW, c, u0, u1, un);
    else
        bn::backward_data<1>(x, gy, mask, gx, gy_out, m, is, scale, mg, mgx, C, HW, c, u0, u1, un);
}
