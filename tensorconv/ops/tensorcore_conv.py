"""Tensor-core convolution for small batches (``kernels_cu/tensorcore_conv.cu``): fp16 in,
fp32 accumulate, fp16 out, NCHW or NHWC (Sun et al., "Efficient Tensor Cores support in
TVM for Low-Latency Deep Learning").

An implicit-im2col GEMM (M = N·OH·OW pixels, N = Cout, K = C·R·S) on ``mma.sync``
m16n8k16: the lowered matrix is never built, ragged sizes are predicated.  At batch 1 most
layers give too few output tiles for the GPU, so K splits across ``Tile.splits`` blocks
whose partial tiles the last block of each tile adds up inside the same launch (a counter
per tile, reset by that block: the launch replays from a CUDA graph).  Two instruction
paths: ``mma.sync`` m16n8k16 and WMMA with the paper's fragment shapes (:data:`PATHS`).
The first piece of issue 24: no tuner yet (:func:`default_tile` is an analytic rank), no
cp.async, no ldmatrix.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry, check_array, check_choice, conv_geometry
from tensorconv.ops._launch import cdiv, launch, ptr, round_up, stored_tile, workspace
from tensorconv.reference import conv as reference

FILE = "tensorcore_conv.cu"
BK = 32                                   # tcc::BK: K per shared-memory chunk
LAYOUTS = ("nchw", "nhwc")
MAX_SPLITS = 16


@dataclass(frozen=True)
class Problem:
    """One convolution and the layout of its input and output."""

    geom: ConvGeometry
    layout: str

    @property
    def m(self) -> int:
        return self.geom.n * self.geom.oh * self.geom.ow

    @property
    def k(self) -> int:
        return self.geom.c * self.geom.r * self.geom.s


@dataclass(frozen=True)
class Tile:
    """A block of ``bm`` pixels x ``bn`` output channels, warps of ``wm`` x ``wn``, K split
    ``splits`` ways, on the instructions of ``path`` (:data:`PATHS`)."""

    bm: int
    bn: int
    wm: int
    wn: int
    splits: int = 1
    path: int = 0

    @property
    def threads(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.bm, self.bn, self.wm, self.wn

    def smem_bytes(self, p: Problem) -> int:
        """The operand tiles, or the fp32 result tile that reuses them, and a flag."""
        return max(2 * (self.bm + self.bn) * (BK + 8), 4 * self.bm * (self.bn + 4)) + 4

    def grid(self, p: Problem) -> tuple[int, int, int]:
        return cdiv(p.m, self.bm), cdiv(p.geom.k, self.bn), self.splits


# (bm, bn, wm, wn): every block shape the file instantiates, both layouts.
SHAPES = ((32, 32, 16, 16), (64, 32, 32, 16), (64, 64, 32, 32), (128, 64, 64, 32))
# The instruction paths: mma.sync m16n8k16, and WMMA with the paper's fragment shapes
# (m x n of an m x n x 16 fragment).
PATHS = {0: ("mma.sync", 16, 8), 1: ("wmma", 16, 16), 2: ("wmma", 32, 8), 3: ("wmma", 8, 32)}


def path_fits(shape, path: int) -> bool:
    """Whether a warp tile of ``shape`` holds whole fragments of ``path``."""
    _, fm, fn = PATHS[path]
    return shape[2] % fm == 0 and shape[3] % fn == 0


def supported(p: Problem) -> str | None:
    """Why ``p`` cannot run here, or None."""
    g = p.geom
    if g.groups != 1:
        return f"groups={g.groups}: the tensor-core kernel runs dense convolutions only"
    if g.dilation != (1, 1):
        return f"dilation={g.dilation}: the tensor-core kernel runs undilated convolutions only"
    if p.layout not in LAYOUTS:
        return f"layout must be one of {LAYOUTS}, got {p.layout!r}"
    return None


def split_k(p: Problem, tile: Tile) -> int:
    """K per split share: a multiple of BK, so no share starts inside a chunk."""
    return round_up(cdiv(p.k, tile.splits), BK)


def candidates(p: Problem, facts: DeviceFacts, paths=tuple(PATHS),
               max_splits: int = MAX_SPLITS) -> list[Tile]:
    """Every shape on each of ``paths`` it fits, with split counts up to ``max_splits``
    whose shares hold at least two chunks, cheapest by :func:`_cost` first (mma.sync first
    among equals)."""
    out = []
    for shape in SHAPES:
        for path in (q for q in paths if path_fits(shape, q)):
            for splits in range(1, max_splits + 1):
                if splits > 1 and split_k(p, Tile(*shape, splits)) < 2 * BK:
                    break
                out.append(Tile(*shape, splits, path))
    return sorted(out, key=lambda t: _cost(p, t, facts))


def _cost(p: Problem, t: Tile, facts: DeviceFacts) -> tuple:
    """An analytic rank: waves of blocks over the SMs (four blocks each), times the padded
    work of a block, plus the split reduction's traffic."""
    blocks = int(np.prod(t.grid(p)))
    waves = cdiv(blocks, 4 * facts.sm_count)
    per_block = t.bm * t.bn * split_k(p, t)
    reduce = (t.splits > 1) * t.splits * p.m * p.geom.k * 8 / (4 * facts.sm_count)
    return waves * per_block + reduce, -t.bm * t.bn


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The best-ranked candidate (what runs untuned)."""
    return candidates(p, facts)[0]


def tile_key(p: Problem) -> str:
    """The tune-cache key of ``p``'s tile: device, source, shape, layout (fp16)."""
    return tunecache.make_key("tc_conv", FILE, f"{p.geom}|{p.layout}|fp16")


def tuned_tile(p: Problem) -> Tile | None:
    """The tile :func:`tensorconv.tuning.tc_search.tune_tc_tile` stored for ``p``, if any."""
    return stored_tile(sys.modules[__name__], p)


def _name(t: Tile, layout: str) -> str:
    return f"tc_conv<{t.bm}, {t.bn}, {t.wm}, {t.wn}, {t.path}, {int(layout == 'nhwc')}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernel ``tile`` launches for ``p``."""
    return (cuda.kernel_ref(FILE, _name(tile, p.layout)),)


def instantiations() -> list[str]:
    """Every shape on every path it fits, in both layouts (split counts are runtime)."""
    return sorted(_name(Tile(*s, path=q), lay) for s in SHAPES for q in PATHS
                  if path_fits(s, q) for lay in LAYOUTS)


def pack_weights(w, layout: str, xp=None):
    """(Cout, C, R, S) weights as the kernel reads them: (Cout, K) float16, K in the input
    layout's order ((c, r, s) for NCHW, (r, s, c) for NHWC)."""
    check_choice(layout, "layout", LAYOUTS)
    xp = xp or backend.array_module(w)
    w = xp.asarray(w)
    if layout == "nhwc":
        w = w.transpose(0, 2, 3, 1)
    return xp.ascontiguousarray(w.reshape(w.shape[0], -1).astype(np.float16))


def problem(x_shape, w_shape, stride, padding, layout: str) -> Problem:
    """The :class:`Problem` of an input of ``x_shape`` in ``layout`` and (Cout, C, R, S)
    weights."""
    check_choice(layout, "layout", LAYOUTS)
    nchw = x_shape if layout == "nchw" else (x_shape[0], x_shape[3], x_shape[1], x_shape[2])
    return Problem(conv_geometry(nchw, w_shape, stride, padding), layout)


def output_shape(p: Problem) -> tuple[int, int, int, int]:
    g = p.geom
    return (g.n, g.k, g.oh, g.ow) if p.layout == "nchw" else (g.n, g.oh, g.ow, g.k)


@functools.lru_cache(maxsize=16)
def _counters(device: int, tiles: int):
    """Zeroed per-tile split counters on ``device`` (the kernel leaves them zeroed)."""
    import cupy

    with cupy.cuda.Device(device):
        return cupy.zeros(max(tiles, 1), dtype=np.int32)


def _counter_buffer(xp, tiles: int):
    """Counters for ``tiles`` tiles: the smallest cached power of two that holds them."""
    size = 1 << max(10, (tiles - 1).bit_length())
    return _counters(xp.cuda.runtime.getDevice(), size)


def tc_conv2d(x, w, bias=None, stride=1, padding=0, *, layout: str = "nchw",
              relu: bool = False, residual=None, tile: Tile | None = None, packed=None,
              out=None):
    """``relu?(conv(x, w) + bias + residual)`` on the tensor cores, fp16 in and out.

    Parameters
    ----------
    x : array, float16, C-contiguous: (N, C, H, W) for ``layout="nchw"``, (N, H, W, C) for
        ``"nhwc"`` (NumPy: the fp32 reference on the same fp16 values)
    w : array, (Cout, C, R, S), float16 or float32 (rounded to float16)
    bias : array, (Cout,), float32, optional
    residual : array like the output, float16, optional
    tile : Tile, optional
        Default: the tuned tile (:func:`tuned_tile`), else :func:`default_tile`.
    packed : array, (Cout, C·R·S), float16, optional
        :func:`pack_weights` of ``w`` for ``layout``, prepared once.
    out : array like the output, float16, optional (GPU only)

    Returns
    -------
    array, float16: (N, Cout, OH, OW) or (N, OH, OW, Cout)
    """
    check_choice(layout, "layout", LAYOUTS)
    if not isinstance(relu, (bool, np.bool_)):
        raise TypeError(f"relu must be a bool, got {type(relu).__name__}")
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float16, contiguous=True, xp=xp)
    check_array(w, "w", ndim=4, xp=xp)
    p = problem(x.shape, w.shape, stride, padding, layout)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    shape = output_shape(p)
    if bias is not None:
        bias = backend.as_array(bias, "bias")
        check_array(bias, "bias", ndim=1, dtype=np.float32, contiguous=True, xp=xp)
        if bias.shape[0] != p.geom.k:
            raise ValueError(f"bias has {bias.shape[0]} entries; w has {p.geom.k} filters")
    for name, a in (("residual", residual), ("out", out)):
        if a is None:
            continue
        a = backend.as_array(a, name)
        check_array(a, name, ndim=4, dtype=np.float16, contiguous=True, xp=xp)
        if tuple(a.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(a.shape)}; expected {shape}")
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU only")
        return _reference(x, w, bias, residual, p, relu)
    facts = backend.device_facts()
    tile = tile or tuned_tile(p) or default_tile(p, facts)
    if not isinstance(tile, Tile) or tile.shape not in SHAPES or tile.path not in PATHS \
            or not path_fits(tile.shape, tile.path):
        raise ValueError(f"tile must be a Tile of one of the shapes {SHAPES} on a path "
                         f"({sorted(PATHS)}) whose fragments it holds, got {tile!r}")
    if not 1 <= tile.splits <= MAX_SPLITS:
        raise ValueError(f"tile.splits must be in 1..{MAX_SPLITS}, got {tile.splits}")
    if packed is None:
        packed = pack_weights(w, layout, xp)
    elif tuple(packed.shape) != (p.geom.k, p.k) or packed.dtype != np.float16:
        raise ValueError(f"packed must be float16 of shape {(p.geom.k, p.k)} (pack_weights), "
                         f"got {packed.dtype} {tuple(packed.shape)}")
    out = xp.empty(shape, dtype=np.float16) if out is None else out
    grid = tile.grid(p)
    partial = workspace(xp, tile.splits * p.m * p.geom.k) if tile.splits > 1 else None
    counters = _counter_buffer(xp, grid[0] * grid[1]) if tile.splits > 1 else None
    g, i32 = p.geom, np.int32
    launch(kernels(p, tile)[0], grid, (tile.threads,),
           (x, packed, ptr(bias), ptr(residual), out, ptr(partial), ptr(counters),
            i32(g.n), i32(g.c), i32(g.h), i32(g.w), i32(g.k), i32(g.r), i32(g.s), i32(g.oh),
            i32(g.ow), i32(g.stride[0]), i32(g.stride[1]), i32(g.padding[0]),
            i32(g.padding[1]), i32(split_k(p, tile)), i32(bool(relu))))
    return out


def _reference(x, w, bias, residual, p: Problem, relu: bool):
    """The fp32 reference on the fp16 values, rounded to fp16."""
    nchw = x if p.layout == "nchw" else x.transpose(0, 3, 1, 2)
    y = reference.conv2d(nchw.astype(np.float32), np.asarray(w, np.float16).astype(np.float32),
                         bias, p.geom.stride, p.geom.padding)
    if p.layout == "nhwc":
        y = y.transpose(0, 2, 3, 1)
    if residual is not None:
        y = y + residual.astype(np.float32)
    if relu:
        y = np.maximum(y, 0)
    return np.ascontiguousarray(y.astype(np.float16))
