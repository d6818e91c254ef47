// CP-decomposed convolution (Reustle et al.), fp32 NCHW:
//   V[n,t,y,x] = sum_r T[t,r] sum_s S[s,r] sum_{i,j} H[i,r] W[j,r] U[n,s,y*sh+i-ph,x*sw+j-pw]
// with factors S (C x R), H (kh x R), W (kw x R), T (N x R), row-major.
//
// cp_conv_naive: Algorithm 1, one thread per output element, nothing shared.
// cp_conv_fused: Algorithm 2.  Threads come in groups of S_TILE lanes, one
// group per output pixel; lane l walks input channels l, l + S_TILE, ... and
// keeps two length-R register vectors: p (the H x W filtered input of one
// channel) and q (p scaled by S, summed over its channels).  R is a template
// parameter so that p and q stay in registers.  Departures from the paper's
// listing, all for speed: the lanes reduce q once (shuffles, plus shared memory
// when S_TILE > 32) instead of reducing <q, T[t,:]> once per output channel;
// the block's threads then share the <q, T[t,:]> products with the pixel
// fastest, so that the writes are coalesced; windows inside the image skip
// the bounds checks; and an epilogue adds a bias and a residual and applies
// ReLU, so that a network folds its batch norm into T and the bias.  Still one
// write per output.
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

// Odd row strides in shared memory, so that threads reading consecutive rows of T
// (or consecutive pixels' q) hit distinct banks.
template <int R> struct OddStride { static constexpr int value = R | 1; };

template <int R>
__global__ void cp_conv_fused(
    const float* __restrict__ U, const float* __restrict__ S, const float* __restrict__ H,
    const float* __restrict__ W, const float* __restrict__ T, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ V,
    int N, int C, int IH, int IW, int K, int OH, int OW, int KH, int KW,
    int stride_h, int stride_w, int pad_h, int pad_w, int relu)
{
    // Shared: HW[i,j,:] = H[i,:] o W[j,:] (the Hadamard product of line 7, formed once per
    // block), T, and one partial q per warp of each pixel.
    constexpr int RP = OddStride<R>::value;
    extern __shared__ float smem[];
    float* sHW = smem;
    float* sT = sHW + KH * KW * R;
    float* sQ = sT + K * RP;
    const int lanes = blockDim.x;  // S_TILE: a power of two, 1..1024
    const int groups = blockDim.y;  // pixels per block
    const int tid = threadIdx.y * lanes + threadIdx.x;
    const int nthreads = lanes * groups;
    for (int e = tid; e < KH * KW * R; e += nthreads) {
        const int r = e % R, ij = e / R;
        sHW[e] = H[(ij / KW) * R + r] * W[(ij % KW) * R + r];
    }
    for (int e = tid; e < K * R; e += nthreads) sT[(e / R) * RP + e % R] = T[e];
    __syncthreads();

    const size_t plane = (size_t)OH * OW;
    const size_t pixels = (size_t)N * plane;
    const size_t pix0 = (size_t)blockIdx.x * groups;
    const size_t pix = pix0 + threadIdx.y;
    const bool active = pix < pixels;
    const int x = active ? (int)(pix % OW) : 0, y = active ? (int)(pix / OW % OH) : 0;
    const int n = active ? (int)(pix / plane) : 0;
    const int y0 = y * stride_h - pad_h, x0 = x * stride_w - pad_w;
    const bool interior = y0 >= 0 && y0 + KH <= IH && x0 >= 0 && x0 + KW <= IW;

    float q[R];
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = 0.f;
    for (int s = threadIdx.x; active && s < C; s += lanes) {
        float p[R];
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = 0.f;
        const float* Us = U + ((size_t)n * C + s) * IH * IW;
        if (interior) {  // no bounds checks, and unrolled so that loads overlap
            for (int i = 0; i < KH; ++i) {
                const float* row = Us + (size_t)(y0 + i) * IW + x0;
                const float* hw = sHW + i * KW * R;
#pragma unroll 4
                for (int j = 0; j < KW; ++j) {
                    const float u = __ldg(row + j);
#pragma unroll
                    for (int r = 0; r < R; ++r) p[r] = fmaf(u, hw[j * R + r], p[r]);
                }
            }
        } else {
            for (int i = 0; i < KH; ++i) {
                const int iy = y0 + i;
                if (iy < 0 || iy >= IH) continue;
                for (int j = 0; j < KW; ++j) {
                    const int ix = x0 + j;
                    if (ix < 0 || ix >= IW) continue;
                    const float u = __ldg(Us + (size_t)iy * IW + ix);
                    const float* hw = sHW + (i * KW + j) * R;
#pragma unroll
                    for (int r = 0; r < R; ++r) p[r] = fmaf(u, hw[r], p[r]);
                }
            }
        }
        const float* Ss = S + (size_t)s * R;
#pragma unroll
        for (int r = 0; r < R; ++r) q[r] = fmaf(p[r], __ldg(Ss + r), q[r]);
    }

    // Reduce q over the pixel's lanes: shuffles inside a warp, then the warps' partial
    // sums through shared memory.
    const int width = lanes < 32 ? lanes : 32;
    for (int off = width / 2; off > 0; off >>= 1) {
#pragma unroll
        for (int r = 0; r < R; ++r) q[r] += __shfl_xor_sync(0xffffffffu, q[r], off, width);
    }
    const int warps = lanes > 32 ? lanes / 32 : 1;  // partial sums per pixel
    if ((threadIdx.x & 31) == 0) {
        float* dst = sQ + ((size_t)threadIdx.y * warps + threadIdx.x / 32) * RP;
#pragma unroll
        for (int r = 0; r < R; ++r) dst[r] = q[r];
    }
    __syncthreads();
    if (warps > 1) {
        for (int e = tid; e < groups * R; e += nthreads) {
            const int g = e / R, r = e % R;
            float v = 0.f;
            for (int w = 0; w < warps; ++w) v += sQ[((size_t)g * warps + w) * RP + r];
            sQ[(size_t)g * warps * RP + r] = v;  // slot 0 of the pixel; its other slots are read above
        }
        __syncthreads();
    }

    // Output phase: the block's threads walk (t, pixel) with the pixel fastest, so that
    // consecutive threads write consecutive pixels of one output plane (the block's
    // pixels are consecutive in (n, y, x)).  One write per output.
    for (int e = tid; e < K * groups; e += nthreads) {
        const int g = e % groups, t = e / groups;
        const size_t pg = pix0 + g;
        if (pg >= pixels) continue;
        const float* qg = sQ + (size_t)g * warps * RP;
        const float* tr = sT + t * RP;
        float a = bias ? bias[t] : 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) a = fmaf(qg[r], tr[r], a);
        const size_t o = (pg / plane * K + t) * plane + pg % plane;
        if (residual) a += residual[o];
        V[o] = relu ? fmaxf(a, 0.f) : a;
    }
}

#ifndef __CUDACC_RTC__  // offline type-check of every rank the Python op may ask for
#define TC_CP(R) template __global__ void cp_conv_fused<R>(const float*, const float*, \
    const float*, const float*, const float*, const float*, const float*, float*, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int);
TC_CP(1) TC_CP(2) TC_CP(3) TC_CP(4) TC_CP(5) TC_CP(6) TC_CP(7) TC_CP(8)
TC_CP(9) TC_CP(10) TC_CP(11) TC_CP(12) TC_CP(13) TC_CP(14) TC_CP(15) TC_CP(16)
TC_CP(17) TC_CP(18) TC_CP(19) TC_CP(20) TC_CP(21) TC_CP(22) TC_CP(23) TC_CP(24)
TC_CP(25) TC_CP(26) TC_CP(27) TC_CP(28) TC_CP(29) TC_CP(30) TC_CP(31) TC_CP(32)
#endif
