"""3x3 stride-1 convolution by Winograd's F(2x2, 3x3) at fp32 accuracy (``kernels_cu/winograd_conv.cu``).

The ``"winograd"`` variant of :func:`tensorconv.ops.tucker.core_conv2d`: each 2x2
output tile is ``A^T [(G g G^T) . (B^T d B)] A``, the channel sums of the 16
transformed points are 16 GEMMs on ``mma.sync`` tf32 tiles with every operand
split into two tf32 parts (3xTF32, as :mod:`tensorconv.ops.tucker_tf32x3`), so the
result keeps fp32 accuracy with 2.25x fewer multiplies than the direct
convolution.  It pays off where a dense 3x3 layer has many channels on a large
plane (a ResNet's first stage).  This module owns the weight transform and
packing, the tile, the launch; :func:`tensorconv.tuning.oracle.tune_winograd_tile`
times every tile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry
from tensorconv.ops.tucker_tf32x3 import pack_weights

_FILE = "winograd_conv.cu"
THREADS = 256                 # the kernel's WINO_THREADS: 8 warps, two points each
WARP_TILES_M = (1, 2)         # WM: 16-tile rows per warp (16 or 32 Winograd tiles per block)
WARP_TILES_N = (1, 2, 4)      # WN: 8-channel tiles per warp (= per block)
TILE_WIDTHS = (2, 4, 8, 16, 32)

# G of F(2x2, 3x3): U = G g G^T maps a 3x3 filter to its 4x4 transformed tile.
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


@dataclass(frozen=True)
class WinogradTile:
    """Launch shape of the ``"winograd"`` kernel.

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

    def smem_bytes(self) -> int:
        """Two stages of split transformed inputs, or the 16 points of every
        (tile, channel) at the end, whichever is larger."""
        slabs = 2 * 2 * 16 * self.ck * (self.tiles + 8)
        points = 16 * 8 * self.wn * (self.tiles + 4)
        return 4 * max(slabs, points)

    def grid(self, geom: ConvGeometry) -> tuple[int, int, int]:
        """(tile blocks, batch x channel blocks, 1)."""
        th, tw = winograd_tiles(geom)
        return (-(-th // self.tbh) * -(-tw // self.tbw), geom.n * -(-geom.k // (8 * self.wn)), 1)


def winograd_tiles(geom: ConvGeometry) -> tuple[int, int]:
    """(rows, columns) of 2x2 output tiles covering the output."""
    return -(-geom.oh // 2), -(-geom.ow // 2)


def supported(geom: ConvGeometry) -> str | None:
    """None when the ``"winograd"`` kernel runs ``geom``; otherwise the reason it cannot."""
    if (geom.r, geom.s) != (3, 3):
        return f"the winograd kernel takes 3x3 filters only, not {geom.r}x{geom.s}"
    if geom.stride != (1, 1):
        return f"the winograd kernel takes stride 1 only, not {geom.stride}"
    if geom.dilation != (1, 1) or geom.groups != 1:
        return "the winograd kernel supports neither dilation nor groups"
    if backend.device_facts().compute_capability < (8, 0):
        return "the winograd kernel needs tf32 tensor cores (sm_80 or newer)"
    return None


def check_tile(tile: WinogradTile) -> None:
    """Raise ``ValueError`` naming what is wrong with ``tile``."""
    from tensorconv.ops.tucker import check_smem

    if tile.wm not in WARP_TILES_M or tile.wn not in WARP_TILES_N:
        raise ValueError(f"tile.wm must be in {WARP_TILES_M} and tile.wn in {WARP_TILES_N}, "
                         f"got {tile}")
    if tile.tbw not in TILE_WIDTHS or tile.tiles % tile.tbw:
        raise ValueError(f"tile.tbw must be in {TILE_WIDTHS} and divide the block's "
                         f"{tile.tiles} tiles, got {tile}")
    check_smem(tile, tile.smem_bytes())


def candidates(geom: ConvGeometry, smem_limit: int) -> list[WinogradTile]:
    """Every tile worth timing: no more channel tiles than the output needs, rows of
    tiles no wider than the output's (rounded up to a power of two)."""
    n8_need = -(-geom.k // 8)
    _, tiles_w = winograd_tiles(geom)
    out = []
    for wm in WARP_TILES_M:
        for wn in WARP_TILES_N:
            if wn > 1 and wn >= 2 * n8_need:
                continue
            for tbw in TILE_WIDTHS:
                t = WinogradTile(wm, wn, tbw)
                if (t.tiles % tbw == 0 and (tbw == 2 or tbw < 2 * tiles_w)
                        and t.smem_bytes() <= smem_limit):
                    out.append(t)
    return out


def default_tile(geom: ConvGeometry) -> WinogradTile:
    """An untimed choice: 16 tiles as a 4 x 4 square (8 x 8 output pixels; 2 wide on narrow
    outputs) and as many channel tiles as the output needs, up to 4."""
    wn = next(v for v in WARP_TILES_N if 8 * v >= min(geom.k, 32))
    return WinogradTile(1, wn, 4 if winograd_tiles(geom)[1] > 2 else 2)


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


def prepare_weights(w, xp=None):
    """The kernel's weight operand: :func:`transform_weights` in mma B-fragment order
    (:func:`tensorconv.ops.tucker_tf32x3.pack_weights` unsplit: the kernel splits them
    as it loads them, which halves the bytes every block reads), shape
    ``(ceil(N/8), ceil(C/8), 16, 32, 2)``."""
    return pack_weights(transform_weights(w, xp), xp, split=False)


def packed_shape(geom: ConvGeometry) -> tuple[int, ...]:
    """Shape of :func:`prepare_weights` for ``geom``'s weights."""
    return (-(-geom.k // 8), -(-geom.c // 8), 16, 32, 2)


def kernel(tile: WinogradTile):
    """The compiled ``winograd_f2x2_3x3_tf32x3`` instantiation for ``tile``."""
    return cuda.get_kernel(_FILE, f"winograd_f2x2_3x3_tf32x3<{tile.wm}, {tile.wn}>")


def launch(x, w_packed, out, geom: ConvGeometry, tile: WinogradTile,
           epilogue=(None, None, False)) -> None:
    """Run the kernel on checked arguments (``core_conv2d`` checks them); ``epilogue``:
    (bias or None, residual or None, relu)."""
    from tensorconv.ops.tucker import epilogue_args

    k = kernel(tile)
    smem = tile.smem_bytes()
    cuda.set_dynamic_smem(k, smem)
    tiles_h, tiles_w = winograd_tiles(geom)
    i32 = np.int32
    k(tile.grid(geom), (THREADS,), (
        x, w_packed, out, *epilogue_args(epilogue), i32(geom.c), i32(geom.h), i32(geom.w),
        i32(geom.k), i32(geom.oh), i32(geom.ow), i32(geom.padding[0]), i32(geom.padding[1]),
        i32(tiles_h), i32(tiles_w), i32(tile.tbw), i32(-(-tiles_w // tile.tbw)),
        i32(-(-geom.k // (8 * tile.wn)))), shared_mem=smem)
