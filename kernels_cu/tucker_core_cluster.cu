// The "cluster" core convolution (ours, for the H100), fp32 NCHW: the "cluster" variant of
// tensorconv.ops.core_conv and the default for a Tucker core; the Python op
// (tensorconv/ops/tucker_core_cluster.py) owns tiles, launch geometry and checks.
//
// The paper's kernel (tucker_core_tdc.cu) is weak on small planes (one thread per
// output channel leaves most of the GPU idle) and on large ones (one shared-memory read
// per pixel and filter tap).
//
// A block owns NB output channels x a TH x TW pixel tile (TW = TWG * PT) and a
// 1/CL share of the C input channels; each thread computes NT channels x PT
// consecutive pixels of one row, so one input-row read (PT + S - 1 values at
// stride 1) feeds S * NT * PT multiply-adds and one weight vector NT * PT.
// Lanes run over channel groups fastest: a warp reads a few distinct weight
// vectors and a few distinct input rows, broadcast to the rest.  Input cube and
// weights (CRSN, zero-filled past N) come in CK-channel stages through cp.async,
// two stages deep, the halo zero-filled by the copy itself.
//
// The CL blocks sharing a tile form a thread-block cluster (blockIdx.z is the
// rank): each pushes its partial sums of slice q of the tile into block q's
// shared memory (tdcx::PushReduce: st.async, no fence), and block q adds them in
// a fixed order (deterministic, no atomics, no zero-filled output), then writes
// them pixel-fastest (coalesced).  Without a
// split the registers go straight to memory: at batch 1 a block's latency chain
// is the kernel's time, and a shared-memory round trip lengthens it.

#include "tc_cluster.cuh"
#include "tc_common.cuh"

template <int R, int S, int STRIDE, int NT, int PT, int CL>
__global__ void TDCX_CLUSTER_DIMS(CL) __launch_bounds__(256) tdc_core_conv_cluster(
    const float* __restrict__ x,       // (B, C, H, W)
    const float* __restrict__ w_crsn,  // (C, R, S, N)
    float* __restrict__ y,             // (B, N, OH, OW)
    const float* __restrict__ bias,    // (N,) or nullptr
    const float* __restrict__ residual,  // like y, or nullptr
    int relu,
    int C, int H, int W, int N, int OH, int OW, int pad_h, int pad_w,
    int NB, int TH, int CK, int c_per, int red_off,
    // Divisors as the host's FastDiv constants (tensorconv.cuda.fast_div): channel
    // groups NB / NT, column groups TWG, channel tiles, pixel tiles per row, staged
    // plane, staged row, weight row (NB / 4 with float4 copies, else NB), stage
    // channels CK, tile pixels, tile columns, outputs per cluster rank.
    unsigned long long fd_ng, unsigned long long fd_twg, unsigned long long fd_n_tiles,
    unsigned long long fd_tiles_w, unsigned long long fd_plane, unsigned long long fd_iwt,
    unsigned long long fd_nb4, unsigned long long fd_ck, unsigned long long fd_thw,
    unsigned long long fd_tw, unsigned long long fd_share)
{
    tc::wait_prior_grids();
    constexpr int VN = (PT - 1) * STRIDE + S;  // input columns under one thread's PT pixels
    constexpr int VN4 = (VN + 3) / 4 * 4;
    constexpr bool VEC_IN = (PT * STRIDE) % 4 == 0;  // thread rows start 16-byte aligned
    extern __shared__ __align__(16) float smem[];
    const tdcx::FastDiv by_ng = tdcx::FastDiv::of(fd_ng), by_twg = tdcx::FastDiv::of(fd_twg);
    const tdcx::FastDiv by_n_tiles = tdcx::FastDiv::of(fd_n_tiles);
    const tdcx::FastDiv by_tiles_w = tdcx::FastDiv::of(fd_tiles_w);
    const tdcx::FastDiv by_plane = tdcx::FastDiv::of(fd_plane), by_iwt = tdcx::FastDiv::of(fd_iwt);
    const tdcx::FastDiv by_nb4 = tdcx::FastDiv::of(fd_nb4), by_ck = tdcx::FastDiv::of(fd_ck);
    const tdcx::FastDiv by_thw = tdcx::FastDiv::of(fd_thw), by_tw = tdcx::FastDiv::of(fd_tw);
    const int TWG = by_twg.d, TW = by_tw.d, THW = by_thw.d;
    const int IHT = (TH - 1) * STRIDE + R, IWT = by_iwt.d;
    const int IWP = ((TWG - 1) * PT * STRIDE + VN4 + 3) / 4 * 4;  // row pitch: float4 over-reads stay in the row
    const int in_stage = CK * IHT * IWP, w_stage = (CK * R * S * NB + 3) / 4 * 4;

    const int tid = threadIdx.x, threads = blockDim.x, NG = by_ng.d;
    const int pg = by_ng.div(tid), ng = tid - pg * NG;
    const int ph = by_twg.div(pg), pw = pg - ph * TWG;
    const int b = by_n_tiles.div(blockIdx.y), n0 = (blockIdx.y - b * (int)by_n_tiles.d) * NB;
    const int th_i = by_tiles_w.div(blockIdx.x);
    const int oh0 = th_i * TH, ow0 = (blockIdx.x - th_i * (int)by_tiles_w.d) * TW;
    const int ih0 = oh0 * STRIDE - pad_h, iw0 = ow0 * STRIDE - pad_w;
    const int split = blockIdx.z;
    const int c_begin = min(C, split * c_per), c_end = min(C, c_begin + c_per);
    const int stages = by_ck.div(c_end - c_begin + CK - 1);
    const int nbuf = c_per > CK ? 2 : 1;  // a single stage needs one buffer (the op sizes smem alike)
    const bool vec_w = N % 4 == 0 && NB % 4 == 0;
    const float* xb = x + (size_t)b * C * H * W;
    tdcx::PushReduce<CL> red(smem + red_off, fd_share);
    if constexpr (CL > 1) red.begin(NB * THW);

    auto issue = [&](int k) {
        const int cb = c_begin + k * CK, cn = min(CK, c_end - cb);
        float* is = smem + (k & 1) * in_stage;
        float* ws = smem + nbuf * in_stage + (k & 1) * w_stage;
        const int plane = IHT * IWT;
        for (int i = tid; i < cn * plane; i += threads) {
            const int c = by_plane.div(i), p = i - c * plane;
            const int r = by_iwt.div(p), q = p - r * IWT;
            const int ih = ih0 + r, iw = iw0 + q;
            const bool ok = ih >= 0 && ih < H && iw >= 0 && iw < W;
            tdcx::cp_async4(is + (c * IHT + r) * IWP + q,
                            ok ? xb + ((size_t)(cb + c) * H + ih) * W + iw : xb, ok);
        }
        const float* wsrc = w_crsn + (size_t)cb * R * S * N + n0;
        const int rows = cn * R * S;
        if (vec_w) {
            const int nb4 = NB / 4;
            for (int i = tid; i < rows * nb4; i += threads) {
                const int row = by_nb4.div(i), n = (i - row * nb4) * 4;
                const bool ok = n0 + n < N;
                tdcx::cp_async16(ws + row * NB + n, ok ? wsrc + (size_t)row * N + n : w_crsn, ok);
            }
        } else {
            for (int i = tid; i < rows * NB; i += threads) {
                const int row = by_nb4.div(i), n = i - row * NB;
                const bool ok = n0 + n < N;
                tdcx::cp_async4(ws + row * NB + n, ok ? wsrc + (size_t)row * N + n : w_crsn, ok);
            }
        }
        tdcx::cp_async_commit();
    };

    float acc[NT][PT];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < PT; ++j) acc[n][j] = 0.f;

    const int in_off = ph * STRIDE * IWP + pw * PT * STRIDE;
    if (c_begin < c_end) issue(0);
    for (int k = 0; k < stages; ++k) {
        if (k + 1 < stages) {
            issue(k + 1);
            tdcx::cp_async_wait<1>();
        } else {
            tdcx::cp_async_wait<0>();
        }
        __syncthreads();
        const int cn = min(CK, c_end - (c_begin + k * CK));
        const float* is = smem + (k & 1) * in_stage + in_off;
        const float* ws = smem + nbuf * in_stage + (k & 1) * w_stage + ng * NT;
        for (int c = 0; c < cn; ++c) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float* row = is + (c * IHT + r) * IWP;
                float v[VN4];
                if constexpr (VEC_IN) {
#pragma unroll
                    for (int q = 0; q < VN4 / 4; ++q) {
                        const float4 t = reinterpret_cast<const float4*>(row)[q];
                        v[4 * q] = t.x; v[4 * q + 1] = t.y; v[4 * q + 2] = t.z; v[4 * q + 3] = t.w;
                    }
                } else {
#pragma unroll
                    for (int q = 0; q < VN; ++q) v[q] = row[q];
                }
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    const float* wr = ws + ((c * R + r) * S + s) * NB;
                    float wk[NT];
                    if constexpr (NT % 4 == 0) {
#pragma unroll
                        for (int q = 0; q < NT / 4; ++q) {
                            const float4 t = reinterpret_cast<const float4*>(wr)[q];
                            wk[4 * q] = t.x; wk[4 * q + 1] = t.y; wk[4 * q + 2] = t.z; wk[4 * q + 3] = t.w;
                        }
                    } else {
#pragma unroll
                        for (int q = 0; q < NT; ++q) wk[q] = wr[q];
                    }
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int j = 0; j < PT; ++j)
                            acc[n][j] = fmaf(v[j * STRIDE + s], wk[n], acc[n][j]);
                }
            }
        }
        __syncthreads();  // the next issue() overwrites this stage
    }

    if constexpr (CL == 1) {
        // Nothing to combine: store straight from registers (PT consecutive pixels per row).
        const int oh = oh0 + ph;
        if (oh < OH) {
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const int nn = n0 + ng * NT + n;
                if (nn >= N) break;
                const size_t row = (((size_t)b * N + nn) * OH + oh) * OW;
#pragma unroll
                for (int j = 0; j < PT; ++j) {
                    const int ow = ow0 + pw * PT + j;
                    if (ow < OW)
                        y[row + ow] = tc::conv_epilogue(acc[n][j], bias, nn, residual, row + ow, relu);
                }
            }
        }
        return;
    }
    // Every block pushes its partial sums (channel-major, pixel fastest) to their
    // owners, then adds the partials of the outputs it owns and stores them.
    // A thread's PT pixels of a channel are adjacent: pushed as vectors.
    constexpr int VEC = PT % 4 == 0 ? 4 : PT % 2 == 0 ? 2 : 1;
    red.ready();
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < PT; j += VEC)
            red.template push<VEC>((ng * NT + n) * THW + ph * TW + pw * PT + j, &acc[n][j]);
    red.wait();
    const int owned = red.count(NB * THW), base = red.rank * red.share;
    for (int e = tid; e < owned; e += threads) {
        const int idx = base + e, n = by_thw.div(idx), p = idx - n * THW;
        const int r = by_tw.div(p);
        const int oh = oh0 + r, ow = ow0 + p - r * TW;
        const size_t at = (((size_t)b * N + n0 + n) * OH + oh) * OW + ow;
        if (n0 + n < N && oh < OH && ow < OW)
            y[at] = tc::conv_epilogue(red.sum(e), bias, n0 + n, residual, at, relu);
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.tucker_core_cluster.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_TDC_CORE_CONV_CLUSTER(...) template __global__ void tdc_core_conv_cluster<__VA_ARGS__>( \
    const float*, const float*, float*, const float*, const float*, int, int, int, int, int, int, \
    int, int, int, int, int, int, int, int, unsigned long long, unsigned long long, \
    unsigned long long, unsigned long long, unsigned long long, unsigned long long, \
    unsigned long long, unsigned long long, unsigned long long, unsigned long long, \
    unsigned long long);
TC_I_TDC_CORE_CONV_CLUSTER(1, 1, 1, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(1, 1, 2, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(1, 3, 1, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(1, 3, 2, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(1, 7, 1, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(1, 7, 2, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(2, 2, 1, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(2, 2, 2, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 1, 1, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(3, 1, 2, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 1, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 1, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 1, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 1, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 2, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 2, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 2, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 2, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 4, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 4, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 4, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 8, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 8, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 8, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 1, 8, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 1, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 1, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 1, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 1, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 2, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 2, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 2, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 2, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 4, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 4, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 4, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 8, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 8, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 8, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 2, 8, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 1, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 1, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 1, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 1, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 2, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 2, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 2, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 2, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 4, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 4, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 4, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 8, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 8, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 8, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 4, 8, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 1, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 1, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 1, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 1, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 2, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 2, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 2, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 2, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 4, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 4, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 4, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 8, 1) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 8, 2)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 8, 4) TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 1, 8, 8, 8)
TC_I_TDC_CORE_CONV_CLUSTER(3, 3, 2, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(4, 4, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(4, 4, 2, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(5, 5, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(5, 5, 2, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(6, 6, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(6, 6, 2, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(7, 1, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(7, 1, 2, 4, 4, 2) TC_I_TDC_CORE_CONV_CLUSTER(7, 7, 1, 4, 4, 2)
TC_I_TDC_CORE_CONV_CLUSTER(7, 7, 2, 4, 4, 2)
#undef TC_I_TDC_CORE_CONV_CLUSTER
#endif
