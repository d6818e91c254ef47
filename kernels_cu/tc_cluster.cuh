// Helpers shared by the Tucker and 1x1 kernels: cp.async copies and tile staging,
// thread-block cluster barriers, distributed-shared-memory loads and push reductions
// (sm_90), fast division.
#pragma once

// Clusters and distributed shared memory need sm_90; older devices get the
// kernel without them, and the Python op then allows a cluster size of 1 only.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define TDCX_CLUSTER_DIMS(CL)
#define TDCX_SM90_ONLY(...) __trap()
#else
#define TDCX_CLUSTER_DIMS(CL) __cluster_dims__(1, 1, CL)
#define TDCX_SM90_ONLY(...) __VA_ARGS__
#endif

namespace tdcx {
// dst as a shared-memory address (__cvta_generic_to_shared): a loop that converts its
// stage's base once and adds constants gets them folded into the copy's address.
__device__ __forceinline__ void cp_async4(unsigned dst, const float* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async16(unsigned dst, const float* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
    cp_async4((unsigned)__cvta_generic_to_shared(dst), src, valid);
}
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
    cp_async16((unsigned)__cvta_generic_to_shared(dst), src, valid);
}
// Stage a rows x COLS tile with cp.async: row r of dst (at dst + r * DST, DST >= COLS
// a multiple of 4) from src + r * stride + col0, columns at or past `limit`
// zero-filled.  16-byte copies where rows start 16-byte aligned and a run of 4
// columns is all in or all out (stride and limit multiples of 4; col0 a multiple of
// COLS), else 4-byte ones.  Every thread of the block calls it.
template <int COLS, int DST = COLS>
__device__ __forceinline__ void stage_rows(float* dst, const float* src, int rows, int stride,
                                           int col0, int limit, int tid, int threads) {
    if (COLS % 4 == 0 && stride % 4 == 0 && limit % 4 == 0) {
        for (int i = tid; i < rows * (COLS / 4); i += threads) {
            const int r = i / (COLS / 4), q = 4 * (i % (COLS / 4));
            const bool ok = col0 + q < limit;
            cp_async16(dst + r * DST + q, ok ? src + (size_t)r * stride + col0 + q : src, ok);
        }
    } else {
        for (int i = tid; i < rows * COLS; i += threads) {
            const int r = i / COLS, q = i % COLS;
            const bool ok = col0 + q < limit;
            cp_async4(dst + r * DST + q, ok ? src + (size_t)r * stride + col0 + q : src, ok);
        }
    }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}
// A block's pipeline over `slices` reduction slices through a STAGES-deep ring of
// shared-memory stages: load(slice, stage) issues a slice's cp.async copies, AHEAD slices
// ahead of compute(slice, stage), which runs once its copies have landed and every warp is
// done with the stage they overwrite (AHEAD = STAGES - 2: compute may leave its reads of a
// stage in flight, asynchronous wgmma, until the next compute returns).  landed(slice, stage) runs in each thread
// once its own copies of the slice are in, before the barrier that publishes them (a
// thread may rewrite what it copied there).  ASYNC_PROXY: compute reads the stage through
// the async proxy (wgmma's shared-memory operands), so each thread fences its writes into
// that proxy before the barrier.  Every copy has landed when it returns.
template <int STAGES, bool ASYNC_PROXY = false, int AHEAD = STAGES - 1, typename Load,
          typename Compute, typename Landed>
__device__ __forceinline__ void cp_async_ring(int slices, Load load, Compute compute,
                                              Landed landed) {
    static_assert(AHEAD < STAGES, "AHEAD is at most STAGES - 1");
#pragma unroll
    for (int st = 0; st < AHEAD; ++st) {
        if (st < slices) load(st, st);
        cp_async_commit();   // empty groups keep the wait count uniform
    }
    for (int it = 0; it < slices; ++it) {
        cp_async_wait<AHEAD - 1>();
        landed(it, it % STAGES);
        if constexpr (ASYNC_PROXY)
            TDCX_SM90_ONLY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
        // slice `it` is in; every warp is done with slice it + AHEAD - STAGES's stage
        __syncthreads();
        if (it + AHEAD < slices) load(it + AHEAD, (it + AHEAD) % STAGES);
        cp_async_commit();
        compute(it, it % STAGES);
    }
    cp_async_wait<0>();
}
template <int STAGES, bool ASYNC_PROXY = false, int AHEAD = STAGES - 1, typename Load,
          typename Compute>
__device__ __forceinline__ void cp_async_ring(int slices, Load load, Compute compute) {
    cp_async_ring<STAGES, ASYNC_PROXY, AHEAD>(slices, load, compute, [](int, int) {});
}
// A cluster-wide barrier whose release makes this block's shared-memory writes
// visible to its peers.  The release compiles to a GPU-wide memory barrier
// (MEMBAR.ALL.GPU): 0.3-0.8 µs per barrier in the fig. 6 kernels on the H100, so
// reductions use PushReduce below instead.
__device__ __forceinline__ void cluster_sync() {
    TDCX_SM90_ONLY(asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                                "barrier.cluster.wait.acquire.aligned;\n" ::: "memory"));
}
// The barrier before exit, which only keeps this block's shared memory alive while
// peers read it: their reads have completed (their values were used) before they
// arrive, so nothing needs publishing and the arrive is relaxed.
__device__ __forceinline__ void cluster_exit_sync() {
    TDCX_SM90_ONLY(asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\t"
                                "barrier.cluster.wait.aligned;\n" ::: "memory"));
}
// The 16-byte-aligned float4 at `local`'s offset in cluster block `rank`.
__device__ __forceinline__ float4 ld_peer4(const float* local, unsigned rank) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    TDCX_SM90_ONLY(
        unsigned a = (unsigned)__cvta_generic_to_shared(local); unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(a), "r"(rank));
        asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory"));
    return v;
}
// n / d for a block-uniform run-time divisor 1 <= d < 2^16 and 0 <= n < 2^31
// (the round-up multiply-shift method): the staging loops divide every element
// index, and a hardware-free 32-bit division costs ~20 instructions.
struct FastDiv {
    unsigned d, m, l;
    __device__ explicit FastDiv(unsigned div) : d(div), l(0) {
        while ((1u << l) < d) ++l;
        // floor(2^32 (2^l - d) / d) + 1 by long division in two 16-bit digits
        // (2^l - d < d < 2^16): 32-bit divisions only, no 64-bit division call
        const unsigned a = (1u << l) - d, hi = (a << 16) / d, rem = (a << 16) % d;
        m = (hi << 16) + ((rem << 16) / d) + 1u;
    }
    // The same constants computed by the host (tensorconv.cuda.fast_div): m in bits
    // 0-31, l in 32-39, d in 40-55.  Saves the ~40 set-up instructions per divisor
    // that a run-time divisor costs each thread before its first copy.
    __device__ static FastDiv of(unsigned long long packed) {
        FastDiv f(1u);
        f.m = (unsigned)packed;
        f.l = (unsigned)(packed >> 32) & 0xFFu;
        f.d = (unsigned)(packed >> 40);
        return f;
    }
    __device__ __forceinline__ int div(int n) const {
        return (int)((__umulhi((unsigned)n, m) + (unsigned)n) >> l);
    }
};

// Cluster reduction by pushes.  The CL blocks of a cluster each hold partial sums
// of the same `total` outputs; block q owns outputs [q * share, (q + 1) * share)
// (share: ceil(total / CL) rounded up to a multiple of 4)
// and receives every block's partials of them into its own shared memory (CL
// slots of `share` floats, slot r from rank r) through st.async, whose bytes
// complete a transaction count on q's mbarrier.  The owner adds the slots in rank
// order (deterministic).  Nothing is fenced: the transaction count orders the
// data, where a release barrier at cluster scope costs a GPU-wide memory barrier.
// Use: begin() at kernel start (all threads), ready() before the first push(),
// wait() before reading the slots.
template <int CL>
struct PushReduce {
    float* slots;                // this block's CL x share floats
    FastDiv by_share;
    int share, rank;
    unsigned long long* bar;     // this block's mbarrier, after the slots

    // slots_: 8-byte aligned, CL * share floats, then the mbarrier; share_div: the
    // host's FastDiv constants of share.
    __device__ PushReduce(float* slots_, unsigned long long share_div)
        : slots(slots_), by_share(FastDiv::of(share_div)), share(by_share.d), rank(0) {
        bar = reinterpret_cast<unsigned long long*>(slots + ((CL * share + 1) & ~1));
    }

    // Outputs this block owns.
    __device__ __forceinline__ int count(int total) const {
        return max(0, min(share, total - rank * share));
    }
    __device__ __forceinline__ void begin(int total) {
        TDCX_SM90_ONLY(
            asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
            if (threadIdx.x == 0) {
                const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
                const unsigned bytes = 4u * CL * count(total);
                asm volatile("{\n\t.reg .b64 st;\n\t"
                             "mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
                             "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t"
                             "fence.mbarrier_init.release.cluster;\n\t}\n"
                             :: "r"(b), "r"(bytes) : "memory");
            }
            asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"));
    }
    // Every peer's mbarrier is initialised.
    __device__ __forceinline__ void ready() const {
        TDCX_SM90_ONLY(asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"));
    }
    // Send this block's partial sums of outputs idx .. idx + V - 1 to their owner:
    // idx a multiple of V (1, 2 or 4), which keeps the run inside one owner's range
    // (share is a multiple of 4) and the vector store aligned.  A warp's lanes should
    // send adjacent runs: each store instruction is one transaction per run.
    template <int V>
    __device__ __forceinline__ void push(int idx, const float* v) const {
        static_assert(V == 1 || V == 2 || V == 4, "push runs of 1, 2 or 4 floats");
        TDCX_SM90_ONLY(
            const unsigned q = (unsigned)by_share.div(idx);
            const int off = rank * share + idx - (int)q * share;
            const unsigned a = (unsigned)__cvta_generic_to_shared(slots + off);
            const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
            unsigned ra, rb;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(q));
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(rb) : "r"(b), "r"(q));
            if constexpr (V == 4)
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 "
                             "[%0], {%1, %2, %3, %4}, [%5];\n"
                             :: "r"(ra), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "r"(rb)
                             : "memory");
            else if constexpr (V == 2)
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 "
                             "[%0], {%1, %2}, [%3];\n"
                             :: "r"(ra), "f"(v[0]), "f"(v[1]), "r"(rb) : "memory");
            else
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 "
                             "[%0], %1, [%2];\n" :: "r"(ra), "f"(v[0]), "r"(rb) : "memory"));
    }
    // All CL slots of this block's outputs have arrived.
    __device__ __forceinline__ void wait() const {
        TDCX_SM90_ONLY(
            const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
            asm volatile("{\n\t.reg .pred done;\n"
                         "WAIT_PUSHED:\n\t"
                         "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n\t"
                         "@!done bra WAIT_PUSHED;\n\t}\n" :: "r"(b) : "memory"));
    }
    // The sum over the cluster of owned output e (0 <= e < count), in rank order.
    __device__ __forceinline__ float sum(int e) const {
        float v = 0.f;
#pragma unroll
        for (int r = 0; r < CL; ++r) v += slots[r * share + e];
        return v;
    }
};
}  // namespace tdcx
