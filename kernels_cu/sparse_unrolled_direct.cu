// A sparse convolution unrolled for one layer's weights (NCHW, fp32, any stride and
// padding), nothing staged: each thread reads its pixel's input words straight through the
// L1 at immediate offsets and applies the nonzeros as fma's with immediate weights.  Written
// for 1x1 filters; wider filters at stride 2 and more run too (see the last paragraph).
//
// A 1x1 filter reads one input position a pixel, the same for every channel, so a word
// serves only the rows with a nonzero in its channel: staging it in shared memory (the
// tiled kernel, sparse_unrolled.cu) buys no reuse across taps, and walking a row's
// (weight, offset) table at run time (sparse_csr_pointwise in sparse_conv.cu) costs a table
// read and an address per multiply-add.  Here the host
// (tensorconv/ops/sparse_unrolled_direct_body.py) writes the body,
// SPARSE_UNROLLED_DIRECT_BODY, for a given kernel matrix: a block owns RB
// output rows ("a group") and T consecutive output pixels, one a thread; for every column
// of the kernel matrix (an input channel and tap) that any row of the group uses, the thread
// loads its word once and adds it into each such row's sum, kept in a register.
//
// At stride 2 a staged stage holds about four input words a pixel and channel, copied one
// by one (sparse_unrolled.cu at stride 2 measured 1.9-3.4x slower than the tiled kernel);
// here each of a filter's taps is one load through the L1 at an immediate offset, in the
// padding a predicated one, with no stage, index arithmetic or barrier.
//
// The body defines namespace pu: the layer's constants and group<EPI>(g, xp, rok, cok, out),
// which calls the function holding group g's code (a switch; each group a function of its
// own, not inlined, so the front end's time grows with the body's length, not faster: one
// function holding every group took nvcc minutes on a 512 x 256 layer).  A group function
// writes its rows through the epilogue EPI names at compile time (bit 0: accumulate onto
// what dense blocks wrote, 1: bias, 2: residual, 3: ReLU): a thread writes RB rows, and
// run-time flags would cost their tests on every row.  Kernels are compiled per layer and
// epilogue (CuPy caches them on disk by the body's path, which names its content's hash).
//
// A block may hold GB groups, each on TP = T / GB threads (whole warps) over the block's TP
// pixels: the groups then load the same words, which meet in the SM's L1; a group in a
// block of its own reads the layer's input from L2 once more for every group.
//
// A ring tile (RING > 0, 1x1 filters inside the image) copies a group's channels with
// cp.async into RING slots of shared memory a thread (slot i at word i * T from the thread's
// first), RING / 8 channels a commit group, seven groups ahead of the products: the straight-
// line loads keep about nine words in flight a thread, each holding a register until used,
// and on the 1x1 layers the kernel waits on those loads from L2.
//
// A split tile (KS > 1, one group a block, no ring) runs each pixel on KS threads, one in
// each of KS consecutive sets of TP: set q runs the group's function for its share q of
// the columns (a function a share), the later sets write their sums to shared memory and
// arrive at a named barrier, the first waits there and adds them before the epilogue.  The
// thread's chain of loads is KS times shorter, the warps a layer runs KS times more: a
// layer of few pixels a group waits on its loads with few warps an SM to hide them.
#include "tc_common.cuh"
#include "sparse_unrolled.cuh"   // SU_FMA

namespace pu {
// Where a thread writes: output (image, 0, pixel) at `at`, the epilogue's operands.
struct Out {
    float* __restrict__ y;
    const float* __restrict__ bias;
    const float* __restrict__ residual;
    size_t at;
};
enum : int { ACCUMULATE = 1, BIAS = 2, RESIDUAL = 4, RELU = 8 };
// Row k's sum into the output (defined below, once the body has set OH and OW).
template <int EPI> __device__ __forceinline__ void store(const Out& o, int k, float v);
}  // namespace pu
extern __shared__ float pu_ring[];   // RING * T words: the threads' rings, slot-major;
                                     // or the split's later shares' sums ((KS-1) * RB * TP)
#ifndef SU_HOST_EMULATION
// A split group's later shares arrive at barrier 1 once their sums are written, the first
// share waits there (the block's T threads in all; barrier 0 is __syncthreads').  Not the
// .aligned forms (bar.sync / bar.arrive): in the last pixel block a warp's lanes past the
// last pixel reach the barrier at the kernel's top and the others in the group's function,
// and an aligned barrier reached from two places in one warp hangs the block.
#define PU_BAR_ARRIVE() asm volatile("barrier.arrive 1, %0;" :: "n"(pu::T) : "memory")
#define PU_BAR_SYNC() asm volatile("barrier.sync 1, %0;" :: "n"(pu::T) : "memory")
#endif

#ifndef SPARSE_UNROLLED_DIRECT_BODY
#define SPARSE_UNROLLED_DIRECT_BODY "sparse_unrolled_direct_example.inc"
#endif
#include SPARSE_UNROLLED_DIRECT_BODY

namespace pu {
// Row k's sum v (k a constant in the generated code), through the epilogue: the sums'
// order of tc::conv_epilogue after the blocks' sum.
template <int EPI> __device__ __forceinline__ void store(const Out& o, int k, float v) {
    const size_t at = o.at + (size_t)k * (OH * OW);
    if constexpr ((EPI & ACCUMULATE) != 0) v += o.y[at];
    if constexpr ((EPI & BIAS) != 0) v += o.bias[k];
    if constexpr ((EPI & RESIDUAL) != 0) v += o.residual[at];
    if constexpr ((EPI & RELU) != 0) v = fmaxf(v, 0.f);
    o.y[at] = v;
}
}  // namespace pu

// Grid: (pixel blocks of TP, blocks of GB groups), or the two swapped (GROUPS_FIRST).  Block:
// T threads, GB groups of TP (or KS shares of one group's columns), one output pixel a thread.  EPI: the epilogue (pu::ACCUMULATE |
// BIAS | RESIDUAL | RELU); bias and residual read only where named.
template <int EPI>
__global__ void __launch_bounds__(pu::T) sparse_unrolled_direct(
    const float* __restrict__ x, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ y, int n)
{
    tc::wait_prior_grids();
    using namespace pu;
    static_assert(T == GB * KS * TP && (GB * KS == 1 || TP % 32 == 0),
                  "a group (a share) takes whole warps");
    static_assert(KS == 1 || (GB == 1 && RING == 0), "a split tile: one group, no ring");
    const int sub = GB == 1 ? 0 : (int)threadIdx.x / TP;
    const int part = KS == 1 ? 0 : (int)threadIdx.x / TP;     // warp-uniform
    const int tx = (int)threadIdx.x - (sub + part) * TP;      // one of the two is 0
    // GROUPS_FIRST: the groups of one pixel block are consecutive blocks, so they run side
    // by side and the input words the first reads from DRAM the others find in L2
    const int pblock = GROUPS_FIRST ? blockIdx.y : blockIdx.x;
    const int gblock = GROUPS_FIRST ? blockIdx.x : blockIdx.y;
    const int p = pblock * TP + tx;
    const int grp = gblock * GB + sub;
    if (p >= n * (OH * OW) || grp >= GROUPS) {
        // past the last pixel: a split block's barrier still counts every thread
        if constexpr (KS > 1) {
            if (part == 0) PU_BAR_SYNC(); else PU_BAR_ARRIVE();
        }
        return;
    }
    const int nn = p / (OH * OW), rem = p - nn * (OH * OW);
    const int oy = rem / OW, ox = rem - oy * OW;
    const int iy = oy * SH - PH, ix = ox * SW - PW;
    // which of the filter's rows and columns land inside the image (a tap outside reads
    // nothing: the padding's zeros); the body loads tap (r, s) only where both bits are set
    unsigned rok = 0, cok = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) rok |= (unsigned)((unsigned)(iy + r) < (unsigned)H) << r;
#pragma unroll
    for (int s = 0; s < S; ++s) cok |= (unsigned)((unsigned)(ix + s) < (unsigned)W) << s;
    // the window's corner: outside the image where the window starts in the padding, read
    // only at the taps inside
    const float* xp = x + (size_t)nn * C * H * W + ((long long)iy * W + ix);
    su_ring_t sr{};
    if constexpr (RING > 0) sr = su_ring_addr(pu_ring + threadIdx.x);
    group<EPI>(grp * KS + part, xp, rok, cok, sr, tx,
               Out{y, bias, residual, (size_t)nn * K * (OH * OW) + rem});
}

#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_SPARSE_UNROLLED_DIRECT(...) template __global__ void sparse_unrolled_direct<__VA_ARGS__>( \
    const float*, const float*, const float*, float*, int);
TC_I_SPARSE_UNROLLED_DIRECT(0) TC_I_SPARSE_UNROLLED_DIRECT(1) TC_I_SPARSE_UNROLLED_DIRECT(2)
TC_I_SPARSE_UNROLLED_DIRECT(3) TC_I_SPARSE_UNROLLED_DIRECT(4) TC_I_SPARSE_UNROLLED_DIRECT(5)
TC_I_SPARSE_UNROLLED_DIRECT(6) TC_I_SPARSE_UNROLLED_DIRECT(7) TC_I_SPARSE_UNROLLED_DIRECT(8)
TC_I_SPARSE_UNROLLED_DIRECT(9) TC_I_SPARSE_UNROLLED_DIRECT(10) TC_I_SPARSE_UNROLLED_DIRECT(11)
TC_I_SPARSE_UNROLLED_DIRECT(12) TC_I_SPARSE_UNROLLED_DIRECT(13) TC_I_SPARSE_UNROLLED_DIRECT(14)
TC_I_SPARSE_UNROLLED_DIRECT(15)
#undef TC_I_SPARSE_UNROLLED_DIRECT
#endif
