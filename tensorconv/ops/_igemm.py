"""The GEMM view of a convolution that both implicit-GEMM kernels share
(``direct_conv.cu``'s fp32 ``conv2d_igemm`` and ``igemm_tf32x3.cu``'s tensor-core one):
the sizes of each mode and the split reduction that sums their partial tiles.

=====  ==================  ===============  ==============  ===============
mode   computes            M rows           P columns       Q reduction
=====  ==================  ===============  ==============  ===============
0      y = conv(x, w)      k of the group   (n, oh, ow)     (c, r, s)
1      gx = dgrad(gy, w)   c of the group   (n, h, w)       (k, r, s)
2      gw = wgrad(x, gy)   k of the group   (c, r, s)       (n, oh, ow)
=====  ==================  ===============  ==============  ===============
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import NULL, cdiv

MODES = (0, 1, 2)
MODE_NAMES = {0: "forward", 1: "data gradient", 2: "weight gradient"}
REDUCE_FILE, REDUCE_NAME = "direct_conv.cu", "conv2d_splitk_reduce"
SHARE_LONG = 64    # from this many splits over few values, four lanes share each value
SHARE_SPLITS = 16  # igemm::SHARE_SPLITS: from this many splits a block's warps share each value's
MAX_SPLITS = 256   # a thin weight gradient (a 3-channel stem: 27 columns) fills the GPU so


def gemm_sizes(geom: ConvGeometry, mode: int) -> tuple[int, int, int]:
    """(M, P, Q) of the per-group GEMM that ``mode`` computes."""
    cg, kg, rs = geom.c // geom.groups, geom.k // geom.groups, geom.r * geom.s
    pixels_out, pixels_in = geom.n * geom.oh * geom.ow, geom.n * geom.h * geom.w
    return {0: (kg, pixels_out, cg * rs), 1: (cg, pixels_in, kg * rs),
            2: (kg, cg * rs, pixels_out)}[mode]


def phase_sizes(geom: ConvGeometry) -> list[tuple[int, int]]:
    """(input pixels, taps) of each phase of a strided data gradient run by phase
    (``igemm_tf32x3``'s mode 3), phase (a, b) at ``a * stride_w + b``: the input rows
    h = a - pad + stride * j take the filter rows a, a + stride, ... (so for columns), as
    ``igemm_tf32x3.cu``'s ``Phase`` counts them; a phase no tap reaches has 0 taps."""
    def axis(a: int, pad: int, stride: int, n: int, taps: int) -> tuple[int, int]:
        first = cdiv(pad - a, stride) if pad > a else 0
        span = n - 1 - a + pad
        count = max(0, span // stride - first + 1) if span >= 0 else 0
        return count, (cdiv(taps - a, stride) if a < taps else 0)
    (sh, sw), (ph, pw) = geom.stride, geom.padding
    rows = [axis(a, ph, sh, geom.h, geom.r) for a in range(sh)]
    cols = [axis(b, pw, sw, geom.w, geom.s) for b in range(sw)]
    return [(rc * cc, rt * ct) for rc, rt in rows for cc, ct in cols]


def geometry_ints(geom: ConvGeometry) -> tuple:
    """The int32 arguments the convolution kernels of ``direct_conv.cu`` and
    ``igemm_tf32x3.cu`` take first: n, c, h, w, k, oh, ow, r, s, stride, padding and
    dilation (each h then w), groups (the direct kernel's start at c)."""
    return tuple(np.int32(v) for v in (geom.n, geom.c, geom.h, geom.w, geom.k, geom.oh,
                                       geom.ow, geom.r, geom.s, *geom.stride, *geom.padding,
                                       *geom.dilation, geom.groups))


def out_rows(geom: ConvGeometry, mode: int) -> int:
    """Rows of the whole output over all groups (the partial tiles' height)."""
    return geom.c if mode == 1 else geom.k


def plane(geom: ConvGeometry, mode: int) -> int:
    """Columns per output row block: the output's plane (modes 0, 1) or all of P (mode 2),
    so that column p of row r lands at ``((p // plane) * rows + r) * plane + p % plane``."""
    return {0: geom.oh * geom.ow, 1: geom.h * geom.w, 2: gemm_sizes(geom, 2)[1]}[mode]


def check_splits(splits) -> None:
    """``ValueError`` unless ``splits`` is None or an int in 1..:data:`MAX_SPLITS`."""
    if splits is not None and (not isinstance(splits, (int, np.integer))
                               or not 1 <= splits <= MAX_SPLITS):
        raise ValueError(f"splits must be an int in 1..{MAX_SPLITS}, got {splits!r}")


def split_depth(q: int, bk: int, splits: int) -> tuple[int, int]:
    """(reduction length per split, splits) for ``splits`` requested over ``q`` in ``bk``
    steps: each split a whole number of steps, and no split left empty."""
    steps = cdiv(q, bk)
    per_split = cdiv(steps, splits) * bk
    return per_split, cdiv(steps * bk, per_split)


def reduce_ref() -> cuda.KernelRef:
    """The split reduction's kernel (``direct_conv.cu``)."""
    return cuda.kernel_ref(REDUCE_FILE, REDUCE_NAME)


@functools.lru_cache(maxsize=4096)
def reduce_config(geom: ConvGeometry, mode: int, splits: int, relu: bool, sm_count: int):
    """(kernel, grid, integer arguments) of the reduction of ``splits`` partial tiles."""
    i32 = np.int32
    rows, p = out_rows(geom, mode), gemm_sizes(geom, mode)[1]
    return (cuda.load(reduce_ref()), (reduce_blocks(rows * p, splits, sm_count),),
            (i32(splits), i32(rows), i32(p), i32(plane(geom, mode)), i32(relu)))


def reduce_blocks(total: int, splits: int, sm_count: int) -> int:
    """256-thread blocks of the split reduction over ``total`` values: one value a thread
    below :data:`SHARE_SPLITS` splits; else a block's warps share each value's splits, 32
    values a block, or 8 (four lanes a value: more blocks than 32-value blocks would need
    tell the kernel so) where 32-value blocks would not give each SM two and the splits
    are :data:`SHARE_LONG` or more (a thin weight gradient's long streams)."""
    if splits < SHARE_SPLITS:
        return min(cdiv(total, 256), 8 * sm_count)
    if splits >= SHARE_LONG and cdiv(total, 32) < 2 * sm_count:
        return cdiv(total, 8)
    return min(cdiv(total, 32), 8 * sm_count)


def reduce_flat(partial, out, splits: int, size: int, sm_count: int) -> None:
    """``out`` = the sum of ``splits`` partial arrays of ``size`` floats each, laid end to
    end in ``partial``, in split order (deterministic), no epilogue."""
    kernel, grid, ints = reduce_flat_config(splits, size, sm_count)
    kernel(grid, (256, 1, 1), (partial, NULL, NULL, out) + ints)


@functools.lru_cache(maxsize=4096)
def reduce_flat_config(splits: int, size: int, sm_count: int):
    """(kernel, grid, integer arguments) of :func:`reduce_flat`, for a caller that caches
    its launches; the pointer arguments are (partial, NULL, NULL, out)."""
    i32 = np.int32
    return (cuda.load(reduce_ref()), (reduce_blocks(size, splits, sm_count), 1, 1),
            (i32(splits), i32(1), i32(size), i32(size), i32(0)))


def workspace_floats(geom: ConvGeometry, mode: int, splits: int) -> int:
    """Floats of the partial tiles ``splits`` > 1 needs (0 for one split)."""
    return splits * out_rows(geom, mode) * gemm_sizes(geom, mode)[1] if splits > 1 else 0


def sm_count() -> int:
    """The current device's SM count (the split heuristics' target)."""
    return backend.device_facts().sm_count
