"""The weight gradient of a 3x3 stride-1 convolution by Winograd's F(2x2, 3x3)
(``kernels_cu/winograd_wgrad.cu``).

The forward's 2x2 output tile is ``A^T [(G w G^T) . (B^T x_t B)] A``; differentiated in the
filters, ``gw = G^T (sum_t (A gy_t A^T) . (B^T x_t B)) G``.  Point by point of the 4x4
transformed tile the sum over tiles is a GEMM, (K x T) by (T x C) with T = N x TH x TW
tiles: 16 GEMMs with 2.25x fewer multiplies than the 9 taps of the direct weight gradient.
One launch transforms x's patches (``U``), one gy's tiles (``V``), the 16 GEMMs run as one
grouped 1x1 weight gradient on :mod:`~tensorconv.ops.igemm_tf32x3` (3xTF32: fp32 accuracy;
one tf32 pass under ``precision.using("tf32")``), and one launch takes the 16 points back
to 3x3 filters.  ``U`` and ``V`` are four times x's and gy's size, so the transforms cost
memory traffic that only deep layers' GEMMs repay: it runs as
``ops.conv2d_backward_weight(..., algorithm="winograd")``, the default where
:func:`tensorconv.ops.conv_algorithm.choose_algorithm` finds it faster (measured,
``docs/notes/training_speed.md``).
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend, cuda, precision
from tensorconv.checks import ConvGeometry, conv_geometry
from tensorconv.ops import igemm_tf32x3
from tensorconv.ops._launch import NULL, cdiv, has_tf32_mma
from tensorconv.scratch import workspace

FILE = "winograd_wgrad.cu"
Problem = ConvGeometry
NAMES = ("winograd_wgrad_inputs", "winograd_wgrad_grads", "winograd_wgrad_filters")
THREADS = 256
POINTS = 16                  # the 4x4 transformed tile
BLOCKS_PER_SM = 16           # the transforms' grid-stride loops: enough blocks to fill a wave
_INT32 = 1 << 31

# F(2x2, 3x3): B^T (4x4) transforms an input patch, A (4x2) a gradient tile, G (4x3) a filter
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_A = np.array([[1, 0], [1, 1], [1, -1], [0, -1]], np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)


def tiles(p: Problem) -> tuple[int, int]:
    """(TH, TW): the 2x2 output tiles along each axis (the last one past an odd edge)."""
    return cdiv(p.oh, 2), cdiv(p.ow, 2)


def supported(p: Problem) -> str | None:
    """Why :func:`run` cannot compute ``p``'s weight gradient, or None: 3x3 filters at
    stride 1, undilated, ungrouped, any padding; every transformed tensor indexed in 32
    bits."""
    if (p.r, p.s) != (3, 3) or p.stride != (1, 1):
        return (f"winograd's weight gradient takes 3x3 filters at stride 1, not "
                f"{p.r}x{p.s} at {p.stride}")
    if p.dilation != (1, 1) or p.groups != 1:
        return "winograd's weight gradient supports neither dilation nor groups"
    th, tw = tiles(p)
    big = max(p.c, p.k) * p.n
    if POINTS * big * th * tw >= _INT32 or big * max(p.h * p.w, p.oh * p.ow) >= _INT32:
        return ("winograd's weight gradient indexes in 32 bits: its tensors and transforms "
                "must be < 2**31 values")
    return None


def gemm_problem(p: Problem) -> igemm_tf32x3.Problem:
    """The 16 GEMMs as one grouped 1x1 weight gradient: x = U (1, 16 C, N TH, TW), gy = V
    (1, 16 K, N TH, TW), 16 groups, w = M (16 K, C, 1, 1)."""
    th, tw = tiles(p)
    geom = conv_geometry((1, POINTS * p.c, p.n * th, tw), (POINTS * p.k, p.c, 1, 1),
                         groups=POINTS)
    return igemm_tf32x3.problem(geom, 2)


# --------------------------------------------------------------------------- reference

def _patches(a, size: int, step: int, th: int, tw: int, pad: tuple[int, int]):
    """(N, C, TH, TW, size, size) windows of ``a`` (N, C, H, W) at rows step ty - pad[0],
    columns step tx - pad[1], zeros outside."""
    n, c, h, w = a.shape
    hp, wp = step * (th - 1) + size, step * (tw - 1) + size
    rows, cols = min(h, hp - pad[0]), min(w, wp - pad[1])
    padded = np.zeros((n, c, hp, wp), np.float64)
    padded[:, :, pad[0]:pad[0] + rows, pad[1]:pad[1] + cols] = a[:, :, :rows, :cols]
    out = np.empty((n, c, th, tw, size, size), np.float64)
    for i in range(size):
        for j in range(size):
            out[..., i, j] = padded[:, :, i:i + step * th:step, j:j + step * tw:step]
    return out


def transform_inputs(x: np.ndarray, p: Problem) -> np.ndarray:
    """``winograd_wgrad_inputs`` in float64: U (16, C, N, TH, TW), U[xi] = (B^T x_t B)[xi]."""
    th, tw = tiles(p)
    d = _patches(np.asarray(x, np.float64), 4, 2, th, tw, p.padding)
    u = np.einsum("ai,nctwij,bj->abcntw", _BT, d, _BT)
    return u.reshape(POINTS, p.c, p.n, th, tw)


def transform_grads(gy: np.ndarray, p: Problem) -> np.ndarray:
    """``winograd_wgrad_grads`` in float64: V (16, K, N, TH, TW), V[xi] = (A gy_t A^T)[xi]."""
    th, tw = tiles(p)
    g = _patches(np.asarray(gy, np.float64), 2, 2, th, tw, (0, 0))
    v = np.einsum("ai,nktwij,bj->abkntw", _A, g, _A)
    return v.reshape(POINTS, p.k, p.n, th, tw)


def transform_filters(m: np.ndarray) -> np.ndarray:
    """``winograd_wgrad_filters`` in float64: gw (K, C, 3, 3) = G^T M G from M (16, K, C)."""
    m = np.asarray(m, np.float64).reshape(4, 4, *np.shape(m)[1:])
    return np.einsum("ia,ijkc,jb->kcab", _G, m, _G)


def weight_grad(x: np.ndarray, gy: np.ndarray, p: Problem) -> np.ndarray:
    """The whole computation in float64 (the reference the kernels' walk follows)."""
    u, v = transform_inputs(x, p), transform_grads(gy, p)
    m = np.einsum("xkntw,xcntw->xkc", v, u)
    return transform_filters(m)


# --------------------------------------------------------------------------- launch

def kernels(p: Problem) -> tuple[cuda.KernelRef, ...]:
    """The three transforms and the GEMM's kernels (at the current precision)."""
    g = gemm_problem(p)
    tile = igemm_tf32x3.default_tile(g, backend.device_facts())
    return tuple(cuda.kernel_ref(FILE, name) for name in NAMES) + igemm_tf32x3.kernels(g, tile)


def instantiations() -> list[str]:
    """No templates: the file's plain kernels are all CI's nvcc build needs."""
    return []


@functools.lru_cache(maxsize=1024)
def _config(p: Problem, precision_name: str, device: int):
    """The transforms' kernels, grids and integer arguments, the GEMM's problem and tile,
    and the workspace's parts (U, V, M, partial: offsets and sizes), cached (a training
    step runs many: per call only the pointers are new)."""
    del precision_name, device   # the memo's key: kernel_ref and cuda.load read them
    facts = backend.device_facts()
    i32 = np.int32
    th, tw = tiles(p)
    t = p.n * th * tw
    g = gemm_problem(p)
    tile = igemm_tf32x3.default_tile(g, facts)
    cap = BLOCKS_PER_SM * facts.sm_count
    grids = [min(cdiv(total, THREADS), cap) for total in (p.c * t, p.k * t, p.k * p.c)]
    ints = ((i32(p.n), i32(p.c), i32(p.h), i32(p.w), i32(th), i32(tw), i32(p.padding[0]),
             i32(p.padding[1])),
            (i32(p.n), i32(p.k), i32(p.oh), i32(p.ow), i32(th), i32(tw)),
            (i32(p.k), i32(p.c)))
    sizes = (POINTS * p.c * t, POINTS * p.k * t, POINTS * p.k * p.c,
             igemm_tf32x3.workspace_floats(g, tile))
    offsets = tuple(int(v) for v in np.cumsum((0,) + sizes[:-1]))
    loaded = tuple(cuda.load(cuda.kernel_ref(FILE, name)) for name in NAMES)
    return loaded, grids, ints, g, tile, offsets, sizes


def run(x, gy, out, p: Problem, xp) -> None:
    """``out`` (K, C, 3, 3) = the weight gradient of ``p`` from checked ``x``, ``gy``: the
    transforms into the stream's scratch buffer, the GEMM, the filters' transform."""
    facts = backend.device_facts()
    if not has_tf32_mma(facts):
        raise ValueError(f"algorithm='winograd' for the weight gradient needs sm_80 or later; "
                         f"{facts.name} is {facts.arch}")
    loaded, grids, ints, g, tile, offsets, sizes = _config(p, precision.current(),
                                                           xp.cuda.runtime.getDevice())
    buf = workspace(xp, offsets[-1] + sizes[-1])
    u, v, m, partial = (buf[o:o + n] for o, n in zip(offsets, sizes))
    inputs, grads, filters = loaded
    inputs((grids[0],), (THREADS,), (x, u) + ints[0])
    grads((grids[1],), (THREADS,), (gy, v) + ints[1])
    igemm_tf32x3.run(g, v, u, None, None, m, tile, False, xp, partial if sizes[3] else NULL)
    filters((grids[2],), (THREADS,), (m, out) + ints[2])
