"""A Tucker layer's core convolution, its last 1x1 and the next layer's first 1x1 in one
launch (``kernels_cu/tucker_tail.cu``), forward only.

``t = core(u)``, ``y = act1(conv1x1(t, w_last) + b_last (+ residual))`` (stored) and,
when ``w_next`` is given, ``z = act2(conv1x1(y, w_next) + b_next)``.  A block owns
``p`` output pixels and holds every weight of the three in shared memory, so the
kernel serves the narrow stages of a network (e.g. ResNet-18's 64- and 128-channel
stages with Tucker ranks ~28 / ~55); :func:`candidates` says where it fits.  The
inference engine times it against the launches it replaces when it tunes
(:mod:`tensorconv.engine.tucker`); here the tile is a heuristic unless given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.backend import DeviceFacts
from tensorconv.checks import (
    ConvGeometry,
    check_array,
    check_bools,
    check_residual,
    check_vector,
    conv_call,
    conv_geometry,
    core_conv_issue,
    output_buffer,
)
from tensorconv.ops import direct_conv, pointwise_conv
from tensorconv.ops._launch import (
    CHAIN_THREADS,
    cdiv,
    filter_cover,
    launch,
    no_out_on_cpu,
    product_scratch_floats,
    ptr,
    up4,
)

FILE = "tucker_tail.cu"
MAX_FILTER = 7


@dataclass(frozen=True)
class Problem:
    """The core's geometry (``u`` -> ``t``), then ``m`` channels of ``y`` and ``j`` of ``z``
    (0: no next 1x1)."""

    core: ConvGeometry
    m: int
    j: int = 0

    @property
    def rows(self) -> int:
        """The core's reduction, D1 R S: one im2col column per output pixel."""
        return self.core.c * self.core.r * self.core.s

    @property
    def hw_out(self) -> int:
        return self.core.oh * self.core.ow


@dataclass(frozen=True)
class Tile:
    """``p`` output pixels per block of 256 threads."""

    p: int

    def smem_bytes(self, prob: Problem) -> int:
        """Columns (D1 R S rows), core weights, core outputs, A, y, B and the split
        partials: the layout ``tucker_tail`` computes."""
        p, k, d2p, mp, jp = self.p, prob.rows, up4(prob.core.k), up4(prob.m), up4(prob.j)
        red = max(product_scratch_floats(o, p) for o in (d2p, mp, jp) if o)
        return 4 * (k * p + k * d2p + d2p * p + d2p * mp + mp * p + mp * jp + red)

    def grid(self, prob: Problem) -> tuple[int, int, int]:
        return cdiv(prob.hw_out, self.p), prob.core.n, 1


TILES = tuple(Tile(p) for p in (4, 8, 16, 32, 64))


def supported(core: ConvGeometry, last: ConvGeometry, nxt: ConvGeometry | None) -> str | None:
    """Why the kernel cannot run ``core`` -> ``last`` (-> ``nxt``); None when it can (wide
    layers may still not fit in shared memory: :func:`candidates`)."""
    if (why := core_conv_issue(core, "Tucker tail", MAX_FILTER)) is not None:
        return why
    for name, g in (("w_last", last), ("w_next", nxt)):
        if g is not None and (why := pointwise_conv.supported(g)) is not None:
            return f"{name} {why}"
    if last.c != core.k:
        return f"w_last must take the core's {core.k} output channels, got {last.c}"
    if nxt is not None and nxt.c != last.k:
        return f"w_next must take w_last's {last.k} output channels, got {nxt.c}"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """The tiles whose shared memory fits ``p``'s weights and columns."""
    return [t for t in TILES if t.smem_bytes(p) <= facts.smem_per_block_optin]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The largest fitting tile whose grid still gives every SM a block, else the smallest."""
    tiles = candidates(p, facts)
    if not tiles:
        raise ValueError(f"tucker_tail: {p.rows} core rows -> {p.core.k} -> {p.m} -> {p.j} "
                         "channels do not fit in shared memory")
    full = [t for t in tiles if np.prod(t.grid(p)) >= facts.sm_count]
    return max(full, key=lambda t: t.p) if full else min(tiles, key=lambda t: t.p)


def pack_weights(w_core, w_last, w_next=None):
    """``(wct, at, bt)`` as the kernel reads them: the core (D2, D1, R, S) as (D1 R S, D2P),
    ``w_last`` (M, D2, 1, 1) as (D2P, MP), ``w_next`` (J, M, 1, 1) as (MP, JP) (None
    without it); transposed and zero-padded to multiples of 4."""
    xp = backend.array_module(w_core)
    d2, k = w_core.shape[0], int(np.prod(w_core.shape[1:]))
    m = w_last.shape[0]
    wct = xp.zeros((k, up4(d2)), np.float32)
    wct[:, :d2] = w_core.reshape(d2, k).T
    at = xp.zeros((up4(d2), up4(m)), np.float32)
    at[:d2, :m] = w_last.reshape(m, d2).T
    if w_next is None:
        return wct, at, None
    j = w_next.shape[0]
    bt = xp.zeros((up4(m), up4(j)), np.float32)
    bt[:m, :j] = w_next.reshape(j, m).T
    return wct, at, bt


def packed_shapes(p: Problem) -> tuple:
    """Shapes of :func:`pack_weights`' arrays for ``p`` (None for an absent ``w_next``)."""
    d2p, mp = up4(p.core.k), up4(p.m)
    return (p.rows, d2p), (d2p, mp), (mp, up4(p.j)) if p.j else None


def _name(p: int, r: int, s: int, stride: int) -> str:
    return f"tucker_tail<{p}, {r}, {s}, {stride}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` on ``p`` runs."""
    return (cuda.kernel_ref(FILE, _name(tile.p, p.core.r, p.core.s, p.core.stride[0])),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile on a 3x3 core, and one tile on every
    core filter size of ``filter_cover`` at either stride."""
    names = {_name(t.p, 3, 3, st) for t in TILES for st in (1, 2)}
    names |= {_name(16, r, s, st) for r, s in filter_cover(MAX_FILTER) for st in (1, 2)}
    return sorted(names)


def tucker_tail_conv2d(u, w_core, stride, padding, w_last, w_next=None, b_last=None, b_next=None, *,
                residual=None, relu1: bool = False, relu2: bool = False,
                tile: Tile | None = None, packed=None, y_out=None, z_out=None):
    """``y = relu1?(conv1x1(core(u), w_last) + b_last + residual)``; with ``w_next``
    also ``z = relu2?(conv1x1(y, w_next) + b_next)``.

    Parameters
    ----------
    u : array, (N, D1, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w_core : array, (D2, D1, R, S), float32
    stride, padding : int or pair
        Of the core convolution.
    w_last : array, (M, D2, 1, 1), float32
    w_next : array, (J, M, 1, 1), float32, optional
    b_last : array, (M,), float32, optional
    b_next : array, (J,), float32, optional (with ``w_next``)
    residual : array, (N, M, OH, OW), float32, optional
        Added to ``y`` before ``relu1``.
    relu1, relu2 : bool
    tile : Tile, optional
        One of :func:`candidates`; default :func:`default_tile`.
    packed : tuple, optional
        :func:`pack_weights` of the three weights, prepared once.
    y_out : array, (N, M, OH, OW), float32, optional (GPU only)
    z_out : array, (N, J, OH, OW), float32, optional (GPU only)

    Returns
    -------
    (y, z) : arrays; ``z`` is None without ``w_next``
    """
    check_bools(relu1=relu1, relu2=relu2)
    u, w_core, _, _, core = conv_call(u, w_core, None, None, stride, padding,
                                      names=("u", "w_core", "bias"))
    xp = backend.array_module(u)
    w_last = backend.as_array(w_last, "w_last")
    w_next = None if w_next is None else backend.as_array(w_next, "w_next")
    if b_next is not None and w_next is None:
        raise ValueError("b_next needs w_next")
    for a, name in ((w_last, "w_last"), (w_next, "w_next")):
        if a is not None:
            check_array(a, name, ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if w_last.shape[1] != core.k:
        raise ValueError(f"w_last must take the core's {core.k} output channels, got w_last of "
                         f"shape {tuple(w_last.shape)}")
    last = conv_geometry(core.output_shape, w_last.shape)
    if w_next is not None and w_next.shape[1] != last.k:
        raise ValueError(f"w_next must take w_last's {last.k} output channels, got w_next of "
                         f"shape {tuple(w_next.shape)}")
    nxt = None if w_next is None else conv_geometry(last.output_shape, w_next.shape)
    b_last = check_vector(b_last, "b_last", last.k, xp, "output channel of w_last")
    if nxt is not None:
        b_next = check_vector(b_next, "b_next", nxt.k, xp, "output channel of w_next")
    if (why := supported(core, last, nxt)) is not None:
        raise ValueError(f"tucker_tail: {why}")
    residual = check_residual(residual, last.output_shape, xp)
    if xp is np:
        no_out_on_cpu(y_out=y_out, z_out=z_out)
        t = direct_conv.conv2d(u, w_core, None, core.stride, core.padding)
        y = direct_conv.conv2d(t, w_last, b_last, relu=relu1, residual=residual)
        return y, (None if w_next is None else
                   direct_conv.conv2d(y, w_next, b_next, relu=relu2))
    p = Problem(core, last.k, 0 if nxt is None else nxt.k)
    facts = backend.device_facts()
    tiles = candidates(p, facts)
    if tile is None:
        tile = default_tile(p, facts)
    elif tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {p.rows} core rows -> {core.k} -> "
                         f"{p.m} -> {p.j} channels, got {tile}")
    if packed is None:
        packed = pack_weights(w_core, w_last, w_next)
    got = tuple(None if a is None else tuple(a.shape) for a in packed)
    if got != packed_shapes(p):
        raise ValueError(f"packed weights have shapes {got}; expected {packed_shapes(p)}")
    wct, at, bt = packed
    y = output_buffer(xp, y_out, last.output_shape, "y_out")
    z = None if nxt is None else output_buffer(xp, z_out, nxt.output_shape, "z_out")
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (CHAIN_THREADS,), (
        u, wct, at, ptr(b_last), ptr(residual), y, ptr(bt), ptr(b_next), ptr(z),
        i32(core.c), i32(core.h), i32(core.w), i32(core.ow), i32(p.hw_out),
        i32(core.padding[0]), i32(core.padding[1]), i32(up4(core.k)), i32(p.m), i32(up4(p.m)),
        i32(p.j), i32(up4(p.j) if p.j else 0), i32(bool(relu1)), i32(bool(relu2))),
        tile.smem_bytes(p))
    return y, z
