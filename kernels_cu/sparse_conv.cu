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
// sparse_block_table runs every block of a layer in one launch, each item a range of a
// block's rows and of its columns storing its sums in rows of its own (slots);
// sparse_block_reduce adds each output channel's slots in a fixed order.
//
// sparse_csr_tiled: the remainder, tiled.  A thread block (WARPS warps) owns RB rows and a
// tile of 32·PX output pixels (NB images x TH x TW, powers of two); the input under the
// tile streams through shared memory CK channels at a time (two stages, 16-byte cp.async
// where rows allow), and each warp walks its own RB / WARPS rows' nonzeros in the chunk (taps:
// each nonzero's weight and byte offset in the staged chunk, two to a 16-byte broadcast
// load), each lane keeping PX pixels 32 apart in the tile for each of its rows.  Every
// staged input value serves all RB rows; every tap loaded serves PX multiply-adds a lane.
//
// sparse_csr_pointwise: the remainder of a 1x1 filter, nothing staged: WARPS warps share
// a tile of 32·PX pixels, each warp RW rows, each lane reading its pixels' input values
// straight from global memory (L1-cached) at every tap.
//
// sparse_csr_rows: the same remainder one thread per output pixel of one row (the
// row-wise direct sparse convolution, Escoin-style).
//
// All three end with the epilogue (bias, residual, ReLU) of every row: they run last, after
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

// Every dense block of a layer in one launch (the block table): item blockIdx.y is a
// range of at most BM rows of one block and a range of its columns, and stores its
// sums, unadded, in its own rows of `partial` (one slot per row); sparse_block_reduce
// then adds each output channel's slots in a fixed order.  The column split gives a
// layer with few pixels (deep layers at batch 32) enough thread blocks, and the slots
// keep the sum deterministic where blocks share rows.  Where every output channel has
// at most one slot (no shared rows, no cut columns: layers with many pixels) the items
// store straight into y through `slot_rows`, and no reduction runs.
//
// Its main loop is sparse_block_gemm's, written out again: one __forceinline__ device
// function shared by the two kernels compiled to the same PTX but ran sparse_block_gemm
// 9-15 % slower on the H100 (docs/notes/sparse_conv.md, 2026-11-25).
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) sparse_block_table(
    const float* __restrict__ x,        // (N, C, H, W)
    const float* __restrict__ values_all,  // every block's (rows, cols) values in turn
    const int4* __restrict__ tabs,      // every block's column table in turn
    const int4* __restrict__ items,     // (items, 2): values offset, ld, table offset, rows;
                                        //             first column, end column, slot, 0
    const int* __restrict__ slot_rows, // (slots,) output channels, or nullptr
    float* __restrict__ out,            // (slots, Q) partial sums, or y (N, K, OH, OW)
    int CHW, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw, int Q)
{
    tc::wait_prior_grids();
    const int4 ia = items[2 * blockIdx.y], ib = items[2 * blockIdx.y + 1];
    const float* __restrict__ values = values_all + ia.x;
    const int4* __restrict__ tab = tabs + ia.z;
    const int ncols = ia.y, nrows = ia.w, kbeg = ib.x, kend = ib.y;
    constexpr int TX = BN / TN, TY = BM / TM, THREADS = TX * TY;
    static_assert(THREADS % BN == 0, "a thread gathers pixels of one column set");
    constexpr int NA = (BM * BK + THREADS - 1) / THREADS, NB = BN * BK / THREADS;
    constexpr int GK = THREADS / BN;
    __shared__ float as[BK][BM + 1];
    __shared__ float bs[BK][BN];
    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
    const int q0 = blockIdx.x * BN;
    const int OHW = OH * OW;

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

    float ra[NA], rb[NB];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < NA; ++i) {
            const int e = tid + i * THREADS, m = e / BK, k = k0 + e % BK;
            ra[i] = (e < BM * BK && m < nrows && k < kend)
                        ? values[(size_t)m * ncols + k] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < NB; ++i) {
            const int k = k0 + gk + i * GK;
            float v = 0.f;
            if (gvalid && k < kend) {
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

    fetch(kbeg);
    for (int k0 = kbeg; k0 < kend; k0 += BK) {
        stash();
        __syncthreads();
        if (k0 + BK < kend) fetch(k0 + BK);
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
    for (int i = 0; i < TM; ++i) {
        const int m = ty + i * TY;
        if (m >= nrows) continue;
        if (slot_rows == nullptr) {
            float* row = out + (size_t)(ib.z + m) * Q;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int q = q0 + tx + j * TX;
                if (q < Q) row[q] = acc[i][j];
            }
        } else {
            const size_t krow = (size_t)slot_rows[ib.z + m] * OHW;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int q = q0 + tx + j * TX;
                if (q >= Q) continue;
                const int n = q / OHW, p = q - n * OHW;
                out[(size_t)n * K * OHW + krow + p] = acc[i][j];
            }
        }
    }
}

// y[n, k, p] = the sum of output channel k's slots (red_idx[red_ptr[k]:red_ptr[k+1]], in
// that order), 0 for a channel in no block: the remainder kernel then adds into it.
__global__ void __launch_bounds__(256) sparse_block_reduce(
    const float* __restrict__ partial,  // (slots, Q)
    const int* __restrict__ red_ptr,    // (K + 1,)
    const int* __restrict__ red_idx,    // (slots,)
    float* __restrict__ y,              // (N, K, OH, OW)
    int K, int OHW, int Q)
{
    tc::wait_prior_grids();
    const int q = blockIdx.x * 256 + threadIdx.x;
    if (q >= Q) return;
    const int n = q / OHW, p = q - n * OHW;
    for (int k = blockIdx.y; k < K; k += gridDim.y) {
        float s = 0.f;
        const int end = red_ptr[k + 1];
        for (int i = red_ptr[k]; i < end; ++i) s += partial[(size_t)red_idx[i] * Q + q];
        y[((size_t)n * K + k) * OHW + p] = s;
    }
}

template <int RB, int PX, int CK, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, WARPS == 16 && RB / WARPS * PX >= 32 ? 2 : 0)
sparse_csr_tiled(
    const float* __restrict__ x,          // (N, C, H, W)
    const int2* __restrict__ row_tab,     // (groups, chunks, RB + 1): row slot RB·g + i's
                                          // taps in chunk j, (start, count) from the (g, j)
                                          // segment's start; [.., RB]: the segment's (first,
                                          // length) in taps; all even
    const float2* __restrict__ taps,      // by (row group, chunk, row), each row's run
                                          // padded to an even length by a zero weight at
                                          // offset 0: the weight, and (as bits) its byte
                                          // offset in a staged chunk
    const int* __restrict__ row_of,       // (groups·RB,): each slot's output row, or -1
                                          // (rows balanced over the warps by nonzeros)
    const float* __restrict__ bias,       // (K,) or nullptr
    const float* __restrict__ residual,   // like y, or nullptr
    float* __restrict__ y,                // (N, K, OH, OW)
    float* __restrict__ partial,          // (shares, K, N·OH·OW), or nullptr: one share
    int N, int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int NB, int TH, int TW, int IHT, int PITCH, int ipad, int vec, int rstep, int cstep,
    int phases, int rphases, int chunks,
    int per_share, int tiles_w, int max_segment, int accumulate, int relu)
{
    tc::wait_prior_grids();
    // Staged line t of a channel is input row ih0 + t·rstep, its column u input column
    // col0 + u·cstep: steps of 1, or the stride where the filter is one tap high (wide),
    // so that a 1x1 strided layer stages only the pixels it reads.  With phases > 1 (the
    // horizontal stride, word copies) a line holds `phases` runs of PITCH / phases words,
    // column u at run u % phases, word u / phases: a strided tile's reads are consecutive.
    // With rphases > 1 (the vertical stride) a channel's lines hold its input rows by row
    // phase (rows q, q + rphases, ... for each q in turn), so that output rows next to
    // each other read lines next to each other, PITCH (odd) words apart: both bank parities.
    // An image's CK·IHT lines are followed by ipad words where a warp's pixels span images,
    // so that two images' reads do not fall on the same banks.
    // Shared memory: two stages of the input (NB images of IMG words); two stages of the
    // chunk's taps (the block's rows' nonzeros in it, at most max_segment); the block's row
    // table of its share's chunks; the staging table (an int a staged vector).  The next
    // chunk's copies are in flight while this one is computed, and the compute loop reads
    // shared memory only.
    // Two blocks an SM for 16 warps with 32 accumulators a thread (at most 64 registers, a
    // few spilled): measured faster than one block of 92-96 registers (1.09-1.31x on
    // ResNet-18-8x's layers, H200), which the compiler otherwise picks for some builds.
    extern __shared__ __align__(16) float xs[];
    const int IMG = CK * IHT * PITCH + ipad, stage_size = (NB * IMG + 3) & ~3;
    float2* tap_stage = reinterpret_cast<float2*>(xs + 2 * stage_size);
    int2* rows_s = reinterpret_cast<int2*>(tap_stage + 2 * max_segment);
    int* table = reinterpret_cast<int*>(rows_s + per_share * (RB + 1));
    // WARPS warps, each owning RB / WARPS of the block's rows over all of the tile's 32·PX
    // pixels (NB images x TH x TW, powers of two): a tap's weight and offset are loaded
    // once for PX multiply-adds a lane, and a warp walks only its own rows' taps.  More
    // warps a block: each staged chunk serves more rows.
    constexpr int RW = RB / WARPS;         // 32·WARPS threads (RemainderGeometry.threads)
    static_assert(RB % WARPS == 0 && PX >= 1, "whole rows a warp");
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int lw = __ffs(TW) - 1, lhw = lw + __ffs(TH) - 1;
    const int th_i = blockIdx.x / tiles_w, tw_i = blockIdx.x - th_i * tiles_w;
    // blockIdx.z: (image group, share of the channel chunks), a tile's shares next to each
    // other (they stage the same input).  Where the blocks alone leave SMs short of
    // threads, shares of the chunks sum into partial outputs that conv2d_splitk_reduce
    // adds in a fixed order, with the epilogue.
    const int shares = (chunks + per_share - 1) / per_share;
    const int group = blockIdx.z / shares, share = blockIdx.z - group * shares;
    const int c_begin = share * per_share, c_end = min(chunks, c_begin + per_share);
    const int oh0 = th_i * TH, ow0 = tw_i * TW, n0 = group * NB;
    const int ih0 = oh0 * sh - ph, iw0 = ow0 * sw - pw;
    // 16-byte copies (vec = 4, W % 4 == 0): a staged line starts at the multiple of 4 at or
    // before iw0, so every vector lies wholly inside the image or wholly outside; `lead`
    // columns come first, and each thread's reads start past them.
    const int lead = vec == 4 ? (iw0 & 3) : 0, col0 = iw0 - lead;
    const int per_line = PITCH / vec, items = NB * CK * IHT * per_line, HW = H * W;
    // Pixel p of the tile (column p % TW, row p / TW % TH, image p / (TW·TH)) reads staged
    // word `word(p)` plus its tap's offset.  Lane l's j-th pixel is l + 32·j; the fields of
    // l and of 32·j do not overlap (powers of two), so its word is word(l) + word(32·j): a
    // per-thread base and PX offsets shared by the warp.
    const int col_read = phases > 1 ? 1 : sw / cstep, run = PITCH / phases;
    const int row_read = rphases > 1 ? 1 : sh / rstep;
    auto word = [&](int p) {
        return (p >> lhw) * IMG + ((p >> lw) & (TH - 1)) * row_read * PITCH
            + (p & (TW - 1)) * col_read;
    };
    const int tbase = 4 * (word(lane) + lead);
    int joff[PX];
#pragma unroll
    for (int j = 0; j < PX; ++j) joff[j] = 4 * word(32 * j);

    // The block's row table (its share's chunks: chunk c at (c - c_begin)·(RB + 1)), and
    // its staging table, made once: for each staged vector its offset in x at chunk 0, or
    // -1 for padding; a chunk then copies vector e from x + c0·H·W + table[e] with no
    // index arithmetic.
    const int2* my_rows = row_tab + ((size_t)blockIdx.y * chunks + c_begin) * (RB + 1);
    for (int i = tid; i < (c_end - c_begin) * (RB + 1); i += blockDim.x) rows_s[i] = my_rows[i];
    for (int e = tid; e < items; e += blockDim.x) {
        const int line = e / per_line, w = (e - line * per_line) * vec;
        const int col = phases > 1 ? (w % run) * phases + w / run : w;
        const int bc = line / IHT;
        int row = line - bc * IHT;                       // the line's input row, in order
        if (rphases > 1) {                               // or by phase: find the line's
            int q = 0;
            for (int n_q; row >= (n_q = (IHT - q + rphases - 1) / rphases); ++q) row -= n_q;
            row = row * rphases + q;
        }
        const int b = bc / CK, c = bc - b * CK;
        const int n = n0 + b, ih = ih0 + row * rstep, iw = col0 + col * cstep;
        const bool ok = n < N && c < C && ih >= 0 && ih < H && iw >= 0 && iw + vec <= W;
        table[e] = ok ? ((n * C + c) * H + ih) * W + iw : -1;
    }
    __syncthreads();

    // Every vector of a chunk as a cp.async copy that zero-fills the padding (and, in a
    // last chunk short of CK channels, the channels past C), and the chunk's taps.
    // Padded apart, the images are staged one at a time (per_image vectors from vector
    // b·per_image of the table, to word b·IMG): the table stays an int a vector and the
    // loop free of divisions; unpadded, one run over every vector.
    const int per_image = items / NB;
    auto copy = [&](const float* src, int c0, const int* tb, float* dst, int n) {
        if (c0 + CK <= C && vec == 4) {
            for (int e = tid; e < n; e += blockDim.x) {
                const int off = tb[e];
                tdcx::cp_async16(dst + 4 * e, src + max(off, 0), off >= 0);
            }
        } else if (c0 + CK <= C) {
            for (int e = tid; e < n; e += blockDim.x) {
                const int off = tb[e];
                tdcx::cp_async4(dst + e, src + max(off, 0), off >= 0);
            }
        } else {                                         // the last chunk, short of CK
            for (int e = tid; e < n; e += blockDim.x) {
                const int off = tb[e];
                const bool in = off >= 0 && (off / HW) % C + c0 < C;
                if (vec == 4) tdcx::cp_async16(dst + 4 * e, in ? src + off : x, in);
                else tdcx::cp_async4(dst + e, in ? src + off : x, in);
            }
        }
    };
    auto stage = [&](int chunk, float* buf) {
        const int c0 = chunk * CK;
        const float* src = x + (size_t)c0 * HW;
        if (ipad == 0) copy(src, c0, table, buf, items);
        else
            for (int b = 0; b < NB; ++b)
                copy(src, c0, table + b * per_image, buf + b * IMG, per_image);
        const int2 seg = rows_s[(chunk - c_begin) * (RB + 1) + RB];
        float* tbuf = reinterpret_cast<float*>(tap_stage + (chunk & 1) * max_segment);
        const float* tsrc = reinterpret_cast<const float*>(taps + seg.x);
        for (int i = tid; i < seg.y / 2; i += blockDim.x)
            tdcx::cp_async16(tbuf + 4 * i, tsrc + 4 * i, true);
        tdcx::cp_async_commit();
    };

    float acc[RW][PX];
#pragma unroll
    for (int i = 0; i < RW; ++i)
#pragma unroll
        for (int j = 0; j < PX; ++j) acc[i][j] = 0.f;

    // Each tap is one add to the thread's base (its byte offset), and two taps come in one
    // 16-byte broadcast load (an odd run's padding adds 0 times a staged value: cheaper
    // than a branch for the last tap of every row).  The next chunk's copies go out before
    // this one's are awaited: two chunks in flight, so a short chunk's compute does not
    // leave the next one's copy latency exposed.
    stage(c_begin, xs + (c_begin & 1) * stage_size);
    for (int chunk = c_begin; chunk < c_end; ++chunk) {
        if (chunk + 1 < c_end) stage(chunk + 1, xs + ((chunk + 1) & 1) * stage_size);
        else tdcx::cp_async_commit();                    // an empty group: wait<1> below
        tdcx::cp_async_wait<1>();                        // this chunk's copies have landed
        __syncthreads();
        const char* cur = reinterpret_cast<const char*>(xs + (chunk & 1) * stage_size) + tbase;
        const float4* tp = reinterpret_cast<const float4*>(tap_stage + (chunk & 1) * max_segment);
        const int2* rp = rows_s + (chunk - c_begin) * (RB + 1) + warp * RW;
#pragma unroll
        for (int i = 0; i < RW; ++i) {
            const int2 sc = rp[i];                       // rows past K have none
            const float4* p = tp + (sc.x >> 1);
            const float4* end = p + (sc.y >> 1);
#pragma unroll 2
            for (; p < end; ++p) {
                const float4 t = *p;
                const char* a = cur + __float_as_int(t.y);
                const char* b = cur + __float_as_int(t.w);
#pragma unroll
                for (int j = 0; j < PX; ++j)
                    acc[i][j] = fmaf(t.x, *reinterpret_cast<const float*>(a + joff[j]), acc[i][j]);
#pragma unroll
                for (int j = 0; j < PX; ++j)
                    acc[i][j] = fmaf(t.z, *reinterpret_cast<const float*>(b + joff[j]), acc[i][j]);
            }
        }
        __syncthreads();                                 // before the next copies reuse it
    }

    // A row's PX values a lane, 32 consecutive pixels a warp store: coalesced whatever row
    // the slot holds.
#pragma unroll
    for (int i = 0; i < RW; ++i) {
        const int k = row_of[blockIdx.y * RB + warp * RW + i];
        if (k < 0) continue;
#pragma unroll
        for (int j = 0; j < PX; ++j) {
            const int p = lane + 32 * j;
            const int n = n0 + (p >> lhw), oh = oh0 + ((p >> lw) & (TH - 1));
            const int ow = ow0 + (p & (TW - 1));
            if (n >= N || oh >= OH || ow >= OW) continue;
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

template <int WARPS, int RW, int PX, int U>
__global__ void __launch_bounds__(32 * WARPS) sparse_csr_pointwise(
    const float* __restrict__ x,          // (N, C, H, W)
    const int2* __restrict__ slot_tab,    // (shares, slots): each row slot's (first tap,
                                          // count) in a share's channels, both even
    const float4* __restrict__ taps,      // two taps each: weight, c·H·W (as bits), ...;
                                          // a run padded by a zero weight at offset 0
    const int* __restrict__ row_of,       // (slots,): each slot's output row, or -1
    const float* __restrict__ bias,       // (K,) or nullptr
    const float* __restrict__ residual,   // like y, or nullptr
    float* __restrict__ y,                // (N, K, OH, OW)
    float* __restrict__ partial,          // (shares, K, N·OH·OW), or nullptr: one share
    int N, int C, int H, int W, int K, int OH, int OW, int sh, int sw, int ph, int pw,
    int slots, int accumulate, int relu)
{
    tc::wait_prior_grids();
    // A 1x1 filter reads one input position a pixel, the same for every channel, so a
    // tap is only a channel offset and a pixel is wholly inside the image or wholly in
    // the padding.  Nothing is staged: each lane reads its pixels' values straight from
    // global memory (the block's warps share its pixels, so the L1 serves the rows after
    // the first) and keeps PX pixels 32 apart of each of its RW rows: no barrier, no
    // staging table, many warps' loads in flight, where a strided or narrow 1x1 layer's
    // chunks compute too little to hide the tiled kernel's copy round trips.  With
    // blockIdx.z > 0 the channels are shared among blocks (few pixels, deep layers), each
    // share's sums going to its partial output, added in a fixed order afterwards.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int OHW = OH * OW, HW = H * W;
    const int Q = N * OHW, share = blockIdx.z;
    const int q0 = blockIdx.x * 32 * PX + lane;
    const float* base[PX];
    bool inside[PX];
#pragma unroll
    for (int j = 0; j < PX; ++j) {
        const int q = q0 + 32 * j;
        const int n = q / OHW, p = q - n * OHW, oh = p / OW, ow = p - oh * OW;
        const int ih = oh * sh - ph, iw = ow * sw - pw;
        inside[j] = q < Q && ih >= 0 && ih < H && iw >= 0 && iw < W;
        // outside: any in-bounds address (image 0's pixel 0); the sum is dropped below
        base[j] = inside[j] ? x + (size_t)n * C * HW + ih * W + iw : x;
    }
    float acc[RW][PX];
#pragma unroll
    for (int i = 0; i < RW; ++i)
#pragma unroll
        for (int j = 0; j < PX; ++j) acc[i][j] = 0.f;
    const int slot0 = (blockIdx.y * WARPS + warp) * RW;
    const int2* tab = slot_tab + (size_t)share * slots + slot0;
    // U == 1: a row's taps one pair after another (unrolled by four), the loads of each
    // round trip in flight across the warps of an SM.  U > 1: U pairs at a time, the U
    // tap loads, then their 2·U·PX input loads, then the products, so that a warp has U
    // round trips in flight rather than a chain of them: where few warps share an SM and
    // rows are long (deep layers on small maps), a row's latency is the number of such
    // rounds.  Both keep the taps' order, so they give the same sums bit for bit.
#pragma unroll
    for (int i = 0; i < RW; ++i) {
        const int2 st = tab[i];
        const float4* p = taps + (st.x >> 1);
        const float4* end = p + (st.y >> 1);
        if constexpr (U == 1) {
#pragma unroll 4
            for (; p < end; ++p) {
                const float4 t = __ldg(p);
                const int a = __float_as_int(t.y), b = __float_as_int(t.w);
#pragma unroll
                for (int j = 0; j < PX; ++j) acc[i][j] = fmaf(t.x, __ldg(base[j] + a), acc[i][j]);
#pragma unroll
                for (int j = 0; j < PX; ++j) acc[i][j] = fmaf(t.z, __ldg(base[j] + b), acc[i][j]);
            }
        } else {
            for (; p < end; p += U) {
                const int live = (int)(end - p);   // >= 1; the batch's pairs past it skipped
                float4 t[U];
                float xa[U][PX], xb[U][PX];
#pragma unroll
                for (int u = 0; u < U; ++u)
                    t[u] = u < live ? __ldg(p + u) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int j = 0; j < PX; ++j) {
                        xa[u][j] = u < live ? __ldg(base[j] + __float_as_int(t[u].y)) : 0.f;
                        xb[u][j] = u < live ? __ldg(base[j] + __float_as_int(t[u].w)) : 0.f;
                    }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (u >= live) break;
#pragma unroll
                    for (int j = 0; j < PX; ++j) acc[i][j] = fmaf(t[u].x, xa[u][j], acc[i][j]);
#pragma unroll
                    for (int j = 0; j < PX; ++j) acc[i][j] = fmaf(t[u].z, xb[u][j], acc[i][j]);
                }
            }
        }
    }
    // A row's 32 consecutive pixels a warp store: coalesced whatever row the slot holds.
#pragma unroll
    for (int i = 0; i < RW; ++i) {
        const int k = row_of[slot0 + i];
        if (k < 0) continue;
#pragma unroll
        for (int j = 0; j < PX; ++j) {
            const int q = q0 + 32 * j;
            if (q >= Q) continue;
            const int n = q / OHW, p = q - n * OHW;
            const size_t at = ((size_t)n * K + k) * OHW + p;
            float v = inside[j] ? acc[i][j] : 0.f;
            if (accumulate && share == 0) v += y[at];
            if (partial != nullptr)
                partial[((size_t)share * K + k) * Q + q] = v;
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
TC_I_SPARSE_BLOCK_GEMM(128, 64, 16, 8, 4) TC_I_SPARSE_BLOCK_GEMM(16, 128, 16, 2, 4)
TC_I_SPARSE_BLOCK_GEMM(32, 128, 16, 4, 4) TC_I_SPARSE_BLOCK_GEMM(32, 64, 16, 2, 4)
TC_I_SPARSE_BLOCK_GEMM(64, 128, 16, 8, 4) TC_I_SPARSE_BLOCK_GEMM(64, 64, 16, 4, 4)
TC_I_SPARSE_BLOCK_GEMM(8, 128, 16, 1, 4)
#undef TC_I_SPARSE_BLOCK_GEMM
#define TC_I_SPARSE_BLOCK_TABLE(...) template __global__ void sparse_block_table<__VA_ARGS__>( \
    const float*, const float*, const int4*, const int4*, const int*, float*, int, int, int, int, \
    int, int, int, int, int, int, int);
TC_I_SPARSE_BLOCK_TABLE(16, 128, 16, 2, 4) TC_I_SPARSE_BLOCK_TABLE(32, 128, 16, 4, 4)
TC_I_SPARSE_BLOCK_TABLE(32, 64, 16, 2, 4) TC_I_SPARSE_BLOCK_TABLE(64, 128, 16, 8, 4)
#undef TC_I_SPARSE_BLOCK_TABLE
#define TC_I_SPARSE_CSR_POINTWISE(...) template __global__ void sparse_csr_pointwise<__VA_ARGS__>( \
    const float*, const int2*, const float4*, const int*, const float*, const float*, float*, \
    float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_SPARSE_CSR_POINTWISE(16, 1, 1, 1) TC_I_SPARSE_CSR_POINTWISE(16, 1, 1, 8)
TC_I_SPARSE_CSR_POINTWISE(16, 1, 2, 1) TC_I_SPARSE_CSR_POINTWISE(16, 1, 2, 4)
TC_I_SPARSE_CSR_POINTWISE(16, 1, 4, 1) TC_I_SPARSE_CSR_POINTWISE(16, 2, 1, 1)
TC_I_SPARSE_CSR_POINTWISE(16, 2, 1, 8) TC_I_SPARSE_CSR_POINTWISE(16, 2, 2, 1)
TC_I_SPARSE_CSR_POINTWISE(16, 2, 2, 4) TC_I_SPARSE_CSR_POINTWISE(16, 2, 4, 1)
TC_I_SPARSE_CSR_POINTWISE(16, 4, 1, 1) TC_I_SPARSE_CSR_POINTWISE(16, 4, 1, 8)
TC_I_SPARSE_CSR_POINTWISE(16, 4, 2, 1) TC_I_SPARSE_CSR_POINTWISE(16, 4, 2, 4)
TC_I_SPARSE_CSR_POINTWISE(16, 4, 4, 1) TC_I_SPARSE_CSR_POINTWISE(4, 1, 1, 1)
TC_I_SPARSE_CSR_POINTWISE(4, 1, 2, 1) TC_I_SPARSE_CSR_POINTWISE(4, 1, 4, 1)
TC_I_SPARSE_CSR_POINTWISE(4, 2, 1, 1) TC_I_SPARSE_CSR_POINTWISE(4, 2, 2, 1)
TC_I_SPARSE_CSR_POINTWISE(4, 2, 4, 1) TC_I_SPARSE_CSR_POINTWISE(4, 4, 1, 1)
TC_I_SPARSE_CSR_POINTWISE(4, 4, 2, 1) TC_I_SPARSE_CSR_POINTWISE(4, 4, 4, 1)
TC_I_SPARSE_CSR_POINTWISE(8, 1, 1, 1) TC_I_SPARSE_CSR_POINTWISE(8, 1, 1, 8)
TC_I_SPARSE_CSR_POINTWISE(8, 1, 2, 1) TC_I_SPARSE_CSR_POINTWISE(8, 1, 2, 4)
TC_I_SPARSE_CSR_POINTWISE(8, 1, 4, 1) TC_I_SPARSE_CSR_POINTWISE(8, 2, 1, 1)
TC_I_SPARSE_CSR_POINTWISE(8, 2, 1, 8) TC_I_SPARSE_CSR_POINTWISE(8, 2, 2, 1)
TC_I_SPARSE_CSR_POINTWISE(8, 2, 2, 4) TC_I_SPARSE_CSR_POINTWISE(8, 2, 4, 1)
TC_I_SPARSE_CSR_POINTWISE(8, 4, 1, 1) TC_I_SPARSE_CSR_POINTWISE(8, 4, 1, 8)
TC_I_SPARSE_CSR_POINTWISE(8, 4, 2, 1) TC_I_SPARSE_CSR_POINTWISE(8, 4, 2, 4)
TC_I_SPARSE_CSR_POINTWISE(8, 4, 4, 1)
#undef TC_I_SPARSE_CSR_POINTWISE
#define TC_I_SPARSE_CSR_ROWS(...) template __global__ void sparse_csr_rows<__VA_ARGS__>( \
    const float*, const int*, const int*, const float*, const int*, const int*, const int*, \
    const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int, int, \
    int, int);
TC_I_SPARSE_CSR_ROWS(128) TC_I_SPARSE_CSR_ROWS(256)
#undef TC_I_SPARSE_CSR_ROWS
#define TC_I_SPARSE_CSR_TILED(...) template __global__ void sparse_csr_tiled<__VA_ARGS__>( \
    const float*, const int2*, const float2*, const int*, const float*, const float*, float*, \
    float*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int);
TC_I_SPARSE_CSR_TILED(128, 1, 8, 16) TC_I_SPARSE_CSR_TILED(128, 2, 8, 16)
TC_I_SPARSE_CSR_TILED(128, 4, 8, 16) TC_I_SPARSE_CSR_TILED(16, 1, 8, 4)
TC_I_SPARSE_CSR_TILED(16, 2, 8, 4) TC_I_SPARSE_CSR_TILED(16, 4, 16, 4)
TC_I_SPARSE_CSR_TILED(16, 4, 32, 4) TC_I_SPARSE_CSR_TILED(16, 4, 8, 4)
TC_I_SPARSE_CSR_TILED(16, 8, 8, 4) TC_I_SPARSE_CSR_TILED(32, 1, 8, 4)
TC_I_SPARSE_CSR_TILED(32, 2, 16, 4) TC_I_SPARSE_CSR_TILED(32, 2, 32, 4)
TC_I_SPARSE_CSR_TILED(32, 2, 8, 4) TC_I_SPARSE_CSR_TILED(32, 2, 8, 8)
TC_I_SPARSE_CSR_TILED(32, 4, 16, 4) TC_I_SPARSE_CSR_TILED(32, 4, 8, 4)
TC_I_SPARSE_CSR_TILED(32, 8, 8, 4) TC_I_SPARSE_CSR_TILED(64, 1, 32, 4)
TC_I_SPARSE_CSR_TILED(64, 1, 8, 4) TC_I_SPARSE_CSR_TILED(64, 2, 8, 16)
TC_I_SPARSE_CSR_TILED(64, 2, 8, 4) TC_I_SPARSE_CSR_TILED(64, 2, 8, 8)
TC_I_SPARSE_CSR_TILED(64, 4, 8, 4) TC_I_SPARSE_CSR_TILED(64, 4, 8, 8)
TC_I_SPARSE_CSR_TILED(64, 8, 8, 8) TC_I_SPARSE_CSR_TILED(8, 1, 8, 4)
TC_I_SPARSE_CSR_TILED(8, 2, 8, 4) TC_I_SPARSE_CSR_TILED(8, 4, 8, 4)
TC_I_SPARSE_CSR_TILED(8, 8, 8, 4)
#undef TC_I_SPARSE_CSR_TILED
#endif
