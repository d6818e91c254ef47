// A sparse convolution unrolled for one layer's weights (any stride, "same" padding, NCHW,
// fp32): the multiply-adds of every nonzero are straight-line code with the weight as an
// immediate operand and the input word's offset in shared memory as an immediate address.
//
// The tiled remainder (sparse_conv.cu) walks a row's nonzeros at run time, so each
// multiply-add costs a shared-memory word for the input value plus a broadcast for the
// (weight, offset) pair, and its sums can only be kept per row; that reads shared memory
// at about one word per multiply-add.  Here the host (tensorconv/ops/sparse_unrolled.py)
// writes the body, SPARSE_UNROLLED_BODY, for a given kernel matrix: a block owns RB output
// rows ("a group") and a tile of TI images x TH output rows x OW columns; each thread owns
// PX vertically consecutive pixels of one column and keeps RB x PX sums in registers.  For
// every input channel c and filter column s that any row of the group uses, the thread loads
// the (PX - 1) * ST + R words of its column once and applies every nonzero (row, c, r, s) of
// the group to its PX pixels: a word serves every row with a nonzero there and every tap r
// that reaches it, which the tiled kernel cannot do without knowing the rows at compile
// time.
//
// The body defines namespace su: the layer's constants, Sums (a thread's RB x PX sums as
// scalars, read by get(sums, j, i)), and chunk(g, ch, sp, sums), which calls the function
// that holds group g's channel chunk ch (a switch over g * CHUNKS + ch).  This file stages the input
// (CK channels a stage, two stages, cp.async; the box of a tile with its halo rows, its
// halo columns zeroed once; at stride ST > 1 a row's columns split into ST phases, column u
// of the box at (u % ST) * PW + u / ST, so that a warp's threads, ST input columns apart,
// read consecutive words) and runs the epilogue (bias, residual, ReLU, or accumulate onto
// what dense blocks wrote).  The body is generated per layer, so kernels are compiled per
// layer (CuPy caches them on disk by the body's path, which names its content's hash).
#include "tc_common.cuh"

#include "sparse_unrolled.cuh"   // SU_FMA
#ifndef SU_HOST_EMULATION   // tests/host/ run this file on the CPU with their own copies
#include "tc_cluster.cuh"   // tdcx::cp_async4 / 16, commit, wait
#endif

#ifndef SPARSE_UNROLLED_BODY
#define SPARSE_UNROLLED_BODY "sparse_unrolled_example.inc"
#endif
#include SPARSE_UNROLLED_BODY

// Where column u of a staged row lies (u = input column + PAD).
__device__ __forceinline__ constexpr int su_word(int u) {
    return (u % su::ST) * su::PW + u / su::ST;
}

// Channels [c0, c0 + CK) of images [n0, n0 + TI), input rows [iy0, iy0 + HR) with
// iy0 = y0 * ST - PAD (y0 the tile's first output row), input columns [0, WS) into a stage:
// word (c, image, row, u) at c * CS + image * IMG + row * P + su_word(u) + SH, where SH puts
// the first interior column on a 16-byte boundary (stride 1).  Rows outside the image and
// channels or images past the end are zero-filled.  16-byte copies (VEC 4) at stride 1 only:
// at a larger stride a row's columns go to different phases.
template <int VEC_ASKED>
__device__ __forceinline__ void su_stage(float* buf, const float* __restrict__ x, int n,
                                         int c0, int n0, int y0) {
    using namespace su;
    constexpr int VEC = ST == 1 ? VEC_ASKED : 1, PER = WS / VEC, ROWS = CK * TI * HR;
    for (int e = threadIdx.x; e < ROWS * PER; e += T) {
        const int row = e / PER, q = e - row * PER;
        const int cc = row / (TI * HR), rest = row - cc * (TI * HR);
        const int im = rest / HR, yy = rest - im * HR;
        const int ch = c0 + cc, nn = n0 + im, iy = y0 * ST - PAD + yy;
        const bool ok = ch < C && nn < n && (unsigned)iy < (unsigned)H;
        float* d = buf + cc * CS + im * IMG + yy * P + su_word(PAD + q * VEC) + SH;
        const float* s = ok ? x + (((size_t)nn * C + ch) * H + iy) * W + q * VEC : x;
        if constexpr (VEC == 4) tdcx::cp_async16(d, s, ok);
        else tdcx::cp_async4(d, s, ok);
    }
}

// The halo columns of both stages (never copied into): columns u < PAD and u >= PAD + WS
// of the ST * PW a row holds, zero.
__device__ __forceinline__ void su_zero_halo(float* sm) {
    using namespace su;
    constexpr int COLS = ST * PW - WS, ROWS = 2 * CK * TI * HR;
    for (int e = threadIdx.x; e < ROWS * COLS; e += T) {
        const int row = e / COLS, j = e - row * COLS;
        const int u = j < PAD ? j : j + WS;
        sm[(row / (TI * HR)) * CS + ((row / HR) % TI) * IMG + (row % HR) * P + su_word(u) + SH]
            = 0.f;
    }
}

// Grid: (image groups x output row bands, groups).  Block: T threads.  VEC: 4 where every
// input row starts on a 16-byte boundary (stride 1, W % 4 == 0 and x aligned), else 1.
template <int VEC>
__global__ void __launch_bounds__(su::T) sparse_unrolled(
    const float* __restrict__ x, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ y, int n, int accumulate,
    int relu)
{
    tc::wait_prior_grids();
    using namespace su;
    extern __shared__ __align__(16) float sm[];
    const int band = blockIdx.x % BANDS, n0 = (blockIdx.x / BANDS) * TI, y0 = band * TH;
    const int g = blockIdx.y;
    const int im = threadIdx.x / (OW * STRIPS), rest = threadIdx.x - im * (OW * STRIPS);
    const int strip = rest / OW, col = rest - strip * OW;
    const float* base = sm + im * IMG + strip * PX * ST * P + col + SH;

    // Blocks start at different chunks and wrap around.  Inside a model's graph a layer's
    // code (up to a few hundred KB) is cold in L2, and a block fetches it one line after
    // another: blocks that all start at chunk 0 wait on one chain of misses, blocks spread
    // over the chunks fetch the chunks side by side.  Four consecutive blocks share a start:
    // blocks are handed out in order, and neighbours on the two SMs of a TPC that run
    // different code slow each other down even when the code is warm (measured: as if the
    // pair shared an instruction cache).  The start depends on the block alone, so the sums' order, and the
    // result, is the same in every run.
    const int first = (blockIdx.x >> 2) % CHUNKS;
    su_zero_halo(sm);
    su_stage<VEC>(sm, x, n, first * CK, n0, y0);
    tdcx::cp_async_commit();
    Sums a{};
    for (int i = 0, ch = first; i < CHUNKS; ++i, ch = ch + 1 < CHUNKS ? ch + 1 : 0) {
        if (i + 1 < CHUNKS) {
            const int next = ch + 1 < CHUNKS ? ch + 1 : 0;
            su_stage<VEC>(sm + ((i + 1) & 1) * STAGE, x, n, next * CK, n0, y0);
            tdcx::cp_async_commit();
            tdcx::cp_async_wait<1>();
        } else {
            tdcx::cp_async_wait<0>();
        }
        __syncthreads();
        chunk(g, ch, base + (i & 1) * STAGE, a);
        __syncthreads();
    }

    const int nn = n0 + im, oy = y0 + strip * PX;
#pragma unroll
    for (int j = 0; j < RB; ++j) {
        const int k = g * RB + j;
        if (k >= K || nn >= n) continue;
#pragma unroll
        for (int i = 0; i < PX; ++i) {
            if (oy + i >= OH) continue;
            const size_t at = (((size_t)nn * K + k) * OH + oy + i) * OW + col;
            float v = get(a, j, i);
            if (accumulate) v += y[at];
            y[at] = tc::conv_epilogue(v, bias, k, residual, at, relu);
        }
    }
}

#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SPARSE_UNROLLED(...) template __global__ void sparse_unrolled<__VA_ARGS__>( \
    const float*, const float*, const float*, float*, int, int, int);
TC_I_SPARSE_UNROLLED(1) TC_I_SPARSE_UNROLLED(4)
#undef TC_I_SPARSE_UNROLLED
#endif
