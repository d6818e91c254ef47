// What the kernels unrolled for a layer's weights share (sparse_unrolled.cu and
// sparse_unrolled_direct.cu; tests/host/ run them on the CPU with their own definitions).
#pragma once

#ifndef SU_HOST_EMULATION
// acc += v * w, w the float whose bits are the eight hex digits `bits` (an immediate), as
// inline PTX: C++ `fmaf` with a float literal costs NVRTC's front end more time a product
#define SU_FMA(acc, v, bits) asm("fma.rn.f32 %0, %1, 0f" #bits ", %0;" : "+f"(acc) : "f"(v))
#endif
