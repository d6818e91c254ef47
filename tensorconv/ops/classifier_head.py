"""A CNN's classifier head, global average pool then linear, as one launch
(``kernels_cu/classifier_head.cu``); forward only, for the inference engine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.backend import DeviceFacts
from tensorconv.checks import check_array, check_vector, output_buffer
from tensorconv.ops._launch import cdiv, has_clusters, launch, no_out_on_cpu, ptr

FILE = "classifier_head.cu"
WARPS = 8  # 256 threads


@dataclass(frozen=True)
class Problem:
    """``n`` samples of ``c`` channels over ``hw`` pixels -> ``k`` outputs."""

    n: int
    c: int
    hw: int
    k: int


@dataclass(frozen=True)
class Tile:
    """``opw`` outputs per warp (8 warps per block); the ``cl`` blocks of a thread-block
    cluster split the channel means between them (``cl`` 1: every block averages all)."""

    cl: int = 1
    opw: int = 4

    def share(self, c: int) -> int:
        """Channels each cluster rank averages: ceil(c / cl) rounded up to 4."""
        return cdiv(cdiv(c, self.cl), 4) * 4

    def smem_bytes(self, p: Problem) -> int:
        return 4 * max(p.c, self.cl * self.share(p.c))

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(cluster columns, samples, cluster ranks) for ``p.k`` outputs."""
        blocks = cdiv(p.k, WARPS * self.opw)
        return cdiv(blocks, self.cl), p.n, self.cl


TILES = tuple(Tile(cl, opw) for cl in (1, 2, 4, 8) for opw in (1, 4))
DEFAULT_TILE = Tile(1, 4)


def supported(p: Problem) -> str | None:
    """Every head runs here (None); very many channels may not fit: :func:`candidates`."""
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Tiles whose channel means fit in shared memory; cluster tiles only on sm_90."""
    return [t for t in TILES if t.smem_bytes(p) <= facts.smem_per_block_optin
            and (t.cl == 1 or has_clusters(facts))]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """:data:`DEFAULT_TILE` (no timing)."""
    return DEFAULT_TILE


def _name(cl: int, opw: int) -> str:
    return f"gap_linear<{cl}, {opw}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` runs."""
    return (cuda.kernel_ref(FILE, _name(tile.cl, tile.opw)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile of :data:`TILES`."""
    return sorted(_name(t.cl, t.opw) for t in TILES)


def gap_linear(x, w, bias=None, *, out=None, tile: Tile = DEFAULT_TILE):
    """``y = mean(x, axis=(2, 3)) @ w.T + bias``.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (K, C), float32, C-contiguous — the linear layer's weight
    bias : array, (K,), float32, optional
    out : array, (N, K), float32, optional (GPU only)
    tile : Tile
        One of :func:`candidates`; the engine times them.

    Returns
    -------
    array, (N, K), float32
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    check_array(w, "w", ndim=2, dtype=np.float32, contiguous=True, xp=xp)
    n, c, h, wd = x.shape
    p = Problem(n, c, h * wd, w.shape[0])
    if w.shape[1] != c:
        raise ValueError(f"w has {w.shape[1]} input features; x has {c} channels")
    bias = check_vector(bias, "bias", p.k, xp, "output of w")
    if xp is np:
        no_out_on_cpu(out=out)
        return reference.gap_linear(x, w, bias).astype(np.float32)
    facts = backend.device_facts()
    if tile.smem_bytes(p) > facts.smem_per_block_optin:
        raise ValueError(f"x has {c} channels; their means need {tile.smem_bytes(p)} bytes of "
                         "shared memory, more than a block may have")
    if tile not in (fitting := candidates(p, facts)):
        raise ValueError(f"tile must be one of {fitting}, got {tile}")
    out = output_buffer(xp, out, (n, p.k))
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (32 * WARPS,),
           (x, w, ptr(bias), out, i32(c), i32(p.hw), i32(p.k), i32(tile.share(c))),
           tile.smem_bytes(p))
    return out
