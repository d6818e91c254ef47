// Runs kernels_cu/sparse_unrolled.cu on the CPU for tests/test_sparse_unrolled.py: each CUDA
// thread of a block is a host thread, __syncthreads a barrier, shared memory one array,
// cp.async a plain copy (the waits then have nothing to wait for).
#pragma once
#include <pthread.h>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(x)
#define __restrict__
#define __align__(x)
#define __shared__
#define SU_HOST_EMULATION

struct SuDim3 { int x, y, z; };
inline thread_local SuDim3 threadIdx;
inline SuDim3 blockIdx;
inline pthread_barrier_t su_barrier;
inline void __syncthreads() { pthread_barrier_wait(&su_barrier); }
// a split group's named barrier (sparse_unrolled_direct.cu): arriving waits here too
#define PU_BAR_ARRIVE() __syncthreads()
#define PU_BAR_SYNC() __syncthreads()
float __shfl_xor_sync(unsigned, float, int);   // named in tc_common.cuh, never called here

inline float su_bits(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
#define SU_FMA(acc, v, bits) acc = std::fma(v, su_bits(0x##bits##u), acc)
// A ring's copy lands at once (the waits have nothing to wait for): a slot reused before its
// word is read shows as a wrong sum (tests/test_sparse_unrolled_direct.py checks the waits).
typedef char* su_ring_t;
inline su_ring_t su_ring_addr(float* p) { return reinterpret_cast<char*>(p); }
#define SU_RING_CP(ring, off, src) (*reinterpret_cast<float*>((ring) + (off)) = *(src))
#define SU_RING_COMMIT()
#define SU_RING_WAIT(n)
#define SU_RING_LD(v, ring, off) (v = *reinterpret_cast<const float*>((ring) + (off)))
namespace tdcx {
inline void cp_async4(float* d, const float* s, bool v) { *d = v ? *s : 0.f; }
inline void cp_async16(float* d, const float* s, bool v) {
    for (int i = 0; i < 4; ++i) d[i] = v ? s[i] : 0.f;
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
}  // namespace tdcx
