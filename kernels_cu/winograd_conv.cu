// 3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3) on the tensor cores
// at fp32 accuracy (3xTF32; one tf32 pass when compiled for it, tc_mma.cuh), NCHW, one launch:
//     Y = A^T [ (G g G^T) . (B^T d B) ] A     per 2x2 output tile, summed over input channels
// The element-wise product summed over channels is 16 independent GEMMs (one per point xi
// of the 4x4 transformed tile): tiles x output channels over input channels, 2.25x fewer
// multiplies than the direct convolution: for a batch-1 ResNet's first stage, where an
// implicit GEMM (tucker_core_tf32x3.cu) needs the whole K = 576 on every SM for its few
// outputs however it is tiled (docs/notes/winograd_conv.md has the times).
//
// Block (tiles, n, b) owns TT = 16 WM Winograd tiles (tbh x tbw of them, 2 tbh x 2 tbw
// output pixels) and NB = 8 WN output channels; warp w computes points xi = 2w and 2w + 1
// for all of them (each A fragment meets WN channel tiles, each B fragment WM tile rows).
// Input channels stream CK = 256 / TT at a time: each thread transforms one (channel, tile)
// 4x4 patch, read straight from global memory (neighbouring patches overlap, L1 serves the
// repeats) one chunk ahead, splits the 16 values into tf32 parts (tc_mma.cuh) and stores
// them in the chunk's double-buffered slab.  A warp's B fragments (the transformed weights
// in fragment order, U = G g G^T computed once by the op in fp64) are loaded one chunk
// ahead into registers, as no other warp of the block reads them, and split there: every
// block reads all of its channels' weights, and stored split they were twice the bytes.
// At the end the 16 points of every (tile, channel) meet in shared memory for the output
// transform and the epilogue (bias, residual, ReLU; its operands loaded at the start).
// The Python op (tensorconv/ops/winograd_conv.py) checks the arguments, packs the weights
// (winograd_pack_weights below, on the device) and picks the tile (WM, WN, tbw).
#include "tc_common.cuh"
#include "tc_mma.cuh"

constexpr int WINO_THREADS = 256;  // 8 warps, two of the 16 points each

template <int WM, int WN>
__global__ void __launch_bounds__(WINO_THREADS, 1) winograd_f2x2_3x3_tf32x3(
    const float* __restrict__ x,         // (B, C, H, W)
    const float2* __restrict__ wpk,      // (N8, C8, 16, 32 lanes): b0, b1 in fp32
    float* __restrict__ y,               // (B, N, OH, OW)
    const float* __restrict__ bias,      // (N,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    int relu,
    int C, int H, int W, int N, int OH, int OW, int pad_h, int pad_w,
    int tiles_h, int tiles_w, int tbw, int blocks_w, int n_blocks)
{
    tc::wait_prior_grids();
    constexpr int TT = WM * 16, CK = WINO_THREADS / TT, KS = CK / 8, NB = WN * 8;
    // Row pitches: TPAD = 8 mod 32 (TT = 32) or 24 (TT = 16) puts a fragment's 4 channels x
    // 8 tiles in distinct banks; MPAD = TT + 4 does the same for the accumulator scatter.
    constexpr int TPAD = TT + 8, MPAD = TT + 4;
    constexpr int PART = 16 * CK * TPAD, BUF = 2 * PART;  // a slab: big parts, small parts
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.y / n_blocks, nb8 = (blockIdx.y - b * n_blocks) * WN;
    const int tbh = TT / tbw, by = blockIdx.x / blocks_w, bx = blockIdx.x - by * blocks_w;
    const int n8_total = (N + 7) >> 3, c8_total = (C + 7) >> 3, chunks = (C + CK - 1) / CK;
    const int xi0 = 2 * warp;

    // The (channel, tile) this thread transforms in every chunk.
    const int c_mine = tid / TT, mine = tid - c_mine * TT, my_ty = mine / tbw;
    const int gy = by * tbh + my_ty, gx = bx * tbw + mine - my_ty * tbw;
    const int iy0 = 2 * gy - pad_h, ix0 = 2 * gx - pad_w;
    const bool tile_live = gy < tiles_h && gx < tiles_w;
    const float* xb = x + (size_t)b * C * H * W;

    auto load_patch = [&](int chunk, float (&d)[16]) {
        const int c = chunk * CK + c_mine;
        const bool live = tile_live && c < C;
        const float* plane = xb + (size_t)min(c, C - 1) * H * W;
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int iy = iy0 + r, ix = ix0 + s;
                d[4 * r + s] = live && iy >= 0 && iy < H && ix >= 0 && ix < W
                                   ? __ldg(plane + (size_t)iy * W + ix) : 0.f;
            }
    };
    auto load_weights = [&](int chunk, float2 (&wr)[2][KS][WN]) {
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
#pragma unroll
                for (int j = 0; j < WN; ++j) {
                    const int c8 = chunk * KS + ks, n8 = nb8 + j;
                    wr[q][ks][j] = c8 < c8_total && n8 < n8_total
                        ? wpk[((size_t)(n8 * c8_total + c8) * 16 + xi0 + q) * 32 + lane]
                        : make_float2(0.f, 0.f);
                }
    };
    // V = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; point xi = 4 i + j.
    auto transform = [&](const float (&d)[16], float* slab) {
        float u[16];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u[j] = d[j] - d[8 + j];
            u[4 + j] = d[4 + j] + d[8 + j];
            u[8 + j] = d[8 + j] - d[4 + j];
            u[12 + j] = d[4 + j] - d[12 + j];
        }
        float* at = slab + c_mine * TPAD + mine;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float v[4] = {u[4 * i] - u[4 * i + 2], u[4 * i + 1] + u[4 * i + 2],
                          u[4 * i + 2] - u[4 * i + 1], u[4 * i + 1] - u[4 * i + 3]};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float lo;
                tf32x3::split(v[j], lo);
                at[(4 * i + j) * CK * TPAD] = v[j];
                if constexpr (tf32x3::EXACT) at[PART + (4 * i + j) * CK * TPAD] = lo;
            }
        }
    };

    // Small warp tiles get independent accumulator sets: a dependent mma costs ~26 cycles.
    constexpr int SETS = 2 * WM * WN <= 2 ? 3 : (2 * WM * WN <= 4 ? 2 : 1);
    float acc[SETS][2][WM][WN][4];
#pragma unroll
    for (int z = 0; z < SETS; ++z)
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int i = 0; i < WM; ++i)
#pragma unroll
                for (int j = 0; j < WN; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[z][q][i][j][e] = 0.f;

    auto products = [&](const float* slab, const float2 (&wr)[2][KS][WN]) {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                // A fragment (i, e): tile 16 i + g + 8 (e & 1), channel 8 ks + t + 4 (e >> 1).
                const float* va = slab + ((xi0 + q) * CK + ks * 8 + t) * TPAD + g;
                unsigned abig[WM][4], asml[WM][4];
#pragma unroll
                for (int i = 0; i < WM; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int off = (e >> 1) * 4 * TPAD + i * 16 + (e & 1) * 8;
                        abig[i][e] = __float_as_uint(va[off]);
                        asml[i][e] = __float_as_uint(va[PART + off]);
                    }
                unsigned bbig[WN][2], bsml[WN][2];
#pragma unroll
                for (int j = 0; j < WN; ++j) {
                    float b0 = wr[q][ks][j].x, b1 = wr[q][ks][j].y, s0, s1;
                    tf32x3::split(b0, s0);
                    tf32x3::split(b1, s1);
                    bbig[j][0] = __float_as_uint(b0);
                    bbig[j][1] = __float_as_uint(b1);
                    bsml[j][0] = __float_as_uint(s0);
                    bsml[j][1] = __float_as_uint(s1);
                }
                if constexpr (tf32x3::EXACT) {
#pragma unroll
                    for (int i = 0; i < WM; ++i)
#pragma unroll
                        for (int j = 0; j < WN; ++j)
                            tf32x3::mma(acc[2 % SETS][q][i][j], asml[i], bbig[j][0], bbig[j][1]);
#pragma unroll
                    for (int i = 0; i < WM; ++i)
#pragma unroll
                        for (int j = 0; j < WN; ++j)
                            tf32x3::mma(acc[1 % SETS][q][i][j], abig[i], bsml[j][0], bsml[j][1]);
                }
#pragma unroll
                for (int i = 0; i < WM; ++i)
#pragma unroll
                    for (int j = 0; j < WN; ++j)
                        tf32x3::mma(acc[0][q][i][j], abig[i], bbig[j][0], bbig[j][1]);
            }
    };

    // Output (idx, e) of this thread: channel, tile and pixel e = 2 i + j of its 2 x 2; false
    // when it lies outside the output.
    auto output_at = [&](int idx, int e, size_t& at) {
        const int n = idx / TT, tile = idx - n * TT, ch = nb8 * 8 + n, ty = tile / tbw;
        const int oy = 2 * (by * tbh + ty) + (e >> 1), ox = 2 * (bx * tbw + tile - ty * tbw) + (e & 1);
        at = (((size_t)b * N + ch) * OH + oy) * OW + ox;
        return idx < NB * TT && ch < N && oy < OH && ox < OW;
    };
    // The epilogue's operands are loaded before the products: read after them, their
    // latency was exposed at the end.  Added in conv_epilogue's order (bias, residual).
    constexpr int PAIRS = (NB * TT + WINO_THREADS - 1) / WINO_THREADS;
    float bias_pre[PAIRS], res_pre[PAIRS][4];
#pragma unroll
    for (int r = 0; r < PAIRS; ++r) {
        const int idx = tid + r * WINO_THREADS, ch = nb8 * 8 + idx / TT;
        bias_pre[r] = bias != nullptr && idx < NB * TT && ch < N ? bias[ch] : 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            size_t at;
            res_pre[r][e] = residual != nullptr && output_at(idx, e, at) ? residual[at] : 0.f;
        }
    }

    float d[16];
    float2 wcur[2][KS][WN], wnext[2][KS][WN];
    load_patch(0, d);
    load_weights(0, wcur);
#pragma unroll 1
    for (int k = 0; k < chunks; ++k) {
        // Two slabs: a warp writing chunk k's has passed the barrier of chunk k - 1, which
        // every warp reaches only after its products of chunk k - 2 (the same slab).
        float* slab = smem + (k & 1) * BUF;
        transform(d, slab);
        const bool more = k + 1 < chunks;
        if (more) {
            load_patch(k + 1, d);
            load_weights(k + 1, wnext);
        }
        __syncthreads();
        products(slab, wcur);
        if (more) {
#pragma unroll
            for (int q = 0; q < 2; ++q)
#pragma unroll
                for (int ks = 0; ks < KS; ++ks)
#pragma unroll
                    for (int j = 0; j < WN; ++j) wcur[q][ks][j] = wnext[q][ks][j];
        }
    }
    __syncthreads();  // the slabs become the points' meeting place

    // Accumulator (q, i, j, e): tile 16 i + g + 8 (e >> 1), channel 8 j + 2 t + (e & 1).
    float* ms = smem;  // (16 points, NB channels, MPAD)
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int i = 0; i < WM; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float v = acc[0][q][i][j][e];
#pragma unroll
                    for (int z = 1; z < SETS; ++z) v += acc[z][q][i][j][e];
                    ms[((xi0 + q) * NB + 8 * j + 2 * t + (e & 1)) * MPAD + 16 * i + g +
                       8 * (e >> 1)] = v;
                }
    __syncthreads();

    // Y = A^T M A, A^T = [1 1 1 0; 0 1 -1 -1], then the epilogue.
#pragma unroll
    for (int r = 0; r < PAIRS; ++r) {
        const int idx = tid + r * WINO_THREADS, n = idx / TT, tile = idx - n * TT;
        if (idx >= NB * TT) break;
        float m[16];
#pragma unroll
        for (int xi = 0; xi < 16; ++xi) m[xi] = ms[(xi * NB + n) * MPAD + tile];
        float u[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u[j] = m[j] + m[4 + j] + m[8 + j];
            u[4 + j] = m[4 + j] - m[8 + j] - m[12 + j];
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = e >> 1;
            float v = (e & 1) ? u[4 * i + 1] - u[4 * i + 2] - u[4 * i + 3]
                              : u[4 * i] + u[4 * i + 1] + u[4 * i + 2];
            size_t at;
            if (!output_at(idx, e, at)) continue;
            v += bias_pre[r];
            v += res_pre[r][e];
            y[at] = relu ? fmaxf(v, 0.f) : v;
        }
    }
}

// Row i of G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]] applied to (a, b, c),
// in fp64 and in the order of winograd_conv.transform_weights (the host path), so both
// round to the same floats.
__device__ __forceinline__ double wino_g_row(int i, double a, double b, double c) {
    return i == 0 ? a
         : i == 1 ? __dmul_rn(__dadd_rn(__dadd_rn(a, b), c), 0.5)
         : i == 2 ? __dmul_rn(__dadd_rn(__dsub_rn(a, b), c), 0.5)
                  : c;
}

// The weight operand of winograd_f2x2_3x3_tf32x3 made on the device in one launch, which a
// training step affords (the array transform is some twenty small kernels): U = G f G^T of
// every filter f in mma B-fragment order, unsplit, zero past nf filters and cf channels,
//     packed[n8][c8][p][lane] = (U[8 n8 + g][8 c8 + t][p], U[8 n8 + g][8 c8 + t + 4][p])
// for lane = 4 g + t and point p = 4 i + j.  flip == 0: f = w, (nf, cf, 3, 3).  flip == 1:
// the data gradient's filters, f[n][c][r][s] = w[c][n][2 - r][2 - s], w being (cf, nf, 3, 3).
__global__ void winograd_pack_weights(const float* __restrict__ w, float2* __restrict__ packed,
                                      int nf, int cf, int flip)
{
    tc::wait_prior_grids();
    const int c8s = (cf + 7) / 8;
    const int total = (nf + 7) / 8 * c8s * 16 * 32;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int lane = e % 32, p = e / 32 % 16, c8 = e / 512 % c8s, n8 = e / 512 / c8s;
        const int n = 8 * n8 + lane / 4, i = p / 4, j = p % 4;
        float v[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = 8 * c8 + lane % 4 + 4 * h;
            v[h] = 0.f;
            if (n >= nf || c >= cf) continue;
            const float* f = flip ? w + ((size_t)c * nf + n) * 9 : w + ((size_t)n * cf + c) * 9;
            double gf[3];   // (G f)[i][s]
#pragma unroll
            for (int s = 0; s < 3; ++s) {
                double a[3];
#pragma unroll
                for (int r = 0; r < 3; ++r) a[r] = flip ? f[(2 - r) * 3 + 2 - s] : f[r * 3 + s];
                gf[s] = wino_g_row(i, a[0], a[1], a[2]);
            }
            v[h] = __double2float_rn(wino_g_row(j, gf[0], gf[1], gf[2]));
        }
        packed[e] = make_float2(v[0], v[1]);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.winograd_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_WINOGRAD_F2X2_3X3_TF32X3(...) template __global__ void winograd_f2x2_3x3_tf32x3<__VA_ARGS__>( \
    const float*, const float2*, float*, const float*, const float*, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int);
TC_I_WINOGRAD_F2X2_3X3_TF32X3(1, 1) TC_I_WINOGRAD_F2X2_3X3_TF32X3(1, 2)
TC_I_WINOGRAD_F2X2_3X3_TF32X3(1, 4) TC_I_WINOGRAD_F2X2_3X3_TF32X3(2, 1)
TC_I_WINOGRAD_F2X2_3X3_TF32X3(2, 2) TC_I_WINOGRAD_F2X2_3X3_TF32X3(2, 4)
#undef TC_I_WINOGRAD_F2X2_3X3_TF32X3
#endif
