// The weight gradient of a 3x3 stride-1 convolution by Winograd's F(2x2, 3x3), NCHW, fp32.
// The forward's 2x2 output tile t is y_t = A^T [(G w G^T) . (B^T x_t B)] A, so
//     gw[k, c] = G^T ( sum_t (A gy_t A^T)[k] . (B^T x_t B)[c] ) G
// where x_t is the tile's 4x4 input patch and gy_t its 2x2 output gradient.  The sum over
// tiles is, point by point xi of the 4x4 transformed tile, a GEMM over the tiles:
//     M[xi] (K x C) = V[xi] (K x T) U[xi]^T (T x C),
// 16 GEMMs with 2.25x fewer multiplies than the direct weight gradient's 9 taps.  They run
// as one grouped 1x1 weight gradient on the tensor-core implicit GEMM (igemm_tf32x3, 16
// groups, one "image" whose plane is the N x TH x TW tiles); these kernels make its
// operands and take its result back to 3x3 filters:
//   winograd_wgrad_inputs:  U[xi][c][n][ty][tx] = (B^T x_t B)[xi], x_t at rows 2 ty - ph,
//                           columns 2 tx - pw (zeros outside the image)
//   winograd_wgrad_grads:   V[xi][k][n][ty][tx] = (A gy_t A^T)[xi] (zeros past OH, OW)
//   winograd_wgrad_filters: gw[k][c] = G^T M[.][k][c] G, M[xi][k][c] the GEMM's (16 K, C)
// One thread a tile of one channel (of one filter in the last), every value read and
// written once (the overlapping patches' repeats come from L1), in the tensors' order:
// the transforms are bound by memory, the GEMM by the tensor cores.
//
// Launch geometry, the workspace and the checks belong to tensorconv/ops/winograd_wgrad.py.
#include "tc_common.cuh"

// B^T d B for a 4x4 patch d: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then the columns.
__global__ void winograd_wgrad_inputs(const float* __restrict__ x, float* __restrict__ u,
                                      int N, int C, int H, int W, int TH, int TW, int ph, int pw)
{
    tc::wait_prior_grids();
    const int thw = TH * TW, total = N * C * thw;   // e = (c N + n) thw + tile: u's order
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int plane = e / thw, t = e - plane * thw, c = plane / N, n = plane - c * N;
        const int ty = t / TW, tx = t - ty * TW, y0 = 2 * ty - ph, x0 = 2 * tx - pw;
        const float* src = x + ((size_t)n * C + c) * H * W;
        float d[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int yy = y0 + i, xx = x0 + j;
                d[i][j] = (unsigned)yy < (unsigned)H && (unsigned)xx < (unsigned)W
                              ? __ldg(src + yy * W + xx) : 0.f;
            }
        float r[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            r[0][j] = d[0][j] - d[2][j];
            r[1][j] = d[1][j] + d[2][j];
            r[2][j] = d[2][j] - d[1][j];
            r[3][j] = d[1][j] - d[3][j];
        }
        float* dst = u + e;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dst[(size_t)(4 * i) * total] = r[i][0] - r[i][2];
            dst[(size_t)(4 * i + 1) * total] = r[i][1] + r[i][2];
            dst[(size_t)(4 * i + 2) * total] = r[i][2] - r[i][1];
            dst[(size_t)(4 * i + 3) * total] = r[i][1] - r[i][3];
        }
    }
}

// A g A^T for a 2x2 gradient g: rows (g0, g0 + g1, g0 - g1, -g1), then the columns.
__global__ void winograd_wgrad_grads(const float* __restrict__ gy, float* __restrict__ v,
                                     int N, int K, int OH, int OW, int TH, int TW)
{
    tc::wait_prior_grids();
    const int thw = TH * TW, total = N * K * thw;   // e = (k N + n) thw + tile: v's order
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int plane = e / thw, t = e - plane * thw, k = plane / N, n = plane - k * N;
        const int ty = t / TW, tx = t - ty * TW;
        const float* src = gy + ((size_t)n * K + k) * OH * OW;
        float g[2][2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int yy = 2 * ty + i, xx = 2 * tx + j;
                g[i][j] = yy < OH && xx < OW ? __ldg(src + yy * OW + xx) : 0.f;
            }
        float r[4][2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            r[0][j] = g[0][j];
            r[1][j] = g[0][j] + g[1][j];
            r[2][j] = g[0][j] - g[1][j];
            r[3][j] = -g[1][j];
        }
        float* dst = v + e;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dst[(size_t)(4 * i) * total] = r[i][0];
            dst[(size_t)(4 * i + 1) * total] = r[i][0] + r[i][1];
            dst[(size_t)(4 * i + 2) * total] = r[i][0] - r[i][1];
            dst[(size_t)(4 * i + 3) * total] = -r[i][1];
        }
    }
}

// G^T m G for a 4x4 m: rows (m0 + h, (m1 - m2) / 2, h + m3) with h = (m1 + m2) / 2, then
// the columns.
__global__ void winograd_wgrad_filters(const float* __restrict__ m, float* __restrict__ gw,
                                       int K, int C)
{
    tc::wait_prior_grids();
    const int total = K * C;   // e = k C + c: gw's order, and m[xi]'s
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        float a[4][4];
#pragma unroll
        for (int xi = 0; xi < 16; ++xi) a[xi / 4][xi % 4] = __ldg(m + (size_t)xi * total + e);
        float r[3][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float h = 0.5f * (a[1][j] + a[2][j]);
            r[0][j] = a[0][j] + h;
            r[1][j] = 0.5f * (a[1][j] - a[2][j]);
            r[2][j] = h + a[3][j];
        }
        float* dst = gw + (size_t)e * 9;
#pragma unroll
        for (int i = 0; i < 3; ++i) {
            const float h = 0.5f * (r[i][1] + r[i][2]);
            dst[3 * i] = r[i][0] + h;
            dst[3 * i + 1] = 0.5f * (r[i][1] - r[i][2]);
            dst[3 * i + 2] = h + r[i][3];
        }
    }
}
