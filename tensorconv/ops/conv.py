"""Dense fp32 direct convolution (``kernels_cu/direct_conv.cu``).

This module is the pattern for every op of the toolkit: argument checks, tile
choice and launch geometry here in Python; device code only in the ``.cu``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import ConvGeometry, check_array, check_conv_args

_KERNEL_FILE = "direct_conv.cu"
_TK_CHOICES = (16, 8, 4, 2, 1)      # instantiated in direct_conv.cu
_FIXED_FILTERS = ((1, 1), (3, 3))   # filter sizes with an unrolled instantiation
_SMEM_BUDGET = 48 * 1024            # the default per-block limit: no opt-in needed
_MAX_STAGE_CHANNELS = 16


@dataclass(frozen=True)
class DirectConvTile:
    """One block's work: a ``th x tw`` output tile, ``tk`` channels, ``cc`` staged inputs."""

    th: int
    tw: int
    tk: int
    cc: int

    def smem_bytes(self, geom: ConvGeometry) -> int:
        """Dynamic shared memory the tile needs for ``geom`` (input patch + weights)."""
        iht = (self.th - 1) * geom.stride[0] + (geom.r - 1) * geom.dilation[0] + 1
        iwt = (self.tw - 1) * geom.stride[1] + (geom.s - 1) * geom.dilation[1] + 1
        return 4 * self.cc * (iht * iwt + geom.r * geom.s * self.tk)


def _next_pow2(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


def direct_conv_tile(geom: ConvGeometry, sm_count: int = 132) -> DirectConvTile:
    """Pick a tile for ``geom``: fill the output width, ~128 threads, enough blocks.

    The widest ``tk`` (most weight reuse per staged input) that still gives at
    least two blocks per SM is taken; the staged channel count ``cc`` is the
    largest that fits the 48 KiB default shared-memory limit.
    """
    tw = min(32, max(4, _next_pow2(geom.ow)))
    th = min(max(1, 128 // tw), _next_pow2(geom.oh))
    kg = geom.k // geom.groups
    spatial = -(-geom.oh // th) * -(-geom.ow // tw) * geom.n * geom.groups
    tk = 1
    for cand in _TK_CHOICES:
        if cand > 1 and cand >= 2 * kg:
            continue  # more than half the accumulators would be idle
        tk = cand
        if spatial * -(-kg // cand) >= 2 * sm_count:
            break
    per_channel = DirectConvTile(th, tw, tk, 1).smem_bytes(geom)
    cc = max(1, min(geom.c // geom.groups, _MAX_STAGE_CHANNELS, _SMEM_BUDGET // per_channel))
    return DirectConvTile(th, tw, tk, cc)


def _check_tile(tile: DirectConvTile, geom: ConvGeometry) -> None:
    if tile.tk not in _TK_CHOICES:
        raise ValueError(f"tile.tk must be one of {_TK_CHOICES}, got {tile.tk}")
    if min(tile.th, tile.tw, tile.cc) < 1 or tile.th * tile.tw > 1024:
        raise ValueError(f"tile {tile} needs 1 <= th*tw <= 1024 threads and cc >= 1")
    limit = backend.device_facts().smem_per_block_optin
    if tile.smem_bytes(geom) > limit:
        raise ValueError(f"tile {tile} needs {tile.smem_bytes(geom)} bytes of shared memory "
                         f"for this convolution; the device allows {limit}")


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *, relu=False,
           out=None, tile: DirectConvTile | None = None):
    """fp32 2-D convolution (cross-correlation), NCHW, with optional bias and ReLU.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous
        NumPy runs on the CPU; CuPy (or a PyTorch CUDA tensor through DLPack,
        not copied) runs the CUDA kernel.
    w : array, (K, C // groups, R, S), float32, same device as ``x``
    bias : array, (K,), float32, optional
    stride, padding, dilation : int or (int, int)
    groups : int
        Must divide both C and K (``groups == C`` is a depthwise convolution).
    relu : bool
        Apply ``max(., 0)`` after the bias, inside the kernel.
    out : array, (N, K, OH, OW), float32, optional
        Written in place (GPU only); lets a CUDA graph reuse one buffer.
    tile : DirectConvTile, optional
        Overrides the heuristic tile (for tuning).

    Returns
    -------
    array, (N, K, OH, OW), float32, on the device of ``x``
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    bias = None if bias is None else backend.as_array(bias, "bias")
    geom = check_conv_args(x, w, bias, stride, padding, dilation, groups,
                           dtype=np.float32, contiguous=True)
    xp = backend.array_module(x)
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        y = reference.conv2d(x, w, bias, geom.stride, geom.padding, geom.dilation, geom.groups)
        return np.maximum(y, 0, out=y) if relu else y

    if out is None:
        out = xp.empty(geom.output_shape, dtype=np.float32)
    else:
        out = backend.as_array(out, "out")
        check_array(out, "out", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
        if tuple(out.shape) != geom.output_shape:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {geom.output_shape}")
    facts = backend.device_facts()
    tile = tile or direct_conv_tile(geom, facts.sm_count)
    _check_tile(tile, geom)

    kr, ks = (geom.r, geom.s) if (geom.r, geom.s) in _FIXED_FILTERS else (0, 0)
    kernel = cuda.get_kernel(_KERNEL_FILE, f"conv2d_direct_fwd<{tile.tk}, {kr}, {ks}>")
    smem = tile.smem_bytes(geom)
    cuda.set_dynamic_smem(kernel, smem)
    tiles_w = -(-geom.ow // tile.tw)
    k_tiles = -(-(geom.k // geom.groups) // tile.tk)
    grid = (-(-geom.oh // tile.th) * tiles_w, geom.groups * k_tiles, geom.n)
    i32 = np.int32
    args = (x, w, np.uintp(0) if bias is None else bias, out,
            i32(geom.c), i32(geom.h), i32(geom.w), i32(geom.k), i32(geom.oh), i32(geom.ow),
            i32(geom.r), i32(geom.s), i32(geom.stride[0]), i32(geom.stride[1]),
            i32(geom.padding[0]), i32(geom.padding[1]), i32(geom.dilation[0]),
            i32(geom.dilation[1]), i32(geom.groups), i32(tiles_w), i32(k_tiles),
            i32(tile.cc), i32(bool(relu)))
    kernel(grid, (tile.tw, tile.th, 1), args, shared_mem=smem)
    return out
