"""A CNN's classifier head, global average pool then linear, as one launch
(``kernels_cu/classifier_head.cu``); forward only, for the inference engine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import check_array
from tensorconv.ops.conv import output_buffer

_FILE = "classifier_head.cu"
_WARPS = 8  # 256 threads


@dataclass(frozen=True)
class HeadTile:
    """``opw`` outputs per warp (8 warps per block); the ``cl`` blocks of a thread-block
    cluster split the channel means between them (``cl`` 1: every block averages all)."""

    cl: int = 1
    opw: int = 4

    def share(self, c: int) -> int:
        """Channels each cluster rank averages: ceil(c / cl) rounded up to 4."""
        per_rank = -(-c // self.cl)
        return -(-per_rank // 4) * 4

    def smem_bytes(self, c: int) -> int:
        return 4 * max(c, self.cl * self.share(c))

    def grid(self, n: int, k: int) -> tuple[int, int, int]:
        """(cluster columns, samples, cluster ranks) for ``k`` outputs."""
        blocks = -(-k // (_WARPS * self.opw))
        return -(-blocks // self.cl), n, self.cl


TILES = tuple(HeadTile(cl, opw) for cl in (1, 2, 4, 8) for opw in (1, 4))
DEFAULT_TILE = HeadTile(1, 4)


def fitting_tiles(c: int) -> list[HeadTile]:
    """Tiles whose channel means fit in shared memory; cluster tiles only on sm_90."""
    facts = backend.device_facts()
    return [t for t in TILES if t.smem_bytes(c) <= facts.smem_per_block_optin
            and (t.cl == 1 or facts.compute_capability >= (9, 0))]


def gap_linear(x, w, bias=None, *, out=None, tile: HeadTile = DEFAULT_TILE):
    """``y = mean(x, axis=(2, 3)) @ w.T + bias``.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (K, C), float32, C-contiguous — the linear layer's weight
    bias : array, (K,), float32, optional
    out : array, (N, K), float32, optional (GPU only)
    tile : HeadTile
        One of :data:`TILES` that fits (:func:`fitting_tiles`); the engine times them.

    Returns
    -------
    array, (N, K), float32
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    check_array(w, "w", ndim=2, dtype=np.float32, contiguous=True, xp=xp)
    n, c, h, wd = x.shape
    k = w.shape[0]
    if w.shape[1] != c:
        raise ValueError(f"w has {w.shape[1]} input features; x has {c} channels")
    if bias is not None:
        bias = backend.as_array(bias, "bias")
        check_array(bias, "bias", ndim=1, dtype=np.float32, contiguous=True, xp=xp)
        if bias.shape[0] != k:
            raise ValueError(f"bias has {bias.shape[0]} entries; w has {k} outputs")
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        return reference.gap_linear(x, w, bias).astype(np.float32)
    smem = tile.smem_bytes(c)
    if smem > backend.device_facts().smem_per_block_optin:
        raise ValueError(f"x has {c} channels; their means need {smem} bytes of shared memory, "
                         f"more than a block may have")
    if tile not in fitting_tiles(c):
        raise ValueError(f"tile must be one of {fitting_tiles(c)}, got {tile}")
    out = output_buffer(xp, out, (n, k))
    kernel = cuda.get_kernel(_FILE, f"gap_linear<{tile.cl}, {tile.opw}>")
    cuda.set_dynamic_smem(kernel, smem)
    i32 = np.int32
    kernel(tile.grid(n, k), (32 * _WARPS,),
           (x, w, np.uintp(0) if bias is None else bias, out, i32(c), i32(h * wd), i32(k),
            i32(tile.share(c))), shared_mem=smem)
    return out
