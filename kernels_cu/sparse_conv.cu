// Sparse convolution over a block-sparse kernel (Rumi et al., PACT'20, §4), fp32, NCHW.
//
// The K x (C·R·S) kernel matrix is held as dense blocks (a list of rows, a list of
// columns, every cell stored) and a CSR remainder (tensorconv/blocksparse.py).  With the
// output pixels of all images as one axis Q = N·OH·OW, the convolution is
//     y[k, q] = sum over the columns j of row k of  W[k, j] · X[j, q],
// X the implicit im2col of the input: column j = c·R·S + r·S + s reads x[n, c, ih, iw]
// at ih = oh·sh - ph + r, iw = ow·sw - pw + s (zero outside the image).
//
// sparse_block_gemm: one dense block (or a range of its rows) as a register-tiled GEMM,
// BM rows x BN pixels per thread block, BK columns per shared-memory stage; the input is
// gathered through the block's column table (per column c·H·W + r·W + s, and r, s for
// the bounds: the precomputed offsets of an implicit im2col), and the result is added
// into y through the row list: a warp's stores cover consecutive pixels of one row.
// Launches run one after another, so blocks sharing rows accumulate without atomics.
//
// sparse_csr_tiled: the remainder, tiled.  A thread block owns RB rows and a tile
// of NB images x TH x TW output pixels; the input under the tile streams through shared
// memory CK channels at a time (two stages, cp.async), and for each row the block walks
// that row's nonzeros in the chunk (row_ptr: where each row's nonzeros of each chunk
// start; taps: each nonzero's weight and offset in a staged channel,
// c_local·IHT·PITCH + r·PITCH + s, staged with the chunk, one 8-byte broadcast load); each thread keeps RB x PX sums, its PX pixels TW / PX apart on one output row,
// so a warp's shared-memory reads are consecutive words.  Every staged input value
// serves all RB rows of the block (the reuse the one-thread-per-pixel form lacks).
//
// sparse_csr_rows: the same remainder one thread per output pixel of one row (the
// row-wise direct sparse convolution, Escoin-style).
//
// Both end with the epilogue (bias, residual, ReLU) of every row: they run last, after
// the blocks (y zeroed first), or alone, writing y, when there is no block.
#include "tc_cluster.cuh"
#include "tc_common.cuh"

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) sparse_block_gemm(
    const float* __restrict__ x,        // (N, C, H, W)
    const float* __restrict__ values,   // (nrows, ncols) row-major: the block's rows taken
    const int* __restrict__ rows,       // (nrows,) output channels
    const int4* __restrict__ tab,       // (ncols,) per block column: c·H·W + r·W + s, r, s, 0
    float* __restrict__ y,              // (N, K, OH, OW), added into
    int nrows, int ncols, int CHW, int H, int W, int K, int OH, int OW,
    int sh, int sw, int ph, int pw, int Q)
{
    tc::wait_prior_grids();
    constexpr int TX = BN / TN, TY = BM / TM, THREADS = TX * TY;
    static_assert(THREADS % BN == 0, "a thread gathers pixels of one column set");
    constexpr int NA = (BM * BK + THREADS - 1) / THREADS, NB = BN * BK / THREADS;
    constexpr int GK = THREADS / BN;   // gathered columns a stage, side by side
    // +1: the weights are stored transposed (k fastest across threads); the pad
    // spreads a stage's 16 columns of one row over different banks.
    __shared__ float as[BK][BM + 1];
    __shared__ float bs[BK][BN];
    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
    const int m0 = blockIdx.y * BM, q0 = blockIdx.x * BN;
    const int OHW = OH * OW;

    // The pixel this thread gathers in every stage (j fixed, NB of the BK columns).
    const int gj = tid % BN, gk = tid / BN;
    const int gq = q0 + gj;
    const bool gvalid = gq < Q;
    int gbase = 0, gih = 0, giw = 0;
    if (gvalid) {
        const int n = gq / OHW, p = gq - n * OHW, oh = p / OW, ow = p - oh * OW;
        gih = oh * sh - ph;
        giw = ow * sw - pw;
        gbase = n * CHW + gih * W + giw;
    }

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    // The next stage's weights and gathered inputs are loaded into registers while
    // the current one is multiplied (fetch), and stored to shared memory after it
    // (stash): the gather's latency hides behind the multiply-adds.  Each column's
    // offset and taps come as one 16-byte load (the same for a warp: a broadcast).
    float ra[NA], rb[NB];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < NA; ++i) {
            const int e = tid + i * THREADS, m = m0 + e / BK, k = k0 + e % BK;
            ra[i] = (e < BM * BK && m < nrows && k < ncols)
                        ? values[(size_t)m * ncols + k] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < NB; ++i) {
            const int k = k0 + gk + i * GK;
            float v = 0.f;
            if (gvalid && k < ncols) {
                const int4 t = tab[k];
                const int ih = gih + t.y, iw = giw + t.z;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = x[gbase + t.x];
            }
            rb[i] = v;
        }
    };
    auto stash = [&]() {
#pragma unroll
        for (int i = 0; i < NA; ++i) {
            const int e = tid + i * THREADS;
            if (e < BM * BK) as[e % BK][e / BK] = ra[i];
        }
#pragma unroll
        for (int i = 0; i < NB; ++i) bs[gk + i * GK][gj] = rb[i];
    };

    fetch(0);
    for (int k0 = 0; k0 < ncols; k0 += BK) {
        stash();
        __syncthreads();
        if (k0 + BK < ncols) fetch(k0 + BK);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = as[kk][ty + i * TY];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = bs[kk][tx + j * TX];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int q = q0 + tx + j * TX;
        if (q >= Q) continue;
        const int n = q / OHW, p = q - n * OHW;
        const size_t base = (size_t)n * K * OHW + p;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + ty + i * TY;
            if (m < nrows) y[base + (size_t)rows[m] * OHW] += acc[i][j];
        }
    }
}

template <int RB, int PX, int CK>
__global__ void __launch_bounds__(256) sparse_csr_tiled(
    const float* __restrict__ x,          // (N, C, H, W)
    const int* __restrict__ row_ptr,      // (K / RB, chunks, RB + 1): where row RB·g + i's
                                          // nonzeros of chunk j start in taps; [.., RB]
                                          // ends the (g, j) segment
    const float* __restrict__ taps,       // (nnz, 2), by (row group, chunk, row): the
                                          // weight, and (as bits) its offset in a staged
                                          // channel
    const float* __restrict__ bias,       // (K,) or nullptr
    const float* __restrict__ residual,   // like y, or nullptr
    float* __restrict__ y,                // (N, K, OH, OW)
    float* __restrict__ partial,          // (shares, K, N·OH·OW), or nullptr: one share
    int N, int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int NB, int TH, int TW, int IHT, int IWT, int PITCH, int chunks, int per_share,
    int tiles_w, int max_segment, int accumulate, int relu)
{
    tc::wait_prior_grids();
    // Shared memory: two stages of the input (NB, CK, IHT, PITCH), PITCH >= IWT chosen on
    // the host so that a warp's reads (a few output rows x `lanes` columns) fall in
    // distinct banks where they can; two stages of the chunk's taps (the block's rows'
    // nonzeros in it, at most max_segment); the block's row pointers of every chunk; the
    // staging table (one int a staged word).
    // The next chunk's copies are in flight while this one is computed, and the compute
    // loop reads shared memory only: a global load of each row's pointers and taps put a
    // dependent latency before every row of every chunk.
    extern __shared__ float xs[];
    const int stage_size = NB * CK * IHT * PITCH;
    float* tap_stage = xs + 2 * stage_size;
    int* rows_s = reinterpret_cast<int*>(tap_stage + 4 * max_segment);
    int* table = rows_s + chunks * (RB + 1);
    const int lanes = TW / PX;             // threads per output row of the tile
    const int tid = threadIdx.x;
    const int tx = tid % lanes, ty = (tid / lanes) % TH, img = tid / (lanes * TH);
    const int th_i = blockIdx.x / tiles_w, tw_i = blockIdx.x - th_i * tiles_w;
    // blockIdx.z: (share of the channel chunks, image group).  Where the blocks alone
    // leave SMs short of threads, shares of the chunks sum into partial outputs that
    // conv2d_splitk_reduce adds in a fixed order, with the epilogue.
    const int groups_n = (N + NB - 1) / NB, share = blockIdx.z / groups_n;
    const int c_begin = share * per_share, c_end = min(chunks, c_begin + per_share);
    const int oh0 = th_i * TH, ow0 = tw_i * TW, n0 = (blockIdx.z - share * groups_n) * NB;
    const int ih0 = oh0 * sh - ph, iw0 = ow0 * sw - pw;
    const int k0 = blockIdx.y * RB;
    const int base = (img * CK * IHT + ty * sh) * PITCH + tx * sw;
    const int total = NB * CK * IHT * PITCH, HW = H * W;

    // The block's staging table, made once: for each staged word (image, channel, row,
    // column: the index in a stage) its offset in x at chunk 0, or -1 for padding (and
    // the columns past IWT).  A chunk then copies word e from x + c0·H·W + table[e]:
    // no index arithmetic per chunk (per-line divisions, a warp across each short line,
    // cost more than the products on small maps).
    const int* my_rows = row_ptr + (size_t)blockIdx.y * chunks * (RB + 1);
    for (int i = tid; i < chunks * (RB + 1); i += blockDim.x)
        tdcx::cp_async4(reinterpret_cast<float*>(rows_s + i),
                        reinterpret_cast<const float*>(my_rows + i), true);
    tdcx::cp_async_commit();
    for (int e = tid; e < total; e += blockDim.x) {
        const int line = e / PITCH, col = e - line * PITCH;
        const int b = line / (CK * IHT), rem = line - b * CK * IHT;
        const int c = rem / IHT, row = rem - c * IHT;
        const int n = n0 + b, ih = ih0 + row, iw = iw0 + col;
        const bool ok = col < IWT && n < N && c < C && ih >= 0 && ih < H && iw >= 0 && iw < W;
        table[e] = ok ? ((n * C + c) * H + ih) * W + iw : -1;
    }
    tdcx::cp_async_wait<0>();
    __syncthreads();

    // Every word of a chunk as a cp.async copy that zero-fills the padding (and, in a
    // last chunk short of CK channels, the channels past C): all of a chunk's copies are
    // in flight at once.
    auto stage = [&](int chunk, float* buf) {
        const int c0 = chunk * CK;
        const float* src = x + (size_t)c0 * HW;
        const bool partial = c0 + CK > C;
        for (int e = tid; e < total; e += blockDim.x) {
            const int off = table[e];
            bool in = off >= 0;
            if (partial && in) in = (off / HW) % C + c0 < C;
            tdcx::cp_async4(buf + e, in ? src + off : x, in);
        }
        const int* rp = rows_s + chunk * (RB + 1);
        const int first = rp[0], count = 2 * (rp[RB] - first);
        float* tbuf = tap_stage + (chunk & 1) * 2 * max_segment;
        for (int i = tid; i < count; i += blockDim.x)
            tdcx::cp_async4(tbuf + i, taps + 2 * (size_t)first + i, true);
        tdcx::cp_async_commit();
    };

    float acc[RB][PX];
#pragma unroll
    for (int i = 0; i < RB; ++i)
#pragma unroll
        for (int j = 0; j < PX; ++j) acc[i][j] = 0.f;

    stage(c_begin, xs + (c_begin & 1) * stage_size);
    for (int chunk = c_begin; chunk < c_end; ++chunk) {
        if (chunk + 1 < c_end) stage(chunk + 1, xs + ((chunk + 1) & 1) * stage_size);
        else tdcx::cp_async_commit();                    // an empty group: wait<1> below
        tdcx::cp_async_wait<1>();                        // this chunk's copies have landed
        __syncthreads();
        const float* cur = xs + (chunk & 1) * stage_size + base;
        const float2* tp = reinterpret_cast<const float2*>(tap_stage + (chunk & 1) * 2 * max_segment);
        const int* rp = rows_s + chunk * (RB + 1);
        const int first = rp[0];
#pragma unroll
        for (int i = 0; i < RB; ++i) {
            const int end = rp[i + 1] - first;           // rows past K have none
#pragma unroll 4
            for (int e = rp[i] - first; e < end; ++e) {
                const float2 t = tp[e];
                const float* src = cur + __float_as_int(t.y);
#pragma unroll
                for (int j = 0; j < PX; ++j) acc[i][j] = fmaf(t.x, src[j * lanes * sw], acc[i][j]);
            }
        }
        __syncthreads();                                 // before the next copies reuse it
    }

    const int n = n0 + img, oh = oh0 + ty;
    if (n >= N || oh >= OH) return;
#pragma unroll
    for (int i = 0; i < RB; ++i) {
        const int k = k0 + i;
        if (k >= K) break;
#pragma unroll
        for (int j = 0; j < PX; ++j) {
            const int ow = ow0 + tx + j * lanes;
            if (ow >= OW) continue;
            const size_t at = (((size_t)n * K + k) * OH + oh) * OW + ow;
            float v = acc[i][j];
            if (accumulate && share == 0) v += y[at];
            if (partial != nullptr)
                partial[((size_t)share * K + k) * N * OH * OW + ((size_t)n * OH + oh) * OW + ow] = v;
            else
                y[at] = tc::conv_epilogue(v, bias, k, residual, at, relu);
        }
    }
}

template <int PIX>
__global__ void __launch_bounds__(PIX) sparse_csr_rows(
    const float* __restrict__ x,        // (N, C, H, W)
    const int* __restrict__ indptr,     // (K + 1,)
    const int* __restrict__ indices,    // (nnz,) kernel-matrix columns
    const float* __restrict__ data,     // (nnz,)
    const int* __restrict__ col_off, const int* __restrict__ col_r,
    const int* __restrict__ col_s,
    const float* __restrict__ bias,     // (K,) or nullptr
    const float* __restrict__ residual, // like y, or nullptr
    float* __restrict__ y,              // (N, K, OH, OW)
    int CHW, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw, int Q,
    int accumulate, int relu)
{
    tc::wait_prior_grids();
    const int q = blockIdx.x * PIX + threadIdx.x, k = blockIdx.y;
    if (q >= Q) return;
    const int OHW = OH * OW;
    const int n = q / OHW, p = q - n * OHW, oh = p / OW, ow = p - oh * OW;
    const int ih0 = oh * sh - ph, iw0 = ow * sw - pw;
    const int base = n * CHW + ih0 * W + iw0;
    float acc = 0.f;
    const int end = indptr[k + 1];
    for (int e = indptr[k]; e < end; ++e) {
        const int col = indices[e];
        const int ih = ih0 + col_r[col], iw = iw0 + col_s[col];
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) acc = fmaf(data[e], x[base + col_off[col]], acc);
    }
    const size_t at = ((size_t)n * K + k) * OHW + p;
    if (accumulate) acc += y[at];
    y[at] = tc::conv_epilogue(acc, bias, k, residual, at, relu);
}

// What CI's nvcc build type-checks: tensorconv.ops.sparse_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SPARSE_BLOCK_GEMM(...) template __global__ void sparse_block_gemm<__VA_ARGS__>( \
    const float*, const float*, const int*, const int4*, float*, int, int, int, int, int, int, \
    int, int, int, int, int, int, int);
#define TC_I_SPARSE_CSR_ROWS(...) template __global__ void sparse_csr_rows<__VA_ARGS__>( \
    const float*, const int*, const int*, const float*, const int*, const int*, const int*, \
    const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int, int, \
    int, int);
TC_I_SPARSE_BLOCK_GEMM(16, 128, 16, 2, 4) TC_I_SPARSE_BLOCK_GEMM(32, 128, 16, 4, 4)
TC_I_SPARSE_BLOCK_GEMM(32, 64, 16, 2, 4) TC_I_SPARSE_BLOCK_GEMM(64, 128, 16, 8, 4)
TC_I_SPARSE_BLOCK_GEMM(64, 64, 16, 4, 4) TC_I_SPARSE_BLOCK_GEMM(8, 128, 16, 1, 4)
TC_I_SPARSE_BLOCK_GEMM(128, 64, 16, 8, 4)
TC_I_SPARSE_CSR_ROWS(128) TC_I_SPARSE_CSR_ROWS(256)
#define TC_I_SPARSE_CSR_TILED(...) template __global__ void sparse_csr_tiled<__VA_ARGS__>( \
    const float*, const int*, const float*, const float*, const float*, float*, float*, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, int, int, int);
TC_I_SPARSE_CSR_TILED(16, 2, 8) TC_I_SPARSE_CSR_TILED(16, 4, 8) TC_I_SPARSE_CSR_TILED(8, 1, 8)
TC_I_SPARSE_CSR_TILED(8, 2, 8) TC_I_SPARSE_CSR_TILED(8, 4, 8)
#undef TC_I_SPARSE_BLOCK_GEMM
#undef TC_I_SPARSE_CSR_ROWS
#undef TC_I_SPARSE_CSR_TILED
#endif
