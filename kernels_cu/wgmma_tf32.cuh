// wgmma (sm_90a) with tf32 operands: D[64 x N] += A[64 x 8] B[8 x N] for one warpgroup (four
// consecutive warps from a warp index divisible by 4), A from registers or (the second
// overload) from shared memory, B from shared memory, through matrix descriptors, the
// accumulators in fp32 registers.
//
// A fragment of warp w (rows 16 w .. 16 w + 15), lane (g, t) = (lane / 4, lane % 4): a[0] row g,
// column t; a[1] row g + 8, column t; a[2] row g, column t + 4; a[3] row g + 8, column t + 4
// (the layout of mma.sync m16n8k8's A).  Accumulators: d[4 j + e] is row g + 8 (e >> 1),
// column 8 j + 2 t + (e & 1) of the warp's 16 rows.  tf32 operands in shared memory must be
// K-major (tf32 has no transposed form): see wg::desc.  From shared memory, the tensor cores
// read an fp32 word's tf32 bits (its low 13 mantissa bits dropped, not rounded).
//
// A wgmma reads its A registers (and its accumulators) until a wait covers its group, and
// neither the compiler nor ptxas keeps them from being rewritten before that: a caller that
// leaves products running (wait<1>) fills the next A fragment into other registers and keeps
// the running one's alive past the wait (igemm_tf32x3.cu alternates two sets).
//
// Only sm_90a has these instructions: outside __CUDA_ARCH_FEAT_SM90_ALL every call traps,
// and the ops never launch such a kernel there (igemm_tf32x3.has_wgmma); the ops build them
// for the sm_90a target (tensorconv.cuda.kernel_ref(..., arch_specific=True)).
#pragma once

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_SM90A(...) __VA_ARGS__
#else
#define WG_SM90A(...) __trap();
#endif

namespace wg {
// A shared-memory matrix descriptor for K-major core matrices (8 rows x 16 bytes each, rows
// 16 bytes apart) without swizzling: `lbo` bytes between core matrices adjacent along K,
// `sbo` bytes between those adjacent along M/N.  Addresses and offsets in 16-byte units.
__device__ __forceinline__ unsigned long long desc(const void* smem, unsigned lbo, unsigned sbo) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    return (unsigned long long)((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
           | ((unsigned long long)(sbo >> 4) << 32);
}
// Orders this thread's register writes (accumulators, A fragments) before the warpgroup's
// next wgmma; every warp of the warpgroup runs it.
__device__ __forceinline__ void fence() {
    WG_SM90A(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"));
}
__device__ __forceinline__ void commit() {
    WG_SM90A(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
}
// Waits until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wait() {
    WG_SM90A(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"));
}
// Makes this thread's generic-proxy writes to shared memory (st.shared, cp.async) visible
// to the async proxy that wgmma reads B through; before the barrier that publishes them.
__device__ __forceinline__ void fence_async_smem() {
    WG_SM90A(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
}

template <int N>
struct Tf32;   // mma(d, a, b): d += A B on a 64 x N x 8 tile, N in {8, 16, 32, 64, 128}

template <>
struct Tf32<8> {
    __device__ __forceinline__ static void mma(float (&d)[4], const unsigned (&a)[4], unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, %8, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)));
    }
    // A from shared memory too (K-major, `a` its descriptor, as b's)
    __device__ __forceinline__ static void mma(float (&d)[4], unsigned long long a, unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3}, "
            "%4, %5, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(a), "l"(b)));
    }
};

template <>
struct Tf32<16> {
    __device__ __forceinline__ static void mma(float (&d)[8], const unsigned (&a)[4], unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, "
            "{%8, %9, %10, %11}, %12, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)));
    }
    // A from shared memory too (K-major, `a` its descriptor, as b's)
    __device__ __forceinline__ static void mma(float (&d)[8], unsigned long long a, unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, "
            "%8, %9, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7])
            : "l"(a), "l"(b)));
    }
};

template <>
struct Tf32<32> {
    __device__ __forceinline__ static void mma(float (&d)[16], const unsigned (&a)[4], unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
            "{%16, %17, %18, %19}, %20, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
              "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)));
    }
    // A from shared memory too (K-major, `a` its descriptor, as b's)
    __device__ __forceinline__ static void mma(float (&d)[16], unsigned long long a, unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
            "%16, %17, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
              "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "l"(a), "l"(b)));
    }
};

template <>
struct Tf32<64> {
    __device__ __forceinline__ static void mma(float (&d)[32], const unsigned (&a)[4], unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "{%32, %33, %34, %35}, %36, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
              "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
              "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
              "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)));
    }
    // A from shared memory too (K-major, `a` its descriptor, as b's)
    __device__ __forceinline__ static void mma(float (&d)[32], unsigned long long a, unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "%32, %33, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
              "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
              "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
              "+f"(d[30]), "+f"(d[31])
            : "l"(a), "l"(b)));
    }
};

template <>
struct Tf32<128> {
    __device__ __forceinline__ static void mma(float (&d)[64], const unsigned (&a)[4], unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "{%64, %65, %66, %67}, %68, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
              "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
              "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
              "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
              "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
              "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
              "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
              "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)));
    }
    // A from shared memory too (K-major, `a` its descriptor, as b's)
    __device__ __forceinline__ static void mma(float (&d)[64], unsigned long long a, unsigned long long b) {
        WG_SM90A(asm volatile(
            "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "%64, %65, 1, 1, 1;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
              "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
              "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
              "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
              "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
              "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
              "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
              "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
              "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(a), "l"(b)));
    }
};

}  // namespace wg
