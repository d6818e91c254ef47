// Helpers shared by the Tucker kernels: cp.async copies, the thread-block
// cluster barrier and distributed-shared-memory loads (sm_90), fast division.
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
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}
__device__ __forceinline__ void cluster_sync() {
    TDCX_SM90_ONLY(asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                                "barrier.cluster.wait.acquire.aligned;\n" ::: "memory"));
}
// The float at `local`'s offset in the shared memory of cluster block `rank`.
__device__ __forceinline__ float ld_peer(const float* local, unsigned rank) {
    float v = 0.f;
    TDCX_SM90_ONLY(
        unsigned a = (unsigned)__cvta_generic_to_shared(local); unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(a), "r"(rank));
        asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory"));
    return v;
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
    __device__ __forceinline__ int div(int n) const {
        return (int)((__umulhi((unsigned)n, m) + (unsigned)n) >> l);
    }
};
}  // namespace tdcx
