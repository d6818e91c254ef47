"""A Tucker layer's core convolution, its last 1x1 and the next layer's first 1x1 in one
launch (``kernels_cu/tucker_tail.cu``), forward only.

``t = core(u)``, ``y = act1(conv1x1(t, w_last) + b_last (+ residual))`` (stored) and,
when ``w_next`` is given, ``z = act2(conv1x1(y, w_next) + b_next)``.  A block owns
``p`` output pixels and holds every weight of the three in shared memory, so the
kernel serves the narrow stages of a network (e.g. ResNet-18's 64- and 128-channel
stages with Tucker ranks ~28 / ~55); :func:`fitting_tiles` says where it fits.  The
inference engine times it against the launches it replaces when it tunes
(``tensorconv.nn.engine``); here the tile is a heuristic unless given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import (ConvGeometry, check_array, check_conv_args, conv_geometry,
                               core_conv_issue)
from tensorconv.ops import conv as dense
from tensorconv.ops import pointwise
from tensorconv.ops.pointwise_pair import product_scratch_floats, up4

_FILE = "tucker_tail.cu"
_THREADS = 256
MAX_FILTER = 7


@dataclass(frozen=True)
class TailTile:
    """``p`` output pixels per block of 256 threads."""

    p: int

    def smem_bytes(self, k: int, d2: int, m: int, j: int) -> int:
        """Columns (k = D1 R S rows), core weights, core outputs, A, y, B and the split
        partials: the layout ``tucker_tail`` computes."""
        p, d2p, mp, jp = self.p, up4(d2), up4(m), up4(j)
        red = max(product_scratch_floats(o, p) for o in (d2p, mp, jp) if o)
        return 4 * (k * p + k * d2p + d2p * p + d2p * mp + mp * p + mp * jp + red)

    def grid(self, hw_out: int, n: int) -> tuple[int, int, int]:
        return -(-hw_out // self.p), n, 1


TILES = tuple(TailTile(p) for p in (4, 8, 16, 32, 64))


def supported(core: ConvGeometry, last: ConvGeometry, nxt: ConvGeometry | None) -> str | None:
    """Why the kernel cannot run ``core`` -> ``last`` (-> ``nxt``); None when it can (wide
    layers may still not fit in shared memory: :func:`fitting_tiles`)."""
    if (why := core_conv_issue(core, "Tucker tail", MAX_FILTER)) is not None:
        return why
    for name, g in (("w_last", last), ("w_next", nxt)):
        if g is not None and (why := pointwise.supported(g)) is not None:
            return f"{name} {why}"
    if last.c != core.k:
        return f"w_last must take the core's {core.k} output channels, got {last.c}"
    if nxt is not None and nxt.c != last.k:
        return f"w_next must take w_last's {last.k} output channels, got {nxt.c}"
    return None


def fitting_tiles(k: int, d2: int, m: int, j: int) -> list[TailTile]:
    """The tiles whose shared memory fits ``k = D1 R S`` -> ``d2`` -> ``m`` -> ``j``."""
    limit = backend.device_facts().smem_per_block_optin
    return [t for t in TILES if t.smem_bytes(k, d2, m, j) <= limit]


def default_tile(k: int, d2: int, m: int, j: int, hw_out: int, n: int,
                 sm_count: int = 132) -> TailTile:
    """The largest fitting tile whose grid still gives every SM a block, else the smallest."""
    tiles = fitting_tiles(k, d2, m, j)
    if not tiles:
        raise ValueError(f"tucker_tail: {k} core rows -> {d2} -> {m} -> {j} channels do not "
                         "fit in shared memory")
    full = [t for t in tiles if np.prod(t.grid(hw_out, n)) >= sm_count]
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


def tucker_tail(u, w_core, stride, padding, w_last, w_next=None, b_last=None, b_next=None, *,
                residual=None, relu1: bool = False, relu2: bool = False,
                tile: TailTile | None = None, packed=None, y_out=None, z_out=None):
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
    tile : TailTile, optional
        One of :data:`TILES` that fits; default :func:`default_tile`.
    packed : tuple, optional
        :func:`pack_weights` of the three weights, prepared once.
    y_out : array, (N, M, OH, OW), float32, optional (GPU only)
    z_out : array, (N, J, OH, OW), float32, optional (GPU only)

    Returns
    -------
    (y, z) : arrays; ``z`` is None without ``w_next``
    """
    u, w_core, w_last = (backend.as_array(a, name) for a, name in
                         ((u, "u"), (w_core, "w_core"), (w_last, "w_last")))
    w_next = None if w_next is None else backend.as_array(w_next, "w_next")
    b_last = None if b_last is None else backend.as_array(b_last, "b_last")
    b_next = None if b_next is None else backend.as_array(b_next, "b_next")
    if b_next is not None and w_next is None:
        raise ValueError("b_next needs w_next")
    core = check_conv_args(u, w_core, None, stride, padding, dtype=np.float32, contiguous=True)
    xp = backend.array_module(u)
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
    for b, name, g in ((b_last, "b_last", last), (b_next, "b_next", nxt)):
        if b is not None:
            check_array(b, name, ndim=1, dtype=np.float32, contiguous=True, xp=xp)
            if b.shape[0] != g.k:
                raise ValueError(f"{name} has {b.shape[0]} entries; expected {g.k}")
    why = supported(core, last, nxt)
    if why is not None:
        raise ValueError(f"tucker_tail: {why}")
    if xp is np:
        if y_out is not None or z_out is not None:
            raise ValueError("y_out and z_out are supported on the GPU path only")
        t = dense.conv2d(u, w_core, None, core.stride, core.padding)
        y = dense.conv2d(t, w_last, b_last, relu=relu1, residual=residual)
        return y, (None if w_next is None else dense.conv2d(y, w_next, b_next, relu=relu2))
    k, d2, m = core.c * core.r * core.s, core.k, last.k
    j = 0 if nxt is None else nxt.k
    hw_out = core.oh * core.ow
    tiles = fitting_tiles(k, d2, m, j)
    if tile is None:
        tile = default_tile(k, d2, m, j, hw_out, core.n, backend.device_facts().sm_count)
    elif tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {k} core rows -> {d2} -> {m} -> {j} "
                         f"channels, got {tile}")
    residual = dense.check_residual(residual, last, xp)
    if packed is None:
        packed = pack_weights(w_core, w_last, w_next)
    wct, at, bt = packed
    shapes = ((k, up4(d2)), (up4(d2), up4(m)), None if nxt is None else (up4(m), up4(j)))
    got = tuple(None if a is None else tuple(a.shape) for a in packed)
    if got != shapes:
        raise ValueError(f"packed weights have shapes {got}; expected {shapes}")
    y = dense.output_buffer(xp, y_out, last.output_shape, "y_out")
    z = None if nxt is None else dense.output_buffer(xp, z_out, nxt.output_shape, "z_out")
    kernel = cuda.get_kernel(_FILE, f"tucker_tail<{tile.p}, {core.r}, {core.s}, "
                                    f"{core.stride[0]}>")
    smem = tile.smem_bytes(k, d2, m, j)
    cuda.set_dynamic_smem(kernel, smem)
    null, i32 = np.uintp(0), np.int32
    opt = lambda a: null if a is None else a  # noqa: E731
    kernel(tile.grid(hw_out, core.n), (_THREADS,), (
        u, wct, at, opt(b_last), opt(residual), y, opt(bt), opt(b_next), opt(z),
        i32(core.c), i32(core.h), i32(core.w), i32(core.ow), i32(hw_out),
        i32(core.padding[0]), i32(core.padding[1]), i32(up4(d2)), i32(m), i32(up4(m)),
        i32(j), i32(up4(j) if j else 0), i32(bool(relu1)), i32(bool(relu2))), shared_mem=smem)
    return y, z
