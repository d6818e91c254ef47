"""Tensor-core convolution for small batches (``kernels_cu/tensorcore_conv.cu``): fp16 in,
fp32 accumulate, fp16 out, NCHW or NHWC (Sun et al., "Efficient Tensor Cores support in
TVM for Low-Latency Deep Learning").

An implicit-im2col GEMM (M = N·OH·OW pixels, N = Cout, K = C·R·S): the lowered matrix is
never built, ragged sizes are predicated.  Operands stream through a ring of shared-memory
chunks, by 16-byte ``cp.async`` where rows allow (weights with K % 8 == 0; NHWC inputs
with C % 8 == 0) and otherwise one half per load through registers, the k -> input offset
map read from a per-layer table (:func:`tap_table`).  At batch 1 most layers give too few
output tiles for the GPU, so K splits across ``Tile.splits`` blocks whose partial tiles the
last block of each tile adds up inside the same launch (a counter per tile, reset by that
block: the launch replays from a CUDA graph).  Two instruction paths: ``mma.sync``
m16n8k16 with ``ldmatrix``, and WMMA with the paper's fragment shapes (:data:`PATHS`).
:func:`default_tile` is an analytic rank; :mod:`tensorconv.tuning.tc_search` times the
best-ranked tiles.
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass, replace

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry, check_array, check_choice, conv_geometry
from tensorconv.ops._launch import cdiv, launch, ptr, round_up, stored_tile, workspace
from tensorconv.reference import conv as reference

FILE = "tensorcore_conv.cu"
BK = 32                                   # tcc::BK: K per shared-memory chunk
PAD = 8                                   # tcc::PAD: halves after each shared row
LAYOUTS = ("nchw", "nhwc")
MAX_SPLITS = 16
log = logging.getLogger(__name__)


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

    @property
    def vec_ok(self) -> bool:
        """Whether 16-byte loads fit: 8 consecutive k of a weight row (K % 8 == 0) and, in
        NHWC, 8 consecutive channels of a pixel (C % 8 == 0)."""
        return self.k % 8 == 0 and (self.layout == "nchw" or self.geom.c % 8 == 0)


@dataclass(frozen=True)
class Tile:
    """A block of ``bm`` pixels x ``bn`` output channels, warps of ``wm`` x ``wn``, K split
    ``splits`` ways, on the instructions of ``path`` (:data:`PATHS`), through a ring of
    ``stages`` shared-memory chunks, with 16-byte ``cp.async`` loads where ``vec`` (else
    one half per load, through registers)."""

    bm: int
    bn: int
    wm: int
    wn: int
    splits: int = 1
    path: int = 0
    stages: int = 3
    vec: bool = True

    @property
    def threads(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.bm, self.bn, self.wm, self.wn

    def smem_bytes(self, p: Problem) -> int:
        """The ring of operand chunks, or the fp32 result tile that reuses it."""
        a_km = not (self.vec and p.layout == "nhwc") and self.path != 3
        a = BK * (self.bm + PAD) if a_km else self.bm * (BK + PAD)
        ring = 2 * self.stages * (a + self.bn * (BK + PAD))
        return max(ring, 4 * self.bm * (self.bn + 4))

    def grid(self, p: Problem) -> tuple[int, int, int]:
        return cdiv(p.m, self.bm), cdiv(p.geom.k, self.bn), self.splits

    def mode(self, p: Problem) -> int:
        """The kernel's MODE: bit 0 NHWC, bit 1 vector loads."""
        return int(p.layout == "nhwc") | (int(self.vec) << 1)


# (bm, bn, wm, wn): every block shape the file instantiates: four warps, or eight, which
# halve each warp's serial work on a block tile (at batch 1 a block's latency is the layer's).
SHAPES = ((16, 64, 16, 16), (32, 32, 16, 16), (32, 64, 16, 32), (64, 32, 32, 16),
          (64, 64, 32, 32), (64, 128, 32, 64), (128, 64, 64, 32),
          (32, 64, 16, 16), (64, 32, 16, 16), (64, 64, 32, 16), (128, 64, 32, 32))
RING_HALVES = 64   # register halves per thread the scalar loads' ring may hold
# The instruction paths: mma.sync m16n8k16, and WMMA with the paper's fragment shapes
# (m x n of an m x n x 16 fragment).
PATHS = {0: ("mma.sync", 16, 16), 1: ("wmma", 16, 16), 2: ("wmma", 32, 8), 3: ("wmma", 8, 32)}
# Pipeline depths: mma.sync takes 2-4 stages; WMMA (the paper's path) double-buffers.
STAGES = {0: (2, 3, 4), 1: (2,), 2: (2,), 3: (2,)}


def path_fits(shape, path: int) -> bool:
    """Whether a warp tile of ``shape`` holds whole fragments of ``path`` (mma.sync reads
    16 x 16 of A and of B per ldmatrix.x4); WMMA, the paper's path, runs four warps."""
    _, fm, fn = PATHS[path]
    warps = (shape[0] // shape[2]) * (shape[1] // shape[3])
    return shape[2] % fm == 0 and shape[3] % fn == 0 and (path == 0 or warps == 4)


def ring_fits(shape, stages: int, mode: int) -> bool:
    """Whether the register ring of the scalar loads (A unless NHWC with vector loads, B
    unless vector loads: one chunk's halves per thread per stage) stays within
    :data:`RING_HALVES` (more spills)."""
    threads = (shape[0] // shape[2]) * (shape[1] // shape[3]) * 32
    a = shape[0] * BK // threads if mode != 3 else 0
    b = shape[1] * BK // threads if not mode & 2 else 0
    return (a + b) * stages <= RING_HALVES


def supported(p: Problem) -> str | None:
    """Why ``p`` cannot run here, or None."""
    g = p.geom
    if g.groups != 1:
        return f"groups={g.groups}: the tensor-core kernel runs dense convolutions only"
    if g.dilation != (1, 1):
        return f"dilation={g.dilation}: the tensor-core kernel runs undilated convolutions only"
    if p.layout not in LAYOUTS:
        return f"layout must be one of {LAYOUTS}, got {p.layout!r}"
    if max(g.n * g.c * g.h * g.w, p.m * g.k) >= 2**31:
        return "the input or the output has 2**31 elements or more (32-bit offsets)"
    return None


def split_k(p: Problem, tile: Tile) -> int:
    """K per split share: a multiple of BK, so no share starts inside a chunk."""
    return round_up(cdiv(p.k, tile.splits), BK)


def check_tile(tile: Tile, p: Problem) -> None:
    """Raise ``ValueError`` unless ``tile`` is one the file instantiates and fits ``p``."""
    if not isinstance(tile, Tile) or tile.shape not in SHAPES or tile.path not in PATHS \
            or not path_fits(tile.shape, tile.path) or tile.stages not in STAGES[tile.path]:
        raise ValueError(f"tile must be a Tile of one of the shapes {SHAPES} on a path "
                         f"({sorted(PATHS)}) whose fragments it holds, with stages in "
                         f"{STAGES}, got {tile!r}")
    if not 1 <= tile.splits <= MAX_SPLITS:
        raise ValueError(f"tile.splits must be in 1..{MAX_SPLITS}, got {tile.splits}")
    if tile.vec and not p.vec_ok:
        raise ValueError(f"tile.vec needs K % 8 == 0 (and C % 8 == 0 in NHWC); this layer "
                         f"has C={p.geom.c}, K={p.k} ({p.layout})")
    if not ring_fits(tile.shape, tile.stages, tile.mode(p)):
        raise ValueError(f"{tile}: the scalar loads' register ring of {tile.stages} stages "
                         f"exceeds {RING_HALVES} halves per thread ({p.layout}); use fewer "
                         f"stages or vector loads")


def candidates(p: Problem, facts: DeviceFacts, paths=tuple(PATHS),
               max_splits: int = MAX_SPLITS, vec=(True, False)) -> list[Tile]:
    """Every shape on each of ``paths`` it fits, at each pipeline depth of the path, with
    split counts up to ``max_splits`` whose shares hold at least two chunks, with and
    without vector loads (``vec``; with only where the layer allows), cheapest by
    :func:`_cost` first."""
    vecs = [v for v in vec if p.vec_ok or not v]
    out = []
    for shape in SHAPES:
        for path in (q for q in paths if path_fits(shape, q)):
            for splits in range(1, max_splits + 1):
                if splits > 1 and split_k(p, Tile(*shape, splits)) < 2 * BK:
                    break
                out += [t for st in STAGES[path] for v in vecs
                        if ring_fits(shape, st, (t := Tile(*shape, splits, path, st, v)).mode(p))]
    return sorted(out, key=lambda t: _cost(p, t, facts))


def _cost(p: Problem, t: Tile, facts: DeviceFacts) -> tuple:
    """An analytic rank: waves of blocks over the SMs (four blocks each), times a block's
    chunks, each the padded multiply-adds of the tile plus a fixed latency (worth a 64 x 64
    chunk), plus the split reduction's traffic; then vector loads, mma.sync and three
    stages first among equals."""
    blocks = int(np.prod(t.grid(p)))
    waves = cdiv(blocks, 4 * facts.sm_count)
    chunks = cdiv(split_k(p, t), BK)
    per_block = chunks * (t.bm * t.bn + 64 * 64) * BK * (1 if t.vec else 2)
    reduce = (t.splits > 1) * t.splits * p.m * p.geom.k * 8 / (4 * facts.sm_count)
    return waves * per_block + reduce, not t.vec, t.path != 0, abs(t.stages - 3), -t.bm * t.bn


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The best-ranked candidate (what runs untuned)."""
    return candidates(p, facts)[0]


def tile_key(p: Problem) -> str:
    """The tune-cache key of ``p``'s tile: device, source, shape, layout (fp16)."""
    return tunecache.make_key("tc_conv", FILE, f"{p.geom}|{p.layout}|fp16")


def tuned_tile(p: Problem) -> Tile | None:
    """The tile :func:`tensorconv.tuning.tc_search.tune_tc_tile` stored for ``p``, if any."""
    return stored_tile(sys.modules[__name__], p)


def _name(t: Tile, mode: int) -> str:
    return f"tc_conv<{t.bm}, {t.bn}, {t.wm}, {t.wn}, {t.path}, {mode}, {t.stages}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernel ``tile`` launches for ``p``."""
    return (cuda.kernel_ref(FILE, _name(tile, tile.mode(p))),)


def instantiations() -> list[str]:
    """Every shape on every path it fits, at each of its depths, in the four modes (both
    layouts, vector loads or not; split counts are runtime)."""
    return sorted(_name(Tile(*s, path=q, stages=st), mode) for s in SHAPES for q in PATHS
                  if path_fits(s, q) for st in STAGES[q] for mode in range(4)
                  if ring_fits(s, st, mode))


def tap_table(p: Problem) -> np.ndarray:
    """(K, 2) int32: for each k, the offset of its input element from the pixel's corner
    (NCHW k = (c, r, s): c·H·W + r·W + s; NHWC k = (r, s, c): (r·W + s)·C + c) and
    r << 16 | s, which the kernel's scalar loads read instead of dividing k."""
    g = p.geom
    if p.layout == "nchw":
        c, r, s = np.meshgrid(np.arange(g.c), np.arange(g.r), np.arange(g.s), indexing="ij")
        off = c * g.h * g.w + r * g.w + s
    else:
        r, s, c = np.meshgrid(np.arange(g.r), np.arange(g.s), np.arange(g.c), indexing="ij")
        off = (r * g.w + s) * g.c + c
    return np.stack([off.ravel(), (r.ravel() << 16) | s.ravel()], axis=1).astype(np.int32)


@functools.lru_cache(maxsize=64)
def _device_tap_table(device: int, p: Problem):
    """:func:`tap_table` on ``device``, built once per layer."""
    import cupy

    with cupy.cuda.Device(device):
        return cupy.asarray(tap_table(p))


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
    tile = tile or tuned_tile(p) or default_tile(p, backend.device_facts())
    check_tile(tile, p)
    if packed is None:
        packed = pack_weights(w, layout, xp)
    elif tuple(packed.shape) != (p.geom.k, p.k) or packed.dtype != np.float16 \
            or not packed.flags.c_contiguous:
        raise ValueError(f"packed must be C-contiguous float16 of shape {(p.geom.k, p.k)} "
                         f"(pack_weights), got {packed.dtype} {tuple(packed.shape)}")
    if tile.vec and (x.data.ptr % 16 or packed.data.ptr % 16):
        log.info("tc_conv2d: x or packed is not 16-byte aligned; %s runs on scalar loads",
                 tile)
        tile = replace(tile, vec=False)
    out = xp.empty(shape, dtype=np.float16) if out is None else out
    # 16-byte epilogue stores (NHWC, 8 channels at a time) need aligned outputs
    vec_out = (layout == "nhwc" and p.geom.k % 8 == 0 and out.data.ptr % 16 == 0
               and (residual is None or residual.data.ptr % 16 == 0))
    grid = tile.grid(p)
    tiles = grid[0] * grid[1]
    partial = workspace(xp, tile.splits * tiles * tile.bm * tile.bn) if tile.splits > 1 \
        else None
    counters = _counter_buffer(xp, tiles) if tile.splits > 1 else None
    g, i32 = p.geom, np.int32
    launch(kernels(p, tile)[0], grid, (tile.threads,),
           (x, packed, _device_tap_table(xp.cuda.runtime.getDevice(), p), ptr(bias), ptr(residual),
            out, ptr(partial), ptr(counters), i32(g.n), i32(g.c), i32(g.h), i32(g.w),
            i32(g.k), i32(g.r), i32(g.s), i32(g.oh), i32(g.ow), i32(g.stride[0]),
            i32(g.stride[1]), i32(g.padding[0]), i32(g.padding[1]), i32(split_k(p, tile)),
            i32(bool(relu)), i32(vec_out)),
           smem=tile.smem_bytes(p))
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
