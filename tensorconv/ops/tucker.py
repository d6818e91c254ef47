"""Tucker-format core convolution (``kernels_cu/tucker_core_conv.cu``).

Two variants of the core R x S convolution D1 -> D2 of a Tucker-format layer:

* ``"tdc"`` — the paper's scheme (TDC, PPoPP'23, Listing 2): a block per
  TH x TW x TC input tile, one thread per output channel, the input cube staged
  once, weights in CRSN order, channel-tile partial sums added atomically.
* ``"igemm"`` — our implicit-GEMM kernel (:mod:`tensorconv.ops.conv`), whose
  split reduction keeps the GPU busy where the paper's scheme is weak (large
  H x W with few channels).

Only 3 x 3 filters have ``"tdc"`` instantiations; other sizes run ``"igemm"``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry, check_array, check_conv_args
from tensorconv.ops import conv as dense

_FILE = "tucker_core_conv.cu"
VARIANTS = ("tdc", "igemm")
TILE_SIDES = (1, 2, 4, 7, 8)        # TH, TW instantiated in tucker_core_conv.cu
MAX_TILE_OUTPUTS = 32               # TH * TW register accumulators per thread
_SUPPORTED_FILTERS = ((3, 3),)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoreTile:
    """A block's share of the core convolution: TH x TW outputs of TC input channels."""

    th: int
    tw: int
    tc: int

    def smem_bytes(self, geom: ConvGeometry) -> int:
        iht = (self.th - 1) * geom.stride[0] + geom.r
        iwt = (self.tw - 1) * geom.stride[1] + geom.s
        return 4 * self.tc * iht * iwt

    def blocks(self, geom: ConvGeometry) -> int:
        """Thread blocks of one launch (the paper's num_blks, times the batch)."""
        return (-(-geom.oh // self.th) * -(-geom.ow // self.tw) * -(-geom.c // self.tc)
                * geom.n)


def tdc_supported(geom: ConvGeometry) -> str | None:
    """None when the ``"tdc"`` kernel runs ``geom``; otherwise the reason it cannot."""
    if (geom.r, geom.s) not in _SUPPORTED_FILTERS:
        return f"the tdc kernel is instantiated for 3x3 filters only, not {geom.r}x{geom.s}"
    if geom.dilation != (1, 1) or geom.groups != 1:
        return "the tdc kernel supports neither dilation nor groups"
    if geom.k > 1024:
        return f"the tdc kernel has one thread per output channel: {geom.k} > 1024"
    return None


def candidate_tiles(geom: ConvGeometry, smem_limit: int) -> list[CoreTile]:
    """Every valid (TH, TW, TC): instantiated sides, TC a power of two up to C (and C itself)."""
    tcs = sorted({min(geom.c, 1 << i) for i in range(12)} | {geom.c})
    out = []
    for th in TILE_SIDES:
        for tw in TILE_SIDES:
            if th * tw > MAX_TILE_OUTPUTS or th > max(geom.oh, 1) * 2 or tw > max(geom.ow, 1) * 2:
                continue
            for tc in tcs:
                t = CoreTile(th, tw, tc)
                if t.smem_bytes(geom) <= smem_limit:
                    out.append(t)
    return out


def to_crsn(w):
    """Core weights (N, C, R, S) -> the kernel's CRSN order (C, R, S, N), contiguous."""
    return backend.array_module(w).ascontiguousarray(w.transpose(1, 2, 3, 0))


def _check_tile(tile: CoreTile, geom: ConvGeometry) -> None:
    if tile.th not in TILE_SIDES or tile.tw not in TILE_SIDES:
        raise ValueError(f"tile sides must be in {TILE_SIDES}, got {tile}")
    if tile.th * tile.tw > MAX_TILE_OUTPUTS:
        raise ValueError(f"tile {tile} has {tile.th * tile.tw} outputs per thread; "
                         f"at most {MAX_TILE_OUTPUTS}")
    if not 1 <= tile.tc <= geom.c:
        raise ValueError(f"tile.tc must be in 1..{geom.c}, got {tile.tc}")
    limit = backend.device_facts().smem_per_block_optin
    if tile.smem_bytes(geom) > limit:
        raise ValueError(f"tile {tile} needs {tile.smem_bytes(geom)} bytes of shared memory; "
                         f"the device allows {limit}")


def tdc_kernel(tile: CoreTile, geom: ConvGeometry):
    """The compiled ``tdc_core_conv`` instantiation for ``tile`` (registers: ``.num_regs``)."""
    return cuda.get_kernel(_FILE, f"tdc_core_conv<{tile.th}, {tile.tw}, {geom.r}, {geom.s}>")


def tdc_threads(geom: ConvGeometry) -> int:
    """Threads per block: the output channels, rounded up to whole warps."""
    return 32 * -(-geom.k // 32)


def core_conv2d(x, w, stride=1, padding=0, *, variant: str | None = None,
                tile: CoreTile | None = None, w_crsn=None, out=None):
    """The core convolution of a Tucker-format layer, fp32, NCHW, no bias.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, D1, H, W), float32, C-contiguous
    w : array, (D2, D1, R, S), float32 — the core tensor in our (N, C, R, S) layout
    stride, padding : int or (int, int)
    variant : {"tdc", "igemm"}, optional
        Default ``"tdc"`` when it supports the shape (3x3, no dilation), else
        ``"igemm"`` (logged).
    tile : CoreTile, optional
        ``"tdc"`` tile; default :func:`tensorconv.tuning.tdc_model.choose_tile`.
    w_crsn : array, (D1, R, S, D2), optional
        :func:`to_crsn` of ``w``, precomputed once (inference) instead of per call.
    out : array, (B, D2, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, D2, OH, OW), float32
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    geom = check_conv_args(x, w, None, stride, padding, 1, 1, dtype=np.float32, contiguous=True)
    xp = backend.array_module(x)
    if xp is np:
        raise TypeError("core_conv2d runs on the GPU: pass CuPy arrays "
                        "(tensorconv.ops.conv2d computes the same on the CPU)")
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    reason = tdc_supported(geom)
    if variant == "tdc" and reason:
        raise ValueError(reason)
    if variant is None:
        variant = "igemm" if reason else "tdc"
        if reason:
            log.info("core_conv2d falls back to igemm: %s", reason)
    if variant == "igemm":
        if tile is not None:
            raise ValueError("tile applies to variant='tdc' only")
        return dense.conv2d(x, w, None, geom.stride, geom.padding, out=out, algorithm="igemm")

    out = dense.output_buffer(xp, out, geom.output_shape)
    if tile is None:
        from tensorconv.tuning.tdc_model import choose_tile

        tile = choose_tile(geom)
    _check_tile(tile, geom)
    if w_crsn is None:
        w_crsn = to_crsn(w)
    else:
        w_crsn = backend.as_array(w_crsn, "w_crsn")
        check_array(w_crsn, "w_crsn", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
        if tuple(w_crsn.shape) != (geom.c, geom.r, geom.s, geom.k):
            raise ValueError(f"w_crsn has shape {tuple(w_crsn.shape)}; expected "
                             f"{(geom.c, geom.r, geom.s, geom.k)} (to_crsn(w))")
    kernel = tdc_kernel(tile, geom)
    smem = tile.smem_bytes(geom)
    cuda.set_dynamic_smem(kernel, smem)
    tiles_w = -(-geom.ow // tile.tw)
    tiles_hw = -(-geom.oh // tile.th) * tiles_w
    c_tiles = -(-geom.c // tile.tc)
    atomic = c_tiles > 1
    if atomic:
        out.fill(0)
    i32 = np.int32
    kernel((tiles_hw * c_tiles, geom.n), (tdc_threads(geom),), (
        x, w_crsn, out, i32(geom.c), i32(geom.h), i32(geom.w), i32(geom.k), i32(geom.oh),
        i32(geom.ow), i32(geom.stride[0]), i32(geom.stride[1]), i32(geom.padding[0]),
        i32(geom.padding[1]), i32(tile.tc), i32(tiles_w), i32(tiles_hw), i32(atomic)),
        shared_mem=smem)
    return out
