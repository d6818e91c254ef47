// Direct fp32 convolution, NCHW, any stride / padding / dilation / groups.
//
// One block computes a TH x TW tile of output pixels (one pixel per thread)
// for TK output channels of one group and one image.  The block walks the
// group's input channels CC at a time: the input patch under its tile and the
// TK x CC x R x S weights are staged in shared memory, then every thread runs
// its R x S x CC multiply-adds out of shared memory with TK accumulators held
// in registers.  Weights are stored k-fastest in shared memory so that a warp
// reads the same TK values (a broadcast) while it reads distinct inputs.
//
// Launch geometry, tile sizes and argument checks belong to
// tensorconv/ops/conv.py; this file holds device code only.
#include "tc_common.cuh"

// TK: output channels per thread.  KR, KS: filter size fixed at compile time
// (so the R x S loops unroll), or 0 to take R, S at run time.
template <int TK, int KR, int KS>
__global__ void conv2d_direct_fwd(
    const float* __restrict__ x,     // (N, C, H, W)
    const float* __restrict__ w,     // (K, C / groups, R, S)
    const float* __restrict__ bias,  // (K,) or nullptr
    float* __restrict__ y,           // (N, K, OH, OW)
    int C, int H, int W, int K, int OH, int OW, int R, int S,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    int groups, int tiles_w, int k_tiles, int cc, int relu)
{
    if (KR > 0) R = KR;
    if (KS > 0) S = KS;
    extern __shared__ float smem[];
    const int TW = blockDim.x, TH = blockDim.y;
    const int tid = threadIdx.y * TW + threadIdx.x;
    const int nthreads = TW * TH;

    const int Cg = C / groups, Kg = K / groups;
    const int g = blockIdx.y / k_tiles;
    const int k0 = (blockIdx.y % k_tiles) * TK;  // first output channel within the group
    const int n = blockIdx.z;
    const int oh0 = (blockIdx.x / tiles_w) * TH;
    const int ow0 = (blockIdx.x % tiles_w) * TW;

    // Input patch that the output tile reads (with dilation and stride).
    const int IHT = (TH - 1) * stride_h + (R - 1) * dil_h + 1;
    const int IWT = (TW - 1) * stride_w + (S - 1) * dil_w + 1;
    const int ih0 = oh0 * stride_h - pad_h;
    const int iw0 = ow0 * stride_w - pad_w;
    const int RS = R * S;

    // Weights first: their float4 reads need 16-byte alignment, which the
    // input patch's arbitrary size would break if it came first.
    float* sw = smem;                      // [cc][R*S][TK]
    float* sx = smem + cc * RS * TK;       // [cc][IHT][IWT]

    float acc[TK];
#pragma unroll
    for (int k = 0; k < TK; ++k) acc[k] = 0.f;

    const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
    const float* wg = w + (size_t)g * Kg * Cg * RS;

    for (int c0 = 0; c0 < Cg; c0 += cc) {
        const int cn = min(cc, Cg - c0);
        // Stage the input patch; out-of-image and past-the-group entries are zeros.
        const int patch = IHT * IWT;
        for (int i = tid; i < cc * patch; i += nthreads) {
            const int c = i / patch, p = i % patch;
            const int ih = ih0 + p / IWT, iw = iw0 + p % IWT;
            float v = 0.f;
            if (c < cn && ih >= 0 && ih < H && iw >= 0 && iw < W)
                v = xg[((size_t)(c0 + c) * H + ih) * W + iw];
            sx[i] = v;
        }
        // Stage the weights k-fastest; channels past Kg are zeros.
        for (int i = tid; i < cc * RS * TK; i += nthreads) {
            const int k = i % TK, crs = i / TK;
            const int c = crs / RS, rs = crs % RS;
            float v = 0.f;
            if (c < cn && k0 + k < Kg)
                v = wg[((size_t)(k0 + k) * Cg + c0 + c) * RS + rs];
            sw[i] = v;
        }
        __syncthreads();

        for (int c = 0; c < cn; ++c) {
            const float* sxc = sx + c * patch + threadIdx.y * stride_h * IWT + threadIdx.x * stride_w;
            const float* swc = sw + c * RS * TK;
#pragma unroll
            for (int r = 0; r < (KR > 0 ? KR : R); ++r) {
#pragma unroll
                for (int s = 0; s < (KS > 0 ? KS : S); ++s) {
                    const float xv = sxc[r * dil_h * IWT + s * dil_w];
                    const float* wv = swc + (r * S + s) * TK;
                    if constexpr (TK % 4 == 0) {
#pragma unroll
                        for (int k = 0; k < TK; k += 4) {
                            const float4 q = *reinterpret_cast<const float4*>(wv + k);
                            acc[k] += xv * q.x;
                            acc[k + 1] += xv * q.y;
                            acc[k + 2] += xv * q.z;
                            acc[k + 3] += xv * q.w;
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < TK; ++k) acc[k] += xv * wv[k];
                    }
                }
            }
        }
        __syncthreads();
    }

    const int oh = oh0 + threadIdx.y, ow = ow0 + threadIdx.x;
    if (oh >= OH || ow >= OW) return;
#pragma unroll
    for (int k = 0; k < TK; ++k) {
        const int kk = g * Kg + k0 + k;
        if (k0 + k < Kg) {
            float v = acc[k] + (bias != nullptr ? bias[kk] : 0.f);
            if (relu) v = fmaxf(v, 0.f);
            y[(((size_t)n * K + kk) * OH + oh) * OW + ow] = v;
        }
    }
}

// Explicit instantiations of every variant the Python op may pick, so that an
// offline nvcc build (CI) type-checks them all.
#define TC_DIRECT_CONV_INSTANCE(TK, KR, KS)                                        \
    template __global__ void conv2d_direct_fwd<TK, KR, KS>(                        \
        const float*, const float*, const float*, float*, int, int, int, int, int, \
        int, int, int, int, int, int, int, int, int, int, int, int, int, int);
#define TC_DIRECT_CONV_SIZES(TK) \
    TC_DIRECT_CONV_INSTANCE(TK, 0, 0) TC_DIRECT_CONV_INSTANCE(TK, 1, 1) TC_DIRECT_CONV_INSTANCE(TK, 3, 3)
TC_DIRECT_CONV_SIZES(1)
TC_DIRECT_CONV_SIZES(2)
TC_DIRECT_CONV_SIZES(4)
TC_DIRECT_CONV_SIZES(8)
TC_DIRECT_CONV_SIZES(16)
