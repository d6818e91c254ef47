"""1x1 convolution for small batches (``kernels_cu/pointwise_conv.cu``), forward only.

One block per P pixels x KB output channels of a sample does the whole
reduction over C after a single round of copies: at batch 1 the 1x1 layers of
a Tucker-format CNN are latency, not arithmetic.  Bias, a residual and ReLU
are fused.  The inference engine times it against the implicit GEMM when it
tunes (``tensorconv.nn.engine``); here the tile is a heuristic unless given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry, check_conv_args
from tensorconv.ops import conv as dense

_FILE = "pointwise_conv.cu"
_THREADS = 256


@dataclass(frozen=True)
class PointwiseTile:
    """``p`` pixels x ``kb`` output channels per block of 256 threads."""

    p: int
    kb: int

    def smem_bytes(self, c: int) -> int:
        return 4 * c * (self.p + self.kb)

    def grid(self, geom: ConvGeometry) -> tuple[int, int, int]:
        return (-(-geom.oh * geom.ow // self.p), -(-geom.k // self.kb), geom.n)


# The instantiations the kernel file type-checks offline; each thread owns kb / (256 / p)
# output channels of one pixel.
TILES = tuple(PointwiseTile(p, kb) for p, kb in
              ((16, 16), (32, 16), (32, 32), (64, 32), (64, 64), (128, 32)))


def supported(geom: ConvGeometry) -> str | None:
    """Why the kernel cannot run ``geom``'s shape (None when it can; very many input
    channels may still not fit in shared memory: :func:`fitting_tiles`)."""
    if (geom.r, geom.s) != (1, 1) or geom.stride != (1, 1) or geom.padding != (0, 0):
        return "needs a 1x1 filter, stride 1 and no padding"
    if geom.groups != 1:
        return "needs groups == 1"
    return None


def fitting_tiles(geom: ConvGeometry) -> list[PointwiseTile]:
    """The tiles whose shared memory fits ``geom``'s input channels."""
    limit = backend.device_facts().smem_per_block_optin
    return [t for t in TILES if t.smem_bytes(geom.c) <= limit]


def default_tile(geom: ConvGeometry, sm_count: int = 132) -> PointwiseTile:
    """The largest tile whose grid still gives every SM a block; else the smallest."""
    tiles = fitting_tiles(geom)
    full = [t for t in tiles if np.prod(t.grid(geom)) >= sm_count]
    return max(full, key=lambda t: t.p * t.kb) if full else min(tiles, key=lambda t: t.p * t.kb)


def transpose_weights(w):
    """(K, C, 1, 1) weights as the kernel reads them: (C, K), C-contiguous."""
    xp = backend.array_module(w)
    return xp.ascontiguousarray(w.reshape(w.shape[0], w.shape[1]).T)


def conv1x1(x, w, bias=None, *, residual=None, relu: bool = False,
            tile: PointwiseTile | None = None, wt=None, out=None):
    """``relu?(conv1x1(x, w) + bias + residual)`` (fp32, NCHW).

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (K, C, 1, 1), float32
    bias : array, (K,), float32, optional
    residual : array, (N, K, H, W), float32, optional
    relu : bool
    tile : PointwiseTile, optional
        One of :data:`TILES`; default :func:`default_tile`.
    wt : array, (C, K), float32, optional
        :func:`transpose_weights` of ``w``, prepared once (else transposed per call).
    out : array, (N, K, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, H, W), float32
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    bias = None if bias is None else backend.as_array(bias, "bias")
    geom = check_conv_args(x, w, bias, dtype=np.float32, contiguous=True)
    why = supported(geom)
    if why is not None:
        raise ValueError(f"conv1x1 {why}: got w of shape {tuple(w.shape)}")
    xp = backend.array_module(x)
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        return dense.conv2d(x, w, bias, relu=relu, residual=residual)
    tiles = fitting_tiles(geom)
    if not tiles:
        raise ValueError(f"conv1x1: {geom.c} input channels do not fit in shared memory")
    if tile is not None and tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {geom.c} input channels, got {tile}")
    residual = dense.check_residual(residual, geom, xp)
    if wt is None:
        wt = transpose_weights(w)
    elif tuple(wt.shape) != (geom.c, geom.k) or not wt.flags.c_contiguous:
        raise ValueError(f"wt must be C-contiguous of shape {(geom.c, geom.k)}, "
                         f"got {tuple(wt.shape)}")
    out = dense.output_buffer(xp, out, geom.output_shape)
    tile = tile or default_tile(geom, backend.device_facts().sm_count)
    kernel = cuda.get_kernel(_FILE, f"conv1x1_pointwise<{tile.p}, {tile.kb}>")
    smem = tile.smem_bytes(geom.c)
    cuda.set_dynamic_smem(kernel, smem)
    null, i32 = np.uintp(0), np.int32
    kernel(tile.grid(geom), (_THREADS,), (
        x, wt, null if bias is None else bias, null if residual is None else residual, out,
        i32(geom.c), i32(geom.h * geom.w), i32(geom.k), i32(bool(relu))), shared_mem=smem)
    return out
