// What the kernels unrolled for a layer's weights share (sparse_unrolled.cu and
// sparse_unrolled_direct.cu; tests/host/ run them on the CPU with their own definitions).
#pragma once

#ifndef SU_HOST_EMULATION
// acc += v * w, w the float whose bits are the eight hex digits `bits` (an immediate), as
// inline PTX: C++ `fmaf` with a float literal costs NVRTC's front end more time a product
#define SU_FMA(acc, v, bits) asm("fma.rn.f32 %0, %1, 0f" #bits ", %0;" : "+f"(acc) : "f"(v))

// A thread's ring of cp.async slots (sparse_unrolled_direct.cu's ring tiles): su_ring_t is
// the thread's first slot as a shared-memory address; SU_RING_CP copies the word at the
// global `src` into the slot `off` bytes on, SU_RING_LD reads one back.  Inline PTX, so that
// the slot's offset is an immediate and a copy holds no register while in flight.
typedef unsigned su_ring_t;
__device__ __forceinline__ su_ring_t su_ring_addr(float* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
#define SU_RING_CP(ring, off, src) asm volatile( \
    "cp.async.ca.shared.global [%0], [%1], 4;" :: "r"((ring) + (off)), "l"(src) : "memory")
#define SU_RING_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define SU_RING_WAIT(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")
#define SU_RING_LD(v, ring, off) asm volatile( \
    "ld.shared.f32 %0, [%1];" : "=f"(v) : "r"((ring) + (off)) : "memory")
#endif
