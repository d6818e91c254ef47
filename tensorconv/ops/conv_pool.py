"""A convolution followed by max pooling in one launch (``kernels_cu/conv_maxpool.cu``):
the ImageNet stem of ResNets and DenseNets (7x7 stride-2 conv, BN folded, ReLU, 3x3
stride-2 max pool); forward only, for the inference engine.

The conv runs on the tensor cores at fp32 accuracy (3xTF32) as an implicit GEMM
over the input patch under a block's pooling windows, so it suits few input
channels (the patch of all of them sits in shared memory).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.autograd.functions.pooling import pool_args, pooled_size
from tensorconv.checks import check_conv_args
from tensorconv.ops.conv import cdiv, output_buffer
from tensorconv.ops.pointwise_pair import mma_fragments
from tensorconv.ops.tucker_tf32x3 import round_tf32

_FILE = "conv_maxpool.cu"
_WARPS = 8          # 256 threads
_MAX_TILES_PER_WARP = 8  # n8 accumulator tiles a warp holds (3 x 4 registers each)


@dataclass(frozen=True)
class ConvPoolTile:
    """A block's ``th`` x ``tw`` pooled pixels and ``nb`` output channels (16, 32 or 64:
    one m16 strip per warp group)."""

    th: int = 4
    tw: int = 4
    nb: int = 32

    def conv_tile(self, pool_kernel: int, pool_stride: int) -> tuple[int, int]:
        """The conv outputs the block's pooling windows read (rows, columns)."""
        return ((self.th - 1) * pool_stride + pool_kernel,
                (self.tw - 1) * pool_stride + pool_kernel)

    def tiles_per_warp(self, pool_kernel: int, pool_stride: int) -> int:
        th, tw = self.conv_tile(pool_kernel, pool_stride)
        return cdiv(cdiv(th * tw, 8), _WARPS // (self.nb // 16))

    def smem_bytes(self, c: int, r: int, s: int, stride: int, pool_kernel: int,
                   pool_stride: int) -> int:
        """Weights and the patch, both split in two parts (the patch plus a zero plane),
        the offset tables; the conv outputs reuse that memory afterwards."""
        th, tw = self.conv_tile(pool_kernel, pool_stride)
        plane = ((th - 1) * stride + r) * ((tw - 1) * stride + s)
        k8 = 8 * cdiv(c * r * s, 8)
        staged = (self.nb // 16) * k8 * 32 + 2 * (c + 1) * plane + k8 + 8 * cdiv(th * tw, 8)
        return 4 * max(staged, self.nb * th * tw)

    def grid(self, n: int, m: int, ph: int, pw: int) -> tuple[int, int, int]:
        return cdiv(pw, self.tw), cdiv(ph, self.th), n * self.slices(m)

    def slices(self, m: int) -> int:
        return cdiv(m, self.nb)


TILES = tuple(ConvPoolTile(th, tw, nb) for th, tw in ((2, 4), (4, 4), (4, 8), (8, 8), (4, 16))
              for nb in (16, 32, 64))
DEFAULT_TILE = ConvPoolTile(4, 4, 32)


def fitting_tiles(c: int, r: int, s: int, stride: int, pool_kernel: int, pool_stride: int,
                  smem_limit: int | None = None) -> list[ConvPoolTile]:
    """Tiles whose accumulators fit a warp's registers and whose patch fits shared memory
    (``smem_limit`` bytes; default: the current device's opt-in limit)."""
    limit = backend.device_facts().smem_per_block_optin if smem_limit is None else smem_limit
    return [t for t in TILES
            if t.tiles_per_warp(pool_kernel, pool_stride) <= _MAX_TILES_PER_WARP
            and t.smem_bytes(c, r, s, stride, pool_kernel, pool_stride) <= limit]


def supported(geom, pool_kernel, pool_stride) -> str | None:
    """Why the fused kernel cannot run conv ``geom`` then this max pool, or None; whether
    a tile fits is :func:`fitting_tiles`' answer."""
    if geom.dilation != (1, 1) or geom.groups != 1:
        return "the fused conv + max pool supports neither dilation nor groups"
    if geom.stride[0] != geom.stride[1]:
        return f"the fused conv + max pool takes equal strides, not {geom.stride}"
    if pool_kernel[0] != pool_kernel[1] or pool_stride[0] != pool_stride[1]:
        return (f"the fused conv + max pool takes square pooling windows and strides, not "
                f"{pool_kernel} / {pool_stride}")
    return None


def pack_weights(w, tile: ConvPoolTile):
    """``w`` (M, C, R, S) as the kernel reads it: (M, C R S) zero-padded to (slices *
    ``tile.nb``, K8) (K8: C R S rounded up to 8) in :func:`mma_fragments` order, each
    fragment as its tf32 part then the remainder's: (slices nb / 16, K8 / 8, 2, 32, 4)."""
    xp = backend.array_module(w)
    m, k = w.shape[0], int(np.prod(w.shape[1:]))
    padded = xp.zeros((tile.slices(m) * tile.nb, 8 * cdiv(k, 8)), np.float32)
    padded[:m, :k] = w.reshape(m, k)
    big = round_tf32(padded, xp)
    return xp.ascontiguousarray(xp.stack([mma_fragments(big), mma_fragments(padded - big)],
                                         axis=2))


def conv2d_maxpool(x, w, bias=None, stride=1, padding=0, pool_kernel=3, pool_stride=None,
                   pool_padding=0, *, relu: bool = False, tile: ConvPoolTile = DEFAULT_TILE,
                   packed=None, out=None):
    """``y = max_pool2d(act(conv2d(x, w) + bias))``, act ReLU or identity.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (M, C, R, S), float32, C-contiguous
    bias : array, (M,), float32, optional
    stride, padding : int or (int, int)
        The convolution's; strides equal in both axes.
    pool_kernel, pool_stride, pool_padding : int or (int, int)
        The max pool's, as PyTorch's ``max_pool2d`` (square windows and strides;
        stride defaults to the window; padding at most half of it, padded cells
        ignored).
    relu : bool
        ReLU after the bias, before pooling.
    tile : ConvPoolTile
        One of :func:`fitting_tiles` for these sizes; the engine times them.
    packed : array, optional
        ``pack_weights(w, tile)``, prepared once by a caller that launches repeatedly.
    out : array, (N, M, PH, PW), float32, optional (GPU only)

    Returns
    -------
    array, (N, M, PH, PW), float32

    A NaN input propagates as through a conv then a pooling launch; an infinite one
    may come out NaN where they give +-inf (a 3xTF32 product of inf and a weight's
    zero remainder).
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    if bias is not None:
        bias = backend.as_array(bias, "bias")
    xp = backend.array_module(x)
    geom = check_conv_args(x, w, bias, stride, padding, dtype=np.float32, contiguous=True)
    pk, ps, pp = pool_args(pool_kernel, pool_stride, pool_padding)
    if geom.oh + 2 * pp[0] < pk[0] or geom.ow + 2 * pp[1] < pk[1]:
        raise ValueError(f"pooling window {pk} larger than the padded conv output "
                         f"{(geom.oh, geom.ow)}")
    ph, pw = pooled_size(geom.oh, geom.ow, pk, ps, pp)
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        y = reference.conv2d(x, w, bias, geom.stride, geom.padding)
        y = np.maximum(y, 0) if relu else y
        return reference.pool2d(y, pk, ps, pp, "max").astype(np.float32)
    issue = supported(geom, pk, ps)
    if issue is not None:
        raise ValueError(issue)
    fitting = fitting_tiles(geom.c, geom.r, geom.s, geom.stride[0], pk[0], ps[0])
    if not fitting:
        raise ValueError(f"x has {geom.c} channels: a block's weights and input patch do not "
                         f"fit shared memory")
    if tile not in fitting:
        raise ValueError(f"tile must be one of {fitting}, got {tile}")
    k8s = cdiv(geom.c * geom.r * geom.s, 8)
    expected = (tile.slices(geom.k) * tile.nb // 16, k8s, 2, 32, 4)
    if packed is None:
        packed = pack_weights(w, tile)
    elif tuple(packed.shape) != expected or packed.dtype != np.float32:
        raise ValueError(f"packed has shape {tuple(packed.shape)}; pack_weights(w, tile) "
                         f"gives {expected}")
    out = output_buffer(xp, out, (geom.n, geom.k, ph, pw))
    name = (f"conv_maxpool<{geom.r}, {geom.s}, {geom.stride[0]}, {pk[0]}, {ps[0]}, "
            f"{tile.th}, {tile.tw}, {tile.nb}>")
    kernel = cuda.get_kernel(_FILE, name)
    smem = tile.smem_bytes(geom.c, geom.r, geom.s, geom.stride[0], pk[0], ps[0])
    cuda.set_dynamic_smem(kernel, smem)
    i32 = np.int32
    args = (x, packed, np.uintp(0) if bias is None else bias, out, i32(geom.c), i32(geom.h),
            i32(geom.w), i32(geom.k), i32(geom.oh), i32(geom.ow), i32(ph), i32(pw),
            i32(geom.padding[0]), i32(geom.padding[1]), i32(pp[0]), i32(pp[1]),
            i32(tile.slices(geom.k)), i32(relu))
    kernel(tile.grid(geom.n, geom.k, ph, pw), (32 * _WARPS,), args, shared_mem=smem)
    return out
