// Two chained 1x1 convolutions (stride 1, dense, fp32, NCHW) in one launch:
//     y[n, m, p] = act1(sum_c A[m, c] x[n, c, p] + a[m] (+ r[n, m, p])
//                       (+ sum_c S[m, c] x2[n, c, p at stride S2]))    (stored)
//     z[n, j, p] = act2(sum_m B[j, m] y[n, m, p] + b[j])
// The optional x2 term is a residual block's projection shortcut (a 1x1 convolution
// of the block's input, any stride): its C2 input channels are gathered as more rows
// of the first product (A = [A | S], K = C + C2), which saves the shortcut's launch.
// In a Tucker-format CNN one layer's last 1x1 (D2 -> N, BN, residual, ReLU) feeds
// the next layer's first 1x1 (N -> D1); at batch 1 each is a few microseconds of
// latency, so the pair costs two launches for little arithmetic.  Here a block
// owns P pixels of one sample and a 1/CL slice of the M middle channels: it stages
// its input columns and both weight slices with cp.async (the B slice lands while
// the first product runs), computes its slice of y (stored, and kept in shared
// memory), then its slice's partial sums of z.  The CL blocks of a cluster (one per
// slice) add their partials of z by pushes into the owners' shared memory
// (tdcx::PushReduce, rank order: deterministic).  CL = 1 needs no cluster.
// With MMA the two products run on the tensor cores at fp32 accuracy (3xTF32,
// tc::mma_product): the input columns are split in shared memory, the weights arrive
// in fragment order.
// The Python op (tensorconv/ops/pointwise_pair.py) checks the arguments, picks the
// tile and prepares the weights (A with S's columns after its own): FMA tiles take A
// transposed (C + C2, CL * MB) and B transposed (CL * MB, JP), zero-padded, MB = the
// slice (a multiple of 4), JP = J rounded up to 4; MMA tiles take each slice's A
// (MB x K8) and B (JP x MB) in fragment order, slice after slice, MB and JP multiples
// of 16, K8 = C + C2 rounded up to 8.
#include "tc_chain.cuh"

template <int P, int CL, bool MMA>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(tc::CHAIN_THREADS) conv1x1_pair(
    const float* __restrict__ x,         // (N, C, HW)
    const float* __restrict__ at,        // A, packed for the tile
    const float* __restrict__ a_bias,    // (M,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    float* __restrict__ y,               // (N, M, HW)
    const float* __restrict__ bt,        // B, packed for the tile
    const float* __restrict__ b_bias,    // (J,) or nullptr
    float* __restrict__ z,               // (N, J, HW)
    const float* __restrict__ x2,        // (N, C2, H2, W2), or unused when C2 == 0
    int C, int HW, int M, int MB, int J, int JP, int relu1, int relu2,
    int C2, int plane2, int W2, int OW, int S2, int slots_off, unsigned long long fd_share)
{
    tc::wait_prior_grids();
    static_assert(P % 4 == 0 && tc::CHAIN_THREADS % P == 0, "pixel runs of 4; whole columns");
    constexpr int PS = MMA ? tc::mma_stride(P) : P, COPIES = MMA ? 2 : 1;
    const int K1 = C + C2;                    // rows of the first product
    const int CK = MMA ? (K1 + 7) & ~7 : K1;  // rows of xs (the mma's K steps of 8)
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;                  // CK x PS (x COPIES: big, small)
    float* as = xs + COPIES * CK * PS; // CK x MB
    float* ys = as + CK * MB;          // MB x PS (x COPIES)
    float* bs = ys + COPIES * MB * PS; // MB x JP
    float* red = bs + MB * JP;         // split-reduction partials
    const int p0 = blockIdx.x * P, n = blockIdx.y, slice = blockIdx.z, tid = threadIdx.x;
    const int m0 = slice * MB;
    tdcx::PushReduce<CL> push(smem + slots_off, fd_share);
    if constexpr (CL > 1) push.begin(JP * P);

    // Group 0: the input columns and the A slice; group 1: the B slice, which is
    // only needed after the first product.
    const float* xn = x + (size_t)n * C * HW;
    tdcx::stage_rows<P, PS>(xs, xn, C, HW, p0, HW, tid, tc::CHAIN_THREADS);
    if (C2 > 0) {  // a thread gathers one pixel's shortcut inputs: its coordinates once
        const int p = tid % P, pix = p0 + p, oy = pix / OW, ox = pix - oy * OW;
        const bool ok = pix < HW;
        const float* src = x2 + (size_t)n * C2 * plane2 + (size_t)S2 * (oy * W2 + ox);
        for (int c = tid / P; c < C2; c += tc::CHAIN_THREADS / P)
            tdcx::cp_async4(xs + (C + c) * PS + p, ok ? src + (size_t)c * plane2 : x2, ok);
    }
    if constexpr (MMA) {
        for (int i = tid; i < (CK - K1) * PS; i += tc::CHAIN_THREADS) xs[K1 * PS + i] = 0.f;
        tc::stage_flat(as, at + (size_t)slice * MB * CK, MB * CK);
    } else {
        for (int i = tid; i < K1 * (MB / 4); i += tc::CHAIN_THREADS) {
            const int c = i / (MB / 4), j = 4 * (i % (MB / 4));
            tdcx::cp_async16(as + c * MB + j, at + (size_t)c * CL * MB + m0 + j, true);
        }
    }
    tdcx::cp_async_commit();
    tc::stage_flat(bs, bt + (size_t)m0 * JP, MB * JP);
    tdcx::cp_async_commit();
    tc::chain_1x1<P, CL, MMA>(xs, CK, as, ys, bs, MB, red, push, n, p0, m0,
                              {a_bias, residual, y, b_bias, z, HW, M, J, JP, relu1, relu2});
}

// What CI's nvcc build type-checks: tensorconv.ops.pointwise_pair.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CONV1X1_PAIR(...) template __global__ void conv1x1_pair<__VA_ARGS__>(const float*, \
    const float*, const float*, const float*, float*, const float*, const float*, float*, \
    const float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, \
    unsigned long long);
TC_I_CONV1X1_PAIR(16, 1, false) TC_I_CONV1X1_PAIR(16, 1, true) TC_I_CONV1X1_PAIR(16, 2, false)
TC_I_CONV1X1_PAIR(16, 2, true) TC_I_CONV1X1_PAIR(16, 4, false) TC_I_CONV1X1_PAIR(16, 4, true)
TC_I_CONV1X1_PAIR(16, 8, false) TC_I_CONV1X1_PAIR(16, 8, true) TC_I_CONV1X1_PAIR(32, 1, false)
TC_I_CONV1X1_PAIR(32, 1, true) TC_I_CONV1X1_PAIR(32, 2, false) TC_I_CONV1X1_PAIR(32, 2, true)
TC_I_CONV1X1_PAIR(32, 4, false) TC_I_CONV1X1_PAIR(32, 4, true) TC_I_CONV1X1_PAIR(32, 8, false)
TC_I_CONV1X1_PAIR(32, 8, true) TC_I_CONV1X1_PAIR(4, 1, false) TC_I_CONV1X1_PAIR(4, 2, false)
TC_I_CONV1X1_PAIR(4, 4, false) TC_I_CONV1X1_PAIR(4, 8, false) TC_I_CONV1X1_PAIR(64, 1, false)
TC_I_CONV1X1_PAIR(64, 1, true) TC_I_CONV1X1_PAIR(64, 2, false) TC_I_CONV1X1_PAIR(64, 2, true)
TC_I_CONV1X1_PAIR(64, 4, false) TC_I_CONV1X1_PAIR(64, 4, true) TC_I_CONV1X1_PAIR(64, 8, false)
TC_I_CONV1X1_PAIR(64, 8, true) TC_I_CONV1X1_PAIR(8, 1, false) TC_I_CONV1X1_PAIR(8, 1, true)
TC_I_CONV1X1_PAIR(8, 2, false) TC_I_CONV1X1_PAIR(8, 2, true) TC_I_CONV1X1_PAIR(8, 4, false)
TC_I_CONV1X1_PAIR(8, 4, true) TC_I_CONV1X1_PAIR(8, 8, false) TC_I_CONV1X1_PAIR(8, 8, true)
#undef TC_I_CONV1X1_PAIR
#endif
