// Implicit-GEMM convolution on the tensor cores at fp32 accuracy (3xTF32), NCHW: the
// forward and both gradients of a training step, any stride / padding / dilation / groups.
//
// The same GEMM view as conv2d_igemm (direct_conv.cu), OUT[m, p] = sum_q A[m, q] B[q, p]:
//
//   MODE  what                M rows            P columns            Q reduction
//   0     y = conv(x, w)      k of the group    (n, oh, ow)          (c, r, s)
//   1     gx = dgrad(gy, w)   c of the group    (n, h, w)            (k, r, s)
//   2     gw = wgrad(x, gy)   k of the group    (c, r, s)            (n, oh, ow)
//   3     gx, strided         c of the group    (n, h, w) of a phase (tap, k)
//
// Mode 3 is the data gradient of a strided convolution (dilation 1) split by phase: input
// pixel h takes gy[oh] through tap r only where h + pad - r is a multiple of the stride,
// so the pixels with (h + pad) % stride == a take exactly the taps r = a, a + stride, ...
// One GEMM per phase (a, b), blockIdx.z = phase * splits + split, over those pixels and
// those taps alone: a quarter of mode 1's reduction at stride 2, which walks every tap
// and drops three in four.  A phase without taps (1x1, stride 2: three of four) writes
// zeros.  Its reduction runs tap-major, q = t * Kg + k.
//
// A block of 256 threads (8 warps) computes a BM x 128 tile of OUT; each warp a
// (BM / WARPS_M) x (128 / WARPS_N) sub-tile of mma.sync m16n8k8 tiles.  Operands are
// gathered from the tensors (never materialised) a BK = 16 slice at a time by 4-byte
// cp.async copies (zero-filled outside the tensors) into a STAGES-deep ring in shared
// memory, STAGES - 1 slices ahead of the multiplication.  Each fragment value is split as
// it is read into a tf32 "big" part and its remainder (tc_mma.cuh), and each product
// takes three tensor-core passes (big*big, big*small, small*big): the result matches
// fp32 (<= 1e-5 relative).  Compiled for one tf32 pass (tensorconv.precision "tf32") it
// rounds each value and takes one.
//
// On sm_90 the same tile runs on wgmma (template flag WG, built for sm_90a): the block's two
// warpgroups compute the transpose, 64 of the 128 columns each as their M rows, with the
// column operand (B) in registers, read from shared memory as mma.sync's B fragments are,
// and the BM rows of A read by the tensor cores themselves through a matrix descriptor (A
// stored K-major under the 64-byte swizzle: wg_a_word).  At one tf32 pass the gathered B is
// stored the same way and read through a descriptor as well (B_DESC: no fragments in
// registers).  One slice's products stay in flight while the next slice is loaded and
// multiplied (a WG_STAGES ring loading three slices ahead), so where B comes from
// registers its fragments alternate between two register sets.  At fp32 accuracy A's
// values are split in place by the threads that copied them, the remainders in a third part
// of the stage, and each k step takes three wgmma's.
//
// Shared-memory layouts are chosen so that the fragment reads are conflict-free:
// A is m-major with rows of BK + 4 words (lane (g, t) reads row g, column t: banks
// 20g + t, all distinct); B is k-major with rows of 128 + 8 words in modes 0, 1 and 3
// (lane reads row t, column g: banks 8t + g) and, like A, n-major in mode 2, where the
// loads walk the reduction (output pixels) for coalescing.
//
// blockIdx.z splits the reduction: with splits > 1 each split writes its partial tile to
// `partial` ([split][Mtot][P]) and direct_conv.cu's conv2d_splitk_reduce sums them in
// split order (deterministic) and runs the epilogue; with one split the epilogue runs
// here: bias and ReLU (forward only) and residual (the forward's, or the sum a data
// gradient is added to: the gradient of a tensor read twice, as a residual block's input).
//
// HALO (modes 0 and 1, filters of three taps or more): the block's 128 columns are whole
// output planes (planes of at most 128 pixels) or whole rows of one plane, so the source
// pixels they reach form a box per image and channel (Halo).  The reduction keeps its
// order (A is copied as above), zero-padded to chunks of 16 channels x every tap; a chunk's
// box is copied once, into a ring of two, with the chunk's first slice, and each slice
// reads its B values from it: row q of the chunk at a table's offset (its channel's box,
// moved to its tap), column n at the pixel's.  A 3x3 layer copies about a fifth of the B
// values the gather copies, and copies, not products, bound the gather at one tf32 pass
// (docs/notes/igemm_tf32x3.md).
//
// Launch geometry, the split and the checks belong to tensorconv/ops/igemm_tf32x3.py; what
// was tried and how fast: docs/notes/igemm_tf32x3.md.
#include "tc_cluster.cuh"
#include "tc_common.cuh"
#include "tc_mma.cuh"
#include "wgmma_tf32.cuh"

namespace igtc {
constexpr int BN = 128, BK = 16, THREADS = 256;
constexpr int LDK = BK + 4;    // an m-major (or n-major) row: 20 words
constexpr int LDN = BN + 8;    // a k-major row: 136 words (== 8 mod 32)
constexpr int STAGES = 4;      // slices in flight: the dynamic shared memory is STAGES x (A + B)
// The wgmma build loads three slices ahead too, and keeps one slice's products running
// while the next is loaded: its ring has a stage more.
constexpr int WG_STAGES = 5;

template <int BM>
struct Shape {
    static constexpr int WARPS_M = BM >= 32 ? 2 : 1, WARPS_N = 8 / WARPS_M;
    static constexpr int MT = BM / (16 * WARPS_M);   // m16 tiles per warp
    static constexpr int NT = BN / (8 * WARPS_N);    // n8 tiles per warp
    static constexpr int NA = BM * BK / THREADS;     // A values each thread loads per slice
    static constexpr int NB = BN * BK / THREADS;     // B values
    static_assert(MT >= 1 && NA >= 1 && BM * BK % THREADS == 0, "BM is 16, 32, 64 or 128");
};

// The wgmma build's A stage (BM rows of BK = 16 words): K-major core matrices under the
// 64-byte swizzle, so that the A operand is read by wgmma straight from shared memory.
// Row m sits at 64 m bytes, its 16-byte chunk c at chunk c ^ (m / 2 % 4): the two rows a
// warp's copies write land on 32 distinct banks.  Eight-row groups are 512 bytes apart.
__device__ __forceinline__ int wg_a_word(int m, int k) {
    return m * BK + ((((k >> 2) ^ (m >> 1)) & 3) << 2) + (k & 3);
}
constexpr unsigned long long WG_SWIZZLE_64B = 2ull << 62;


// Mode 3's phase a along one axis (stride s, padding pad, n input pixels, taps R): the
// pixels h = a - pad + s * j, j in [first, first + count), and taps a, a + s, ... < R.
struct Phase {
    int first, count, taps;
    __device__ Phase(int a, int pad, int s, int n, int R) {
        const int d = pad - a;
        first = d > 0 ? (d + s - 1) / s : 0;            // a < s, so a - pad < s
        const int span = n - 1 - a + pad;
        count = span < 0 ? 0 : max(0, span / s - first + 1);
        taps = a < R ? (R - a + s - 1) / s : 0;
    }
};

// x / d for 0 <= x < 2^31 and a divisor d >= 1 known only at run time, without the integer
// divide's instruction sequence: m = floor((2^32 - 1) / d) makes umulhi(x, m) floor(x / d)
// or one less (m >= 2^32 / d - 1 and x < 2^32), and one test corrects it.  Mode 3 decodes
// each reduction row's tap with two such divisions, three rows a thread a slice.
struct FastDiv {
    unsigned d, m;
    __device__ explicit FastDiv(int divisor) : d(divisor), m(0xffffffffu / unsigned(divisor)) {}
    __device__ __forceinline__ int operator()(int x) const {
        unsigned q = __umulhi(unsigned(x), m);
        return int(q + ((q + 1) * d <= unsigned(x)));
    }
};

// A copy's source: element `off` of `base`, or `base` itself where the copy is masked off
// (a 0-byte copy reads nothing).  The offset is a valid index wherever `ok`, so it goes
// unsigned: it zero-extends into one multiply-add instead of a 64-bit select and shift.
__device__ __forceinline__ const float* src_at(const float* base, bool ok, int off) {
    return base + (ok ? unsigned(off) : 0u);
}

// The halo path's channel stride in shared memory: the smallest word count >= e that is
// 8 mod 32, so that the fragment reads of four channels (lane t) and eight pixels (lane
// g) fall on distinct banks.  tensorconv/ops/igemm_tf32x3.py sizes the ring with it.
__device__ __forceinline__ int halo_stride(int e) { return (e + 23) / 32 * 32 + 8; }

// The halo path's tile over an output plane of oh x ow pixels: ti whole planes (when a
// plane has at most 128 pixels) or tr rows of one plane, and the source box they reach,
// hr x hw pixels per image and channel, e words in all (the op caps e at 2 x THREADS).
// sh, sw: the source pixels between adjacent outputs (mode 1: 1).
struct Halo {
    int ti, tr, hr, hw, e, cs, img0, row0;
    __device__ Halo(int oh, int ow, int R, int S, int sh, int sw, int dh, int dw, int block) {
        const int plane = oh * ow;
        if (plane <= BN) { ti = BN / plane; tr = oh; } else { ti = 1; tr = BN / ow; }
        hr = (tr - 1) * sh + (R - 1) * dh + 1;
        hw = (ow - 1) * sw + (S - 1) * dw + 1;
        e = ti * hr * hw;
        cs = halo_stride(e);
        const int tiles = (oh + tr - 1) / tr;   // tiles per image when ti == 1
        img0 = ti > 1 ? block * ti : block / tiles;
        row0 = ti > 1 ? 0 : (block - img0 * tiles) * tr;
    }
};
constexpr int HALO_CHANNELS = BK;   // a chunk: one stage per tap
constexpr int HALO_SLOTS = 2;       // boxes in flight (the op requires R * S >= the ring's lead)
constexpr int HALO_POS = 2;         // box words a thread copies per channel, at most
}  // namespace igtc

// KR, KS: the filter size fixed at compile time (0: taken at run time), which turns the
// reduction index's divisions by R*S and S into multiplications.
template <int MODE, int KR, int KS, int BM, bool WG, bool HALO = false>
__global__ void __launch_bounds__(igtc::THREADS, BM >= 128 ? 1 : 2) conv2d_igemm_tf32x3(
    const float* __restrict__ a_src,     // MODE 0, 1, 3: w;  MODE 2: gy
    const float* __restrict__ b_src,     // MODE 0: x;  MODE 1, 3: gy;  MODE 2: x
    const float* __restrict__ bias,      // (K,) or nullptr (MODE 0 only)
    const float* __restrict__ residual,  // like out, or nullptr (MODE 0, 1, 3)
    float* __restrict__ out,             // MODE 0: y;  MODE 1, 3: gx;  MODE 2: gw
    float* __restrict__ partial,         // (splits, Mtot, P, all phases) when splits > 1
    int N, int C, int H, int W, int K, int OH, int OW, int R, int S,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    int groups, int m_tiles, int q_per_split, int relu,
    int a_t)   // a_src is w transposed per group: MODE 1 (G, Cg, Kg, R, S), MODE 3 (G, Cg, R, S, Kg)
{
    tc::wait_prior_grids();
    using namespace igtc;
    using Sh = Shape<BM>;
    static_assert(!HALO || MODE == 0 || MODE == 1, "the halo path: forward, stride-1 data gradient");
    constexpr bool B_KMAJOR = MODE != 2;
    // The wgmma build at one tf32 pass reads B through a descriptor too (B_DESC): the
    // copies store it K-major, as A is (each element is copied on its own, so its place in
    // shared memory is free; in modes 0, 1 and 3 a warp's 32 pixels then write 8 banks
    // 4-way, which still beats the fragment reads).  At fp32 accuracy B would need a split
    // in place (a second remainder stage, eight more values a thread before each barrier):
    // that cost more than the fragments it saves.  The halo path reads B from its box.
    constexpr bool B_DESC = WG && !HALO && !tf32x3::EXACT;
    constexpr int A_WORDS = WG ? BM * BK : BM * LDK;
    constexpr int B_WORDS = HALO ? 0 : B_DESC ? BN * BK : B_KMAJOR ? BK * LDN : BN * LDK;   // HALO: B is the box
    // The wgmma build at fp32 accuracy keeps A's remainders after them.
    constexpr int SMALL_WORDS = WG && tf32x3::EXACT ? A_WORDS : 0;
    constexpr int STAGE_WORDS = A_WORDS + B_WORDS + SMALL_WORDS;

    if (KR > 0) R = KR;
    if (KS > 0) S = KS;
    const int Cg = C / groups, Kg = K / groups;
    const int RS = R * S, OHW = OH * OW, HW = H * W;
    constexpr bool DGRAD = MODE == 1 || MODE == 3;
    // Mode 3: this block's phase (a, b) and split; the others: blockIdx.z is the split.
    const int phases = MODE == 3 ? stride_h * stride_w : 1;
    const int splits = gridDim.z / phases;
    const int phase = blockIdx.z / splits, split_id = blockIdx.z - phase * splits;
    const int ph_a = phase / stride_w, ph_b = phase - ph_a * stride_w;
    const Phase rows_ph(ph_a, pad_h, stride_h, H, R), cols_ph(ph_b, pad_w, stride_w, W, S);
    const int PH = rows_ph.count * cols_ph.count, TAPS = rows_ph.taps * cols_ph.taps;
    const int M = DGRAD ? Cg : Kg;
    const int P = MODE == 0 ? N * OHW : MODE == 1 ? N * HW : MODE == 3 ? N * PH : Cg * RS;
    // The halo path reduces over chunks of 16 source channels (the last one zero-padded).
    const int LIMC = MODE == 0 ? Cg : Kg;
    const int Q = HALO ? (LIMC + HALO_CHANNELS - 1) / HALO_CHANNELS * HALO_CHANNELS * RS
                : MODE == 0 ? Cg * RS : MODE == 1 ? Kg * RS : MODE == 3 ? Kg * TAPS : N * OHW;
    const int Mtot = DGRAD ? C : K;
    // The halo path's output plane and tile (mode 1 is unstrided: one source pixel a step).
    const int PHo = MODE == 0 ? OH : H, PWo = MODE == 0 ? OW : W;
    const int hsh = MODE == 0 ? stride_h : 1, hsw = MODE == 0 ? stride_w : 1;
    const Halo hal(PHo, PWo, R, S, hsh, hsw, dil_h, dil_w, blockIdx.x);

    const int g = blockIdx.y / m_tiles;
    const int m0 = (blockIdx.y % m_tiles) * BM;
    const int p0 = blockIdx.x * BN;
    if (MODE == 3 && p0 >= P) return;   // the grid covers the largest phase
    const int q_begin = split_id * q_per_split;
    const int q_end = min(Q, q_begin + q_per_split);
    const int tid = threadIdx.x;
    // Mode 3's reduction index q = t * Kg + k: tap t = (tr, ts) of the phase.
    const FastDiv by_kg(MODE == 3 ? Kg : 1), by_taps(MODE == 3 ? max(cols_ph.taps, 1) : 1);
    // The other per-slice divisors known only at run time: mode 2's output plane and row
    // (its reduction index is (n, oh, ow)), and R*S and S of a filter not fixed at compile
    // time (KR = 0; a fixed one divides by a constant, a multiplication already).
    const FastDiv by_ohw(MODE == 2 ? OHW : 1), by_ow(MODE == 2 ? OW : 1);
    const FastDiv by_rs(KR == 0 ? RS : 1), by_s(KS == 0 ? S : 1);
    auto div_rs = [&](int x) { return KR == 0 ? by_rs(x) : x / RS; };
    auto div_s = [&](int x) { return KS == 0 ? by_s(x) : x / S; };
    auto tap_of = [&](int q, int& k, int& tr, int& ts) {
        const int t = by_kg(q);
        k = q - t * Kg;
        tr = by_taps(t);
        ts = t - tr * cols_ph.taps;
    };

    // A loads (every mode): consecutive threads take consecutive q of one row m, which are
    // consecutive addresses of w (modes 0, 1) or of gy along the output plane (mode 2).
    const int ak = tid % BK;
    // Where A's rows run along the reduction (the forward's w: rows of Cg * RS words; the
    // data gradient's w transposed by the op, a_t: rows of Kg * RS, in mode 3 tap by tap,
    // Kg words a tap) in whole 16-byte words and a_src is 16-byte aligned: thread t copies
    // the 16-byte words (t + 256 i) / 4 of rows, word t % 4 of each, a quarter of the
    // copies (the loads are issue-bound: docs/notes/igemm_tf32x3.md).  (Mode 2's gy
    // planes allow it too, but there it was measured slower: ResNet-18's tf32 weight
    // gradients 2.53 -> 2.90 ms.)
    constexpr int A_VEC = BM >= 64 ? BM / 64 : 1;   // 16-byte words a thread copies
    constexpr bool A_ROWS = MODE != 2;               // modes whose A may come as rows
    const bool rows_t = (MODE == 1 || MODE == 3) && a_t;
    const int a_run = MODE == 0 ? Cg * RS : Kg * RS;
    const bool a_vec = (MODE == 0 || rows_t) && (MODE == 3 ? Kg : a_run) % 4 == 0
                       && (reinterpret_cast<size_t>(a_src) & 15) == 0;
    const int av_k = 4 * (tid & 3);
    // Modes 0, 1 and 3, B: each thread owns columns bc + 32 j (j < 4: a warp's lanes on 32
    // consecutive pixels, coalesced) and reduction rows 2 br, 2 br + 1 of each slice.  Every
    // element is then (pixel part) + (tap part): the column's (pa, pb) and base offset are
    // decoded once here, each row's tap (dr, ds) and offset once per slice, so an element
    // costs two adds, a bounds test and its copy.  Out-of-range columns get a pa that no
    // tap brings in bounds.
    constexpr int B_COLS = 4;
    const int bc = tid % 32, br = tid / 32;
    int cpa[B_COLS], cpb[B_COLS], cbase[B_COLS];
    if constexpr (MODE != 2 && !HALO) {
        const int plane = MODE == 0 ? OHW : MODE == 1 ? HW : PH;
        const int width = MODE == 0 ? OW : MODE == 1 ? W : cols_ph.count;
        const int src_c = MODE == 0 ? C : K, src_hw = MODE == 0 ? HW : OHW;
        const int src_w = MODE == 0 ? W : OW, src_g = MODE == 0 ? g * Cg : g * Kg;
#pragma unroll
        for (int j = 0; j < B_COLS; ++j) {
            const int pcol = p0 + bc + 32 * j;
            const int img = pcol / plane, rem = pcol - img * plane;
            int pa = rem / width, pb = rem - (rem / width) * width;
            if (MODE == 0) { pa = pa * stride_h - pad_h; pb = pb * stride_w - pad_w; }
            else if (MODE == 1) { pa += pad_h; pb += pad_w; }   // oh = pa - r*dil (stride 1)
            else { pa += rows_ph.first; pb += cols_ph.first; }  // oh = pa - tr, ow = pb - ts
            cbase[j] = (img * src_c + src_g) * src_hw + pa * src_w + pb;
            cpa[j] = pcol < P ? pa : -(1 << 28);
            cpb[j] = pb;
        }
    }
    // Mode 2, B: each thread owns reduction row ak (the same q as its A loads) and columns
    // tid / BK + 16 i: their (c, r, s) never change, so each column's offset from the
    // output pixel's corner and its tap (dr, ds) are decoded once.  Out-of-range columns
    // get a tap that no pixel brings in bounds.
    int btoff[MODE == 2 ? Sh::NB : 1], bdr[MODE == 2 ? Sh::NB : 1], bds[MODE == 2 ? Sh::NB : 1];
    if constexpr (MODE == 2) {
#pragma unroll
        for (int i = 0; i < Sh::NB; ++i) {
            const int pc = p0 + (tid + i * THREADS) / BK;
            const int c = pc / RS, rs = pc % RS;
            const int r = rs / S, s = rs % S;
            bdr[i] = pc < P ? r * dil_h - pad_h : -(1 << 28);
            bds[i] = s * dil_w - pad_w;
            btoff[i] = (g * Cg + c) * HW + bdr[i] * W + bds[i];
        }
    }
    // The halo path: this thread copies box words tid + THREADS k of each channel; their
    // source offsets (at the chunk's first channel: + channel x plane), -1 outside the
    // tensor (zero-filled), are decoded once.
    const int src_plane = MODE == 0 ? HW : OHW;
    int hsrc[HALO ? HALO_POS : 1];
    if constexpr (HALO) {
        const int src_c = MODE == 0 ? C : K, src_h = MODE == 0 ? H : OH, src_w = MODE == 0 ? W : OW;
        const int src_g = MODE == 0 ? g * Cg : g * Kg;
        const int rb = MODE == 0 ? hal.row0 * stride_h - pad_h : hal.row0 + pad_h - (R - 1) * dil_h;
        const int cb = MODE == 0 ? -pad_w : pad_w - (S - 1) * dil_w;
        const int box = hal.hr * hal.hw;
#pragma unroll
        for (int k = 0; k < HALO_POS; ++k) {
            const int pos = tid + k * THREADS, i = pos / box, y = (pos - i * box) / hal.hw;
            const int ih = rb + y, iw = cb + (pos - i * box - y * hal.hw), img = hal.img0 + i;
            const bool ok = pos < hal.e && img < N && (unsigned)ih < (unsigned)src_h
                            && (unsigned)iw < (unsigned)src_w;
            hsrc[k] = ok ? ((img * src_c + src_g) * src_h + ih) * src_w + iw : -1;
        }
    }

    // One slice's operands go straight from global to shared memory (cp.async, zero-filled
    // outside the tensors), STAGES - 1 slices ahead of the one being multiplied: a
    // register-staged copy one slice ahead left the tensor cores waiting on the loads.
    extern __shared__ __align__(1024) float smem[];   // 512-byte swizzle atoms (WG)
    constexpr int RING = WG ? WG_STAGES : STAGES;
    auto a_stage = [&](int st) { return smem + st * STAGE_WORDS; };
    auto b_stage = [&](int st) { return smem + st * STAGE_WORDS + A_WORDS; };
    auto a_small = [&](int st) { return smem + st * STAGE_WORDS + A_WORDS + B_WORDS; };
    auto halo_slot = [&](int chunk) {
        return smem + RING * STAGE_WORDS + (chunk % HALO_SLOTS) * HALO_CHANNELS * hal.cs;
    };
    // The halo path's chunk: HALO_Q reduction rows, row ql at box offset ktab[ql] (its
    // channel's box plus its tap's move), the same in every chunk; made here, published by
    // the ring's first barrier.
    const int HALO_Q = HALO_CHANNELS * RS;
    int* ktab = reinterpret_cast<int*>(smem + RING * STAGE_WORDS + HALO_SLOTS * HALO_CHANNELS * hal.cs);
    if constexpr (HALO) {
        for (int ql = tid; ql < HALO_Q; ql += THREADS) {
            const int ch = ql / RS, tap = ql - ch * RS, r = tap / S, s_ = tap - r * S;
            ktab[ql] = ch * hal.cs + (MODE == 0 ? r * dil_h * hal.hw + s_ * dil_w
                                                : (R - 1 - r) * dil_h * hal.hw + (S - 1 - s_) * dil_w);
        }
    }
    auto load = [&](int q0, int st) {
        float* as = a_stage(st);
        const int qa = q0 + ak;
        // (the halo path's reduction is padded past the last channel: those q copy zeros)
        const bool qa_ok = qa < q_end && (!HALO || qa < LIMC * RS);
        // A's element (m, qa) is a_src[a_base + m * a_step]: the reduction index is decoded
        // once a slice (mode 2: its (n, oh, ow), also B's), not once an element; where A
        // comes as 16-byte runs the runs' own decode below replaces it.
        // (offsets in 32 bits: the op keeps every tensor below 2^31 elements)
        int n2 = 0, rem2 = 0;
        int a_base = 0, a_step = 0;
        if (qa_ok && !(A_ROWS && a_vec)) {
            if (MODE == 0) {   // (w's rows are Cg * RS long: the halo path pads Q)
                a_base = g * Kg * Cg * RS + qa;
                a_step = Cg * RS;
            } else if (MODE == 1 && rows_t) {   // (G, Cg, Kg, R, S): row c is Kg * RS long
                a_base = g * Cg * Kg * RS + qa;
                a_step = Kg * RS;
            } else if (MODE == 1) {
                const int k = div_rs(qa), rs = qa - k * RS;
                a_base = (g * Kg + k) * Cg * RS + rs;
                a_step = RS;
            } else if (MODE == 3) {
                int k, tr, ts;
                tap_of(qa, k, tr, ts);
                const int r = ph_a + tr * stride_h, s_ = ph_b + ts * stride_w;
                if (rows_t) {   // (G, Cg, R, S, Kg): row c is RS * Kg long, Kg words a tap
                    a_base = g * Cg * RS * Kg + (r * S + s_) * Kg + k;
                    a_step = RS * Kg;
                } else {
                    a_base = (g * Kg + k) * Cg * RS + r * S + s_;
                    a_step = RS;
                }
            } else {
                n2 = by_ohw(qa);
                rem2 = qa - n2 * OHW;
                a_base = (n2 * K + g * Kg) * OHW + rem2;
                a_step = OHW;
            }
        }
        if (A_ROWS && a_vec) {
            // (q_end and the halo path's padding start are multiples of 4 here)
            const int qv = q0 + av_k;
            const bool qv_ok = qv < q_end && (!HALO || qv < LIMC * RS);
            int v_base = g * Kg * Cg * RS + qv;
            if (MODE == 3) {   // the tap's Kg words: a 16-byte word never spans two (Kg % 4 == 0)
                int k, tr, ts;
                tap_of(qv, k, tr, ts);
                v_base = g * Cg * RS * Kg
                         + ((ph_a + tr * stride_h) * S + ph_b + ts * stride_w) * Kg + k;
            }
            // copy i's row is ml0 + 64 i: its place is the first's plus a constant
            const int ml0 = tid >> 2;
            const unsigned a_sh = (unsigned)__cvta_generic_to_shared(
                as + (WG ? wg_a_word(ml0, av_k) : ml0 * LDK + av_k));
#pragma unroll
            for (int i = 0; i < A_VEC; ++i) {
                const int ml = ml0 + 64 * i, m = m0 + ml;
                if (ml >= BM) break;
                const bool ok = m < M && qv_ok;
                tdcx::cp_async16(a_sh + 4u * (WG ? 64 * i * BK : 64 * i * LDK),
                                 src_at(a_src, ok, v_base + m * a_run), ok);
            }
        } else {
            // copy i's row is ml0 + 16 i (THREADS / BK = 16 rows a pass)
            const int ml0 = tid / BK;
            const unsigned a_sh = (unsigned)__cvta_generic_to_shared(
                as + (WG ? wg_a_word(ml0, ak) : ml0 * LDK + ak));
#pragma unroll
            for (int i = 0; i < Sh::NA; ++i) {
                const int ml = ml0 + 16 * i, m = m0 + ml;
                const bool ok = m < M && qa_ok;
                tdcx::cp_async4(a_sh + 4u * (WG ? 16 * i * BK : 16 * i * LDK),
                                src_at(a_src, ok, a_base + m * a_step), ok);
            }
        }
        if constexpr (HALO) {
            const int chunk = q0 / HALO_Q;
            if (q0 != chunk * HALO_Q) return;   // the chunk's box comes with its first slice
            const unsigned hs_sh = (unsigned)__cvta_generic_to_shared(halo_slot(chunk));
            const int c0 = chunk * HALO_CHANNELS;
#pragma unroll
            for (int k = 0; k < HALO_POS; ++k) {
                const int pos = tid + k * THREADS;
                if (pos >= hal.e) continue;
                const int src0 = hsrc[k] + c0 * src_plane;
#pragma unroll
                for (int ch = 0; ch < HALO_CHANNELS; ++ch) {
                    const bool ok = hsrc[k] >= 0 && c0 + ch < LIMC;
                    tdcx::cp_async4(hs_sh + 4u * (ch * hal.cs + pos),
                                    src_at(b_src, ok, src0 + ch * src_plane), ok);
                }
            }
        } else if constexpr (MODE == 2) {
            float* bs = b_stage(st);
            const int oh = by_ow(rem2), ow = rem2 - oh * OW;
            const int ohs = oh * stride_h, ows = ow * stride_w;
            const int corner = n2 * C * HW + ohs * W + ows;
            const bool q_ok = qa < q_end;
            const int n0 = tid / BK;   // copy i's column is n0 + 16 i
            const unsigned b_sh = (unsigned)__cvta_generic_to_shared(
                bs + (B_DESC ? wg_a_word(n0, ak) : n0 * LDK + ak));
#pragma unroll
            for (int i = 0; i < Sh::NB; ++i) {
                const int ih = ohs + bdr[i], iw = ows + bds[i];
                const bool ok = q_ok && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                tdcx::cp_async4(b_sh + 4u * (B_DESC ? 16 * i * BK : 16 * i * LDK),
                                src_at(b_src, ok, corner + btoff[i]), ok);
            }
        } else {
            float* bs = b_stage(st);
            const int lim_h = MODE == 0 ? H : OH, lim_w = MODE == 0 ? W : OW;
            const unsigned bs_sh = (unsigned)__cvta_generic_to_shared(bs);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int kl = 2 * br + h, q = q0 + kl;
                // this row's tap: the source offset it adds and its (dr, ds) from (pa, pb)
                int dr = 0, ds = 0, qoff = 0;
                if (MODE == 3) {
                    int k, tr, ts;
                    tap_of(q, k, tr, ts);
                    dr = -tr; ds = -ts;
                    qoff = k * OHW - tr * OW - ts;
                } else {
                    const int cq = div_rs(q), rs = q - cq * RS;
                    const int r = div_s(rs), s_ = rs - r * S;
                    dr = (MODE == 0 ? 1 : -1) * r * dil_h;
                    ds = (MODE == 0 ? 1 : -1) * s_ * dil_w;
                    qoff = MODE == 0 ? cq * HW + dr * W + ds : cq * OHW + dr * OW + ds;
                }
                const bool q_ok = q < q_end;
                // column bc + 32 j's place: the first's plus a constant (under the swizzle
                // too: 32 j moves no bit of the 16-byte chunk's selector)
                const unsigned row_sh = bs_sh + 4u * (B_DESC ? wg_a_word(bc, kl) : kl * LDN + bc);
#pragma unroll
                for (int j = 0; j < B_COLS; ++j) {
                    const int ih = cpa[j] + dr, iw = cpb[j] + ds;
                    const bool ok = q_ok && (unsigned)ih < (unsigned)lim_h
                                    && (unsigned)iw < (unsigned)lim_w;
                    tdcx::cp_async4(row_sh + 4u * (B_DESC ? 32 * j * BK : 32 * j),
                                    src_at(b_src, ok, cbase[j] + qoff), ok);
                }
            }
        }
    };

    const int warp = tid >> 5, lane = tid & 31, lg = lane >> 2, lt = lane & 3;
    const int wm = warp % Sh::WARPS_M, wn = warp / Sh::WARPS_M;
    const int wrow = wm * Sh::MT * 16, wcol = wn * Sh::NT * 8;
    const int slices = q_begin < q_end ? (q_end - q_begin + BK - 1) / BK : 0;
    // The wgmma build computes OUT's transpose, D[p][m] = sum_q B[q][p] A[m][q]: warpgroup
    // wgi takes the tile's columns 64 wgi .. 64 wgi + 63 as its 64 rows, B from registers
    // (warp w of the group its 16 rows wrow_t .. wrow_t + 15), A (BM x 16, K-major) through a
    // descriptor as the BM-wide N operand.
    const int wrow_t = 16 * warp;
    float acc[WG ? 1 : Sh::MT][WG ? 1 : Sh::NT][4];
    float wacc[WG ? BM / 2 : 1];
    if constexpr (WG) {
#pragma unroll
        for (int i = 0; i < BM / 2; ++i) wacc[i] = 0.f;
    } else {
        tf32x3::zero(acc);
    }
    auto b_value = [&](const float* bs, int n, int k) {
        return B_KMAJOR ? bs[k * LDN + n] : bs[n * LDK + k];
    };
    // The halo path: each fragment column's offset in the box (a column past the tile reads
    // the box's first words, its products discarded by the epilogue) ...
    constexpr int HCOLS = WG ? 2 : Sh::NT;
    int hoff[HALO ? HCOLS : 1];
    if constexpr (HALO) {
        const int span = hal.tr * PWo;
#pragma unroll
        for (int j = 0; j < HCOLS; ++j) {
            const int n = WG ? wrow_t + lg + 8 * j : wcol + 8 * j + lg;
            const int i = n / span, rem = n - i * span, rr = rem / PWo, cc = rem - rr * PWo;
            const bool ok = i < hal.ti && hal.img0 + i < N && hal.row0 + rr < PHo;
            hoff[j] = ok ? (i * hal.hr + rr * hsh) * hal.hw + cc * hsw : 0;
        }
    }
    // ... and slice `it`'s B: its stage, or its chunk's box (and the slice's first row in
    // the chunk, bq).
    auto b_of = [&](int it, int st, int& bq) -> const float* {
        if constexpr (HALO) {
            const int q0 = q_begin + it * BK, chunk = q0 / HALO_Q;
            bq = q0 - chunk * HALO_Q;
            return halo_slot(chunk);
        } else {
            bq = 0;
            return b_stage(st);
        }
    };
    // B's value at the slice's reduction row k, fragment column j (WG: half j), tile column n
    auto b_frag = [&](const float* bs, int bq, int j, int n, int k) {
        if constexpr (HALO)
            return bs[ktab[bq + k] + hoff[j]];
        else
            return b_value(bs, n, k);
    };

    if constexpr (WG) {
        // B's values are split (or rounded to tf32) as they are read, like the mma.sync
        // build's; A's are split by the thread that copied them, once they land (one tf32
        // pass: left as they are, the tensor core dropping their low mantissa bits, and
        // B_DESC's too).
        auto landed = [&](int, int st) {
            if constexpr (tf32x3::EXACT) {
                float* as = a_stage(st);
                float* al = a_small(st);
                if (A_ROWS && a_vec) {
#pragma unroll
                    for (int i = 0; i < A_VEC; ++i) {
                        const int ml = (tid + i * THREADS) >> 2;
                        if (ml >= BM) break;
                        const int o = wg_a_word(ml, av_k);
                        float4 v = *reinterpret_cast<const float4*>(as + o), small;
                        tf32x3::split(v.x, small.x);
                        tf32x3::split(v.y, small.y);
                        tf32x3::split(v.z, small.z);
                        tf32x3::split(v.w, small.w);
                        *reinterpret_cast<float4*>(as + o) = v;
                        *reinterpret_cast<float4*>(al + o) = small;
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < Sh::NA; ++i) {
                        const int o = wg_a_word((tid + i * THREADS) / BK, ak);
                        float v = as[o], small;
                        tf32x3::split(v, small);
                        as[o] = v;
                        al[o] = small;
                    }
                }
            }
        };
        // B_DESC: warpgroup wgi's 64 rows of the transpose are B's rows 64 wgi ... 64 wgi + 63,
        // K-major under the 64-byte swizzle like A; no fragments live in registers, so a
        // slice's products stay in flight without the register sets below.
        auto product_ss = [&](int st) {
            const int wrow0 = 64 * (warp / 4) * BK;
            wg::fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
                wg::Tf32<BM>::mma(wacc,
                                  wg::desc(b_stage(st) + wrow0 + 8 * kk, 16, 512) | WG_SWIZZLE_64B,
                                  wg::desc(a_stage(st) + 8 * kk, 16, 512) | WG_SWIZZLE_64B);
            wg::commit();
            wg::wait<1>();   // the previous slice's products are done: its stage is free
        };
        // B's fragments alternate between two register sets: a slice's products read theirs
        // until the next slice's wait, so the next slice fills the other set, and an empty
        // asm after that wait uses the set once more, for the C++ compiler.  ptxas never
        // sees that use (an empty asm leaves no PTX) and treats a wgmma's registers as free
        // once it issues: the sets stay apart, and untouched until their wait, only as its
        // allocation has it.  The SASS of the gather build shows them so; the halo path's
        // showed them merged and rewritten by the next slice's copies, hence its wait<0>
        // (docs/notes/igemm_tf32x3.md).  The GPU tests run every instantiation.
        unsigned frag[2][2][BK / 8][4] = {};   // [set][big, small][k8][register]
        auto product = [&](int it, int st, unsigned (&cur)[2][BK / 8][4],
                           const unsigned (&prev)[2][BK / 8][4]) {
            const float* as = a_stage(st);
            int bq;
            const float* bs = b_of(it, st, bq);
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float v = b_frag(bs, bq, e & 1, wrow_t + lg + 8 * (e & 1),
                                     8 * kk + lt + 4 * (e >> 1));
                    float rest;
                    tf32x3::split(v, rest);
                    cur[0][kk][e] = __float_as_uint(v);
                    cur[1][kk][e] = __float_as_uint(rest);
                }
            wg::fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
                const unsigned long long a_big = wg::desc(as + 8 * kk, 16, 512) | WG_SWIZZLE_64B;
                if constexpr (tf32x3::EXACT) {   // the small products first, as k8_product
                    wg::Tf32<BM>::mma(wacc, cur[1][kk], a_big);
                    wg::Tf32<BM>::mma(wacc, cur[0][kk],
                                      wg::desc(a_small(st) + 8 * kk, 16, 512) | WG_SWIZZLE_64B);
                }
                wg::Tf32<BM>::mma(wacc, cur[0][kk], a_big);
            }
            wg::commit();
            // The previous slice's products are done: its stage is free.  The halo path waits
            // for this slice's too: with them running, ptxas gave the next slice's copies the
            // registers they read (the SASS; wrong products on the H200, 2026-11-29).
            if constexpr (HALO)
                wg::wait<0>();
            else
                wg::wait<1>();
#pragma unroll
            for (int h = 0; h < (tf32x3::EXACT ? 2 : 1); ++h)
#pragma unroll
                for (int kk = 0; kk < BK / 8; ++kk)
                    asm volatile("" ::"r"(prev[h][kk][0]), "r"(prev[h][kk][1]), "r"(prev[h][kk][2]),
                                 "r"(prev[h][kk][3]));
        };
        tdcx::cp_async_ring<RING, true, RING - 2>(
            slices, [&](int it, int st) { load(q_begin + it * BK, st); },
            [&](int it, int st) {
                if constexpr (B_DESC)
                    product_ss(st);
                else if (it & 1)
                    product(it, st, frag[1], frag[0]);
                else
                    product(it, st, frag[0], frag[1]);
            },
            landed);
        wg::wait<0>();
    } else {
        tdcx::cp_async_ring<STAGES>(
            slices, [&](int it, int st) { load(q_begin + it * BK, st); },
            [&](int it, int st) {
                const float* as = a_stage(st);
                int bq;
                const float* bs = b_of(it, st, bq);
#pragma unroll
                for (int k8 = 0; k8 < BK; k8 += 8)
                    tf32x3::k8_product(
                        acc,
                        [&](int i, int e) {
                            const int m = wrow + i * 16 + lg + 8 * (e & 1);
                            return as[m * LDK + k8 + lt + 4 * (e >> 1)];
                        },
                        [&](int j, int h) {
                            return b_frag(bs, bq, j, wcol + j * 8 + lg, k8 + lt + 4 * h);
                        });
            });
    }

    // ---- epilogue.  An output's offset is its column's part (image, pixel; or the split's
    // partial tile) plus row * row_step, so the divisions are made once a column: a thread
    // holds 2 (wgmma) or 2 NT columns, and many rows of each.
    const bool split = splits > 1;
    const int plane = MODE == 0 ? OHW : DGRAD ? HW : P;
    const int Ptot = MODE == 3 ? N * HW : P;   // the partial tiles' width
    const size_t row_step = split ? Ptot : plane;
    auto column = [&](int pl) -> long long {   // -1: past the GEMM's columns
        int p = p0 + pl;
        if constexpr (HALO) {   // the tile's column -> its image, row and column
            const int span = hal.tr * PWo, i = pl / span, rem = pl - i * span, rr = rem / PWo;
            const int img = hal.img0 + i, row = hal.row0 + rr;
            if (i >= hal.ti || img >= N || row >= PHo) return -1;
            p = (img * PHo + row) * PWo + rem - rr * PWo;
        } else if (p >= P) {
            return -1;
        }
        if (MODE == 3) {   // the phase's pixel -> its place in the whole output
            const int im = p / PH, rem = p - im * PH, jj = rem / cols_ph.count;
            const int hh = ph_a - pad_h + stride_h * (rows_ph.first + jj);
            const int ww = ph_b - pad_w + stride_w * (cols_ph.first + rem - jj * cols_ph.count);
            p = im * HW + hh * W + ww;
        }
        if (split) return (long long)split_id * Mtot * Ptot + p;
        const int img_p = p / plane;
        return (long long)img_p * Mtot * plane + (p - img_p * plane);
    };
    // A thread's outputs of one column sit in rows m0 + r0 + d, d a compile-time step of the
    // fragment layout, at d * row_step past the column's first: a 32-bit product (it stays
    // inside one output tensor or partial tile, below 2^31 elements) on a pointer made once
    // a column, one compare and no 64-bit arithmetic a store.  Mode 3 (a phase's data
    // gradient) keeps a 64-bit offset a store: on the pointer form its kernels ran 2-4 %
    // slower (docs/notes/igemm_tf32x3.md).
    const int row_base = (DGRAD ? g * Cg : g * Kg) + m0;
    const unsigned rs32 = (unsigned)row_step;
    float* const dst0 = split ? partial : out;
    auto col_ptr = [&](const float* base, long long col, int r0) {
        return base + (size_t)col + (size_t)(row_base + r0) * row_step;
    };
    // (residual is read where the tile is not split, never by a weight gradient)
    auto col_res = [&](long long col, int r0) -> const float* {
        return MODE != 2 && !split && residual != nullptr ? col_ptr(residual, col, r0) : nullptr;
    };
    // A column's residual values are all loaded before its first store: the compiler may
    // not move a load above a store through another pointer, and load, add, store in turn
    // waits a memory latency an output (a data gradient's addend cost 25 % more than the
    // separate add it replaced).
    auto res_at = [&](const float* res, int r0, int d) {
        return res != nullptr && m0 + r0 + d < M ? __ldg(res + unsigned(d) * rs32) : 0.f;
    };
    // v: the accumulator; r: its residual value (res_at), added where has_res
    auto emit = [&](int r0, float* dst, bool has_res, int d, float v, float r, long long col) {
        if (m0 + r0 + d >= M) return;
        if (!split) {   // the epilogue (tc::conv_epilogue's order: bias, residual, ReLU)
            if (MODE == 0 && bias != nullptr) v += bias[row_base + r0 + d];
            if (has_res) v += r;
            if (MODE == 0 && relu) v = fmaxf(v, 0.f);
        }
        if constexpr (MODE == 3)
            (split ? partial : out)[(size_t)col + (size_t)(row_base + r0 + d) * row_step] = v;
        else
            dst[unsigned(d) * rs32] = v;
    };
    if constexpr (WG) {
        // wacc[4 j + 2 h + e]: D row wrow_t + lg + 8 h (a column of OUT), D column
        // 8 j + 2 lt + e (a row of OUT)
        const int r0 = 2 * lt;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long col = column(wrow_t + lg + 8 * h);
            if (col < 0) continue;
            float* dst = const_cast<float*>(col_ptr(dst0, col, r0));
            const float* res = col_res(col, r0);
            if constexpr (BM <= 64) {
                float rv[BM / 8][2];
#pragma unroll
                for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) rv[j][e] = res_at(res, r0, 8 * j + e);
#pragma unroll
                for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        emit(r0, dst, res != nullptr, 8 * j + e, wacc[4 * j + 2 * h + e],
                             rv[j][e], col);
            } else {   // 32 values a column: loaded one by one (their registers would cost
                       // the tf32 build its second block an SM)
#pragma unroll
                for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int d = 8 * j + e;
                        const bool in = res != nullptr && m0 + r0 + d < M;
                        emit(r0, dst, res != nullptr, d, wacc[4 * j + 2 * h + e],
                             in ? res[unsigned(d) * rs32] : 0.f, col);
                    }
            }
        }
    } else {
        // lane (g, t) holds rows g, g + 8 and columns 2t, 2t + 1 of each m16n8 tile
        const int r0 = wrow + lg;
#pragma unroll
        for (int j = 0; j < Sh::NT; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const long long col = column(wcol + j * 8 + 2 * lt + e);
                if (col < 0) continue;
                float* dst = const_cast<float*>(col_ptr(dst0, col, r0));
                const float* res = col_res(col, r0);
                float rv[Sh::MT][2];
#pragma unroll
                for (int i = 0; i < Sh::MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) rv[i][h] = res_at(res, r0, 16 * i + 8 * h);
#pragma unroll
                for (int i = 0; i < Sh::MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        emit(r0, dst, res != nullptr, 16 * i + 8 * h, acc[i][j][2 * h + e],
                             rv[i][h], col);
            }
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.igemm_tf32x3.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_CONV2D_IGEMM_TF32X3(...) template __global__ void conv2d_igemm_tf32x3<__VA_ARGS__>( \
    const float*, const float*, const float*, const float*, float*, float*, int, int, int, int, \
    int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int);
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 128, false) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 16, false) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 32, false) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 64, false) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 128, false) TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 16, false) TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 32, false) TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 64, false) TC_I_CONV2D_IGEMM_TF32X3(0, 1, 1, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 128, false) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 16, false) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 32, false) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 64, false) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 128, false) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 16, false) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 32, false) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 64, false) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 128, false) TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 16, false) TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 32, false) TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 64, false) TC_I_CONV2D_IGEMM_TF32X3(1, 1, 1, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 128, false) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 16, false) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 32, false) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 64, false) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 128, false) TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 16, false) TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 32, false) TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 64, false) TC_I_CONV2D_IGEMM_TF32X3(2, 0, 0, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 128, false) TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 16, false) TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 32, false) TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 64, false) TC_I_CONV2D_IGEMM_TF32X3(2, 1, 1, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 128, false) TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 16, false) TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 32, false) TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 64, false) TC_I_CONV2D_IGEMM_TF32X3(2, 3, 3, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 128, false) TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 16, false) TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 32, false) TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 64, false) TC_I_CONV2D_IGEMM_TF32X3(3, 0, 0, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 128, false) TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 16, false) TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 32, false) TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 64, false) TC_I_CONV2D_IGEMM_TF32X3(3, 1, 1, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 128, false) TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 128, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 16, false) TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 16, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 32, false) TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 32, true)
TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 64, false) TC_I_CONV2D_IGEMM_TF32X3(3, 3, 3, 64, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 128, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 128, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 16, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 16, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 32, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 32, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 64, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 0, 0, 64, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 128, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 128, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 16, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 16, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 32, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 32, true, true)
TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 64, false, true) TC_I_CONV2D_IGEMM_TF32X3(0, 3, 3, 64, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 128, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 128, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 16, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 16, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 32, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 32, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 64, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 0, 0, 64, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 128, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 128, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 16, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 16, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 32, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 32, true, true)
TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 64, false, true) TC_I_CONV2D_IGEMM_TF32X3(1, 3, 3, 64, true, true)
#undef TC_I_CONV2D_IGEMM_TF32X3
#endif
