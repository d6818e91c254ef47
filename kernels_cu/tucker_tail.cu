// The tail of a Tucker layer in one launch (fp32, NCHW, batch-major):
//     t = core(u)                  R x S convolution, D1 -> D2, stride, zero padding
//     y = act1(A t + a (+ r))      the layer's last 1x1, D2 -> M (stored)
//     z = act2(B y + b)            the next layer's first 1x1, M -> J (stored; J = 0: none)
// At batch 1 a Tucker layer's core and 1x1 launches each cost a few microseconds of
// latency for little arithmetic.  Where the core weights and both 1x1s fit in one
// block's shared memory (the early, narrow stages of a ResNet), a block owns P
// output pixels of one sample: it gathers their R x S x D1 input columns (im2col,
// zero padding by zero-fill) and the core weights in one round of cp.async (A and
// B land while the core product runs), computes the D2 core outputs of its pixels
// in shared memory, then runs the chained 1x1s of tc_chain.cuh on them.
// The Python op (tensorconv/ops/tucker_tail.py) checks the arguments, picks P and
// prepares the weights: core (D1 R S, D2P), A (D2P, MP), B (MP, JP), transposed and
// zero-padded to multiples of 4.
#include "tc_chain.cuh"

template <int P, int R, int S, int STRIDE>
__global__ void __launch_bounds__(tc::CHAIN_THREADS) tucker_tail(
    const float* __restrict__ u,         // (N, D1, H, W)
    const float* __restrict__ wct,       // (D1 * R * S, D2P): core weights transposed
    const float* __restrict__ at,        // (D2P, MP): last 1x1 transposed
    const float* __restrict__ a_bias,    // (M,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (N, M, OH, OW)
    const float* __restrict__ bt,        // (MP, JP): next first 1x1 transposed, or unused
    const float* __restrict__ b_bias,    // (J,) or nullptr
    float* __restrict__ z,               // (N, J, OH, OW), or unused
    int D1, int H, int W, int OW, int HWO, int pad_h, int pad_w,
    int D2P, int M, int MP, int J, int JP, int relu1, int relu2)
{
    tc::wait_prior_grids();
    static_assert(P % 4 == 0 && tc::CHAIN_THREADS % P == 0, "pixel runs of 4; whole columns");
    constexpr int RS = R * S;
    const int K = D1 * RS;
    extern __shared__ __align__(16) float smem[];
    float* cols = smem;            // K x P input columns
    float* ws = cols + K * P;      // K x D2P
    float* ts = ws + K * D2P;      // D2P x P core outputs
    float* as = ts + D2P * P;      // D2P x MP
    float* ys = as + D2P * MP;     // MP x P
    float* bs = ys + MP * P;       // MP x JP
    float* red = bs + MP * JP;     // split-reduction partials (tc::block_product)
    const int p0 = blockIdx.x * P, n = blockIdx.y, tid = threadIdx.x;

    // Group 0: the columns and the core weights; group 1: A; group 2: B.  A thread
    // gathers one pixel's column entries, so its pixel's coordinates are computed once.
    {
        const int p = tid % P, pix = p0 + p;
        const int oy = pix / OW, ox = pix - oy * OW;
        const int iy0 = oy * STRIDE - pad_h, ix0 = ox * STRIDE - pad_w;
        const float* un = u + (size_t)n * D1 * H * W;
        for (int k = tid / P; k < K; k += tc::CHAIN_THREADS / P) {
            const int c = k / RS, rs = k - c * RS, r = rs / S, s = rs - r * S;
            const int iy = iy0 + r, ix = ix0 + s;
            const bool ok = pix < HWO && iy >= 0 && iy < H && ix >= 0 && ix < W;
            tdcx::cp_async4(cols + k * P + p, ok ? un + ((size_t)c * H + iy) * W + ix : un, ok);
        }
    }
    tc::stage_flat(ws, wct, K * D2P);
    tdcx::cp_async_commit();
    tc::stage_flat(as, at, D2P * MP);
    tdcx::cp_async_commit();
    if (J > 0) tc::stage_flat(bs, bt, MP * JP);
    tdcx::cp_async_commit();
    tdcx::cp_async_wait<2>();
    __syncthreads();

    tc::block_product<P>(ws, D2P, cols, K, red, [&](int o, int p, float4 v) {
        *reinterpret_cast<float4*>(ts + o * P + p) = v;
    });
    __syncthreads();  // ts complete; red free again

    tdcx::PushReduce<1> alone(red, 0ull);  // no cluster: never pushes
    tc::chain_1x1<P, 1>(ts, D2P, as, ys, bs, MP, red, alone, n, p0, 0,
                        {a_bias, residual, y, b_bias, z, HWO, M, J, JP, relu1, relu2});
}

// What CI's nvcc build type-checks: tensorconv.ops.tucker_tail.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TUCKER_TAIL(...) template __global__ void tucker_tail<__VA_ARGS__>(const float*, \
    const float*, const float*, const float*, const float*, float*, const float*, const float*, \
    float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_TUCKER_TAIL(16, 1, 1, 1) TC_I_TUCKER_TAIL(16, 1, 1, 2) TC_I_TUCKER_TAIL(16, 1, 3, 1)
TC_I_TUCKER_TAIL(16, 1, 3, 2) TC_I_TUCKER_TAIL(16, 1, 7, 1) TC_I_TUCKER_TAIL(16, 1, 7, 2)
TC_I_TUCKER_TAIL(16, 2, 2, 1) TC_I_TUCKER_TAIL(16, 2, 2, 2) TC_I_TUCKER_TAIL(16, 3, 1, 1)
TC_I_TUCKER_TAIL(16, 3, 1, 2) TC_I_TUCKER_TAIL(16, 3, 3, 1) TC_I_TUCKER_TAIL(16, 3, 3, 2)
TC_I_TUCKER_TAIL(16, 4, 4, 1) TC_I_TUCKER_TAIL(16, 4, 4, 2) TC_I_TUCKER_TAIL(16, 5, 5, 1)
TC_I_TUCKER_TAIL(16, 5, 5, 2) TC_I_TUCKER_TAIL(16, 6, 6, 1) TC_I_TUCKER_TAIL(16, 6, 6, 2)
TC_I_TUCKER_TAIL(16, 7, 1, 1) TC_I_TUCKER_TAIL(16, 7, 1, 2) TC_I_TUCKER_TAIL(16, 7, 7, 1)
TC_I_TUCKER_TAIL(16, 7, 7, 2) TC_I_TUCKER_TAIL(32, 3, 3, 1) TC_I_TUCKER_TAIL(32, 3, 3, 2)
TC_I_TUCKER_TAIL(4, 3, 3, 1) TC_I_TUCKER_TAIL(4, 3, 3, 2) TC_I_TUCKER_TAIL(64, 3, 3, 1)
TC_I_TUCKER_TAIL(64, 3, 3, 2) TC_I_TUCKER_TAIL(8, 3, 3, 1) TC_I_TUCKER_TAIL(8, 3, 3, 2)
#undef TC_I_TUCKER_TAIL
#endif
