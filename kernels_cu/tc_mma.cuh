// fp32 products on the tensor cores (sm_80+): each fp32 operand is split into a tf32
// "big" part and its remainder (whose low bits the tensor core drops), and the three
// products big*big + big*small + small*big are accumulated in fp32.  The discarded
// small*small term is ~2^-22 of the product, so results match fp32 (<= 1e-5
// relative), not tf32 (~3e-4).  Used by the tf32x3 core kernel and the chained 1x1s.
//
// Compiled with -DTC_MMA_PASSES=1 (tensorconv.precision "tf32") the same kernels take
// one pass instead: operands rounded to the nearest tf32 and big*big alone, the
// accuracy of cuDNN's TF32 mode, for a third of the mma's and no remainders to make,
// store or load.  Kernels skip the remainders' work under `if constexpr (EXACT)`.
#pragma once

#ifndef TC_MMA_PASSES
#define TC_MMA_PASSES 3
#endif
static_assert(TC_MMA_PASSES == 1 || TC_MMA_PASSES == 3, "TC_MMA_PASSES is 3 (fp32) or 1 (tf32)");

namespace tf32x3 {
constexpr bool EXACT = TC_MMA_PASSES == 3;  // false: one tf32 pass, no remainders

// In place: v -> its leading 11 significant bits (a tf32 value); small <- the
// rest (0 for inf and NaN, which the big part carries).  One pass: v rounded to the
// nearest tf32 (ties away from zero, as tensorconv.ops.tucker_tf32x3.round_tf32), small 0.
__device__ __forceinline__ void split(float& v, float& small) {
    if constexpr (EXACT) {
        const float big = __uint_as_float(__float_as_uint(v) & 0xFFFFE000u);
        small = isfinite(v) ? v - big : 0.f;
        v = big;
    } else {
        unsigned r;
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
        v = __uint_as_float(r);
        small = 0.f;
    }
}
// d += a * b on one m16n8k8 tile (a: 4 tf32 of the 16 x 8 A tile, b: 2 of the 8 x 8 B tile).
// Not volatile: a pure function of its operands, which the compiler may schedule freely.
// (Issuing the two m16n8k4 halves separately was tried: no faster, and twice the error.)
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// A warp's MT x NT m16n8 accumulator tiles set to zero.
template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}
// One k step of 8 of a warp's MT x NT m16n8 tiles: acc[i][j] += A_i B_j.  a(i, e) is
// register e of m tile i's A fragment (lane (g, t): row g + 8 (e & 1), column t + 4 (e >> 1)),
// b(j, h) register h of n tile j's B fragment (row t + 4 h, column g), read from wherever
// the caller staged them; each value is split (or rounded) as it is read: storing both
// parts would double the shared memory and the copies.  Pass by pass across the n tiles,
// so consecutive mma's write different accumulators (a tile's three passes back to back
// would wait on each other).
template <int MT, int NT, typename AFrag, typename BFrag>
__device__ __forceinline__ void k8_product(float (&acc)[MT][NT][4], AFrag a, BFrag b) {
    auto frag = [](float v, unsigned& big, unsigned& small) {
        float sm;
        split(v, sm);
        big = __float_as_uint(v);
        small = __float_as_uint(sm);
    };
    unsigned bb[NT][2], bsm[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) frag(b(j, h), bb[j][h], bsm[j][h]);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        unsigned ab[4], asm_[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) frag(a(i, e), ab[e], asm_[e]);
        if constexpr (EXACT) {
#pragma unroll
            for (int j = 0; j < NT; ++j) mma(acc[i][j], asm_, bb[j][0], bb[j][1]);
#pragma unroll
            for (int j = 0; j < NT; ++j) mma(acc[i][j], ab, bsm[j][0], bsm[j][1]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) mma(acc[i][j], ab, bb[j][0], bb[j][1]);
    }
}
}  // namespace tf32x3
