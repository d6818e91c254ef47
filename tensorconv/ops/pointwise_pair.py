"""Two chained 1x1 convolutions in one launch (``kernels_cu/pointwise_pair.cu``), forward only.

``y = act1(conv1x1(x, w1) + b1 (+ residual))`` is stored and
``z = act2(conv1x1(y, w2) + b2)`` computed from it in the same launch: in a
Tucker-format CNN one layer's last 1x1 feeds the next layer's first, and at
batch 1 each of those launches is latency, not arithmetic.  A block owns ``p``
pixels of a sample and a slice of the middle channels; the ``cl`` blocks of a
thread-block cluster (one per slice) add their partial sums of ``z``.  ``mma``
tiles run both products on the tensor cores at fp32 accuracy (3xTF32, sm_80+),
FMA tiles on the CUDA cores.  The
inference engine times the pair against the two launches it replaces when it
tunes (``tensorconv.nn.engine``); here the tile is a cost heuristic unless given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry, check_array, check_conv_args, conv_geometry
from tensorconv.ops import conv as dense
from tensorconv.ops import pointwise
from tensorconv.ops.tucker import push_slot_floats

_FILE = "pointwise_pair.cu"
_THREADS = 256


def _up(v: int, q: int) -> int:
    return -(-v // q) * q


def up4(v: int) -> int:
    """``v`` rounded up to a multiple of 4 (the kernels' padded widths)."""
    return _up(v, 4)


def product_scratch_floats(o: int, p: int) -> int:
    """Shared floats ``tc::block_product`` (kernels_cu/tc_chain.cuh) needs for ``o``
    outputs x ``p`` pixels: its split partials, ks x o x p, when it splits the reduction
    (fewer 4x4 output tiles than threads), else none."""
    tiles = o // 4 * p // 4
    ks = 1 if tiles >= _THREADS else _THREADS // tiles
    return ks * o * p if ks > 1 else 0


def mma_scratch_floats(o: int, p: int) -> int:
    """The same for ``tc::mma_product``: ks x o x p when there are fewer 16-output
    strips than warps."""
    strips, warps = o // 16, _THREADS // 32
    ks = 1 if strips >= warps else warps // strips
    return ks * o * p if ks > 1 else 0


def mma_stride(p: int) -> int:
    """Row stride of a ``p``-pixel mma operand (``tc::mma_stride``: bank-conflict padding)."""
    return p + 8 if p % 16 == 0 else p


@dataclass(frozen=True)
class PairTile:
    """``p`` pixels x a ``1 / cl`` slice of the middle channels per block of 256
    threads; the ``cl`` slices of a pixel tile form one thread-block cluster;
    ``mma``: the products on the tensor cores (3xTF32)."""

    p: int
    cl: int
    mma: bool = False

    def slice(self, m: int) -> int:
        """Middle channels per block: ceil(m / cl) rounded up to a multiple of 4 (16
        for mma tiles)."""
        return _up(-(-m // self.cl), 16 if self.mma else 4)

    def padded_j(self, j: int) -> int:
        """z's channels as the kernel computes them: rounded up to 4 (16 for mma)."""
        return _up(j, 16 if self.mma else 4)

    def share(self, j: int) -> int:
        """Partial sums of z each block of a cluster owns (``tdcx::PushReduce``)."""
        return up4(-(-self.padded_j(j) * self.p // self.cl))

    def slots_offset(self, c: int, m: int, j: int) -> int:
        """Float offset of the push slots: after x, A and y slices (x and y twice, split,
        for mma), the B slice and the split partials (the layout ``conv1x1_pair`` computes)."""
        mb, jp = self.slice(m), self.padded_j(j)
        if self.mma:
            ck, ps = _up(c, 8), mma_stride(self.p)
            red = max(mma_scratch_floats(mb, self.p), mma_scratch_floats(jp, self.p))
            return 2 * ck * ps + ck * mb + 2 * mb * ps + mb * jp + red
        red = max(product_scratch_floats(mb, self.p), product_scratch_floats(jp, self.p))
        return c * self.p + c * mb + mb * self.p + mb * jp + red

    def smem_bytes(self, c: int, m: int, j: int) -> int:
        slots = push_slot_floats(self.cl, self.share(j))
        return 4 * (self.slots_offset(c, m, j) + slots)

    def grid(self, hw: int, n: int) -> tuple[int, int, int]:
        """(pixel tiles, batch, slices): the cluster spans z."""
        return -(-hw // self.p), n, self.cl

    def packed_shapes(self, c: int, m: int, j: int) -> tuple[tuple, tuple]:
        """Shapes of :func:`pack_weights`' two arrays for this tile."""
        mb, jp = self.slice(m), self.padded_j(j)
        if self.mma:
            ck = _up(c, 8)
            return (self.cl, mb // 16, ck // 8, 32, 4), (self.cl, jp // 16, mb // 8, 32, 4)
        return (c, self.cl * mb), (self.cl * mb, jp)


TILES = tuple(PairTile(p, cl) for p in (4, 8, 16, 32, 64) for cl in (1, 2, 4, 8)) + tuple(
    PairTile(p, cl, True) for p in (8, 16, 32, 64) for cl in (1, 2, 4, 8))


def supported(g1: ConvGeometry, g2: ConvGeometry) -> str | None:
    """Why the pair kernel cannot run ``g1`` then ``g2`` (None when it can; wide layers
    may still not fit in shared memory: :func:`fitting_tiles`)."""
    for name, g in (("w1", g1), ("w2", g2)):
        why = pointwise.supported(g)
        if why is not None:
            return f"{name} {why}"
    if g2.c != g1.k or (g2.n, g2.h, g2.w) != (g1.n, g1.oh, g1.ow):
        return f"w2 must take w1's output ({g1.k} channels), got {g2.c} input channels"
    return None


def fitting_tiles(c: int, m: int, j: int) -> list[PairTile]:
    """Tiles whose shared memory fits ``c`` -> ``m`` -> ``j`` channels, with no empty
    slice; cluster tiles only where the device has clusters (sm_90), mma tiles where it
    has tf32 tensor cores (sm_80)."""
    facts = backend.device_facts()
    clusters = facts.compute_capability >= (9, 0)
    tf32 = facts.compute_capability >= (8, 0)
    return [t for t in TILES
            if t.smem_bytes(c, m, j) <= facts.smem_per_block_optin
            and (t.cl - 1) * t.slice(m) < m and (t.cl == 1 or clusters) and (tf32 or not t.mma)]


def default_tile(c: int, m: int, j: int, hw: int, n: int, sm_count: int = 132) -> PairTile:
    """The FMA tile of least estimated time: waves of blocks x (a thread's FMAs + the
    block's staged floats at 16 per cycle); tuned engines time every tile, the mma
    ones included, instead."""
    def cost(t: PairTile) -> float:
        mb = t.slice(m)
        waves = -(-int(np.prod(t.grid(hw, n))) // sm_count)
        per_block = t.p * mb * (c + up4(j)) / _THREADS + (c * (t.p + mb) + mb * up4(j)) / 16
        return waves * per_block
    tiles = [t for t in fitting_tiles(c, m, j) if not t.mma]
    if not tiles:
        raise ValueError(f"conv1x1_pair: {c} -> {m} -> {j} channels do not fit in shared memory")
    return min(tiles, key=cost)


def mma_fragments(w):
    """``w`` (..., O, K), O a multiple of 16 and K of 8, in mma.m16n8k8 A-fragment order
    (..., O/16, K/8, 32 lanes, 4): lane (g, t) of tile (o, k) holds w[o+g, k+t],
    w[o+g+8, k+t], w[o+g, k+t+4], w[o+g+8, k+t+4] (``tc::mma_product``)."""
    xp = backend.array_module(w)
    *lead, o, k = w.shape
    n = len(lead)
    f = w.reshape(*lead, o // 16, 2, 8, k // 8, 2, 4)  # (o16, o+8?, g, k8, k+4?, t)
    f = f.transpose(*range(n), n, n + 3, n + 2, n + 5, n + 4, n + 1)
    return xp.ascontiguousarray(f).reshape(*lead, o // 16, k // 8, 32, 4)


def pack_weights(w1, w2, tile: PairTile, skip_w=None):
    """``(at, bt)`` as the kernel reads them for ``tile``, zero-padded.  FMA tiles:
    ``w1`` (M, C, 1, 1) transposed to (C, cl * MB) and ``w2`` (J, M, 1, 1) to
    (cl * MB, JP) (MB: :meth:`PairTile.slice`, JP: :meth:`PairTile.padded_j`).  mma
    tiles: each slice's ``w1`` rows (MB, C8) and ``w2`` columns (JP, MB) in
    :func:`mma_fragments` order, slice after slice (C8: C rounded up to 8).  A
    projection shortcut's ``skip_w`` (M, C2, 1, 1) joins ``w1`` as C2 more input
    channels (C -> C + C2)."""
    xp = backend.array_module(w1)
    if skip_w is not None:
        w1 = xp.concatenate([w1, skip_w], axis=1)
    m, c = w1.shape[:2]
    j = w2.shape[0]
    cl, mb, jp = tile.cl, tile.slice(m), tile.padded_j(j)
    if tile.mma:
        a = xp.zeros((cl * mb, _up(c, 8)), np.float32)
        a[:m, :c] = w1.reshape(m, c)
        b = xp.zeros((jp, cl * mb), np.float32)
        b[:j, :m] = w2.reshape(j, m)
        return (mma_fragments(a.reshape(cl, mb, -1)),
                mma_fragments(b.reshape(jp, cl, mb).transpose(1, 0, 2)))
    at = xp.zeros((c, cl * mb), np.float32)
    at[:, :m] = w1.reshape(m, c).T
    bt = xp.zeros((cl * mb, jp), np.float32)
    bt[:m, :j] = w2.reshape(j, m).T
    return at, bt


def conv1x1_pair(x, w1, w2, b1=None, b2=None, *, residual=None, skip_x=None, skip_w=None,
                 skip_stride: int = 1, relu1: bool = False, relu2: bool = False,
                 tile: PairTile | None = None, packed=None, y_out=None, z_out=None):
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
    tile : PairTile, optional
        One of :data:`TILES` that fits; default :func:`default_tile`.
    packed : tuple, optional
        :func:`pack_weights` of ``w1, w2`` (and ``skip_w``) for ``tile``, prepared once.
    y_out : array, (N, M, H, W), float32, optional (GPU only)
    z_out : array, (N, J, H, W), float32, optional (GPU only)

    Returns
    -------
    (y, z) : arrays, (N, M, H, W) and (N, J, H, W), float32
    """
    x, w1, w2 = (backend.as_array(a, name) for a, name in ((x, "x"), (w1, "w1"), (w2, "w2")))
    b1 = None if b1 is None else backend.as_array(b1, "b1")
    b2 = None if b2 is None else backend.as_array(b2, "b2")
    g1 = check_conv_args(x, w1, b1, dtype=np.float32, contiguous=True)
    xp = backend.array_module(x)
    check_array(w2, "w2", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if w2.shape[1] != g1.k:
        raise ValueError(f"w2 must take w1's {g1.k} output channels, got w2 of shape "
                         f"{tuple(w2.shape)}")
    g2 = conv_geometry(g1.output_shape, w2.shape)
    if b2 is not None:
        check_array(b2, "b2", ndim=1, dtype=np.float32, contiguous=True, xp=xp)
        if b2.shape[0] != g2.k:
            raise ValueError(f"b2 has {b2.shape[0]} entries; w2 has {g2.k} output channels")
    why = supported(g1, g2)
    if why is not None:
        raise ValueError(f"conv1x1_pair: {why} (w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)})")
    gs, skip_x, skip_w = _check_skip(skip_x, skip_w, skip_stride, g1, xp)
    residual = dense.check_residual(residual, g1, xp)
    if xp is np:
        if y_out is not None or z_out is not None:
            raise ValueError("y_out and z_out are supported on the GPU path only")
        if gs is not None:
            short = dense.conv2d(skip_x, skip_w, stride=gs.stride)
            residual = short if residual is None else residual + short
        y = dense.conv2d(x, w1, b1, relu=relu1, residual=residual)
        return y, dense.conv2d(y, w2, b2, relu=relu2)
    c2 = 0 if gs is None else gs.c
    c, m, j, hw = g1.c + c2, g1.k, g2.k, g1.h * g1.w  # c: the first product's rows
    tiles = fitting_tiles(c, m, j)
    if tile is None:
        tile = default_tile(c, m, j, hw, g1.n, backend.device_facts().sm_count)
    elif tile not in tiles:
        raise ValueError(f"tile must be one of {tiles} for {c} -> {m} -> {j} channels, "
                         f"got {tile}")
    mb = tile.slice(m)
    if packed is None:
        packed = pack_weights(w1, w2, tile, skip_w)
    at, bt = packed
    shapes = tile.packed_shapes(c, m, j)
    if (tuple(at.shape), tuple(bt.shape)) != shapes:
        raise ValueError(f"packed weights are for another tile or shape: at {tuple(at.shape)}, "
                         f"bt {tuple(bt.shape)}; expected {shapes[0]}, {shapes[1]}")
    y = dense.output_buffer(xp, y_out, g1.output_shape, "y_out")
    z = dense.output_buffer(xp, z_out, g2.output_shape, "z_out")
    kernel = cuda.get_kernel(_FILE, f"conv1x1_pair<{tile.p}, {tile.cl}, "
                                    f"{'true' if tile.mma else 'false'}>")
    smem = tile.smem_bytes(c, m, j)
    cuda.set_dynamic_smem(kernel, smem)
    null, i32 = np.uintp(0), np.int32
    opt = lambda a: null if a is None else a  # noqa: E731
    plane2, w2_in, s2 = (0, 0, 1) if gs is None else (gs.h * gs.w, gs.w, gs.stride[0])
    kernel(tile.grid(hw, g1.n), (_THREADS,), (
        x, at, opt(b1), opt(residual), y, bt, opt(b2), z, opt(skip_x),
        i32(g1.c), i32(hw), i32(m), i32(mb), i32(j), i32(tile.padded_j(j)), i32(bool(relu1)),
        i32(bool(relu2)), i32(c2), i32(plane2), i32(w2_in), i32(g1.w), i32(s2),
        i32(tile.slots_offset(c, m, j)),
        cuda.fast_div(tile.share(j) if tile.cl > 1 else 1)),  # no slots without a cluster
        shared_mem=smem)
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
