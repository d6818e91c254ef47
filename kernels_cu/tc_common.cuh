// Shared device helpers for every tensorconv kernel family.
#pragma once

namespace tc {

// Integer ceil-division, used for tile counts that must cover a ragged edge.
__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace tc
