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
    tc::wait_prior_grids();
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

// Row stride of T and of the q partials in shared memory: R + 4 when R is a multiple of
// four (rows stay 16-byte aligned for float4 reads, and eight lanes reading eight rows
// hit distinct bank groups), else odd (distinct banks for scalar reads).
template <int R> struct RowStride { static constexpr int value = R % 4 == 0 ? R + 4 : (R | 1); };

// acc[r] += u * row[r] for a shared-memory row (float4 reads when R % 4 == 0).
template <int R>
__device__ __forceinline__ void axpy_row(float u, const float* row, float (&acc)[R])
{
    if (R % 4 == 0) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll
        for (int k = 0; k < R / 4; ++k) {
            const float4 h = row4[k];
            acc[4 * k] = fmaf(u, h.x, acc[4 * k]);
            acc[4 * k + 1] = fmaf(u, h.y, acc[4 * k + 1]);
            acc[4 * k + 2] = fmaf(u, h.z, acc[4 * k + 2]);
            acc[4 * k + 3] = fmaf(u, h.w, acc[4 * k + 3]);
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = fmaf(u, row[r], acc[r]);
    }
}

// acc + <a, b> for two shared-memory rows.
template <int R>
__device__ __forceinline__ float dot_rows(const float* a, const float* b, float acc)
{
    if (R % 4 == 0) {
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
#pragma unroll
        for (int k = 0; k < R / 4; ++k) {
            const float4 x = a4[k], y = b4[k];
            acc = fmaf(x.x, y.x, fmaf(x.y, y.y, fmaf(x.z, y.z, fmaf(x.w, y.w, acc))));
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) acc = fmaf(a[r], b[r], acc);
    }
    return acc;
}

// p[r] += a[r] * b[r] for two shared-memory rows.
template <int R>
__device__ __forceinline__ void fma_rows(const float* a, const float* b, float (&p)[R])
{
    if (R % 4 == 0) {
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
#pragma unroll
        for (int k = 0; k < R / 4; ++k) {
            const float4 x = a4[k], y = b4[k];
            p[4 * k] = fmaf(x.x, y.x, p[4 * k]);
            p[4 * k + 1] = fmaf(x.y, y.y, p[4 * k + 1]);
            p[4 * k + 2] = fmaf(x.z, y.z, p[4 * k + 2]);
            p[4 * k + 3] = fmaf(x.w, y.w, p[4 * k + 3]);
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = fmaf(a[r], b[r], p[r]);
    }
}

template <int R>
__global__ void cp_conv_fused(
    const float* __restrict__ U, const float* __restrict__ S, const float* __restrict__ H,
    const float* __restrict__ W, const float* __restrict__ T, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ V,
    int N, int C, int IH, int IW, int K, int OH, int OW, int KH, int KW,
    int stride_h, int stride_w, int pad_h, int pad_w, int rows, int relu)
{
    tc::wait_prior_grids();
    // Shared: HW[i,j,:] = H[i,:] o W[j,:] (the Hadamard product of line 7, formed once per
    // block), T, one partial q per warp of each pixel, and each pixel's output offset.
    constexpr int RP = RowStride<R>::value;
    extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the row reads
    float* sHW = reinterpret_cast<float*>(smem4);
    float* sT = sHW + KH * KW * R;
    const int lanes = blockDim.x;   // S_TILE: a power of two, 1..1024
    const int groups = blockDim.y;  // pixels per block, a power of two
    const int warps = lanes > 32 ? lanes / 32 : 1;  // partial sums per pixel
    float* sQ = sT + K * RP;
    const int floats = KH * KW * R + (K + groups * warps) * RP;
    long long* sBase = reinterpret_cast<long long*>(sHW + ((floats + 1) & ~1));  // 8-byte aligned
    const int tid = threadIdx.y * lanes + threadIdx.x;
    const int nthreads = lanes * groups;
    for (int e = tid; e < KH * KW * R; e += nthreads) {
        const int r = e % R, ij = e / R;
        sHW[e] = H[(ij / KW) * R + r] * W[(ij % KW) * R + r];
    }
    for (int e = tid; e < K * R; e += nthreads) sT[(e / R) * RP + e % R] = T[e];

    const long long plane = (long long)OH * OW;
    const long long pixels = (long long)N * plane;
    const long long pix = (long long)blockIdx.x * groups + threadIdx.y;
    const bool active = pix < pixels;
    const int n = active ? (int)(pix / plane) : 0;
    const int yx = active ? (int)(pix - n * plane) : 0;
    const int y = yx / OW, x = yx - y * OW;
    if (threadIdx.x == 0) sBase[threadIdx.y] = active ? (long long)n * K * plane + yx : -1;
    __syncthreads();

    // The pixel's work is split into items of `rows` filter rows of one input channel
    // (a whole channel, as in the paper, or fewer rows when there are too few channels
    // to keep the lanes busy); the lanes stride over the items.  S scales each item's
    // partial p, which is exact because the sum is linear.
    const int y0 = y * stride_h - pad_h, x0 = x * stride_w - pad_w;
    const bool cols_inside = x0 >= 0 && x0 + KW <= IW;
    const int per_channel = (KH + rows - 1) / rows;
    float q[R];
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = 0.f;
    for (int item = threadIdx.x; active && item < C * per_channel; item += lanes) {
        const int s = item / per_channel;
        const int i0 = (item - s * per_channel) * rows;
        const int i1 = min(KH, i0 + rows);
        float p[R];
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = 0.f;
        const float* Us = U + ((long long)n * C + s) * IH * IW;
        for (int i = i0; i < i1; ++i) {
            const int iy = y0 + i;
            if (iy < 0 || iy >= IH) continue;
            const float* row = Us + (long long)iy * IW + x0;
            const float* hw = sHW + i * KW * R;
            if (cols_inside) {  // no bounds checks, and unrolled so that loads overlap
#pragma unroll 4
                for (int j = 0; j < KW; ++j) axpy_row<R>(__ldg(row + j), hw + j * R, p);
            } else {
                for (int j = 0; j < KW; ++j) {
                    if (x0 + j >= 0 && x0 + j < IW) axpy_row<R>(__ldg(row + j), hw + j * R, p);
                }
            }
        }
        const float* Ss = S + (long long)s * R;
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
    if ((threadIdx.x & 31) == 0) {
        float* dst = sQ + (threadIdx.y * warps + threadIdx.x / 32) * RP;
#pragma unroll
        for (int r = 0; r < R; ++r) dst[r] = q[r];
    }
    __syncthreads();
    if (warps > 1) {
        for (int e = tid; e < groups * R; e += nthreads) {
            const int g = e / R, r = e % R;
            float v = 0.f;
            for (int w = 0; w < warps; ++w) v += sQ[(g * warps + w) * RP + r];
            sQ[g * warps * RP + r] = v;  // slot 0 of the pixel, read above by this thread only
        }
        __syncthreads();
    }

    // Output phase: the block's threads walk (t, pixel) with the pixel fastest, so that
    // consecutive threads write consecutive pixels of one output plane.  One write per
    // output.
    const int gshift = __ffs(groups) - 1;
    for (int e = tid; e < K * groups; e += nthreads) {
        const int g = e & (groups - 1), t = e >> gshift;
        const long long base = sBase[g];
        if (base < 0) continue;
        float a = dot_rows<R>(sQ + g * warps * RP, sT + t * RP, bias ? bias[t] : 0.f);
        const long long o = base + t * plane;
        if (residual) a += residual[o];
        V[o] = relu ? fmaxf(a, 0.f) : a;
    }
}

// cp_conv_fused_sep: the fused kernel for stride 1 with the filter applied separably.
// H o W is rank one per r, so p = sum_i H[i] sum_j W[j] u[i,j] costs KH + KW products
// per pixel and channel instead of KH * KW when neighbouring pixels share the column
// sums: a block owns a 32 x TH output tile, stages each input channel's tile (with its
// halo) in shared memory, forms the column sums v[r] = sum_i H[i,r] u[y+i, x'] for the
// tile's rows and halo columns, and each thread (one per pixel) finishes its p with W,
// scales it by S into its q, and after the last channel writes its K outputs.  For few
// input channels and large filters (AlexNet's first layer), where the paper's per-pixel
// loop is long and the GPU is short of pixels to hide it.
template <int R>
__global__ void cp_conv_fused_sep(
    const float* __restrict__ U, const float* __restrict__ S, const float* __restrict__ H,
    const float* __restrict__ W, const float* __restrict__ T, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ V,
    int N, int C, int IH, int IW, int K, int OH, int OW, int KH, int KW, int pad_h, int pad_w,
    int relu)
{
    tc::wait_prior_grids();
    constexpr int RP = RowStride<R>::value;
    constexpr int TW = 32;
    const int TH = blockDim.y;
    const int XW = TW + KW - 1, YH = TH + KH - 1;
    extern __shared__ float4 smem4[];
    float* sT = reinterpret_cast<float*>(smem4);  // K rows; all row blocks stay 16-byte aligned
    float* sV = sT + K * RP;                      // TH x XW column sums, rows of RP
    float* sH = sV + TH * XW * RP;                // KH x R
    float* sW = sH + KH * R;                      // KW x R
    float* sU = sW + KW * R;                      // YH x XW input tile of one channel
    const int tid = threadIdx.y * TW + threadIdx.x;
    const int nthreads = TW * TH;
    for (int e = tid; e < K * R; e += nthreads) sT[(e / R) * RP + e % R] = T[e];
    for (int e = tid; e < KH * R; e += nthreads) sH[e] = H[e];
    for (int e = tid; e < KW * R; e += nthreads) sW[e] = W[e];

    const int n = blockIdx.z;
    const int ox0 = blockIdx.x * TW, oy0 = blockIdx.y * TH;
    const int ix0 = ox0 - pad_w, iy0 = oy0 - pad_h;
    float q[R];
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = 0.f;
    for (int s = 0; s < C; ++s) {
        __syncthreads();  // the previous channel's tile and sums are no longer read
        const float* Us = U + ((long long)n * C + s) * IH * IW;
        for (int e = tid; e < YH * XW; e += nthreads) {
            const int iy = iy0 + e / XW, ix = ix0 + e % XW;
            sU[e] = (iy >= 0 && iy < IH && ix >= 0 && ix < IW) ? __ldg(Us + (long long)iy * IW + ix)
                                                               : 0.f;
        }
        __syncthreads();
        for (int e = tid; e < TH * XW; e += nthreads) {
            float v[R];
#pragma unroll
            for (int r = 0; r < R; ++r) v[r] = 0.f;
            const float* col = sU + e;  // row e / XW of the tile, column e % XW
            for (int i = 0; i < KH; ++i) axpy_row<R>(col[i * XW], sH + i * R, v);
            float* dst = sV + e * RP;
#pragma unroll
            for (int r = 0; r < R; ++r) dst[r] = v[r];
        }
        __syncthreads();
        float p[R];
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = 0.f;
        const float* vrow = sV + (threadIdx.y * XW + threadIdx.x) * RP;
        for (int j = 0; j < KW; ++j) fma_rows<R>(sW + j * R, vrow + j * RP, p);
        const float* Ss = S + (long long)s * R;
#pragma unroll
        for (int r = 0; r < R; ++r) q[r] = fmaf(p[r], __ldg(Ss + r), q[r]);
    }

    const int oy = oy0 + threadIdx.y, ox = ox0 + threadIdx.x;
    if (oy >= OH || ox >= OW) return;
    const long long plane = (long long)OH * OW;
    const long long base = (long long)n * K * plane + (long long)oy * OW + ox;
    for (int t = 0; t < K; ++t) {  // every lane reads the same row of T: a broadcast
        float a = bias ? bias[t] : 0.f;
        const float* tr = sT + t * RP;
#pragma unroll
        for (int r = 0; r < R; ++r) a = fmaf(q[r], tr[r], a);
        const long long o = base + t * plane;
        if (residual) a += residual[o];
        V[o] = relu ? fmaxf(a, 0.f) : a;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.cp_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CP_CONV_FUSED(...) template __global__ void cp_conv_fused<__VA_ARGS__>(const float*, \
    const float*, const float*, const float*, const float*, const float*, const float*, float*, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_CP_CONV_FUSED(10) TC_I_CP_CONV_FUSED(11) TC_I_CP_CONV_FUSED(12) TC_I_CP_CONV_FUSED(13)
TC_I_CP_CONV_FUSED(14) TC_I_CP_CONV_FUSED(15) TC_I_CP_CONV_FUSED(16) TC_I_CP_CONV_FUSED(17)
TC_I_CP_CONV_FUSED(18) TC_I_CP_CONV_FUSED(19) TC_I_CP_CONV_FUSED(1) TC_I_CP_CONV_FUSED(20)
TC_I_CP_CONV_FUSED(21) TC_I_CP_CONV_FUSED(22) TC_I_CP_CONV_FUSED(23) TC_I_CP_CONV_FUSED(24)
TC_I_CP_CONV_FUSED(25) TC_I_CP_CONV_FUSED(26) TC_I_CP_CONV_FUSED(27) TC_I_CP_CONV_FUSED(28)
TC_I_CP_CONV_FUSED(29) TC_I_CP_CONV_FUSED(2) TC_I_CP_CONV_FUSED(30) TC_I_CP_CONV_FUSED(31)
TC_I_CP_CONV_FUSED(32) TC_I_CP_CONV_FUSED(3) TC_I_CP_CONV_FUSED(4) TC_I_CP_CONV_FUSED(5)
TC_I_CP_CONV_FUSED(6) TC_I_CP_CONV_FUSED(7) TC_I_CP_CONV_FUSED(8) TC_I_CP_CONV_FUSED(9)
#undef TC_I_CP_CONV_FUSED
#define TC_I_CP_CONV_FUSED_SEP(...) template __global__ void cp_conv_fused_sep<__VA_ARGS__>( \
    const float*, const float*, const float*, const float*, const float*, const float*, \
    const float*, float*, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_CP_CONV_FUSED_SEP(10) TC_I_CP_CONV_FUSED_SEP(11) TC_I_CP_CONV_FUSED_SEP(12)
TC_I_CP_CONV_FUSED_SEP(13) TC_I_CP_CONV_FUSED_SEP(14) TC_I_CP_CONV_FUSED_SEP(15)
TC_I_CP_CONV_FUSED_SEP(16) TC_I_CP_CONV_FUSED_SEP(17) TC_I_CP_CONV_FUSED_SEP(18)
TC_I_CP_CONV_FUSED_SEP(19) TC_I_CP_CONV_FUSED_SEP(1) TC_I_CP_CONV_FUSED_SEP(20)
TC_I_CP_CONV_FUSED_SEP(21) TC_I_CP_CONV_FUSED_SEP(22) TC_I_CP_CONV_FUSED_SEP(23)
TC_I_CP_CONV_FUSED_SEP(24) TC_I_CP_CONV_FUSED_SEP(25) TC_I_CP_CONV_FUSED_SEP(26)
TC_I_CP_CONV_FUSED_SEP(27) TC_I_CP_CONV_FUSED_SEP(28) TC_I_CP_CONV_FUSED_SEP(29)
TC_I_CP_CONV_FUSED_SEP(2) TC_I_CP_CONV_FUSED_SEP(30) TC_I_CP_CONV_FUSED_SEP(31)
TC_I_CP_CONV_FUSED_SEP(32) TC_I_CP_CONV_FUSED_SEP(3) TC_I_CP_CONV_FUSED_SEP(4)
TC_I_CP_CONV_FUSED_SEP(5) TC_I_CP_CONV_FUSED_SEP(6) TC_I_CP_CONV_FUSED_SEP(7)
TC_I_CP_CONV_FUSED_SEP(8) TC_I_CP_CONV_FUSED_SEP(9)
#undef TC_I_CP_CONV_FUSED_SEP
#endif
