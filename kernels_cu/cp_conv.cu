// CP-decomposed convolution (Reustle et al.), fp32 NCHW:
//   V[n,t,y,x] = sum_r T[t,r] sum_s S[s,r] sum_{i,j} H[i,r] W[j,r] U[n,s,y*sh+i-ph,x*sw+j-pw]
// with factors S (C x R), H (kh x R), W (kw x R), T (N x R), row-major.
//
// cp_conv_naive: Algorithm 1, one thread per output element, nothing shared.
// cp_conv_fused: Algorithm 2.  Threads come in groups of S_TILE lanes, one
// group per output pixel; lane l walks input channels l, l + S_TILE, ... and
// keeps two length-R register vectors: p (the H x W filtered input of one
// channel) and q (p scaled by S, summed over its channels).  For each output
// channel the group reduces <q, T[t,:]> with warp shuffles and lane 0 writes
// the one output.  The small factors H, W, T are staged in shared memory.
// R is a template parameter so that p and q stay in registers.
#include "tc_common.cuh"

extern "C" __global__ void cp_conv_naive(
    const float* __restrict__ U, const float* __restrict__ S, const float* __restrict__ H,
    const float* __restrict__ W, const float* __restrict__ T, float* __restrict__ V,
    int N, int C, int IH, int IW, int K, int OH, int OW, int KH, int KW, int R,
    int stride_h, int stride_w, int pad_h, int pad_w)
{
    const size_t total = (size_t)N * K * OH * OW;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(e % OW), y = (int)(e / OW % OH);
        const int t = (int)(e / ((size_t)OW * OH) % K), n = (int)(e / ((size_t)OW * OH * K));
        float v = 0.f;
        for (int r = 0; r < R; ++r)
            for (int s = 0; s < C; ++s)
                for (int i = 0; i < KH; ++i) {
                    const int iy = y * stride_h + i - pad_h;
                    if (iy < 0 || iy >= IH) continue;
                    for (int j = 0; j < KW; ++j) {
                        const int ix = x * stride_w + j - pad_w;
                        if (ix < 0 || ix >= IW) continue;
                        v += T[t * R + r] * S[s * R + r] * H[i * R + r] * W[j * R + r] *
                             U[(((size_t)n * C + s) * IH + iy) * IW + ix];
                    }
                }
        V[e] = v;
    }
}

template <int R>
__global__ void cp_conv_fused(
    const float* __restrict__ U, const float* __restrict__ S, const float* __restrict__ H,
    const float* __restrict__ W, const float* __restrict__ T, float* __restrict__ V,
    int N, int C, int IH, int IW, int K, int OH, int OW, int KH, int KW,
    int stride_h, int stride_w, int pad_h, int pad_w)
{
    extern __shared__ float smem[];  // H (KH x R), W (KW x R), T (K x R)
    float* sH = smem;
    float* sW = sH + KH * R;
    float* sT = sW + KW * R;
    const int lanes = blockDim.x;  // S_TILE, a power of two dividing 32
    const int tid = threadIdx.y * lanes + threadIdx.x;
    const int nthreads = lanes * blockDim.y;
    for (int i = tid; i < KH * R; i += nthreads) sH[i] = H[i];
    for (int i = tid; i < KW * R; i += nthreads) sW[i] = W[i];
    for (int i = tid; i < K * R; i += nthreads) sT[i] = T[i];
    __syncthreads();

    const size_t pixels = (size_t)N * OH * OW;
    const size_t pix = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
    const bool active = pix < pixels;  // idle groups still take part in the shuffles
    const int x = active ? (int)(pix % OW) : 0, y = active ? (int)(pix / OW % OH) : 0;
    const int n = active ? (int)(pix / ((size_t)OW * OH)) : 0;

    float q[R];
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = 0.f;
    for (int s = threadIdx.x; active && s < C; s += lanes) {
        float p[R];
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = 0.f;
        const float* Us = U + ((size_t)n * C + s) * IH * IW;
        for (int i = 0; i < KH; ++i) {
            const int iy = y * stride_h + i - pad_h;
            if (iy < 0 || iy >= IH) continue;
            for (int j = 0; j < KW; ++j) {
                const int ix = x * stride_w + j - pad_w;
                if (ix < 0 || ix >= IW) continue;
                const float u = __ldg(Us + (size_t)iy * IW + ix);
#pragma unroll
                for (int r = 0; r < R; ++r) p[r] += u * sH[i * R + r] * sW[j * R + r];
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) q[r] += p[r] * __ldg(S + (size_t)s * R + r);
    }

    for (int t = 0; t < K; ++t) {
        float a = 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) a += q[r] * sT[t * R + r];
        for (int off = lanes / 2; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off, lanes);
        if (active && threadIdx.x == 0) V[(((size_t)n * K + t) * OH + y) * OW + x] = a;
    }
}

#ifndef __CUDACC_RTC__  // offline type-check of every rank the Python op may ask for
#define TC_CP(R) template __global__ void cp_conv_fused<R>(const float*, const float*, \
    const float*, const float*, const float*, float*, int, int, int, int, int, int, int, int, \
    int, int, int, int, int);
TC_CP(1) TC_CP(2) TC_CP(3) TC_CP(4) TC_CP(5) TC_CP(6) TC_CP(7) TC_CP(8)
TC_CP(9) TC_CP(10) TC_CP(11) TC_CP(12) TC_CP(13) TC_CP(14) TC_CP(15) TC_CP(16)
TC_CP(17) TC_CP(18) TC_CP(19) TC_CP(20) TC_CP(21) TC_CP(22) TC_CP(23) TC_CP(24)
TC_CP(25) TC_CP(26) TC_CP(27) TC_CP(28) TC_CP(29) TC_CP(30) TC_CP(31) TC_CP(32)
#endif
