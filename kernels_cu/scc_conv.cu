// Sliding-channel convolution (DSXplore's SCC, Wang et al., IPDPS'21), fp32, NCHW.
//
// Filter k reads the U input channels (b_k + u) mod Cin, b_k = (k * stride) mod Cin.  The
// host sorts the filters by window start (the channel-cyclic groups, side by side): a tile
// of consecutive sorted filters reads one band of "virtual" channels v in [lo, lo + span)
// (channel v mod Cin; lo the first filter's start, span = last start - lo + U), so every
// SCC product is a GEMM over that band with the weights laid out dense-masked in shared
// memory (filter i's weight at v is w[k_i, v - b_i] when 0 <= v - b_i < U, else 0).  A
// tile of one window group has span U: no wasted multiply-add; a tile across groups pays
// (span / U) for its reuse.  Pixels are flat over the batch (q = n * P + p), so small
// feature maps still fill whole tiles.
//
// The GEMM kernels take their tile as template arguments <TY, TX, TN, TM>: TY x TX
// threads, each TM (4 or 8) consecutive rows x TN consecutive columns, so a block covers
// BM = TM·TY rows x TN·TX columns.  Small row tiles (16, 32) keep a tile inside one window group where
// groups are small.
//
// scc_fwd: y for BM sorted filters x TN·TX pixels per pixel tile; bias and ReLU fused.
// scc_bwd_data: the input-centric gradient, as a GEMM: a block owns BM input channels x
//   TN·TX pixels and pulls from the filters whose window meets its channels (a per-tile
//   list made on the host); every gx value is written once: no atomics, deterministic.
//   Where its tiles are too few to fill the GPU, blocks share each list (blockIdx.z) into
//   partial maps that conv2d_splitk_reduce adds in a fixed order.
//   In both, a block walks pixel tiles blockIdx.x, + gridDim.x, ... (one where the grid
//   fits the GPU at once), every tile's chunks one cp.async ring.
// scc_bwd_data_gather: the paper's input-centric form, one thread per (channel, pixel)
//   walking its channel's (filter, weight) pairs (the channel map, CSR).
// scc_bwd_data_atomic: the paper's output-centric "Var": one thread per (filter, pixel)
//   adds w[k, u] * gy[k, p] into each channel of its window with atomicAdd.
// scc_bwd_filter: the weight gradient without atomics, as a GEMM: a block reduces BM
//   sorted filters x TN·TX band channels over its share of the pixels into a partial sum;
//   conv2d_splitk_reduce (direct_conv.cu) adds the shares in a fixed order.
// scc_fwd_wide, scc_bwd_filter_wide: the same products by blocks over every filter, each
//   map read once (below, before them).
// scc_fwd_cyclic: the paper's per-thread forward, window starts from the channel-cyclic
//   map in constant memory or computed.
// scc_bwd_onepass: both gradients in one pass over gy and x (below, at the end).
//
// Launch geometry and checks belong to tensorconv/ops/scc_conv.py (scc_fused.py for the
// one-pass backward), tables and tile choices to tensorconv/ops/scc_tiles.py.
#include "tc_cluster.cuh"
#include "tc_common.cuh"

namespace scc {
constexpr int THREADS = 256, RC = 16;   // the per-thread kernels' block; reduction chunk

// v mod Cin for 0 <= v < 3 Cin (a band starts below Cin and spans less than 2 Cin).
__device__ __forceinline__ int wrap(int v, int Cin) {
    v -= v >= Cin ? Cin : 0;
    return v - (v >= Cin ? Cin : 0);
}

// Offset of pixel q of a (N, C, P) map's channel 0, or -1 past the last pixel.
__device__ __forceinline__ long long pixel_base(int q, int Q, int C, int P) {
    if (q >= Q) return -1;
    const int n = q / P;
    return (long long)n * C * P + (q - n * P);
}
// A thread's column j of a block's BN = TN·TX: groups of GW = min(TN, 4) consecutive
// columns, group g at g·GW·TX + GW·tx, so each vector load of a chunk row is contiguous over
// a warp's 8 column threads (one shared wavefront; a run of 8 columns a thread took two).
template <int TN, int TX>
__device__ __forceinline__ int column(int tx, int j) {
    constexpr int GW = TN < 4 ? TN : 4;
    return j / GW * (GW * TX) + GW * tx + j % GW;
}
// The output side of a pixel-tile kernel: a thread's TN pixels q0 + column(tx, j) of a
// (N, C, P) map, runs of V = min(TN, 4) consecutive ones.  Where P and the pointer allow,
// each run lies in one image and is stored as one vector (consecutive pixels a thread make
// scalar stores 16-byte strided across a warp), so one offset a run serves every row;
// else one offset a pixel, by carries.  Found once a thread, not once a row: on the short
// bands this integer work was a fifth of the kernels' instructions.
template <int TN, int TX>
struct PixelOut {
    static constexpr int V = TN < 4 ? TN : 4;
    static_assert(V == 4 || V == 2, "TN is 2 or a multiple of 4");
    bool vec;
    long long b[TN];   // offset in channel 0 of pixel j (vec: of run j / V), -1 past Q
    __device__ __forceinline__ PixelOut(const float* out, int q0, int tx, int Q, int C, int P) {
        vec = P % V == 0 && reinterpret_cast<unsigned long long>(out) % (4 * V) == 0;
        const long long image = (long long)C * P;
#pragma unroll
        for (int g = 0; g < TN; g += V) {
            const int q = q0 + column<TN, TX>(tx, g), n = q / P;
            if (vec) {
                b[g] = q < Q ? n * image + (q - n * P) : -1;
            } else {
                int p = q - n * P;
                long long nb = n * image;
#pragma unroll
                for (int i = 0; i < V; ++i) {
                    b[g + i] = q + i < Q ? nb + p : -1;
                    if (++p == P) p = 0, nb += image;
                }
            }
        }
    }
    // Row `row`: value(j, at) the j-th pixel's value, at its offset in the map.
    template <typename F>
    __device__ __forceinline__ void store(float* out, int row, int P, F value) const {
        const size_t ro = (size_t)row * P;
        if (vec) {
#pragma unroll
            for (int j = 0; j < TN; j += V) {
                if (b[j] < 0) continue;
                const size_t at = b[j] + ro;
                if constexpr (V == 4) {
                    *reinterpret_cast<float4*>(out + at) = make_float4(
                        value(j, at), value(j + 1, at + 1), value(j + 2, at + 2),
                        value(j + 3, at + 3));
                } else {
                    *reinterpret_cast<float2*>(out + at) =
                        make_float2(value(j, at), value(j + 1, at + 1));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < TN; ++j)
                if (b[j] >= 0) out[b[j] + ro] = value(j, b[j] + ro);
        }
    }
};
// Staging of a (N, C, P) map's pixels q0 .. q0 + BN - 1 into RC shared rows by a block of T
// threads, by cp.async (no registers held for copies in flight) or through registers (the
// next chunk loaded while this one is multiplied): rows from a caller's channel function.  Where P and the pointer allow, a thread moves 4 consecutive pixels as
// one 16-byte copy (a quarter of the scalar form's address arithmetic, the instructions
// that bound the large-map kernels), else one pixel.
template <int T, int BN>
struct PixelStage {
    // SC: columns a thread stages one pixel at a time (blocks of fewer threads than pixels)
    static constexpr int SC = BN > T ? BN / T : 1, XL = RC * BN / T, NV = BN / 4;
    static_assert(BN % 4 == 0 && (T % BN == 0 || BN % T == 0) && T % NV == 0 && XL % 4 == 0,
                  "staging shapes");
    bool vec;
    int col, row, step;     // this thread's first pixel column, first row and row step
    long long base[SC];     // its pixels' offsets in channel 0, -1 past the map
    float reg[XL];          // the register form's copies in flight
    __device__ __forceinline__ PixelStage(const float* src, int tid, int q0, int Q, int C, int P) {
        vec = P % 4 == 0 && reinterpret_cast<unsigned long long>(src) % 16 == 0;
        col = vec ? 4 * (tid % NV) : tid % BN;
        row = vec ? tid / NV : tid / BN;
        step = vec ? T / NV : (T / BN > 0 ? T / BN : 1);
        at(q0, Q, C, P);
    }
    // The block's pixels from q0 on (a block walking several pixel tiles moves on).
    __device__ __forceinline__ void at(int q0, int Q, int C, int P) {
#pragma unroll
        for (int m = 0; m < SC; ++m) base[m] = pixel_base(q0 + col + m * T, Q, C, P);
    }
    // s <- rows r0 + row + l·step by cp.async; chan(r) is row r's channel, or -1 for
    // zeros.  The channel is found whatever the pixel, and the copies are predicated on
    // both: with the channel under the pixel's test the odd planes' scalar loads ran
    // 24-37 % slower.
    template <typename Chan>
    __device__ __forceinline__ void copy(float (*s)[BN], const float* src, int r0, int P,
                                         Chan chan) const {
        if (vec) {
#pragma unroll
            for (int l = 0; l < XL / 4; ++l) {
                const int c = chan(r0 + row + l * step);
                const bool ok = c >= 0 && base[0] >= 0;
                tdcx::cp_async16(&s[row + l * step][col],
                                 ok ? src + base[0] + (size_t)c * P : src, ok);
            }
        } else {
#pragma unroll
            for (int l = 0; l < XL / SC; ++l) {
                const int c = chan(r0 + row + l * step);
#pragma unroll
                for (int m = 0; m < SC; ++m) {
                    const bool ok = c >= 0 && base[m] >= 0;
                    tdcx::cp_async4(&s[row + l * step][col + m * T],
                                    ok ? src + base[m] + (size_t)c * P : src, ok);
                }
            }
        }
    }
    // copy() for a band of channels, row v being channel (lo + v) mod Cin and zeros from
    // span on: the vector form addresses each copy from the tile's pixel by one 64-bit
    // multiply-add (its general form spent 25 instructions a 16-byte copy, a tenth of the
    // forward's on the 16x16 layers).
    __device__ __forceinline__ void copy_band(float (*s)[BN], const float* src, int v0, int P,
                                              int lo, int span, int Cin) const {
        if (!vec) {
            copy(s, src, v0, P, [&](int v) { return v < span ? wrap(lo + v, Cin) : -1; });
            return;
        }
        const bool in = base[0] >= 0;
        const unsigned long long px =
            reinterpret_cast<unsigned long long>(src) + 4ull * (in ? base[0] : 0);
        const unsigned pitch = 4u * (unsigned)P;
#pragma unroll
        for (int l = 0; l < XL / 4; ++l) {
            const int v = v0 + row + l * step;
            const bool ok = in && v < span;
            const unsigned c = (unsigned)wrap(lo + v, Cin);
            const float* from = reinterpret_cast<const float*>(px + (unsigned long long)c * pitch);
            tdcx::cp_async16(&s[row + l * step][col], ok ? from : src, ok);
        }
    }
    // The register form: reg <- the same rows (load), then s <- reg (store).
    template <typename Chan>
    __device__ __forceinline__ void load(const float* src, int r0, int P, Chan chan) {
        if (vec) {
#pragma unroll
            for (int l = 0; l < XL / 4; ++l) {
                const int c = chan(r0 + row + l * step);
                float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
                if (c >= 0 && base[0] >= 0)
                    t = *reinterpret_cast<const float4*>(src + base[0] + (size_t)c * P);
                reg[4 * l] = t.x, reg[4 * l + 1] = t.y, reg[4 * l + 2] = t.z, reg[4 * l + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int l = 0; l < XL / SC; ++l) {
                const int c = chan(r0 + row + l * step);
#pragma unroll
                for (int m = 0; m < SC; ++m)
                    reg[l * SC + m] = c >= 0 && base[m] >= 0 ? src[base[m] + (size_t)c * P] : 0.f;
            }
        }
    }
    __device__ __forceinline__ void store(float (*s)[BN]) const {
        if (vec) {
#pragma unroll
            for (int l = 0; l < XL / 4; ++l)
                *reinterpret_cast<float4*>(&s[row + l * step][col]) =
                    make_float4(reg[4 * l], reg[4 * l + 1], reg[4 * l + 2], reg[4 * l + 3]);
        } else {
#pragma unroll
            for (int l = 0; l < XL / SC; ++l)
#pragma unroll
                for (int m = 0; m < SC; ++m) s[row + l * step][col + m * T] = reg[l * SC + m];
        }
    }
};
// Stages of the pixel-tile kernels' cp.async ring: three where they fit 40 KB of static
// shared memory, else two (`floats` a stage).
__host__ __device__ constexpr int ring_stages(int floats) { return 3 * 4 * floats <= 40 * 1024 ? 3 : 2; }
// A thread's (ty, tx) in a TY x TX block: each warp a (32 / WX) x WX patch of WX = 8
// columns, so its chunk_product reads 4 threads' rows and 8 threads' columns (two shared
// wavefronts a chunk row); a warp along one row of 32 threads reads four and was bound
// by shared-memory bandwidth, not by its multiply-adds.
template <int TY, int TX>
__device__ __forceinline__ void thread_coords(int tid, int& ty, int& tx) {
    constexpr int WX = TX < 8 ? TX : 8, WY = 32 / WX;
    static_assert(TX % WX == 0 && TY % WY == 0, "warps tile the block");
    const int lane = tid % 32, warp = tid / 32;
    ty = warp / (TX / WX) * WY + lane / WX;
    tx = warp % (TX / WX) * WX + lane % WX;
}
// acc[i][j] += A[r][TM·ty + i] · B[r][column(tx, j)] over the RC rows of one staged chunk: the
// product step of every GEMM kernel here (TM x TN outputs a thread, from TM / 4 vector
// loads of A and TN / 4 (or one 2-wide) of B a row: the scalar form was issue-bound).
// Eight rows a thread halve the shared-memory wavefronts a multiply-add of four.
template <int TN>
__device__ __forceinline__ void load_row(float (&v)[TN], const float* s) {
    if constexpr (TN % 4 == 0) {
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 t = *reinterpret_cast<const float4*>(s + j);
            v[j] = t.x, v[j + 1] = t.y, v[j + 2] = t.z, v[j + 3] = t.w;
        }
    } else {
        static_assert(TN == 2, "TN is 2 or a multiple of 4");
        const float2 t = *reinterpret_cast<const float2*>(s);
        v[0] = t.x, v[1] = t.y;
    }
}
template <int TY, int TX, int TM, int TN, int LA, int LB>
__device__ __forceinline__ void chunk_product(float (&acc)[TM][TN], const float (*A)[LA],
                                              const float (*B)[LB], int tx, int ty) {
    static_assert(LA % 4 == 0 && LB % 4 == 0 && TM % 4 == 0, "rows stay 16-byte aligned");
#pragma unroll
    for (int r = 0; r < RC; ++r) {
        constexpr int GW = TN < 4 ? TN : 4;
        float a[TM], b[TN];
        load_row<TM>(a, &A[r][TM * ty]);
#pragma unroll
        for (int g = 0; g < TN; g += GW) {
            float v[GW];
            load_row<GW>(v, &B[r][column<TN, TX>(tx, g)]);
#pragma unroll
            for (int i = 0; i < GW; ++i) b[g + i] = v[i];
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}
// A block's walk over pixel tiles blockIdx.x, + gridDim.x, ... (`walk` of them), every
// tile's `chunks` chunks one cp.async ring: load(slice, stage) as the ring's, product(stage)
// on each chunk, then store(tile) and fresh sums after each tile's last.
template <int S, int TM, int TN, typename Load, typename Product, typename Store>
__device__ __forceinline__ void walk_ring(int walk, int chunks, float (&acc)[TM][TN], Load load,
                                          Product product, Store store) {
    int chunk = 0, pt = blockIdx.x;
    tdcx::cp_async_ring<S>(walk * chunks, load, [&](int, int st) {
        product(st);
        if (++chunk < chunks) return;
        store(pt);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
        chunk = 0, pt += gridDim.x;
    });
}
// Blocks an SM must hold of a pixel-tile kernel of T threads: 1,024 threads where a thread
// keeps 16 sums (64 registers: ptxas otherwise takes a few more and three 256-thread
// blocks fit), 512 for 32 sums.
constexpr int min_blocks(int sums, int T) { return (sums <= 16 ? 1024 : 512) / T; }
// Blocks an SM must hold of the weight gradient's: 768 threads, as its pixel shares assume
// (scc_tiles.default_splits); left to itself ptxas capped a 128-thread block at 72
// registers and spilled.
constexpr int filter_blocks(int threads) { return 768 / threads; }
}  // namespace scc

template <int TY, int TX, int TN, int TM, bool RING>
__global__ void __launch_bounds__(TY * TX, scc::min_blocks(TM * TN, TY * TX)) scc_fwd(
    const float* __restrict__ x,        // (N, Cin, P)
    const float* __restrict__ w,        // (Cout, U)
    const int* __restrict__ order,      // (Cout,) filters sorted by window start
    const int* __restrict__ starts,     // (Cout,) the start of each sorted filter
    const float* __restrict__ bias,     // (Cout,) or nullptr
    float* __restrict__ y,              // (N, Cout, P)
    int Cin, int Cout, int U, int P, int Q, int relu)
{
    tc::wait_prior_grids();
    using namespace scc;
    constexpr int T = TY * TX, BM = TM * TY, BN = TN * TX, WL = RC * BM / T;
    constexpr int S = RING ? ring_stages(RC * (BM + 4 + BN)) : 1;
    static_assert(T % RC == 0 && RC * BM % T == 0, "staging shapes");
    __shared__ __align__(16) float ws[S][RC][BM + 4];
    __shared__ __align__(16) float xs[S][RC][BN];
    const int tid = threadIdx.x;
    int ty, tx;
    thread_coords<TY, TX>(tid, ty, tx);
    const int i0 = blockIdx.y * BM;
    const int last = min(i0 + BM, Cout) - 1;
    const int lo = starts[i0], span = starts[last] - lo + U, chunks = (span + RC - 1) / RC;

    // Weights stage along u (a filter's consecutive weights: coalesced): this thread's
    // band offset wr and its WL filters, with their window within the band.
    const int wr = tid % RC;
    int wk[WL], wb[WL];
#pragma unroll
    for (int l = 0; l < WL; ++l) {
        const int si = i0 + tid / RC + l * (T / RC);
        wk[l] = si < Cout ? order[si] : -1;
        wb[l] = si < Cout ? starts[si] - lo : 0;
    }
    // Inputs stage along pixels, band row v being channel (lo + v) mod Cin.
    PixelStage<T, BN> xst(x, tid, blockIdx.x * BN, Q, Cin, P);
    const auto band = [&](int v) { return v < span ? wrap(lo + v, Cin) : -1; };

    // A block walks pixel tiles blockIdx.x, + gridDim.x, ... (host: scc_tiles.pixel_grid),
    // its chunks one ring: where the tiles outnumber the blocks an SM holds at once, the
    // next tile's copies fly over this tile's last products and its stores, instead of
    // every block loading, multiplying and storing in step with the others.
    const int pixel_tiles = (Q + BN - 1) / BN;
    const int walk = (pixel_tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1;
    int ld_chunk = 0, ld_tile = 0;
    const auto load = [&](int, int st) {
        if (ld_chunk == chunks) {
            ld_chunk = 0;
            xst.at((blockIdx.x + ++ld_tile * gridDim.x) * BN, Q, Cin, P);
        }
        const int v0 = RC * ld_chunk++;
#pragma unroll
        for (int l = 0; l < WL; ++l) {
            const int u = v0 + wr - wb[l];
            const bool ok = wk[l] >= 0 && u >= 0 && u < U;
            tdcx::cp_async4(&ws[st][wr][tid / RC + l * (T / RC)],
                            ok ? w + (size_t)wk[l] * U + u : w, ok);
        }
        xst.copy_band(xs[st], x, v0, P, lo, span, Cin);
    };
    // Each row's filter and bias, found once a block (a walking block stores many tiles of
    // the same rows): two shared loads a row in the epilogue, not two dependent global
    // ones and their 64-bit addresses.  Read after the ring's first barrier.
    __shared__ int krow[BM];
    __shared__ float brow[BM];
    for (int r = tid; r < BM; r += T) {
        const int si = i0 + r, k = si < Cout ? order[si] : -1;
        krow[r] = k;
        brow[r] = k >= 0 && bias != nullptr ? bias[k] : 0.f;
    }
    float acc[TM][TN] = {};
    const auto store = [&](int pt) {
        const PixelOut<TN, TX> out(y, pt * BN, tx, Q, Cout, P);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int k = krow[TM * ty + i];
            if (k < 0) continue;
            const float bk = brow[TM * ty + i];      // 0 without a bias
            out.store(y, k, P, [&](int j, size_t at) {
                return tc::conv_epilogue(acc[i][j] + bk, nullptr, k, nullptr, at, relu);
            });
        }
    };
    if constexpr (!RING) {              // one pixel tile, staged through registers
        float wreg[WL];
        const auto fetch = [&](int v0) {
#pragma unroll
            for (int l = 0; l < WL; ++l) {
                const int u = v0 + wr - wb[l];
                wreg[l] = wk[l] >= 0 && u >= 0 && u < U ? w[(size_t)wk[l] * U + u] : 0.f;
            }
            xst.load(x, v0, P, band);
        };
        fetch(0);
        for (int v0 = 0; v0 < span; v0 += RC) {
#pragma unroll
            for (int l = 0; l < WL; ++l) ws[0][wr][tid / RC + l * (T / RC)] = wreg[l];
            xst.store(xs[0]);
            __syncthreads();
            if (v0 + RC < span) fetch(v0 + RC);     // the next chunk's loads fly over this one
            chunk_product<TY, TX>(acc, ws[0], xs[0], tx, ty);
            __syncthreads();
        }
        store(blockIdx.x);
        return;
    }
    walk_ring<S>(walk, chunks, acc, load, [&](int st) {
        chunk_product<TY, TX>(acc, ws[st], xs[st], tx, ty);
    }, store);
}

// The paper's forward pass (Algorithm 2): one thread per (pixel, filter) walking its U
// channels, the window start either read from the channel-cyclic map of one cycle in
// constant memory (MAP; filter k takes entry k mod cycle, the host copies the map in
// before each launch) or computed, (k·stride) mod Cin.  The two are the same arithmetic
// in the same order: equal bit for bit.
namespace scc {
constexpr int MAX_CYCLE = 4096;
}
__constant__ int scc_cycle_starts[scc::MAX_CYCLE];

template <bool MAP>
__global__ void __launch_bounds__(scc::THREADS) scc_fwd_cyclic(
    const float* __restrict__ x,        // (N, Cin, P)
    const float* __restrict__ w,        // (Cout, U)
    const float* __restrict__ bias,     // (Cout,) or nullptr
    float* __restrict__ y,              // (N, Cout, P)
    int Cin, int Cout, int U, int stride, int cycle, int P, int Q, int relu)
{
    tc::wait_prior_grids();
    const int q = blockIdx.x * scc::THREADS + threadIdx.x, k = blockIdx.y;
    const long long xb = scc::pixel_base(q, Q, Cin, P);
    if (xb < 0) return;
    int c = MAP ? scc_cycle_starts[k % cycle] : (int)((long long)k * stride % Cin);
    const float* wk = w + (size_t)k * U;
    float acc = 0.f;
    for (int u = 0; u < U; ++u) {
        acc = fmaf(wk[u], x[xb + (size_t)c * P], acc);
        c = c + 1 == Cin ? 0 : c + 1;
    }
    const size_t at = scc::pixel_base(q, Q, Cout, P) + (size_t)k * P;
    y[at] = tc::conv_epilogue(acc, bias, k, nullptr, at, relu);
}

template <int TY, int TX, int TN, int TM, bool RING>
__global__ void __launch_bounds__(TY * TX, scc::min_blocks(TM * TN, TY * TX)) scc_bwd_data(
    const float* __restrict__ gy,        // (N, Cout, P)
    const float* __restrict__ w,         // (Cout, U)
    const int* __restrict__ begin_k,     // (Cout,) window start of each filter
    const int* __restrict__ tile_ptr,    // (tiles + 1,): the filters meeting channel tile t
    const int* __restrict__ tile_k,      //   are tile_k[tile_ptr[t] .. tile_ptr[t + 1])
    float* __restrict__ gx,              // (splits, N, Cin, P): share z of each list
    int Cin, int Cout, int U, int P, int Q, int per_split)
{
    tc::wait_prior_grids();
    using namespace scc;
    constexpr int T = TY * TX, BM = TM * TY, BN = TN * TX, WL = RC * BM / T;
    constexpr int S = RING ? ring_stages(RC * (BM + BN)) : 1;
    static_assert(T % BM == 0 && RC * BM % T == 0, "staging shapes");
    __shared__ __align__(16) float ws[S][RC][BM];
    __shared__ __align__(16) float gs[S][RC][BN];
    const int tid = threadIdx.x;
    int ty, tx;
    thread_coords<TY, TX>(tid, ty, tx);
    const int c0 = blockIdx.y * BM;
    // This block's share of its tile's filter list (an empty share writes zeros).
    const int e_begin = tile_ptr[blockIdx.y] + blockIdx.z * per_split;
    const int e_end = min(e_begin + per_split, tile_ptr[blockIdx.y + 1]);
    const int chunks = e_end > e_begin ? (e_end - e_begin + RC - 1) / RC : 0;
    gx += (size_t)blockIdx.z * Q * Cin;

    // Weights stage along channels (consecutive channels of one filter are consecutive
    // weights: coalesced): this thread's channel and its WL list rows.
    const int wm = tid % BM, wr = tid / BM;
    const int wc = c0 + wm;
    // Output gradients stage along pixels, list row e being filter tile_k[e].
    PixelStage<T, BN> gst(gy, tid, blockIdx.x * BN, Q, Cout, P);
    const auto listed = [&](int e) { return e < e_end ? tile_k[e] : -1; };

    // Pixel tiles blockIdx.x, + gridDim.x, ... through one ring, as in scc_fwd.
    const int pixel_tiles = (Q + BN - 1) / BN;
    const int walk = (pixel_tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1;
    int ld_chunk = 0, ld_tile = 0;
    const auto load = [&](int, int st) {
        if (ld_chunk == chunks) {
            ld_chunk = 0;
            gst.at((blockIdx.x + ++ld_tile * gridDim.x) * BN, Q, Cout, P);
        }
        const int e0 = e_begin + RC * ld_chunk++;
#pragma unroll
        for (int l = 0; l < WL; ++l) {
            const int e = e0 + wr + l * (T / BM);
            const float* src = w;
            bool ok = false;
            if (e < e_end && wc < Cin) {
                const int k = tile_k[e];
                int u = wc - begin_k[k];
                u += u < 0 ? Cin : 0;
                ok = u < U;
                src = w + (size_t)k * U + u;
            }
            tdcx::cp_async4(&ws[st][wr + l * (T / BM)][wm], ok ? src : w, ok);
        }
        gst.copy(gs[st], gy, e0, P, listed);
    };
    float acc[TM][TN] = {};
    const auto store = [&](int pt) {
        const PixelOut<TN, TX> out(gx, pt * BN, tx, Q, Cin, P);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int c = c0 + TM * ty + i;
            if (c < Cin) out.store(gx, c, P, [&](int j, size_t) { return acc[i][j]; });
        }
    };
    if (chunks == 0) {                                   // an empty share: zeros
        for (int pt = blockIdx.x; pt < pixel_tiles; pt += gridDim.x) store(pt);
        return;
    }
    if constexpr (!RING) {               // one pixel tile, staged through registers
        float wreg[WL];
        const auto fetch = [&](int e0) {
#pragma unroll
            for (int l = 0; l < WL; ++l) {
                const int e = e0 + wr + l * (T / BM);
                float v = 0.f;
                if (e < e_end && wc < Cin) {
                    const int k = tile_k[e];
                    int u = wc - begin_k[k];
                    u += u < 0 ? Cin : 0;
                    if (u < U) v = w[(size_t)k * U + u];
                }
                wreg[l] = v;
            }
            gst.load(gy, e0, P, listed);
        };
        fetch(e_begin);
        for (int e0 = e_begin; e0 < e_end; e0 += RC) {
#pragma unroll
            for (int l = 0; l < WL; ++l) ws[0][wr + l * (T / BM)][wm] = wreg[l];
            gst.store(gs[0]);
            __syncthreads();
            if (e0 + RC < e_end) fetch(e0 + RC);
            chunk_product<TY, TX>(acc, ws[0], gs[0], tx, ty);
            __syncthreads();
        }
        store(blockIdx.x);
        return;
    }
    walk_ring<S>(walk, chunks, acc, load, [&](int st) {
        chunk_product<TY, TX>(acc, ws[st], gs[st], tx, ty);
    }, store);
}

__global__ void __launch_bounds__(scc::THREADS) scc_bwd_data_gather(
    const float* __restrict__ gy,      // (N, Cout, P)
    const float* __restrict__ w,       // (Cout, U)
    const int* __restrict__ map_ptr,   // (Cin + 1,): channel c's pairs
    const int* __restrict__ map_k,     // the filter of each pair
    const int* __restrict__ map_w,     // its weight's index k * U + u
    float* __restrict__ gx,            // (N, Cin, P)
    int Cin, int Cout, int P, int Q)
{
    tc::wait_prior_grids();
    const int q = blockIdx.x * scc::THREADS + threadIdx.x, c = blockIdx.y;
    const long long gbase = scc::pixel_base(q, Q, Cout, P);
    if (gbase < 0) return;
    float acc = 0.f;
    const int end = map_ptr[c + 1];
#pragma unroll 4
    for (int e = map_ptr[c]; e < end; ++e)
        acc = fmaf(w[map_w[e]], gy[gbase + (size_t)map_k[e] * P], acc);
    gx[scc::pixel_base(q, Q, Cin, P) + (size_t)c * P] = acc;
}

__global__ void __launch_bounds__(scc::THREADS) scc_bwd_data_atomic(
    const float* __restrict__ gy,      // (N, Cout, P)
    const float* __restrict__ w,       // (Cout, U)
    const int* __restrict__ begin_k,   // (Cout,) window start of each filter
    float* __restrict__ gx,            // (N, Cin, P), zeroed first
    int Cin, int Cout, int U, int P, int Q)
{
    tc::wait_prior_grids();
    const int q = blockIdx.x * scc::THREADS + threadIdx.x, k = blockIdx.y;
    const long long gbase = scc::pixel_base(q, Q, Cout, P);
    if (gbase < 0) return;
    const float g = gy[gbase + (size_t)k * P];
    const int start = begin_k[k];
    float* out = gx + scc::pixel_base(q, Q, Cin, P);
    for (int u = 0; u < U; ++u) {
        int c = start + u;
        c -= c >= Cin ? Cin : 0;
        atomicAdd(out + (size_t)c * P, w[(size_t)k * U + u] * g);
    }
}

template <int TY, int TX, int TN, int TM>
__global__ void __launch_bounds__(TY * TX, scc::filter_blocks(TY * TX)) scc_bwd_filter(
    const float* __restrict__ x,       // (N, Cin, P)
    const float* __restrict__ gy,      // (N, Cout, P)
    const int* __restrict__ order,     // (Cout,) filters sorted by window start
    const int* __restrict__ starts,    // (Cout,) the start of each sorted filter
    float* __restrict__ partial,       // (splits, Cout, U)
    int Cin, int Cout, int U, int P, int Q, int per_split)
{
    tc::wait_prior_grids();
    using namespace scc;
    // LG filter rows and LX band rows per thread
    constexpr int T = TY * TX, BM = TM * TY, BN = TN * TX, LG = BM * RC / T, LX = BN * RC / T;
    static_assert(T % RC == 0 && BM * RC % T == 0 && BN * RC % T == 0, "staging shapes");
    __shared__ __align__(16) float gs[RC][BM + 4];
    __shared__ __align__(16) float xs[RC][BN + 4];
    const int tid = threadIdx.x;
    int ty, tx;
    thread_coords<TY, TX>(tid, ty, tx);
    const int i0 = blockIdx.y * BM, v0 = blockIdx.x * BN;
    const int last = min(i0 + BM, Cout) - 1;
    const int lo = starts[i0], span = starts[last] - lo + U;
    if (v0 >= span) return;            // the grid covers the widest band of any tile
    const int q_begin = blockIdx.z * per_split, q_end = min(q_begin + per_split, Q);

    // Staging: a thread keeps one pixel lane (sr) and its rows of each operand: the gy
    // rows of LG filters and the x rows of LX band channels, fixed for the whole reduction.
    const int sr = tid % RC, sm = tid / RC;
    long long grow[LG], xrow[LX];
#pragma unroll
    for (int l = 0; l < LG; ++l) {
        const int si = i0 + sm + l * (T / RC);
        grow[l] = si < Cout ? (long long)order[si] * P : -1;
    }
#pragma unroll
    for (int l = 0; l < LX; ++l) {
        const int v = v0 + sm + l * (T / RC);
        xrow[l] = v < span ? (long long)wrap(lo + v, Cin) * P : -1;
    }
    // This thread's pixel q = qc + sr and its offsets in channel 0 of gy and x, carried
    // from chunk to chunk: one division a thread, not one a chunk.
    int q = q_begin + sr, p = q % P;
    long long gb = (long long)(q / P) * Cout * P + p, xb = (long long)(q / P) * Cin * P + p;
    float greg[LG], xreg[LX];
    auto load = [&]() {
        const bool in = q < q_end;
#pragma unroll
        for (int l = 0; l < LG; ++l) greg[l] = in && grow[l] >= 0 ? gy[gb + grow[l]] : 0.f;
#pragma unroll
        for (int l = 0; l < LX; ++l) xreg[l] = in && xrow[l] >= 0 ? x[xb + xrow[l]] : 0.f;
        q += RC, p += RC, gb += RC, xb += RC;
        while (p >= P)                              // into the next image(s)
            p -= P, gb += (long long)(Cout - 1) * P, xb += (long long)(Cin - 1) * P;
    };

    float acc[TM][TN] = {};
    load();
    for (int qc = q_begin; qc < q_end; qc += RC) {
#pragma unroll
        for (int l = 0; l < LG; ++l) gs[sr][sm + l * (T / RC)] = greg[l];
#pragma unroll
        for (int l = 0; l < LX; ++l) xs[sr][sm + l * (T / RC)] = xreg[l];
        __syncthreads();
        if (qc + RC < q_end) load();
        chunk_product<TY, TX>(acc, gs, xs, tx, ty);
        __syncthreads();
    }
    // Band channel v of sorted filter i is its weight u = v - (b_i - lo), when in range:
    // every (filter, weight) lies in exactly one band tile, so each is written once.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int si = i0 + TM * ty + i;
        if (si >= Cout) continue;
        const int k = order[si], b = starts[si] - lo;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int u = v0 + column<TN, TX>(tx, j) - b;
            if (u >= 0 && u < U) partial[((size_t)blockIdx.z * Cout + k) * U + u] = acc[i][j];
        }
    }
}

// The wide kernels (forward, weight gradient): a block owns BN = 32·PX pixels at a time
// and every row of the other side, so each map is read from memory once (the large-map layers are bound by memory,
// not by multiply-adds).  Blocks are persistent: each walks pixel tiles (or chunks of its
// share) with the next one's copies (cp.async) in flight while it computes the current;
// weights are staged once.  Each warp computes 8 sorted filters at a time over their
// own band only, lane = PX pixels.  VEC: P % PX == 0 and 16-byte
// aligned maps, so a lane's pixels are one vector in global memory too.
namespace scc {
constexpr int WIDE = 256, WARPS = WIDE / 32, F = 8;   // block; rows a warp takes at a time

template <int PX>
__device__ __forceinline__ void load_px(float (&v)[PX], const float* s) {
    if constexpr (PX == 4) {
        const float4 t = *reinterpret_cast<const float4*>(s);
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else if constexpr (PX == 2) {
        const float2 t = *reinterpret_cast<const float2*>(s);
        v[0] = t.x, v[1] = t.y;
    } else {
        v[0] = s[0];
    }
}
template <int PX>
__device__ __forceinline__ void store_px(float* d, const float (&v)[PX]) {
    if constexpr (PX == 4) *reinterpret_cast<float4*>(d) = make_float4(v[0], v[1], v[2], v[3]);
    else if constexpr (PX == 2) *reinterpret_cast<float2*>(d) = make_float2(v[0], v[1]);
    else d[0] = v[0];
}

// Copies (cp.async, uncommitted) of dst[r·BN + i] = channel row_of(r) of a (N, C, P) map
// at pixel q0 + i, for r < rows; 0 from pixel Q on.  G = 4: 16-byte copies (P % 4 == 0,
// aligned maps, Q a multiple of 4), else G = 1.
template <int BN, int G, typename RowOf>
__device__ __forceinline__ void stage_pixels(float* dst, const float* __restrict__ src,
                                             int rows, RowOf row_of, int q0, int Q, int C,
                                             int P) {
    static_assert((G == 1 || G == 4) && BN % G == 0 && WIDE % (BN / G) == 0, "copy width");
    constexpr int PER = BN / G, STEP = WIDE / PER;
    // A thread's copies share one pixel column: its offset is found once.
    const int i = threadIdx.x % PER * G;
    const long long base = pixel_base(q0 + i, Q, C, P);
#pragma unroll 4
    for (int r = threadIdx.x / PER; r < rows; r += STEP) {
        const float* from = base >= 0 ? src + base + (size_t)row_of(r) * P : src;
        if constexpr (G == 4) tdcx::cp_async16(dst + r * BN + i, from, base >= 0);
        else tdcx::cp_async4(dst + r * BN + i, from, base >= 0);
    }
}

// A lane's PX outputs of row `row` of a (N, C, P) map at pixels q0 + lane·PX + i.
template <int PX, bool VEC, typename Value>
__device__ __forceinline__ void store_row(float* __restrict__ out, int row, int q0, int Q,
                                          int C, int P, Value value) {
    const int q = q0 + (threadIdx.x & 31) * PX;
    if constexpr (VEC) {
        const long long base = pixel_base(q, Q, C, P);
        if (base < 0) return;
        const size_t at = base + (size_t)row * P;
        float v[PX];
#pragma unroll
        for (int i = 0; i < PX; ++i) v[i] = value(i, at + i);
        store_px<PX>(out + at, v);
    } else {
#pragma unroll
        for (int i = 0; i < PX; ++i) {
            const long long base = pixel_base(q + i, Q, C, P);
            if (base >= 0) out[base + (size_t)row * P] = value(i, base + (size_t)row * P);
        }
    }
}

// Sum each of a lane's 64 values over the warp's 32 lanes; lane l ends with the sums of
// values 2l and 2l + 1 in a[0], a[1] (halving exchanges: 62 shuffles, not 64 x 5).
// halve<H, B>: a[0 .. 2H) summed with the lane of lane bit B flipped, into a[0 .. H): the
// lane with the bit set keeps the upper half.
template <int H, int B = H / 2>
__device__ __forceinline__ void halve(float (&a)[64], int lane) {
    const bool up = lane & B;
#pragma unroll
    for (int i = 0; i < H; ++i) {
        const float send = up ? a[i] : a[i + H];
        a[i] = (up ? a[i + H] : a[i]) + __shfl_xor_sync(0xffffffffu, send, B);
    }
}
__device__ __forceinline__ void warp_sum_64(float (&a)[64]) {
    const int lane = threadIdx.x & 31;
    halve<32>(a, lane);
    halve<16>(a, lane);
    halve<8>(a, lane);
    halve<4>(a, lane);
    halve<2>(a, lane);
}
}  // namespace scc

// y for every filter at the block's pixel tiles; bias and ReLU fused.  All weights
// staged once, u-major in sorted order (a row of FP >= Cout, a multiple of 8), so 8
// filters sharing a window take two broadcast vector loads a step.
template <int PX, bool VEC>
__global__ void __launch_bounds__(scc::WIDE) scc_fwd_wide(    // the arguments of scc_fwd
    const float* __restrict__ x, const float* __restrict__ w, const int* __restrict__ order,
    const int* __restrict__ starts, const float* __restrict__ bias, float* __restrict__ y,
    int Cin, int Cout, int U, int P, int Q, int relu)
{
    tc::wait_prior_grids();
    using namespace scc;
    constexpr int BN = 32 * PX, G = VEC && PX == 4 ? 4 : 1;   // G: floats a copy
    const int FP = (Cout + F - 1) / F * F, tiles = (Q + BN - 1) / BN;
    extern __shared__ __align__(16) float smem[];
    float* ws = smem;                   // (U, FP)
    float* xs = smem + U * FP;          // two (Cin, BN) buffers
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto stage = [&](int t, int buf) {
        if (t < tiles)
            stage_pixels<BN, G>(xs + buf * Cin * BN, x, Cin, [](int r) { return r; },
                                t * BN, Q, Cin, P);
        tdcx::cp_async_commit();
    };
    stage(blockIdx.x, 0);
    for (int idx = threadIdx.x; idx < FP * U; idx += WIDE) {
        const int f = idx / U, u = idx - f * U;
        ws[u * FP + f] = f < Cout ? w[(size_t)order[f] * U + u] : 0.f;
    }
    int buf = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, buf ^= 1) {
        stage(t + gridDim.x, buf ^ 1);  // the next tile lands while this one is computed
        tdcx::cp_async_wait<1>();
        __syncthreads();
        const float* xl = xs + buf * Cin * BN + lane * PX;
        for (int s0 = warp * F; s0 < Cout; s0 += WARPS * F) {
            const int b0 = starts[s0];
            int d[F];                   // window offsets within the warp's band
#pragma unroll
            for (int j = 0; j < F; ++j) d[j] = starts[min(s0 + j, Cout - 1)] - b0;
            const float* wf = ws + s0;
            float acc[F][PX] = {};
            int c = b0;
            if (d[F - 1] == 0) {        // one window: no masking
#pragma unroll 2
                for (int u = 0; u < U; ++u) {
                    float xv[PX];
                    load_px<PX>(xv, xl + c * BN);
                    const float4 wa = *reinterpret_cast<const float4*>(wf + u * FP);
                    const float4 wb = *reinterpret_cast<const float4*>(wf + u * FP + 4);
                    const float wv[F] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                    for (int j = 0; j < F; ++j)
#pragma unroll
                        for (int i = 0; i < PX; ++i) acc[j][i] = fmaf(wv[j], xv[i], acc[j][i]);
                    c = c + 1 == Cin ? 0 : c + 1;
                }
            } else {
                const int span = d[F - 1] + U;
#pragma unroll 2
                for (int v = 0; v < span; ++v) {
                    float xv[PX];
                    load_px<PX>(xv, xl + c * BN);
#pragma unroll
                    for (int j = 0; j < F; ++j) {
                        const int u = v - d[j];
                        const float wv = u >= 0 && u < U ? wf[u * FP + j] : 0.f;
#pragma unroll
                        for (int i = 0; i < PX; ++i) acc[j][i] = fmaf(wv, xv[i], acc[j][i]);
                    }
                    c = c + 1 == Cin ? 0 : c + 1;
                }
            }
#pragma unroll
            for (int j = 0; j < F; ++j) {
                if (s0 + j >= Cout) break;
                const int k = order[s0 + j];
                store_row<PX, VEC>(y, k, t * BN, Q, Cout, P, [&](int i, size_t at) {
                    return tc::conv_epilogue(acc[j][i], bias, k, nullptr, at, relu); });
            }
        }
        __syncthreads();                // this buffer is restaged two tiles on
    }
    tdcx::cp_async_wait<0>();
}

// The weight gradient, wide: warp tile t = (8 sorted filters from 8·fo, band offsets
// 8·vt .. 8·vt + 7 past the first one's start), G[j][v] = sum over the share's pixels of
// gy[k_j] x[(b + v) mod Cin], lane = pixel; the lanes' sums meet in warp_sum_64 once per
// share.  A block's 8 tiles (consecutive in `tiles`) stage only the gy rows of their
// filters and the x rows of their band (`blocks`: first sorted filter, gy rows, first
// channel, x rows), a chunk of BN pixels at a time with the next chunk's copies in
// flight.  Each (filter, weight) lies in one tile: written once per share.
template <int PX, bool VEC>
__global__ void __launch_bounds__(scc::WIDE) scc_bwd_filter_wide(
    const float* __restrict__ x,       // (N, Cin, P)
    const float* __restrict__ gy,      // (N, Cout, P)
    const int* __restrict__ order,     // (Cout,) filters sorted by window start
    const int* __restrict__ starts,    // (Cout,) the start of each sorted filter
    const int4* __restrict__ blocks,   // (blocks,) {first sorted filter, rows, channel, rows}
    const int2* __restrict__ tiles,    // (tiles,) {fo, vt}
    float* __restrict__ partial,       // (splits, Cout, U)
    int ntiles, int Cin, int Cout, int U, int P, int Q, int per_split, int rows)
{
    tc::wait_prior_grids();
    using namespace scc;
    constexpr int BN = 32 * PX, G = VEC && PX == 4 ? 4 : 1;   // G: floats a copy
    extern __shared__ __align__(16) float smem[];
    const int4 blk = blocks[blockIdx.x];
    // two buffers of `rows` rows: gy rows of sorted filters blk.x .. (blk.y of them),
    // then x rows of channels (blk.z + r) mod Cin (blk.w of them)
    const int lane = threadIdx.x & 31, t = blockIdx.x * WARPS + (threadIdx.x >> 5);
    const bool active = t < ntiles;    // warp-uniform
    const int2 tile = active ? tiles[t] : make_int2(0, 0);
    const int s0 = tile.x * F, v0 = tile.y * F, b0 = starts[s0];
    int grow[F], xrow[F];
#pragma unroll
    for (int j = 0; j < F; ++j) {
        grow[j] = min(s0 + j, Cout - 1) - blk.x;
        int r = b0 - blk.z + v0 + j;   // offsets past the tile's band are discarded below
        r -= r >= Cin ? Cin : 0;
        xrow[j] = blk.y + min(r, blk.w - 1);
    }
    const int q_begin = blockIdx.y * per_split, q_end = min(q_begin + per_split, Q);
    auto stage = [&](int qc, int buf) {
        if (qc < q_end) {
            float* dst = smem + buf * rows * BN;
            stage_pixels<BN, G>(dst, gy, blk.y, [&](int r) { return order[blk.x + r]; }, qc,
                                q_end, Cout, P);
            stage_pixels<BN, G>(dst + blk.y * BN, x, blk.w, [&](int r) {
                const int c = blk.z + r;
                return c >= Cin ? c - Cin : c; }, qc, q_end, Cin, P);
        }
        tdcx::cp_async_commit();
    };
    float acc[64] = {};
    stage(q_begin, 0);
    int buf = 0;
    for (int qc = q_begin; qc < q_end; qc += BN, buf ^= 1) {
        stage(qc + BN, buf ^ 1);
        tdcx::cp_async_wait<1>();
        __syncthreads();
        if (active) {
            const float* sb = smem + buf * rows * BN + lane;
#pragma unroll
            for (int i = 0; i < PX; ++i) {
                float g[F], xv[F];
#pragma unroll
                for (int j = 0; j < F; ++j) g[j] = sb[grow[j] * BN + 32 * i];
#pragma unroll
                for (int v = 0; v < F; ++v) xv[v] = sb[xrow[v] * BN + 32 * i];
#pragma unroll
                for (int j = 0; j < F; ++j)
#pragma unroll
                    for (int v = 0; v < F; ++v)
                        acc[j * F + v] = fmaf(g[j], xv[v], acc[j * F + v]);
            }
        }
        __syncthreads();
    }
    tdcx::cp_async_wait<0>();
    if (!active) return;
    warp_sum_64(acc);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int idx = 2 * lane + h, j = idx / F;
        if (s0 + j >= Cout) continue;
        const int u = v0 + idx % F - (starts[s0 + j] - b0);
        if (u >= 0 && u < U)
            partial[((size_t)blockIdx.y * Cout + order[s0 + j]) * U + u] = acc[h];
    }
}

// scc_bwd_onepass: both gradients of a whole layer in one pass.  A block stages a chunk of
// BN pixels of every gy row (in sorted order) and every x channel, computes the chunk's
// input gradient (each value written once) and adds the chunk into its weight-gradient
// outputs, which stay in registers over its pixel share (the shares then summed in a
// fixed order: deterministic, no atomics).  Unlike a lane-per-pixel warp tile (the wide
// weight gradient's), whose every weight is summed over 8 lanes, a thread owns 4 sorted
// filters x 4 band offsets (offsets cq, cq + 8, cq + 16, cq + 24 of a 32-offset run: a
// warp's loads of one x row meet 8 consecutive channels, 8 distinct bank groups), each
// read as a vector of 4 pixels: 8 vector loads a 64 multiply-adds.  The input gradient
// takes 4 channels x 8 pixels a lane over every second or fourth entry of its channel
// octet's (filter, 8 weights) list, the parities then summed by halving shuffles.  S = 2:
// the next chunk's copies in flight; SPLIT: twice the threads, each gradient on its own
// half (a block an SM).
namespace scc {
constexpr int OT = 256;                  // the one-pass block
constexpr int OTILE = 16;                // threads a weight-gradient tile: 8 filters x 32 offsets
}  // namespace scc

template <int IPT, int S, int BN, bool SPLIT, bool VEC>
__global__ void __launch_bounds__(SPLIT ? 2 * scc::OT : scc::OT, SPLIT ? 1 : 2) scc_bwd_onepass(
    const float* __restrict__ x,          // (N, Cin, P)
    const float* __restrict__ gy,         // (N, Cout, P)
    const float* __restrict__ w,          // (Cout, U)
    const int* __restrict__ order,        // (Cout,) filters sorted by window start
    const int* __restrict__ starts,       // (Cout,) the start of each sorted filter
    const int2* __restrict__ tiles,       // (tiles,) {filter octet, run of 32 band offsets}
    const int* __restrict__ oct_ptr,      // (octets + 1,) each channel octet's entries
    const int* __restrict__ entry_row,    // (entries,) the sorted position of its filter
    const int* __restrict__ entry_w,      // (entries, 8) weight index k·U + u, or -1
    float* __restrict__ gx,               // (N, Cin, P)
    float* __restrict__ partial,          // (shares, Cout, U)
    int Cin, int Cout, int U, int P, int Q, int per_share, int ntiles, int entries)
{
    tc::wait_prior_grids();
    using namespace scc;
    // SPLIT: twice the threads, the first OT on the weight gradient, the others on the
    // input gradient, at once (a block an SM: twice the warps).
    constexpr int T = SPLIT ? 2 * OT : OT, LD = BN + 4;   // LD: 16-byte rows, odd in float4s
    constexpr int G = VEC ? 4 : 1, PQ = BN / 4, PER = BN / G, STEP = T / PER;
    constexpr int ES = 32 / PQ;          // lanes sharing a gx unit (entry parity): 2 or 4
    static_assert((S == 1 || S == 2) && (BN == 32 || BN == 64) && T % PER == 0, "shapes");
    const int rows = Cout + Cin, tid = threadIdx.x;
    extern __shared__ __align__(16) float smem[];
    float* wd = smem;                                        // (entries, 8) weights
    int* erow = reinterpret_cast<int*>(smem + 8 * entries);  // (entries,) their rows' offsets
    int* roff = erow + entries;                              // (rows,) each row's channel
    int* optr = roff + rows;                                 // (octets + 1,) oct_ptr
    const int octs = (Cin + 7) / 8;
    float* bufs = smem + (9 * entries + rows + octs + 4) / 4 * 4;   // S x (rows, LD)
    const int q_begin = blockIdx.x * per_share, q_end = min(q_begin + per_share, Q);

    // Staging: this thread's column of G pixels, rows r0, r0 + STEP, ...; zeros past q_end
    // (the next share's pixels).  The first call reads each row's channel from `order`
    // and keeps it for the later ones (a thread stages the same rows every time).
    const int ci = tid % PER * G, r0 = tid / PER;
    auto stage = [&](int qc, int b, bool first) {
        const int q = qc + ci;
        if (qc < q_end) {
            const bool in = q < q_end;
            const int n = in ? q / P : 0, p = in ? q - n * P : 0;
            const float* gsrc = gy + (size_t)n * Cout * P + p;
            const float* xsrc = x + (size_t)n * Cin * P + p;
            float* dst = bufs + b * rows * LD + ci;
#pragma unroll 4
            for (int r = r0; r < rows; r += STEP) {
                int c;
                if (first) roff[r] = c = r < Cout ? order[r] : r - Cout;
                else c = roff[r];
                const float* from = (r < Cout ? gsrc : xsrc) + (size_t)c * P;
                if constexpr (G == 4) tdcx::cp_async16(dst + r * LD, in ? from : gy, in);
                else tdcx::cp_async4(dst + r * LD, in ? from : gy, in);
            }
        }
        tdcx::cp_async_commit();
    };
    // The input gradient's weights: w copied into the last stage's buffer (the first
    // chunk's copies in flight meanwhile where there are two), then gathered from there.
    float* ws = bufs + (S - 1) * rows * LD;
    if (S == 2) stage(q_begin, 0, true);
    const bool w16 = (Cout * U) % 4 == 0 && reinterpret_cast<unsigned long long>(w) % 16 == 0;
    for (int i = 4 * tid; i < Cout * U; i += 4 * T) {
        if (w16) {
            tdcx::cp_async16(ws + i, w + i, true);
        } else {
            for (int k = i; k < min(i + 4, Cout * U); ++k) tdcx::cp_async4(ws + k, w + k, true);
        }
    }
    tdcx::cp_async_commit();
    for (int i = tid; i < entries; i += T) erow[i] = entry_row[i] * LD;
    for (int i = tid; i <= octs; i += T) optr[i] = oct_ptr[i];
    tdcx::cp_async_wait<0>();
    __syncthreads();
    for (int i = tid; i < 8 * entries; i += T) {
        const int widx = entry_w[i];
        wd[i] = widx >= 0 ? ws[widx] : 0.f;
    }
    __syncthreads();                   // ws is restaged from here on
    if (S == 1) stage(q_begin, 0, true);

    // This thread's weight-gradient items: tile t = item / OTILE (8 sorted filters from
    // 8·fo, band offsets 32·run .. past the octet's first start), rows 4·rh .. of the
    // octet, offsets cq + 8·b of the run.  Rows past Cout read the last filter's row and
    // offsets past the band wrap (their sums are discarded).
    int goff[IPT][4], xoff[IPT][4];
    bool live[IPT];
#pragma unroll
    for (int j = 0; j < IPT; ++j) {
        const int item = tid + j * OT, t = item / OTILE;
        live[j] = t < ntiles && (!SPLIT || tid < OT);
        const int2 tl = tiles[live[j] ? t : 0];
        const int s0 = 8 * tl.x + 4 * ((item >> 3) & 1), b0 = starts[8 * tl.x];
        const int v0 = 32 * tl.y + (item & 7);
#pragma unroll
        for (int a = 0; a < 4; ++a) goff[j][a] = min(s0 + a, Cout - 1) * LD;
#pragma unroll
        for (int c = 0; c < 4; ++c) xoff[j][c] = (Cout + (b0 + v0 + 8 * c) % Cin) * LD;
    }
    float acc[IPT][4][4] = {};
    const int units = octs * 32;   // (octet, entry parity, half, pixel quads)

    int b = 0;
    for (int qc = q_begin; qc < q_end; qc += BN) {
        if (S == 2) {
            stage(qc + BN, b ^ 1, false);
            tdcx::cp_async_wait<1>();
        } else {
            if (qc != q_begin) stage(qc, 0, false);
            tdcx::cp_async_wait<0>();
        }
        __syncthreads();
        const float* cur = bufs + b * rows * LD;

        // Input gradient: a warp one channel octet; a lane 4 channels x 8 pixels (quads pg
        // and pg + PQ / 2) over every ES-th entry.
        for (int un = SPLIT ? tid - OT : tid; un < units; un += OT) {
            if (SPLIT && tid < OT) break;
            const int o = un / 32, lane = un % 32, pg = lane % (PQ / 2);
            const int h = lane / (PQ / 2) % 2, eh = lane / PQ;
            float d[4][8] = {};
            const int e1 = optr[o + 1];
#pragma unroll 4
            for (int e = optr[o] + eh; e < e1; e += ES) {
                const float* row = cur + erow[e] + 4 * pg;
                const float4 g0 = *reinterpret_cast<const float4*>(row);
                const float4 g1 = *reinterpret_cast<const float4*>(row + 2 * PQ);
                const float4 wv = *reinterpret_cast<const float4*>(wd + 8 * e + 4 * h);
                const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
                const float ww[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int k = 0; k < 8; ++k) d[i][k] = fmaf(ww[i], gv[k], d[i][k]);
            }
            // The other parities' sums by halving exchanges (lane bits PQ, 2·PQ): each lane
            // keeps RS = 4 / ES of the 4 rows, from row c0 - 8·o - 4·h on.
            constexpr int RS = 4 / ES;
            float r[RS][8];
            int c0 = 8 * o + 4 * h;
            if constexpr (ES == 1) {
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int k = 0; k < 8; ++k) r[i][k] = d[i][k];
            } else {
                const bool up = eh & 1;     // keeps rows 2, 3
                float t[2][8];
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int k = 0; k < 8; ++k) {
                        const float send = up ? d[i][k] : d[i + 2][k];
                        t[i][k] = (up ? d[i + 2][k] : d[i][k])
                                  + __shfl_xor_sync(0xffffffffu, send, PQ);
                    }
                c0 += 2 * up;
                if constexpr (ES == 2) {
#pragma unroll
                    for (int i = 0; i < 2; ++i)
#pragma unroll
                        for (int k = 0; k < 8; ++k) r[i][k] = t[i][k];
                } else {
                    const bool up2 = eh & 2;   // keeps the second of the two
#pragma unroll
                    for (int k = 0; k < 8; ++k) {
                        const float send = up2 ? t[0][k] : t[1][k];
                        r[0][k] = (up2 ? t[1][k] : t[0][k])
                                  + __shfl_xor_sync(0xffffffffu, send, 2 * PQ);
                    }
                    c0 += up2;
                }
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int q = qc + 4 * (pg + half * PQ / 2);
                if constexpr (VEC) {
                    if (q >= q_end) continue;
                    const int n = q / P;
                    float* at = gx + (size_t)n * Cin * P + (q - n * P) + (size_t)c0 * P;
#pragma unroll
                    for (int i = 0; i < RS; ++i)
                        if (c0 + i < Cin)
                            *reinterpret_cast<float4*>(at + (size_t)i * P) = make_float4(
                                r[i][4 * half], r[i][4 * half + 1], r[i][4 * half + 2],
                                r[i][4 * half + 3]);
                } else {
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const long long base = pixel_base(q + k, q_end, Cin, P);
                        if (base < 0) continue;
#pragma unroll
                        for (int i = 0; i < RS; ++i)
                            if (c0 + i < Cin) gx[base + (size_t)(c0 + i) * P] = r[i][4 * half + k];
                    }
                }
            }
        }

        // Weight gradient: 4 filters x 4 offsets an item, 4 pixels a step.
#pragma unroll
        for (int j = 0; j < IPT; ++j) {
            if (!live[j]) continue;
#pragma unroll 4
            for (int pq = 0; pq < PQ; ++pq) {
                float4 g[4], xv[4];
#pragma unroll
                for (int a = 0; a < 4; ++a)
                    g[a] = *reinterpret_cast<const float4*>(cur + goff[j][a] + 4 * pq);
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    xv[c] = *reinterpret_cast<const float4*>(cur + xoff[j][c] + 4 * pq);
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        float v = acc[j][a][c];
                        v = fmaf(g[a].x, xv[c].x, v);
                        v = fmaf(g[a].y, xv[c].y, v);
                        v = fmaf(g[a].z, xv[c].z, v);
                        acc[j][a][c] = fmaf(g[a].w, xv[c].w, v);
                    }
            }
        }
        __syncthreads();                // this buffer is restaged next (S == 1) or after
        b ^= S - 1;
    }
    tdcx::cp_async_wait<0>();
    // Band offset v of sorted filter s is its weight u = v - (b_s - b0), when in range:
    // every (filter, weight) lies in exactly one item, so each is written once.
#pragma unroll
    for (int j = 0; j < IPT; ++j) {
        if (!live[j]) continue;
        const int item = tid + j * OT;
        const int2 tl = tiles[item / OTILE];
        const int s0 = 8 * tl.x + 4 * ((item >> 3) & 1), b0 = starts[8 * tl.x];
        const int v0 = 32 * tl.y + (item & 7);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            if (s0 + a >= Cout) break;
            const int k = order[s0 + a], sh = starts[s0 + a] - b0;
            float* out = partial + ((size_t)blockIdx.x * Cout + k) * U;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int u = v0 + 8 * c - sh;
                if (u >= 0 && u < U) out[u] = acc[j][a][c];
            }
        }
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.scc_conv.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SCC_BWD_DATA(...) template __global__ void scc_bwd_data<__VA_ARGS__>(const float*, \
    const float*, const int*, const int*, const int*, float*, int, int, int, int, int, int);
TC_I_SCC_BWD_DATA(16, 16, 4, 4, false) TC_I_SCC_BWD_DATA(16, 16, 4, 4, true)
TC_I_SCC_BWD_DATA(16, 16, 8, 4, false) TC_I_SCC_BWD_DATA(16, 16, 8, 4, true)
TC_I_SCC_BWD_DATA(4, 32, 4, 8, false) TC_I_SCC_BWD_DATA(4, 32, 4, 8, true)
TC_I_SCC_BWD_DATA(4, 32, 8, 4, false) TC_I_SCC_BWD_DATA(4, 32, 8, 4, true)
TC_I_SCC_BWD_DATA(4, 64, 4, 4, false) TC_I_SCC_BWD_DATA(4, 64, 4, 4, true)
TC_I_SCC_BWD_DATA(8, 32, 4, 4, false) TC_I_SCC_BWD_DATA(8, 32, 4, 4, true)
TC_I_SCC_BWD_DATA(8, 32, 4, 8, false) TC_I_SCC_BWD_DATA(8, 32, 4, 8, true)
#undef TC_I_SCC_BWD_DATA
#define TC_I_SCC_BWD_FILTER(...) template __global__ void scc_bwd_filter<__VA_ARGS__>( \
    const float*, const float*, const int*, const int*, float*, int, int, int, int, int, int);
TC_I_SCC_BWD_FILTER(4, 16, 2, 4) TC_I_SCC_BWD_FILTER(8, 16, 2, 4) TC_I_SCC_BWD_FILTER(8, 16, 4, 4)
#undef TC_I_SCC_BWD_FILTER
#define TC_I_SCC_BWD_FILTER_WIDE(...) template __global__ void scc_bwd_filter_wide<__VA_ARGS__>( \
    const float*, const float*, const int*, const int*, const int4*, const int2*, float*, int, \
    int, int, int, int, int, int, int);
TC_I_SCC_BWD_FILTER_WIDE(1, false) TC_I_SCC_BWD_FILTER_WIDE(2, false)
TC_I_SCC_BWD_FILTER_WIDE(2, true) TC_I_SCC_BWD_FILTER_WIDE(4, false)
TC_I_SCC_BWD_FILTER_WIDE(4, true)
#undef TC_I_SCC_BWD_FILTER_WIDE
#define TC_I_SCC_BWD_ONEPASS(...) template __global__ void scc_bwd_onepass<__VA_ARGS__>( \
    const float*, const float*, const float*, const int*, const int*, const int2*, const int*, \
    const int*, const int*, float*, float*, int, int, int, int, int, int, int, int);
TC_I_SCC_BWD_ONEPASS(1, 1, 32, false, false) TC_I_SCC_BWD_ONEPASS(1, 1, 32, false, true)
TC_I_SCC_BWD_ONEPASS(1, 1, 64, false, false) TC_I_SCC_BWD_ONEPASS(1, 1, 64, false, true)
TC_I_SCC_BWD_ONEPASS(1, 2, 32, false, false) TC_I_SCC_BWD_ONEPASS(1, 2, 32, false, true)
TC_I_SCC_BWD_ONEPASS(1, 2, 64, false, false) TC_I_SCC_BWD_ONEPASS(1, 2, 64, false, true)
TC_I_SCC_BWD_ONEPASS(2, 1, 32, false, false) TC_I_SCC_BWD_ONEPASS(2, 1, 32, false, true)
TC_I_SCC_BWD_ONEPASS(2, 1, 64, false, false) TC_I_SCC_BWD_ONEPASS(2, 1, 64, false, true)
TC_I_SCC_BWD_ONEPASS(2, 2, 32, false, false) TC_I_SCC_BWD_ONEPASS(2, 2, 32, false, true)
TC_I_SCC_BWD_ONEPASS(2, 2, 64, false, false) TC_I_SCC_BWD_ONEPASS(2, 2, 64, false, true)
TC_I_SCC_BWD_ONEPASS(1, 2, 64, true, false) TC_I_SCC_BWD_ONEPASS(1, 2, 64, true, true)
TC_I_SCC_BWD_ONEPASS(2, 2, 64, true, false) TC_I_SCC_BWD_ONEPASS(2, 2, 64, true, true)
#undef TC_I_SCC_BWD_ONEPASS
#define TC_I_SCC_FWD(...) template __global__ void scc_fwd<__VA_ARGS__>(const float*, \
    const float*, const int*, const int*, const float*, float*, int, int, int, int, int, int);
TC_I_SCC_FWD(16, 16, 4, 4, false) TC_I_SCC_FWD(16, 16, 4, 4, true)
TC_I_SCC_FWD(16, 16, 8, 4, false) TC_I_SCC_FWD(16, 16, 8, 4, true)
TC_I_SCC_FWD(4, 32, 4, 8, false) TC_I_SCC_FWD(4, 32, 4, 8, true)
TC_I_SCC_FWD(4, 32, 8, 4, false) TC_I_SCC_FWD(4, 32, 8, 4, true)
TC_I_SCC_FWD(4, 64, 4, 4, false) TC_I_SCC_FWD(4, 64, 4, 4, true)
TC_I_SCC_FWD(8, 32, 4, 4, false) TC_I_SCC_FWD(8, 32, 4, 4, true)
TC_I_SCC_FWD(8, 32, 4, 8, false) TC_I_SCC_FWD(8, 32, 4, 8, true)
#undef TC_I_SCC_FWD
#define TC_I_SCC_FWD_CYCLIC(...) template __global__ void scc_fwd_cyclic<__VA_ARGS__>( \
    const float*, const float*, const float*, float*, int, int, int, int, int, int, int, int);
TC_I_SCC_FWD_CYCLIC(false) TC_I_SCC_FWD_CYCLIC(true)
#undef TC_I_SCC_FWD_CYCLIC
#define TC_I_SCC_FWD_WIDE(...) template __global__ void scc_fwd_wide<__VA_ARGS__>(const float*, \
    const float*, const int*, const int*, const float*, float*, int, int, int, int, int, int);
TC_I_SCC_FWD_WIDE(1, false) TC_I_SCC_FWD_WIDE(2, false) TC_I_SCC_FWD_WIDE(2, true)
TC_I_SCC_FWD_WIDE(4, false) TC_I_SCC_FWD_WIDE(4, true)
#undef TC_I_SCC_FWD_WIDE
#endif
