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
from tensorconv.backend import DeviceFacts
from tensorconv.checks import (
    ConvGeometry,
    check_bools,
    check_window_fits,
    conv_call,
    output_buffer,
    pool_args,
    pooled_size,
)
from tensorconv.ops._launch import a_fragments, cdiv, launch, no_out_on_cpu, ptr, round_tf32

FILE = "conv_maxpool.cu"
WARPS = 8                 # 256 threads
MAX_TILES_PER_WARP = 8    # n8 accumulator tiles a warp holds (3 x 4 registers each)


@dataclass(frozen=True)
class Problem:
    """The convolution's geometry, then the max pool's square window and stride and its
    padding (pairs, as :func:`tensorconv.checks.pool_args` gives them)."""

    conv: ConvGeometry
    pool_kernel: tuple[int, int]
    pool_stride: tuple[int, int]
    pool_padding: tuple[int, int]

    @property
    def pooled(self) -> tuple[int, int]:
        return pooled_size(self.conv.oh, self.conv.ow, self.pool_kernel, self.pool_stride,
                           self.pool_padding)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.conv.n, self.conv.k) + self.pooled


@dataclass(frozen=True)
class Tile:
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
        """The n8 accumulator tiles each warp holds (at most :data:`MAX_TILES_PER_WARP`)."""
        th, tw = self.conv_tile(pool_kernel, pool_stride)
        return cdiv(cdiv(th * tw, 8), WARPS // (self.nb // 16))

    def smem_bytes(self, p: Problem) -> int:
        """Weights and the patch, both split in two parts (the patch plus a zero plane),
        the offset tables; the conv outputs reuse that memory afterwards."""
        g = p.conv
        th, tw = self.conv_tile(p.pool_kernel[0], p.pool_stride[0])
        plane = ((th - 1) * g.stride[0] + g.r) * ((tw - 1) * g.stride[0] + g.s)
        k8 = 8 * cdiv(g.c * g.r * g.s, 8)
        staged = (self.nb // 16) * k8 * 32 + 2 * (g.c + 1) * plane + k8 + 8 * cdiv(th * tw, 8)
        return 4 * max(staged, self.nb * th * tw)

    def slices(self, m: int) -> int:
        return cdiv(m, self.nb)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        ph, pw = p.pooled
        return cdiv(pw, self.tw), cdiv(ph, self.th), p.conv.n * self.slices(p.conv.k)


TILES = tuple(Tile(th, tw, nb) for th, tw in ((2, 4), (4, 4), (4, 8), (8, 8), (4, 16))
              for nb in (16, 32, 64))
DEFAULT_TILE = Tile(4, 4, 32)


def supported(p: Problem) -> str | None:
    """Why the fused kernel cannot run the conv then this max pool, or None; whether a
    tile fits is :func:`candidates`' answer."""
    g = p.conv
    if g.dilation != (1, 1) or g.groups != 1:
        return "the fused conv + max pool supports neither dilation nor groups"
    if g.stride[0] != g.stride[1]:
        return f"the fused conv + max pool takes equal strides, not {g.stride}"
    if p.pool_kernel[0] != p.pool_kernel[1] or p.pool_stride[0] != p.pool_stride[1]:
        return (f"the fused conv + max pool takes square pooling windows and strides, not "
                f"{p.pool_kernel} / {p.pool_stride}")
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Tiles whose accumulators fit a warp's registers and whose patch fits shared memory."""
    pk, ps = p.pool_kernel[0], p.pool_stride[0]
    return [t for t in TILES if t.tiles_per_warp(pk, ps) <= MAX_TILES_PER_WARP
            and t.smem_bytes(p) <= facts.smem_per_block_optin]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """:data:`DEFAULT_TILE` where it fits, else the first that does (no timing)."""
    tiles = candidates(p, facts)
    return DEFAULT_TILE if DEFAULT_TILE in tiles else tiles[0]


def pack_weights(w, tile: Tile):
    """``w`` (M, C, R, S) as the kernel reads it: (M, C R S) zero-padded to (slices *
    ``tile.nb``, K8) (K8: C R S rounded up to 8) in A-fragment order, each fragment as
    its tf32 part then the remainder's: (slices nb / 16, K8 / 8, 2, 32, 4)."""
    xp = backend.array_module(w)
    m, k = w.shape[0], int(np.prod(w.shape[1:]))
    padded = xp.zeros((tile.slices(m) * tile.nb, 8 * cdiv(k, 8)), np.float32)
    padded[:m, :k] = w.reshape(m, k)
    big = round_tf32(padded, xp)
    return xp.ascontiguousarray(xp.stack([a_fragments(big), a_fragments(padded - big)],
                                         axis=2))


def packed_shape(p: Problem, tile: Tile) -> tuple[int, ...]:
    """Shape of :func:`pack_weights` for ``p``'s weights on ``tile``."""
    g = p.conv
    return (tile.slices(g.k) * tile.nb // 16, cdiv(g.c * g.r * g.s, 8), 2, 32, 4)


def _name(r, s, stride, pk, ps, th, tw, nb) -> str:
    return f"conv_maxpool<{r}, {s}, {stride}, {pk}, {ps}, {th}, {tw}, {nb}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` on ``p`` runs (at the current precision)."""
    g = p.conv
    return (cuda.kernel_ref(FILE, _name(g.r, g.s, g.stride[0], p.pool_kernel[0],
                                        p.pool_stride[0], tile.th, tile.tw, tile.nb)),)


POOLS = ((3, 2), (2, 2), (3, 1))   # (window, stride) of the max pools CNNs put after a stem


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: on the ImageNet stem's 7x7 stride-2 conv, every tile
    whose accumulators fit under each pool of :data:`POOLS`; the default tile under the
    stem's pool for other square filters and strides."""
    names = {_name(7, 7, 2, pk, ps, t.th, t.tw, t.nb) for pk, ps in POOLS for t in TILES
             if t.tiles_per_warp(pk, ps) <= MAX_TILES_PER_WARP}
    d = DEFAULT_TILE
    names |= {_name(r, r, st, 3, 2, d.th, d.tw, d.nb) for r in (1, 3, 5, 7) for st in (1, 2)}
    return sorted(names)


def conv2d_maxpool(x, w, bias=None, stride=1, padding=0, pool_kernel=3, pool_stride=None,
                   pool_padding=0, *, relu: bool = False, tile: Tile = DEFAULT_TILE,
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
    tile : Tile
        One of :func:`candidates` for these sizes; the engine times them.
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
    check_bools(relu=relu)
    x, w, bias, _, g = conv_call(x, w, bias, None, stride, padding)
    xp = backend.array_module(x)
    p = Problem(g, *pool_args(pool_kernel, pool_stride, pool_padding,
                              names=("pool_kernel", "pool_stride", "pool_padding")))
    pk, pp = p.pool_kernel, p.pool_padding
    check_window_fits(g.oh + 2 * pp[0], g.ow + 2 * pp[1], pk)
    if xp is np:
        no_out_on_cpu(out=out)
        y = reference.conv2d(x, w, bias, g.stride, g.padding)
        y = np.maximum(y, 0) if relu else y
        return reference.pool2d(y, pk, p.pool_stride, pp, "max").astype(np.float32)
    if (issue := supported(p)) is not None:
        raise ValueError(issue)
    fitting = candidates(p, backend.device_facts())
    if not fitting:
        raise ValueError(f"x has {g.c} channels: a block's weights and input patch do not "
                         f"fit shared memory")
    if tile not in fitting:
        raise ValueError(f"tile must be one of {fitting}, got {tile}")
    if packed is None:
        packed = pack_weights(w, tile)
    elif tuple(packed.shape) != packed_shape(p, tile) or packed.dtype != np.float32:
        raise ValueError(f"packed has shape {tuple(packed.shape)}; pack_weights(w, tile) "
                         f"gives {packed_shape(p, tile)}")
    out = output_buffer(xp, out, p.output_shape)
    ph, pw = p.pooled
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (32 * WARPS,), (
        x, packed, ptr(bias), out, i32(g.c), i32(g.h), i32(g.w), i32(g.k), i32(g.oh),
        i32(g.ow), i32(ph), i32(pw), i32(g.padding[0]), i32(g.padding[1]), i32(pp[0]),
        i32(pp[1]), i32(tile.slices(g.k)), i32(relu)), tile.smem_bytes(p))
    return out
