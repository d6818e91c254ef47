"""3x3 stride-1 convolution by Winograd's F(2x2, 3x3) at fp32 accuracy
(``kernels_cu/winograd_conv.cu``).

The ``"winograd"`` variant of :func:`tensorconv.ops.core_conv2d`: each 2x2 output tile
is ``A^T [(G g G^T) . (B^T d B)] A``, the channel sums of the 16 transformed points are 16
GEMMs on ``mma.sync`` tf32 tiles with every operand split into two tf32 parts (3xTF32),
so the result keeps fp32 accuracy with 2.25x fewer multiplies than the direct
convolution.  At batch 1 it pays off where a dense 3x3 layer has many channels on a large
plane (a ResNet's first stage); on a training batch, for thin layers (16-64 channels),
where ``ops.conv2d`` and its stride-1 data gradient take it by default
(:func:`run_pass`, ``algorithm="winograd"``; the rule is
:data:`tensorconv.ops.conv_algorithm.WINOGRAD_MACS`).  The weight gradient's Winograd
(16 GEMMs over the tiles) is :mod:`tensorconv.ops.winograd_wgrad`.  The tuner
(:func:`tensorconv.tuning.oracle.tune_winograd_tile`) times all of its few tiles.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, precision, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry, conv_geometry
from tensorconv.ops import winograd_wgrad
from tensorconv.ops._launch import (
    b_fragments,
    cdiv,
    check_smem,
    conv_op,
    epilogue_args,
    has_tf32_mma,
    launch,
    stored_tile,
)

FILE = "winograd_conv.cu"
Problem = ConvGeometry
THREADS = 256                 # the kernel's WINO_THREADS: 8 warps, two points each
PACK_NAME = "winograd_pack_weights"   # pack_weights' kernel on the GPU
WARP_TILES_M = (1, 2)         # WM: 16-tile rows per warp (16 or 32 Winograd tiles per block)
WARP_TILES_N = (1, 2, 4)      # WN: 8-channel tiles per warp (= per block)
TILE_WIDTHS = (2, 4, 8, 16, 32)

# G of F(2x2, 3x3): U = G g G^T maps a 3x3 filter to its 4x4 transformed tile
# (transform_weights applies it as adds and halvings).
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


@dataclass(frozen=True)
class Tile:
    """Launch shape of the kernel.

    A block owns ``16 wm`` Winograd tiles, ``tbw`` of them per row (``2 * tbw``
    output columns by ``2 * tiles / tbw`` rows), and ``8 wn`` output channels; it
    streams ``256 / (16 wm)`` input channels per stage.
    """

    wm: int
    wn: int
    tbw: int

    @property
    def tiles(self) -> int:
        return 16 * self.wm

    @property
    def tbh(self) -> int:
        return self.tiles // self.tbw

    @property
    def ck(self) -> int:
        """Input channels per stage (one per thread and tile)."""
        return THREADS // self.tiles

    def smem_bytes(self, p: Problem) -> int:
        """Two stages of split transformed inputs, or the 16 points of every
        (tile, channel) at the end, whichever is larger (``p`` does not matter)."""
        slabs = 2 * 2 * 16 * self.ck * (self.tiles + 8)
        points = 16 * 8 * self.wn * (self.tiles + 4)
        return 4 * max(slabs, points)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(tile blocks, batch x channel blocks, 1)."""
        th, tw = winograd_tiles(p)
        return cdiv(th, self.tbh) * cdiv(tw, self.tbw), p.n * cdiv(p.k, 8 * self.wn), 1


def winograd_tiles(p: Problem) -> tuple[int, int]:
    """(rows, columns) of 2x2 output tiles covering the output."""
    return cdiv(p.oh, 2), cdiv(p.ow, 2)


def supported(p: Problem) -> str | None:
    """None when the kernel runs ``p``; otherwise the reason it cannot."""
    if (p.r, p.s) != (3, 3):
        return f"the winograd kernel takes 3x3 filters only, not {p.r}x{p.s}"
    if p.stride != (1, 1):
        return f"the winograd kernel takes stride 1 only, not {p.stride}"
    if p.dilation != (1, 1) or p.groups != 1:
        return "the winograd kernel supports neither dilation nor groups"
    if not has_tf32_mma(backend.device_facts()):
        return "the winograd kernel needs tf32 tensor cores (sm_80 or newer)"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile worth timing: no more channel tiles than the output needs, rows of
    tiles no wider than the output's (rounded up to a power of two)."""
    n8_need = cdiv(p.k, 8)
    _, tiles_w = winograd_tiles(p)
    out = []
    for wm in WARP_TILES_M:
        for wn in WARP_TILES_N:
            if wn > 1 and wn >= 2 * n8_need:
                continue
            for tbw in TILE_WIDTHS:
                t = Tile(wm, wn, tbw)
                if (t.tiles % tbw == 0 and (tbw == 2 or tbw < 2 * tiles_w)
                        and t.smem_bytes(p) <= facts.smem_per_block_optin):
                    out.append(t)
    return out


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """An untimed choice: 16 tiles as a 4 x 4 square (8 x 8 output pixels; 2 wide on narrow
    outputs) and as many channel tiles as the output needs, up to 4."""
    wn = next(v for v in WARP_TILES_N if 8 * v >= min(p.k, 32))
    return Tile(1, wn, 4 if winograd_tiles(p)[1] > 2 else 2)


def batch_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The tile for a batch of many images (a training step's layer): a block a whole row
    of Winograd tiles wide (a power of two, 2-32), 32 tiles where the plane has the rows
    for them, and :func:`default_tile`'s channel tiles.  On ResNet-20's three layer shapes
    at batch 128 (H200) it is the fastest of the candidates (docs/notes/training_speed.md)."""
    tiles_h, tiles_w = winograd_tiles(p)
    tbw = min(TILE_WIDTHS[-1], 1 << max(1, (tiles_w - 1).bit_length()))
    wm = 2 if 32 // tbw <= tiles_h else 1
    return Tile(wm, default_tile(p, facts).wn, tbw)


def pass_supported(geom: ConvGeometry, mode: int) -> str | None:
    """Why :func:`run_pass` cannot run ``mode`` of ``geom`` (on the geometry alone), or
    None: the forward and the data gradient of a 3x3, stride-1, undilated, ungrouped
    convolution (the data gradient needs padding <= 2: it runs as a forward with padding
    2 - padding); the weight gradient where :func:`winograd_wgrad.supported`."""
    if mode == 2:
        return winograd_wgrad.supported(geom)
    if mode not in (0, 1):
        return f"winograd runs modes 0, 1 and 2, not {mode}"
    if (geom.r, geom.s) != (3, 3) or geom.stride != (1, 1):
        return f"winograd takes 3x3 filters at stride 1, not {geom.r}x{geom.s} at {geom.stride}"
    if geom.dilation != (1, 1) or geom.groups != 1:
        return "winograd supports neither dilation nor groups"
    if mode == 1 and max(geom.padding) > 2:
        return f"winograd's data gradient needs padding <= 2, got {geom.padding}"
    return None


def check_pass(geom: ConvGeometry, mode: int, tile, splits) -> None:
    """``ValueError`` where ``ops.conv2d``'s ``algorithm="winograd"`` cannot run ``mode``
    of ``geom`` or is given a tile or a split (it takes its own tile, and has no split)."""
    if (why := pass_supported(geom, mode)) is not None:
        raise ValueError(why)
    if tile is not None or splits is not None:
        raise ValueError("tile and splits do not apply to algorithm='winograd'")


def pass_geometry(geom: ConvGeometry, mode: int) -> ConvGeometry:
    """The forward :func:`run_pass` runs for ``mode`` of ``geom``: ``geom`` itself, or for
    the data gradient the forward of gy (N, K, OH, OW) with w's filters flipped and
    transposed, at padding ``2 - padding``."""
    if mode == 0:
        return geom
    return conv_geometry((geom.n, geom.k, geom.oh, geom.ow), (geom.c, geom.k, 3, 3), 1,
                         (2 - geom.padding[0], 2 - geom.padding[1]))


def run_pass(mode: int, w, src, bias, residual, out, geom: ConvGeometry, relu: bool) -> None:
    """``ops.conv2d``'s forward (mode 0, ``src`` is x) or stride-1 data gradient (mode 1,
    ``src`` is gy: :func:`pass_geometry`) on checked arguments, into ``out``, on
    :func:`batch_tile` (a heuristic, as the implicit GEMMs' defaults are: a tile tuned
    later in the process would not be seen by a cached launch); the weights transformed
    and packed on the device each call, by one launch of :func:`pack_weights`' kernel.
    Mode 2 (``w`` is gy, ``src`` x, the implicit GEMMs' operand order) is
    :func:`winograd_wgrad.run`."""
    xp = backend.array_module(src)
    if mode == 2:
        return winograd_wgrad.run(src, w, out, geom, xp)
    pack, conv = _pass_config(geom, mode, precision.current(), xp.cuda.runtime.getDevice())
    packed = _pack_into(xp, w, pack)
    kernel, grid, ints, smem = conv
    kernel(grid, (THREADS, 1, 1), (src, packed, out, *epilogue_args((bias, residual, relu)))
           + ints, shared_mem=smem)


def pass_kernels(geom: ConvGeometry, mode: int) -> tuple[cuda.KernelRef, ...]:
    """The kernels :func:`run_pass` launches for ``mode`` of ``geom`` (the packing's and
    the convolution's; the weight gradient's transforms and GEMM)."""
    if mode == 2:
        return winograd_wgrad.kernels(geom)
    p = pass_geometry(geom, mode)
    return (cuda.kernel_ref(FILE, PACK_NAME),
            *kernels(p, batch_tile(p, backend.device_facts())))


@functools.lru_cache(maxsize=1024)
def _pass_config(geom: ConvGeometry, mode: int, precision_name: str, device: int):
    """:func:`run_pass`'s two launches but for their pointers, cached: a training step runs
    some forty, and working out the geometry, tile and kernels took ~0.1 ms a call on the
    host.  ``precision_name`` and ``device`` key the kernels built for them."""
    del precision_name, device   # the memo's key: kernel_ref and load read them
    p = pass_geometry(geom, mode)
    tile = batch_tile(p, backend.device_facts())
    check_tile(tile, p)
    kernel = cuda.load(kernels(p, tile)[0])
    smem = tile.smem_bytes(p)
    cuda.set_dynamic_smem(kernel, smem)
    tiles_h, tiles_w = winograd_tiles(p)
    ints = tuple(np.int32(v) for v in (
        p.c, p.h, p.w, p.k, p.oh, p.ow, p.padding[0], p.padding[1], tiles_h, tiles_w,
        tile.tbw, cdiv(tiles_w, tile.tbw), cdiv(p.k, 8 * tile.wn)))
    return _pack_config(p.k, p.c, mode == 1), (kernel, tile.grid(p), ints, smem)


def _pack_config(nf: int, cf: int, flip: bool):
    """The packing kernel's launch for ``nf`` x ``cf`` filters: (kernel, packed shape,
    grid, integer arguments)."""
    shape = (cdiv(nf, 8), cdiv(cf, 8), 16, 32, 2)
    pairs = shape[0] * shape[1] * 16 * 32
    return (cuda.load(cuda.kernel_ref(FILE, PACK_NAME)), shape,
            (min(cdiv(pairs, THREADS), 4096),), (np.int32(nf), np.int32(cf), np.int32(flip)))


def _pack_into(xp, w, config):
    """A new packed-weights array made from ``w`` by one launch of ``config``."""
    kernel, shape, grid, ints = config
    packed = xp.empty(shape, xp.float32)
    kernel(grid, (THREADS, 1, 1), (w, packed) + ints)
    return packed


def tile_key(p: Problem) -> str:
    """The tune-cache key of the timed best tile for ``p``."""
    return tunecache.make_key("winograd_tile", FILE, p)


def tuned_tile(p: Problem) -> Tile | None:
    """The tile the tuner stored for ``p`` on this device, else None; never times."""
    return stored_tile(sys.modules[__name__], p)


def check_tile(tile: Tile, p: Problem) -> None:
    """Raise ``ValueError`` naming what is wrong with ``tile``."""
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not a winograd_conv.Tile")
    if tile.wm not in WARP_TILES_M or tile.wn not in WARP_TILES_N:
        raise ValueError(f"tile.wm must be in {WARP_TILES_M} and tile.wn in {WARP_TILES_N}, "
                         f"got {tile}")
    if tile.tbw not in TILE_WIDTHS or tile.tiles % tile.tbw:
        raise ValueError(f"tile.tbw must be in {TILE_WIDTHS} and divide the block's "
                         f"{tile.tiles} tiles, got {tile}")
    check_smem(tile, tile.smem_bytes(p))


def transform_weights(w, xp=None):
    """``U = G g G^T`` of every 3x3 filter, computed in float64.

    Parameters
    ----------
    w : array, (N, C, 3, 3), float32
    xp : module, optional
        ``numpy`` or ``cupy``; default: the module of ``w``.

    Returns
    -------
    array, (N, C, 4, 4), float32: point ``(i, j)`` of filter ``(n, c)``.
    """
    xp = xp or backend.array_module(w)
    g = xp.asarray(w, dtype=xp.float64)

    def rows(a0, a1, a2, axis):   # G's rows (1, 0, 0), (1, 1, 1)/2, (1, -1, 1)/2, (0, 0, 1)
        return xp.stack([a0, (a0 + a1 + a2) * 0.5, (a0 - a1 + a2) * 0.5, a2], axis=axis)

    # elementwise kernels only (no upload of G, no GEMM): a captured training step holds it
    t = rows(g[:, :, 0], g[:, :, 1], g[:, :, 2], 2)          # (N, C, 4, 3): G g
    return rows(t[..., 0], t[..., 1], t[..., 2], 3).astype(xp.float32)


def pack_weights(w, xp=None, *, flip: bool = False):
    """The kernel's weight operand: :func:`transform_weights` in mma B-fragment order,
    unsplit (the kernel splits them as it loads them, which halves the bytes every block
    reads), shape ``(ceil(N/8), ceil(C/8), 16, 32, 2)``; on the GPU one launch of
    ``winograd_pack_weights`` (the same bits), which a captured training step affords.

    Parameters
    ----------
    w : array, (N, C, 3, 3), float32 (C-contiguous on the GPU)
    flip : bool
        Pack the data gradient's filters instead, ``w`` transposed to (C, N) and turned
        180 degrees: the forward of gy with them is the stride-1 data gradient.
    """
    xp = xp or backend.array_module(w)
    nf, cf = (w.shape[1], w.shape[0]) if flip else (w.shape[0], w.shape[1])
    if xp is np:
        if flip:
            w = np.ascontiguousarray(np.asarray(w).transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        return b_fragments(transform_weights(w, xp), xp, split=False)
    return _pack_into(xp, w, _pack_config(nf, cf, flip))


def packed_shape(p: Problem) -> tuple[int, ...]:
    """Shape of :func:`pack_weights` for ``p``'s filters."""
    return (cdiv(p.k, 8), cdiv(p.c, 8), 16, 32, 2)


def _name(wm: int, wn: int) -> str:
    return f"winograd_f2x2_3x3_tf32x3<{wm}, {wn}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` on ``p`` runs (at the current precision)."""
    return (cuda.kernel_ref(FILE, _name(tile.wm, tile.wn)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every (WM, WN) a tile may take."""
    return sorted(_name(wm, wn) for wm in WARP_TILES_M for wn in WARP_TILES_N)


def winograd_conv2d(x, w, padding=1, *, bias=None, relu: bool = False, residual=None,
                    tile: Tile | None = None, packed=None, out=None):
    """``relu?(conv(x, w) + bias + residual)`` for 3x3 filters at stride 1 by Winograd's
    F(2x2, 3x3) on the tensor cores at fp32 accuracy, fp32, NCHW.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, C, H, W), float32, C-contiguous
    w : array, (N, C, 3, 3), float32
    padding : int or pair
    bias : array, (N,), float32, optional
    relu : bool
    residual : array, (B, N, OH, OW), float32, optional
    tile : Tile, optional
        Default: the tuned tile (:func:`tuned_tile`), else :func:`default_tile`.
    packed : array, optional
        :func:`pack_weights` of ``w``, prepared once.
    out : array, (B, N, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, N, OH, OW), float32
    """
    return conv_op(sys.modules[__name__], "winograd_conv2d", x, w, 1, padding, bias=bias,
                   relu=relu, residual=residual, tile=tile, packed=packed, out=out)


def run(x, packed, out, p: Problem, tile: Tile, epilogue=(None, None, False)) -> None:
    """Launch on checked arguments (``epilogue``: bias or None, residual or None, relu)."""
    tiles_h, tiles_w = winograd_tiles(p)
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (THREADS,), (
        x, packed, out, *epilogue_args(epilogue), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
        i32(p.oh), i32(p.ow), i32(p.padding[0]), i32(p.padding[1]), i32(tiles_h),
        i32(tiles_w), i32(tile.tbw), i32(cdiv(tiles_w, tile.tbw)),
        i32(cdiv(p.k, 8 * tile.wn))), tile.smem_bytes(p))
