"""Two chained 1x1 convolutions in one launch (``kernels_cu/pointwise_pair.cu``), forward only.

``y = act1(conv1x1(x, w1) + b1 (+ residual))`` is stored and
``z = act2(conv1x1(y, w2) + b2)`` computed from it in the same launch: in a
Tucker-format CNN one layer's last 1x1 feeds the next layer's first, and at
batch 1 each of those launches is latency, not arithmetic.  A block owns ``p``
pixels of a sample and a slice of the middle channels; the ``cl`` blocks of a
thread-block cluster (one per slice) add their partial sums of ``z``.  ``mma``
tiles run both products on the tensor cores at fp32 accuracy (3xTF32, sm_80+),
FMA tiles on the CUDA cores.  A residual block's 1x1 projection shortcut may join the
first product as more input channels.  The inference engine times the pair against the
two launches it replaces when it tunes (:mod:`tensorconv.engine.passes`); here the tile
is a cost heuristic unless given.
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
    output_buffer,
)
from tensorconv.ops import direct_conv, pointwise_conv
from tensorconv.ops._launch import (
    CHAIN_THREADS,
    a_fragments,
    cdiv,
    has_clusters,
    has_tf32_mma,
    launch,
    mma_scratch_floats,
    mma_stride,
    no_out_on_cpu,
    product_scratch_floats,
    ptr,
    push_slot_floats,
    round_up,
    up4,
)

FILE = "pointwise_pair.cu"


@dataclass(frozen=True)
class Problem:
    """``n`` samples of ``hw`` pixels: ``c`` input channels (a shortcut's included) -> ``m``
    middle channels (y) -> ``j`` output channels (z)."""

    n: int
    hw: int
    c: int
    m: int
    j: int


@dataclass(frozen=True)
class Tile:
    """``p`` pixels x a ``1 / cl`` slice of the middle channels per block of 256
    threads; the ``cl`` slices of a pixel tile form one thread-block cluster;
    ``mma``: the products on the tensor cores (3xTF32)."""

    p: int
    cl: int
    mma: bool = False

    def slice(self, m: int) -> int:
        """Middle channels per block: ceil(m / cl) rounded up to a multiple of 4 (16
        for mma tiles)."""
        return round_up(cdiv(m, self.cl), 16 if self.mma else 4)

    def padded_j(self, j: int) -> int:
        """z's channels as the kernel computes them: rounded up to 4 (16 for mma)."""
        return round_up(j, 16 if self.mma else 4)

    def share(self, j: int) -> int:
        """Partial sums of z each block of a cluster owns (``tdcx::PushReduce``)."""
        return up4(cdiv(self.padded_j(j) * self.p, self.cl))

    def slots_offset(self, prob: Problem) -> int:
        """Float offset of the push slots: after x, A and y slices (x and y twice, split,
        for mma), the B slice and the split partials (the layout ``conv1x1_pair`` computes)."""
        c, m, j = prob.c, prob.m, prob.j
        mb, jp = self.slice(m), self.padded_j(j)
        if self.mma:
            ck, ps = round_up(c, 8), mma_stride(self.p)
            red = max(mma_scratch_floats(mb, self.p), mma_scratch_floats(jp, self.p))
            return 2 * ck * ps + ck * mb + 2 * mb * ps + mb * jp + red
        red = max(product_scratch_floats(mb, self.p), product_scratch_floats(jp, self.p))
        return c * self.p + c * mb + mb * self.p + mb * jp + red

    def smem_bytes(self, prob: Problem) -> int:
        return 4 * (self.slots_offset(prob) + push_slot_floats(self.cl, self.share(prob.j)))

    def grid(self, prob: Problem) -> tuple[int, int, int]:
        """(pixel tiles, batch, slices): the cluster spans z."""
        return cdiv(prob.hw, self.p), prob.n, self.cl

    def packed_shapes(self, prob: Problem) -> tuple[tuple, tuple]:
        """Shapes of :func:`pack_weights`' two arrays for this tile."""
        mb, jp = self.slice(prob.m), self.padded_j(prob.j)
        if self.mma:
            ck = round_up(prob.c, 8)
            return (self.cl, mb // 16, ck // 8, 32, 4), (self.cl, jp // 16, mb // 8, 32, 4)
        return (prob.c, self.cl * mb), (self.cl * mb, jp)


TILES = tuple(Tile(p, cl) for p in (4, 8, 16, 32, 64) for cl in (1, 2, 4, 8)) + tuple(
    Tile(p, cl, True) for p in (8, 16, 32, 64) for cl in (1, 2, 4, 8))


def supported(g1: ConvGeometry, g2: ConvGeometry) -> str | None:
    """Why the pair kernel cannot run ``g1`` then ``g2`` (None when it can; wide layers
    may still not fit in shared memory: :func:`candidates`)."""
    for name, g in (("w1", g1), ("w2", g2)):
        if (why := pointwise_conv.supported(g)) is not None:
            return f"{name} {why}"
    if g2.c != g1.k or (g2.n, g2.h, g2.w) != (g1.n, g1.oh, g1.ow):
        return f"w2 must take w1's output ({g1.k} channels), got {g2.c} input channels"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Tiles whose shared memory fits ``p``, with no empty slice; cluster tiles only where
    the device has clusters (sm_90), mma tiles where it has tf32 tensor cores (sm_80)."""
    return [t for t in TILES
            if t.smem_bytes(p) <= facts.smem_per_block_optin
            and (t.cl - 1) * t.slice(p.m) < p.m and (t.cl == 1 or has_clusters(facts))
            and (has_tf32_mma(facts) or not t.mma)]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The FMA tile of least estimated time: waves of blocks x (a thread's FMAs + the
    block's staged floats at 16 per cycle); tuned engines time every tile, the mma
    ones included, instead."""
    def cost(t: Tile) -> float:
        mb = t.slice(p.m)
        waves = cdiv(int(np.prod(t.grid(p))), facts.sm_count)
        per_block = (t.p * mb * (p.c + up4(p.j)) / CHAIN_THREADS
                     + (p.c * (t.p + mb) + mb * up4(p.j)) / 16)
        return waves * per_block
    tiles = [t for t in candidates(p, facts) if not t.mma]
    if not tiles:
        raise ValueError(f"conv1x1_pair: {p.c} -> {p.m} -> {p.j} channels do not fit in "
                         "shared memory")
    return min(tiles, key=cost)


def pack_weights(w1, w2, tile: Tile, skip_w=None):
    """``(at, bt)`` as the kernel reads them for ``tile``, zero-padded.  FMA tiles:
    ``w1`` (M, C, 1, 1) transposed to (C, cl * MB) and ``w2`` (J, M, 1, 1) to
    (cl * MB, JP) (MB: :meth:`Tile.slice`, JP: :meth:`Tile.padded_j`).  mma
    tiles: each slice's ``w1`` rows (MB, C8) and ``w2`` columns (JP, MB) in
    A-fragment order (:func:`tensorconv.ops._launch.a_fragments`), slice after slice
    (C8: C rounded up to 8).  A projection shortcut's ``skip_w`` (M, C2, 1, 1) joins
    ``w1`` as C2 more input channels (C -> C + C2)."""
    xp = backend.array_module(w1)
    if skip_w is not None:
        w1 = xp.concatenate([w1, skip_w], axis=1)
    m, c = w1.shape[:2]
    j = w2.shape[0]
    cl, mb, jp = tile.cl, tile.slice(m), tile.padded_j(j)
    if tile.mma:
        a = xp.zeros((cl * mb, round_up(c, 8)), np.float32)
        a[:m, :c] = w1.reshape(m, c)
        b = xp.zeros((jp, cl * mb), np.float32)
        b[:j, :m] = w2.reshape(j, m)
        return (a_fragments(a.reshape(cl, mb, -1)),
                a_fragments(b.reshape(jp, cl, mb).transpose(1, 0, 2)))
    at = xp.zeros((c, cl * mb), np.float32)
    at[:, :m] = w1.reshape(m, c).T
    bt = xp.zeros((cl * mb, jp), np.float32)
    bt[:m, :j] = w2.reshape(j, m).T
    return at, bt


def _name(p: int, cl: int, mma: bool) -> str:
    return f"conv1x1_pair<{p}, {cl}, {'true' if mma else 'false'}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` runs (at the current precision)."""
    return (cuda.kernel_ref(FILE, _name(tile.p, tile.cl, tile.mma)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile of :data:`TILES`."""
    return sorted(_name(t.p, t.cl, t.mma) for t in TILES)


def conv1x1_pair(x, w1, w2, b1=None, b2=None, *, residual=None, skip_x=None, skip_w=None,
                 skip_stride: int = 1, relu1: bool = False, relu2: bool = False,
                 tile: Tile | None = None, packed=None, y_out=None, z_out=None):
    """``y = relu1?(conv1x1(x, w1) + b1 + residual + conv1x1(skip_x, skip_w, skip_stride))``,
    ``z = relu2?(conv1x1(y, w2) + b2)``.

    The ``skip`` term is a residual block's projection shortcut (its bias folded
    into ``b1`` by the caller), computed in the same launch as more input channels
    of the first product.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w1 : array, (M, C, 1, 1), float32
    w2 : array, (J, M, 1, 1), float32
    b1 : array, (M,), float32, optional
    b2 : array, (J,), float32, optional
    residual : array, (N, M, H, W), float32, optional
        Added to ``y`` before ``relu1``.
    skip_x : array, (N, C2, H2, W2), float32, optional
        The shortcut's input; a 1x1 convolution of stride ``skip_stride`` (no
        padding) must map it to (N, M, H, W).  Needs ``skip_w``.
    skip_w : array, (M, C2, 1, 1), float32, optional
    skip_stride : int
    relu1, relu2 : bool
    tile : Tile, optional
        One of :func:`candidates`; default :func:`default_tile`.
    packed : tuple, optional
        :func:`pack_weights` of ``w1, w2`` (and ``skip_w``) for ``tile``, prepared once.
    y_out : array, (N, M, H, W), float32, optional (GPU only)
    z_out : array, (N, J, H, W), float32, optional (GPU only)

    Returns
    -------
    (y, z) : arrays, (N, M, H, W) and (N, J, H, W), float32
    """
    check_bools(relu1=relu1, relu2=relu2)
    x, w1, b1, _, g1 = conv_call(x, w1, b1, names=("x", "w1", "b1"))
    w2 = backend.as_array(w2, "w2")
    xp = backend.array_module(x)
    check_array(w2, "w2", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if w2.shape[1] != g1.k:
        raise ValueError(f"w2 must take w1's {g1.k} output channels, got w2 of shape "
                         f"{tuple(w2.shape)}")
    g2 = conv_geometry(g1.output_shape, w2.shape)
    b2 = check_vector(b2, "b2", g2.k, xp, "output channel of w2")
    if (why := supported(g1, g2)) is not None:
        raise ValueError(f"conv1x1_pair: {why} (w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)})")
    gs, skip_x, skip_w = _check_skip(skip_x, skip_w, skip_stride, g1, xp)
    residual = check_residual(residual, g1.output_shape, xp)
    if xp is np:
        no_out_on_cpu(y_out=y_out, z_out=z_out)
        if gs is not None:
            short = direct_conv.conv2d(skip_x, skip_w, stride=gs.stride)
            residual = short if residual is None else residual + short
        y = direct_conv.conv2d(x, w1, b1, relu=relu1, residual=residual)
        return y, direct_conv.conv2d(y, w2, b2, relu=relu2)
    p = Problem(g1.n, g1.h * g1.w, g1.c + (0 if gs is None else gs.c), g1.k, g2.k)
    facts = backend.device_facts()
    tiles = candidates(p, facts)
    if tile is None:
        tile = default_tile(p, facts)
    elif tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {p.c} -> {p.m} -> {p.j} channels, "
                         f"got {tile}")
    if packed is None:
        packed = pack_weights(w1, w2, tile, skip_w)
    at, bt = packed
    shapes = tile.packed_shapes(p)
    if (tuple(at.shape), tuple(bt.shape)) != shapes:
        raise ValueError(f"packed weights are for another tile or shape: at {tuple(at.shape)}, "
                         f"bt {tuple(bt.shape)}; expected {shapes[0]}, {shapes[1]}")
    y = output_buffer(xp, y_out, g1.output_shape, "y_out")
    z = output_buffer(xp, z_out, g2.output_shape, "z_out")
    plane2, w2_in, s2 = (0, 0, 1) if gs is None else (gs.h * gs.w, gs.w, gs.stride[0])
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (CHAIN_THREADS,), (
        x, at, ptr(b1), ptr(residual), y, bt, ptr(b2), z, ptr(skip_x),
        i32(g1.c), i32(p.hw), i32(p.m), i32(tile.slice(p.m)), i32(p.j), i32(tile.padded_j(p.j)),
        i32(bool(relu1)), i32(bool(relu2)), i32(p.c - g1.c), i32(plane2), i32(w2_in),
        i32(g1.w), i32(s2), i32(tile.slots_offset(p)),
        cuda.fast_div(tile.share(p.j) if tile.cl > 1 else 1)),  # no slots without a cluster
        tile.smem_bytes(p))
    return y, z


def _check_skip(skip_x, skip_w, stride, g1: ConvGeometry, xp):
    """``(geometry, skip_x, skip_w)`` of the shortcut, checked to produce y's shape
    (all None without one)."""
    if skip_x is None and skip_w is None:
        return None, None, None
    if skip_x is None or skip_w is None:
        raise ValueError("skip_x and skip_w go together (the projection shortcut's input "
                         "and weights)")
    skip_x, skip_w = backend.as_array(skip_x, "skip_x"), backend.as_array(skip_w, "skip_w")
    check_array(skip_x, "skip_x", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    check_array(skip_w, "skip_w", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if not isinstance(stride, (int, np.integer)) or stride < 1:
        raise ValueError(f"skip_stride must be a positive int, got {stride!r}")
    if tuple(skip_w.shape[2:]) != (1, 1) or skip_w.shape[0] != g1.k:
        raise ValueError(f"skip_w must be ({g1.k}, C2, 1, 1), got {tuple(skip_w.shape)}")
    gs = conv_geometry(skip_x.shape, skip_w.shape, stride=int(stride))
    if gs.output_shape != g1.output_shape:
        raise ValueError(f"the shortcut maps skip_x {tuple(skip_x.shape)} to "
                         f"{gs.output_shape} at stride {stride}; y is {g1.output_shape}")
    return gs, skip_x, skip_w
