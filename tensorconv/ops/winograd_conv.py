"""3x3 stride-1 convolution by Winograd's F(2x2, 3x3) at fp32 accuracy
(``kernels_cu/winograd_conv.cu``).

The ``"winograd"`` variant of :func:`tensorconv.ops.core_conv2d`: each 2x2 output tile
is ``A^T [(G g G^T) . (B^T d B)] A``, the channel sums of the 16 transformed points are 16
GEMMs on ``mma.sync`` tf32 tiles with every operand split into two tf32 parts (3xTF32),
so the result keeps fp32 accuracy with 2.25x fewer multiplies than the direct
convolution.  It pays off where a dense 3x3 layer has many channels on a large plane (a
ResNet's first stage).  The tuner (:func:`tensorconv.tuning.oracle.tune_winograd_tile`)
times all of its few tiles.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
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
WARP_TILES_M = (1, 2)         # WM: 16-tile rows per warp (16 or 32 Winograd tiles per block)
WARP_TILES_N = (1, 2, 4)      # WN: 8-channel tiles per warp (= per block)
TILE_WIDTHS = (2, 4, 8, 16, 32)

# G of F(2x2, 3x3): U = G g G^T maps a 3x3 filter to its 4x4 transformed tile.
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
    g = xp.asarray(_G)
    u = xp.einsum("ir,ncrs,js->ncij", g, xp.asarray(w, dtype=xp.float64), g)
    return u.astype(xp.float32)


def pack_weights(w, xp=None):
    """The kernel's weight operand: :func:`transform_weights` in mma B-fragment order,
    unsplit (the kernel splits them as it loads them, which halves the bytes every block
    reads), shape ``(ceil(N/8), ceil(C/8), 16, 32, 2)``."""
    return b_fragments(transform_weights(w, xp), xp, split=False)


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
