// fp32 products on the tensor cores (sm_80+): each fp32 operand is split into a tf32
// "big" part and its remainder (whose low bits the tensor core drops), and the three
// products big*big + big*small + small*big are accumulated in fp32.  The discarded
// small*small term is ~2^-22 of the product, so results match fp32 (<= 1e-5
// relative), not tf32 (~3e-4).  Used by the tf32x3 core kernel and the chained 1x1s.
#pragma once

namespace tf32x3 {
// In place: v -> its leading 11 significant bits (a tf32 value); small <- the
// rest (0 for inf and NaN, which the big part carries).
__device__ __forceinline__ void split(float& v, float& small) {
    const float big = __uint_as_float(__float_as_uint(v) & 0xFFFFE000u);
    small = isfinite(v) ? v - big : 0.f;
    v = big;
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
}  // namespace tf32x3
