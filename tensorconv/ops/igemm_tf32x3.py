"""Implicit-GEMM convolution on the tensor cores at fp32 accuracy
(``kernels_cu/igemm_tf32x3.cu``): the forward and both gradients of a training step.

Same GEMM view, same arguments and same results (to fp32 rounding: <= 1e-5 relative) as
``direct_conv``'s fp32 ``conv2d_igemm``, with 3xTF32 tensor-core products on BM x 128
tiles instead of fp32 FMAs on 64 x 64 ones: ``mma.sync`` on every tensor-core device, or
on sm_90 wgmma (each warpgroup 64 of the 128 columns, the BM rows read by the tensor
cores from shared memory; ``Tile.wgmma``).  Under ``tensorconv.precision.using("tf32")``
it takes one tf32 pass (cuDNN's TF32 accuracy).  The public entry points are
:func:`tensorconv.ops.conv2d`, :func:`~tensorconv.ops.conv2d_backward_data` and
:func:`~tensorconv.ops.conv2d_backward_weight` with ``algorithm="igemm_tf32x3"`` (their
default where :func:`worth_it`); this module owns the tiles and the launch.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, precision
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops import _igemm
from tensorconv.ops._launch import NULL, cdiv, check_smem
from tensorconv.ops.reduction_splits import phase_splits, wgrad_splits
from tensorconv.scratch import workspace

FILE = "igemm_tf32x3.cu"
MODES = (0, 1, 2, 3)                # _igemm's three, and 3: a strided data gradient by phase
BN, BK, THREADS, STAGES = 128, 16, 256, 4
WG_STAGES = 5                       # the wgmma build's ring (igemm_tf32x3.cu)
ROWS = (16, 32, 64, 128)            # block rows instantiated in igemm_tf32x3.cu
AUTO_SPLITS = 64                    # the default split's cap (its tiles were measured under it)
_FIXED_FILTERS = ((1, 1), (3, 3))   # filter sizes with an unrolled instantiation
_MIN_COMPUTE_CAPABILITY = (8, 0)    # mma.sync m16n8k8 tf32
_WGMMA_ARCH = (9, 0)                # wgmma: sm_90a code runs on sm_90 alone
_TAP_LIMIT = 1 << 15                # mode 2 packs (r * dil - pad, s * dil - pad) in 16 bits
_INT32 = 1 << 31
HALO_CHANNELS, HALO_SLOTS = 16, 2   # the halo path: channels a box holds, boxes in flight
HALO_WORDS = 2 * THREADS            # a box's words per channel, at most (two copies a thread)
_RING_LEAD = 3                      # slices the ring loads ahead (both paths)


@dataclass(frozen=True)
class Problem:
    """One implicit-GEMM call: a convolution and which of its GEMMs (``mode``: 0 forward,
    1 data gradient, 2 weight gradient, 3 a strided data gradient split by phase: make it
    with :func:`problem`)."""

    geom: ConvGeometry
    mode: int

    @property
    def phases(self) -> int:
        """GEMMs in one launch: stride_h * stride_w in mode 3, else 1."""
        return self.geom.stride[0] * self.geom.stride[1] if self.mode == 3 else 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, P, Q) per group (mode 3: of its largest phase)."""
        g = self.geom
        if self.mode != 3:
            return _igemm.gemm_sizes(g, self.mode)
        (sh, sw), kg = g.stride, g.k // g.groups
        return (g.c // g.groups, g.n * cdiv(g.h, sh) * cdiv(g.w, sw),
                kg * cdiv(g.r, sh) * cdiv(g.s, sw))

    @property
    def base_mode(self) -> int:
        """The _igemm mode whose output this writes (3 writes the data gradient's)."""
        return 1 if self.mode == 3 else self.mode


def problem(geom: ConvGeometry, mode: int) -> Problem:
    """``mode``'s problem (0, 1, 2 as in :mod:`tensorconv.ops._igemm`); a data gradient
    of a strided, undilated convolution runs by phase (mode 3): each input pixel then
    walks only the taps that reach it, a quarter of them at stride 2."""
    strided = geom.stride != (1, 1) and geom.dilation == (1, 1)
    return Problem(geom, 3 if mode == 1 and strided else mode)


@dataclass(frozen=True)
class Halo:
    """The halo path's tile (``igemm_tf32x3.cu``'s ``Halo``): a block's 128 columns are
    ``images`` whole output planes or ``rows`` rows of one, and the source pixels they reach
    a box of ``box_rows`` x ``box_cols`` per image and channel, ``words`` in all, kept
    ``stride`` words apart in shared memory; ``blocks`` such tiles cover the output."""

    images: int
    rows: int
    box_rows: int
    box_cols: int
    blocks: int

    @property
    def words(self) -> int:
        return self.images * self.box_rows * self.box_cols

    @property
    def stride(self) -> int:
        """The smallest word count >= :attr:`words` that is 8 mod 32 (conflict-free
        fragment reads)."""
        return (self.words + 23) // 32 * 32 + 8


def halo(p: Problem) -> Halo:
    """The halo tile of ``p`` (forward or unstrided data gradient), as the kernel makes it."""
    g = p.geom
    oh, ow = (g.oh, g.ow) if p.mode == 0 else (g.h, g.w)
    sh, sw = g.stride if p.mode == 0 else (1, 1)
    (dh, dw), plane = g.dilation, oh * ow
    images, rows = (BN // plane, oh) if plane <= BN else (1, BN // ow)
    blocks = cdiv(g.n, images) if images > 1 else g.n * cdiv(oh, max(rows, 1))
    return Halo(images, rows, (rows - 1) * sh + (g.r - 1) * dh + 1,
                (ow - 1) * sw + (g.s - 1) * dw + 1, blocks)


def halo_supported(p: Problem) -> str | None:
    """Why the halo path cannot run ``p``, or None: it takes the forward and the unstrided
    data gradient of a filter of three taps or more (the box ring's two slots stay ahead of
    the slices only so), output rows of at most 128 pixels and boxes of at most
    :data:`HALO_WORDS` words per channel."""
    if p.mode not in (0, 1):
        return "the halo path runs the forward and the unstrided data gradient only"
    g = p.geom
    if g.r * g.s < _RING_LEAD:
        return f"the halo path needs a filter of {_RING_LEAD} taps or more, got {g.r}x{g.s}"
    if (g.ow if p.mode == 0 else g.w) > BN:
        return f"the halo path needs output rows of at most {BN} pixels"
    if (words := halo(p).words) > HALO_WORDS:
        return f"the halo path's box would take {words} words a channel (at most {HALO_WORDS})"
    return None


@dataclass(frozen=True)
class Tile:
    """A block of ``bm`` x 128 outputs (256 threads), the reduction split into ``splits``
    (at most; no split is left empty), and the instructions: ``wgmma`` True (sm_90
    only), False (``mma.sync``) or None, the device's default (:func:`resolve`).
    ``halo``: B read from a box of source pixels copied once per 16 channels instead of
    gathered per slice (:func:`halo_supported` says where it runs)."""

    bm: int
    splits: int = 1
    wgmma: bool | None = None
    halo: bool = False

    def smem_bytes(self, p: Problem) -> int:
        """Dynamic shared memory: STAGES (wgmma: WG_STAGES) slices of A (bm x 20 words;
        under wgmma bm x 16, twice at the current precision "fp32": the values' tf32
        parts and their remainders) and B (16 x 136 words, or 128 x 20 in the weight
        gradient; the wgmma build at "tf32" stores a gathered B as A, 128 x 16)."""
        exact = precision.current() == "fp32"
        b_words = BK * (BN + 8)
        if self.wgmma and not exact:
            b_words = BN * BK
        elif p.mode == 2:
            b_words = BN * (BK + 4)
        a_words = self.bm * BK * (2 if exact else 1) if self.wgmma else self.bm * (BK + 4)
        ring = WG_STAGES if self.wgmma else STAGES
        if self.halo:   # A's ring, the box ring, the chunk's row-offset table
            chunk = HALO_CHANNELS * p.geom.r * p.geom.s
            return 4 * (ring * a_words + HALO_SLOTS * HALO_CHANNELS * halo(p).stride + chunk)
        return 4 * ring * (a_words + b_words)

    def split(self, p: Problem) -> tuple[int, int]:
        """(reduction length per split, splits): whole 16-deep slices, and on the halo
        path whole chunks of 16 channels x every tap (its reduction zero-padded to them)."""
        m, _, q = p.gemm
        if not self.halo:
            return _igemm.split_depth(q, BK, self.splits)
        chunk = HALO_CHANNELS * p.geom.r * p.geom.s
        return _igemm.split_depth(cdiv(q, chunk) * chunk, chunk, self.splits)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(column tiles, groups x row tiles, splits)."""
        m, cols, q = p.gemm
        tiles = halo(p).blocks if self.halo else cdiv(cols, BN)
        return (tiles, p.geom.groups * cdiv(m, self.bm), p.phases * self.split(p)[1])

    def blocks_per_sm(self) -> int:
        """Resident blocks per SM: 128-row blocks take up to 255 registers a thread."""
        return 1 if self.bm >= 128 else 2


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p`` (its 32-bit and 16-bit index limits; a strided
    data gradient runs by phase, which needs dilation 1), or None."""
    g = p.geom
    if g.n * g.c * g.h * g.w >= _INT32 or g.n * g.k * g.oh * g.ow >= _INT32:
        return "igemm_tf32x3 indexes in 32 bits: N*C*H*W and N*K*OH*OW must be < 2**31"
    taps = max(g.r * g.dilation[0], g.s * g.dilation[1], g.padding[0], g.padding[1])
    if p.mode == 2 and taps >= _TAP_LIMIT:
        return f"igemm_tf32x3's weight gradient needs filter extent and padding < {_TAP_LIMIT}"
    if p.mode == 1 and g.stride != (1, 1):
        return ("igemm_tf32x3 takes a strided data gradient by phase (mode 3), which needs "
                "dilation 1; this one is strided and dilated")
    if p.mode == 3 and (g.dilation != (1, 1) or g.stride == (1, 1)):
        return "igemm_tf32x3's phase-split data gradient (mode 3) needs stride > 1, dilation 1"
    return None


def device_supported(facts: DeviceFacts) -> bool:
    """Whether the device has tf32 ``mma.sync`` (sm_80 and later)."""
    return tuple(facts.compute_capability) >= _MIN_COMPUTE_CAPABILITY


def has_wgmma(facts: DeviceFacts) -> bool:
    """Whether the device runs the wgmma build (sm_90: its ``sm_90a`` target)."""
    return tuple(facts.compute_capability) == _WGMMA_ARCH


def resolve(tile: Tile, facts: DeviceFacts) -> Tile:
    """``tile`` with ``wgmma`` decided: None becomes :func:`has_wgmma`."""
    return tile if tile.wgmma is not None else dataclasses.replace(tile, wgmma=has_wgmma(facts))


def rows_for(m: int) -> int:
    """The smallest block height that holds ``m`` rows, at most 128."""
    return next((r for r in ROWS if r >= m), ROWS[-1])


def _splits_for(p: Problem, bm: int, facts: DeviceFacts, prec: str) -> int:
    """Reduction splits of ``bm``-row blocks at ``prec``: those that fit one wave, each at
    least four 16-deep slices; a weight gradient's and (its phases' work differs) a data
    gradient's by phase: :mod:`~tensorconv.ops.reduction_splits`' estimates."""
    m, cols, q = p.gemm
    g, rows = p.geom, cdiv(m, bm) * p.geom.groups
    resident = facts.sm_count * Tile(bm).blocks_per_sm()
    if p.mode == 2:
        return wgrad_splits(cdiv(cols, BN) * rows, resident, bm, cdiv(q, BK),
                            g.groups * m * cols, prec)
    if p.mode == 3:
        phases = [(cdiv(g.n * pixels, BN) * rows, cdiv(g.k // g.groups * taps, BK))
                  for pixels, taps in _igemm.phase_sizes(g)]
        return phase_splits(phases, resident, bm, g.n * g.c * g.h * g.w, prec, AUTO_SPLITS)
    return max(1, min(resident // (cdiv(cols, BN) * rows), cdiv(q, BK) // 4, AUTO_SPLITS))


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """Rows: the least that hold a group's; splits: :func:`_splits_for`; wgmma where the
    device has it (mma.sync ran 1.10-1.38x slower on every weight gradient timed since the
    wgmma epilogue's rework, 64-row fp32 ones too); the halo path where :func:`halo_wins`
    (docs/notes/igemm_tf32x3.md)."""
    return _default_tile(p, facts, precision.current())


@functools.lru_cache(maxsize=4096)
def _default_tile(p: Problem, facts: DeviceFacts, prec: str) -> Tile:
    bm = rows_for(p.gemm[0])   # (cached: the estimates would cost an eager call ~0.1 ms)
    splits = _splits_for(p, bm, facts, prec)
    tile = Tile(bm, splits, has_wgmma(facts))
    return dataclasses.replace(tile, halo=halo_wins(p, tile))


def halo_wins(p: Problem, tile: Tile) -> bool:
    """Whether ``tile`` (``wgmma`` decided) runs ``p`` faster on the halo path: on wgmma,
    blocks of at most 64 rows and no split.  Measured on the H200 (3x3, batch 8-128,
    planes 4-56): such tiles 1.05-1.17x faster (ResNet-20's layers, ResNet-18's first
    stage, a 56x56 layer); 128-row blocks 0.95-1.00x (one block an SM, and the halo
    path waits for each slice's products); 5-way splits 0.72-0.82x (whole 16-channel
    chunks split fewer ways); a one-channel stem 0.40x (its 16-channel chunks mostly
    zeros: the reduction's channels must fill one).  ``mma.sync`` keeps the gather."""
    g = p.geom
    channels = (g.c if p.mode == 0 else g.k) // g.groups
    return (bool(tile.wgmma) and tile.bm <= 64 and tile.splits == 1
            and channels >= HALO_CHANNELS and halo_supported(p) is None)


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every block height up to the one that holds the rows, each with its heuristic split
    and with none, on each instruction path the device has, gathering B and (where
    :func:`halo_supported`) from the halo box."""
    top = rows_for(p.gemm[0])
    paths = (True, False) if has_wgmma(facts) else (False,)
    halos = (False, True) if halo_supported(p) is None else (False,)
    tiles = []
    for bm in ROWS:
        if bm <= top:
            for splits in dict.fromkeys((_splits_for(p, bm, facts, precision.current()), 1)):
                tiles += [Tile(bm, splits, wg, h) for wg in paths for h in halos]
    return tiles


def worth_it(p: Problem, facts: DeviceFacts) -> bool:
    """Whether this kernel is the default for ``p``: a tensor-core device, a GEMM of at
    least 2**24 multiply-adds per group (smaller ones are bound by launch and staging,
    where the fp32 kernel's 64-wide tiles lose nothing), 16 rows and 32 columns, or 32 rows
    of a weight gradient (a thin stem's 9 columns, split over the GPU: training_speed.md)."""
    m, cols, q = p.gemm
    return (device_supported(facts) and supported(p) is None and m * cols * q >= 1 << 24
            and m >= 16 and (cols >= 32 or p.mode == 2 and m >= 32))


def check_tile(tile: Tile, p: Problem, facts: DeviceFacts | None = None) -> None:
    """``ValueError`` naming what is wrong with ``tile`` for ``p`` (on ``facts``' device:
    default, the current one)."""
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not an igemm_tf32x3.Tile")
    if tile.bm not in ROWS:
        raise ValueError(f"tile.bm must be one of {ROWS}, got {tile.bm}")
    if tile.wgmma not in (None, True, False):
        raise ValueError(f"tile.wgmma must be True, False or None, got {tile.wgmma!r}")
    if tile.halo not in (True, False):
        raise ValueError(f"tile.halo must be True or False, got {tile.halo!r}")
    if tile.halo and (why := halo_supported(p)) is not None:
        raise ValueError(f"tile.halo=True: {why}")
    _igemm.check_splits(tile.splits)
    facts = facts or backend.device_facts()
    if tile.wgmma and not has_wgmma(facts):
        raise ValueError(f"tile.wgmma=True needs an sm_90 device; {facts.name} is {facts.arch}")
    check_smem(tile, resolve(tile, facts).smem_bytes(p), facts)


def _fixed(geom: ConvGeometry) -> tuple[int, int]:
    return (geom.r, geom.s) if (geom.r, geom.s) in _FIXED_FILTERS else (0, 0)


def _name(mode: int, kr: int, ks: int, bm: int, wgmma: bool, halo: bool = False) -> str:
    flags = str(bool(wgmma)).lower() + (", true" if halo else "")
    return f"conv2d_igemm_tf32x3<{mode}, {kr}, {ks}, {bm}, {flags}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The GEMM kernel of ``tile`` (``wgmma``: :func:`resolve`) and the split's reduction."""
    kr, ks = _fixed(p.geom)
    wg = bool(resolve(tile, backend.device_facts()).wgmma if tile.wgmma is None else tile.wgmma)
    return (cuda.kernel_ref(FILE, _name(p.mode, kr, ks, tile.bm, wg, tile.halo),
                            arch_specific=wg), _igemm.reduce_ref())


def workspace_floats(p: Problem, tile: Tile) -> int:   # the split's partials (or 0)
    return _igemm.workspace_floats(p.geom, p.base_mode, tile.split(p)[1])


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every mode, filter, block height and path, and
    the halo path's (modes 0 and 1, filters of three taps or more)."""
    sizes = (0, 0), *_FIXED_FILTERS
    plain = [_name(mode, kr, ks, bm, wg) for mode in MODES for kr, ks in sizes
             for bm in ROWS for wg in (False, True)]
    halos = [_name(mode, kr, ks, bm, wg, True) for mode in (0, 1) for kr, ks in sizes
             if kr * ks != 1 for bm in ROWS for wg in (False, True)]
    return sorted(plain + halos)


TRANSPOSE_DGRAD_W = (1, 3)
"""Modes whose data gradient reads ``w`` transposed per group in the scratch buffer (mode 1:
(G, C/G, K/G, R, S), mode 3: (G, C/G, R, S, K/G)), its runs copied 16 bytes at a time as
the forward's (read in place, mode 3's A is one word a copy, K/G*R*S words apart: uncoalesced;
``docs/notes/igemm_tf32x3.md``)."""


def transposes_w(p: Problem) -> bool:
    """Whether :func:`run` hands ``p``'s kernel ``w`` transposed (:data:`TRANSPOSE_DGRAD_W`)."""
    g = p.geom
    run = (g.k // g.groups) * (g.r * g.s if p.mode == 1 else 1)   # a copy run of A's rows
    return p.mode in TRANSPOSE_DGRAD_W and run % 4 == 0


@functools.lru_cache(maxsize=4096)
def _config(p: Problem, tile: Tile, relu: bool, precision_name: str, device: int,
            a_t: bool = False):
    """Kernel, grid, integer arguments, workspace floats and reduction of one launch, cached
    (a training step launches hundreds; per call only the pointers are new).  ``a_t``:
    mode 1's ``w`` comes transposed (:func:`transposes_w`)."""
    i32 = np.int32
    m, _, q = p.gemm
    q_per_split, splits = tile.split(p)
    ref, _ = kernels(p, tile)
    grid = tile.grid(p)
    ints = _igemm.geometry_ints(p.geom) + (i32(cdiv(m, tile.bm)), i32(q_per_split), i32(relu),
                                     i32(a_t))
    reduce = (_igemm.reduce_config(p.geom, p.base_mode, splits, relu, _igemm.sm_count())
              if splits > 1 else None)
    kernel = cuda.load(ref)
    with precision.using(precision_name):
        smem = tile.smem_bytes(p)
    cuda.set_dynamic_smem(kernel, smem)
    return (kernel, grid, ints, smem, _igemm.workspace_floats(p.geom, p.base_mode, splits),
            reduce)


def run(p: Problem, a, b, bias, residual, out, tile: Tile, relu: bool, xp,
        partial=None) -> None:
    """Launch on checked arguments: ``a``, ``b`` the GEMM's operands (mode 0, 1: ``w`` and
    ``x`` / ``gy``; mode 2: ``gy`` and ``x``), ``bias``/``residual`` (mode 0) or None;
    ``partial``: the split's :func:`workspace_floats` floats, for a caller whose own
    operands sit in the stream's scratch buffer (default: that buffer)."""
    tile = resolve(tile, backend.device_facts())
    a_t = partial is None and transposes_w(p)   # (a caller's own partial: its scratch is taken)
    kernel, grid, ints, smem, floats, reduce = _config(p, tile, bool(relu), precision.current(),
                                                       xp.cuda.runtime.getDevice(), a_t)
    if a_t:   # w (G, Kg, Cg, RS) -> (G, Cg, Kg, RS) / (G, Cg, RS, Kg) after the partials
        g, at = p.geom, cdiv(floats, 4) * 4   # (16-byte aligned)
        buf = workspace(xp, at + a.size)
        dims, order = (g.groups, g.k // g.groups, g.c // g.groups, g.r * g.s), (
            (0, 2, 1, 3) if p.mode == 1 else (0, 2, 3, 1))
        wt = buf[at:at + a.size].reshape([dims[i] for i in order])
        xp.copyto(wt, a.reshape(dims).transpose(order))
        a, partial = wt, (buf if floats else NULL)
    elif partial is None:
        partial = workspace(xp, floats) if floats else NULL
    bias = NULL if bias is None else bias
    residual = NULL if residual is None else residual
    kernel(grid, (THREADS, 1, 1), (a, b, bias, residual, out, partial) + ints, shared_mem=smem)
    if reduce is not None:
        rkernel, rgrid, rints = reduce
        rkernel(rgrid, (256, 1, 1), (partial, bias, residual, out) + rints)
