"""1x1 convolution for small batches (``kernels_cu/pointwise_conv.cu``), forward only.

One block per P pixels x KB output channels of a sample does the whole reduction over
C after a single round of copies: at batch 1 the 1x1 layers of a Tucker-format CNN are
latency, not arithmetic.  Bias, a residual and ReLU are fused.  The inference engine
times it against the implicit GEMM when it tunes (:mod:`tensorconv.engine.dense`); here
the tile is a heuristic unless given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry, check_bools, check_packed, conv_call, output_buffer
from tensorconv.ops import direct_conv
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu, ptr

FILE = "pointwise_conv.cu"
Problem = ConvGeometry
THREADS = 256


@dataclass(frozen=True)
class Tile:
    """``p`` pixels x ``kb`` output channels per block of 256 threads; each thread owns
    ``kb / (256 / p)`` output channels of one pixel."""

    p: int
    kb: int

    def smem_bytes(self, prob: Problem) -> int:
        return 4 * prob.c * (self.p + self.kb)

    def grid(self, prob: Problem) -> tuple[int, int, int]:
        return cdiv(prob.oh * prob.ow, self.p), cdiv(prob.k, self.kb), prob.n


TILES = tuple(Tile(p, kb) for p, kb in
              ((16, 16), (32, 16), (32, 32), (64, 32), (64, 64), (128, 32)))


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``'s shape (None when it can; very many input
    channels may still not fit in shared memory: :func:`candidates`)."""
    if (p.r, p.s) != (1, 1) or p.stride != (1, 1) or p.padding != (0, 0):
        return "needs a 1x1 filter, stride 1 and no padding"
    if p.groups != 1:
        return "needs groups == 1"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """The tiles whose shared memory fits ``p``'s input channels."""
    return [t for t in TILES if t.smem_bytes(p) <= facts.smem_per_block_optin]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The largest tile whose grid still gives every SM a block; else the smallest."""
    tiles = candidates(p, facts)
    full = [t for t in tiles if np.prod(t.grid(p)) >= facts.sm_count]
    return max(full, key=lambda t: t.p * t.kb) if full else min(tiles, key=lambda t: t.p * t.kb)


def pack_weights(w):
    """(K, C, 1, 1) weights as the kernel reads them: (C, K), C-contiguous."""
    xp = backend.array_module(w)
    return xp.ascontiguousarray(w.reshape(w.shape[0], w.shape[1]).T)


def packed_shape(p: Problem) -> tuple[int, int]:
    """Shape of :func:`pack_weights` for ``p``'s weights."""
    return p.c, p.k


def _name(p: int, kb: int) -> str:
    return f"conv1x1_pointwise<{p}, {kb}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` runs."""
    return (cuda.kernel_ref(FILE, _name(tile.p, tile.kb)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile of :data:`TILES`."""
    return sorted(_name(t.p, t.kb) for t in TILES)


def conv1x1(x, w, bias=None, *, residual=None, relu: bool = False, tile: Tile | None = None,
            packed=None, out=None):
    """``relu?(conv1x1(x, w) + bias + residual)`` (fp32, NCHW).

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (K, C, 1, 1), float32
    bias : array, (K,), float32, optional
    residual : array, (N, K, H, W), float32, optional
    relu : bool
    tile : Tile, optional
        One of :func:`candidates`; default :func:`default_tile`.
    packed : array, (C, K), float32, optional
        :func:`pack_weights` of ``w``, prepared once (else transposed per call).
    out : array, (N, K, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, H, W), float32
    """
    check_bools(relu=relu)
    x, w, bias, residual, p = conv_call(x, w, bias, residual)
    if (why := supported(p)) is not None:
        raise ValueError(f"conv1x1 {why}: got w of shape {tuple(w.shape)}")
    xp = backend.array_module(x)
    if xp is np:
        no_out_on_cpu(out=out)
        return direct_conv.conv2d(x, w, bias, relu=relu, residual=residual)
    facts = backend.device_facts()
    tiles = candidates(p, facts)
    if not tiles:
        raise ValueError(f"conv1x1: {p.c} input channels do not fit in shared memory")
    if tile is not None and tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {p.c} input channels, got {tile}")
    tile = tile or default_tile(p, facts)
    packed = (pack_weights(w) if packed is None else
              check_packed(packed, "packed", packed_shape(p), xp, "pack_weights(w)"))
    out = output_buffer(xp, out, p.output_shape)
    run(x, packed, out, p, tile, (bias, residual, bool(relu)))
    return out


def run(x, packed, out, p: Problem, tile: Tile, epilogue=(None, None, False)) -> None:
    """Launch on checked arguments (``epilogue``: bias or None, residual or None, relu)."""
    bias, residual, relu = epilogue
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (THREADS,), (
        x, packed, ptr(bias), ptr(residual), out, i32(p.c), i32(p.h * p.w), i32(p.k),
        i32(bool(relu))), tile.smem_bytes(p))
