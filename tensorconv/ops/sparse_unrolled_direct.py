"""A sparse convolution's remainder unrolled for its weights, nothing staged
(``kernels_cu/sparse_unrolled_direct.cu``): written for 1x1 filters, and run on wider ones
too, where the staged kernel's stage costs more than it saves (strided layers, and layers
whose few nonzeros a staged input value serves).

On a 1x1 filter an input word serves only the rows with a nonzero in its channel, so
staging it (:mod:`tensorconv.ops.sparse_unrolled`) buys nothing, and the unstaged
pointwise kernel (``sparse_csr_pointwise``) reads a (weight, offset) pair from its table
and forms an address for every multiply-add.  Here the host writes the kernel's body for
one layer: a block owns ``rb`` output rows and ``threads`` output pixels, one a thread;
for each input channel any of those rows uses, the thread loads its pixel's word once (an
immediate offset from the pixel's address) and applies that channel's nonzeros as
``fma`` instructions with immediate weights.  Any stride and padding, NCHW, fp32, any
batch.  On ResNet-18-8x's strided shortcuts (H200, batch 32, trained masks) it took
3.0-6.5 µs against the pointwise kernel's fastest tile's 6.2-9.9 µs (a probe:
``docs/notes/sparse_conv.md``).
The cost is a compile per layer and tile (CuPy keeps the binary on disk), so layers above
:data:`tensorconv.ops.sparse_unrolled.MAX_FMAS` multiply-adds are not offered;
:mod:`tensorconv.ops.sparse_conv` runs it as the remainder kind ``"unrolled"`` on 1x1
filters, and on a wider filter where given one of its tiles (a tuned plan times them on
every layer: :func:`tensorconv.ops.sparse_remainder.remainder_choices`).  There each
tap the group uses is one load, predicated where the pixel's window meets the padding.
A ring tile (``Tile.ring``, large 1x1 layers) makes each thread's loads ``cp.async``
copies into its own slots of shared memory, many channels ahead of their products, so that
more of them are in flight than the straight-line loads' registers allow.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, files
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops._launch import cdiv, launch, ptr

FILE = "sparse_unrolled_direct.cu"
NAME = "sparse_unrolled_direct"
ROWS = (8, 16, 32, 64)    # rows a block the tuner times; more rows would spill the sums
# threads a block the tuner times: 128 was at most 2 % faster than 64 on ResNet-18-8x's six
# shortcuts (H200) and 8 % slower on one, 256 never faster; each tile is a compile
THREADS = (64,)
# threads a block the tuner also times on a 1x1 layer of at least WIDE_PIXELS output pixels,
# at WIDE_BLOCK_ROWS rows or more a group: a block's warps run one group's code, so an SM
# holds fewer groups' code at once.  At 64 threads ncu found a 1024x256 layer on 14x14
# waiting on instruction fetch (36 cycles an issue of 38), at 256 on its loads; on random
# 1/8 masks at batch 32 the 256-thread tile took 27.5 against 40.7 µs there and 20.9 against
# 28.6 on a 256x528 layer on 16x16, no slower on six others (H200, docs/notes/sparse_conv.md)
# On those tiles the tuner also times the grid with the groups first (GROUPS_FIRST: a pixel
# block's groups are consecutive blocks): 1.58x faster on a 256x1024 layer on 14x14 (51.2 ->
# 32.4 µs), 1.16x on a strided 512x256 one on 56x56, within 5 % on fourteen others
WIDE_BLOCK = 256
WIDE_BLOCK_ROWS = 32
WIDE_PIXELS = 2048
MAX_GRID_Y = 65535
# row groups a block the tuner also times, one warp each on the block's 32 pixels: the
# groups' loads of the same words then meet in the SM's L1, where groups in blocks of their
# own each read the input from L2 (512 x 256 stride 2 on 8x8 at 8 rows a group: 64 reads)
WARP_GROUPS = (4,)
# On the same 1x1 layers as the wide tiles, the tuner also times each of them with the
# loads made cp.async copies into a ring of RING shared-memory slots a thread, committed in
# RING_GROUPS groups: a thread then keeps RING - RING / RING_GROUPS input words in flight
# without a register for any, where ptxas keeps about 9 loads in flight from the
# straight-line body.  Measured (H200, docs/notes/sparse_conv.md): the fastest tile on 8 of
# the 39 unrollable 1x1 layers of GoogLeNet-8x and ResNet-50-8x, by up to 1.31x; slower on
# the others, so offered, not chosen by rule; on 64-thread blocks slower on every layer tried
RING = 64
RING_GROUPS = 8
# rows a group on a wider filter: each group loads every tap its rows use, so fewer rows a
# group mean more loads as well as more code (a pruned 256x128 3x3 layer, 36,864 nonzeros:
# 8 rows a group 1.4 MB of code, 32 rows 0.9 MB; nvcc 52 s and 22 s); 64 rows were 1.09-1.6x
# slower than 32 on all eight of ResNet-18-8x's 3x3 layers timed (H200, docs/notes/sparse_conv.md)
WIDE_ROWS = (32,)


@dataclass(frozen=True)
class Problem:
    """A sparse layer's remainder: ``geom`` its convolution."""

    geom: ConvGeometry


@dataclass(frozen=True)
class Tile:
    """``gb`` groups of ``rb`` output rows a block, on ``threads`` threads: each group's
    ``threads // gb`` threads (whole warps) take the block's output pixels, one a thread.
    ``groups_first``: the grid's x counts the groups and its y the pixel blocks, so that a
    pixel block's groups are launched one after another.  ``ring``: 0, or the slots of
    each thread's ring of cp.async copies in shared memory (1x1 filters whose pixels all
    read inside the image, one group a block: :data:`RING`)."""

    rb: int
    threads: int
    gb: int = 1
    groups_first: bool = False
    ring: int = 0

    @property
    def pixels(self) -> int:
        """Output pixels a block."""
        return self.threads // self.gb

    def smem_bytes(self, p: Problem) -> int:
        """The rings' shared memory: ``ring`` words a thread."""
        return 4 * self.ring * self.threads

    def grid(self, p: Problem) -> tuple[int, int, int]:
        g = p.geom
        pixels, groups = cdiv(g.n * g.oh * g.ow, self.pixels), cdiv(cdiv(g.k, self.rb), self.gb)
        return (groups, pixels, 1) if self.groups_first else (pixels, groups, 1)


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``, or None."""
    g = p.geom
    if g.groups != 1 or g.dilation != (1, 1):
        return "the unstaged unrolled remainder runs undilated, ungrouped convolutions"
    if g.r > 32 or g.s > 32:
        return "the unstaged unrolled remainder runs filters of at most 32 x 32 taps"
    return None


def ring_fits(g: ConvGeometry) -> bool:
    """Whether a ring tile runs ``g``: a 1x1 filter whose one tap lies inside the image for
    every output pixel (the ring's copies are not predicated)."""
    return g.r * g.s == 1 and _tap_guard(g, 0, 0) == ""


def check_tile(p: Problem, tile: Tile) -> None:
    """A clear error for a ring tile ``p`` cannot run."""
    if tile.ring == 0:
        return
    if tile.ring % RING_GROUPS or tile.ring < RING_GROUPS:
        raise ValueError(f"tile.ring must be 0 or a multiple of {RING_GROUPS}, got {tile.ring}")
    if tile.gb != 1:
        raise ValueError(f"a ring tile holds one group a block, got gb={tile.gb}")
    if not ring_fits(p.geom):
        raise ValueError("a ring tile runs 1x1 filters whose tap lies inside the image for "
                         f"every output pixel, got a {p.geom.r}x{p.geom.s} filter with "
                         f"padding {p.geom.padding}")


def candidates(p: Problem, facts: DeviceFacts | None) -> list[Tile]:
    """Every rows a group (:data:`ROWS`, :data:`WIDE_ROWS` for a wider filter; up to twice
    the layer's rows) on :data:`THREADS`, one group a block; on a 1x1 layer of at least
    :data:`WIDE_PIXELS` output pixels also :data:`WIDE_BLOCK` threads a block for groups of
    :data:`WIDE_BLOCK_ROWS` rows or more, with the pixel blocks first and with the groups
    first, each also with a ring of :data:`RING` copies a thread where :func:`ring_fits`;
    and :data:`WARP_GROUPS` groups a block of a warp
    each where the layer has that many groups; the rule's first.
    On ResNet-18-8x's shortcuts (H200, batch 32) the fastest of one group a block had 64
    rows on 8,192 output pixels, 32 on 2,048 and 8 on 512: more rows a group load each
    word for more rows, fewer give a small layer more blocks."""
    if supported(p) is not None:
        return []
    g = p.geom
    offered = ROWS if g.r * g.s == 1 else WIDE_ROWS
    rows = [rb for rb in offered if rb <= max(offered[0], 2 * g.k)]
    tiles = [Tile(rb, t) for rb in rows for t in THREADS]
    if g.r * g.s == 1 and g.n * g.oh * g.ow >= WIDE_PIXELS:
        first = cdiv(g.n * g.oh * g.ow, WIDE_BLOCK) <= MAX_GRID_Y    # pixel blocks on y
        rings = (0, RING) if ring_fits(g) else (0,)
        tiles += [Tile(rb, WIDE_BLOCK, 1, gf, ring) for ring in rings for rb in rows
                  if rb >= WIDE_BLOCK_ROWS for gf in ((False, True) if first else (False,))]
    tiles += [Tile(rb, 32 * gb, gb) for gb in WARP_GROUPS for rb in rows
              if cdiv(p.geom.k, rb) >= gb]
    first = _rule(p, tiles, facts.sm_count if facts else 132)
    return [first] + [t for t in tiles if t != first]


def _rule(p: Problem, tiles: list[Tile], sm_count: int) -> Tile:
    """Of the 64-thread tiles of one group a block, the most rows a block whose launch
    gives every SM three warps, else the one with the most warps (the fastest tile on two
    of the three shortcuts above; on the third, 1.26x its time)."""
    small = [t for t in tiles if t.threads == THREADS[0] and t.gb == 1]

    def warps(t: Tile) -> int:
        gx, gy, _ = t.grid(p)
        return gx * gy * cdiv(t.threads, 32)

    fit = [t for t in small if warps(t) >= 3 * sm_count]
    return max(fit, key=lambda t: t.rb) if fit else max(small, key=lambda t: (warps(t), -t.rb))


def default_tile(p: Problem, facts: DeviceFacts | None) -> Tile:
    tiles = candidates(p, facts)
    if not tiles:
        raise ValueError(supported(p) or f"no unstaged unrolled tile fits {p.geom}")
    return tiles[0]


def fmas(weights_nnz: int, tile: Tile) -> int:
    """The body's multiply-add instructions for ``weights_nnz`` nonzeros."""
    return weights_nnz


def _reach(tap: int, stride: int, pad: int, size: int, out: int) -> str:
    """Where a filter's ``tap`` (along one axis) lands for the layer's output positions:
    ``"always"`` inside the image, ``"never"`` (only padding), or ``"some"``."""
    inside = [0 <= o * stride - pad + tap < size for o in range(out)]
    return "always" if all(inside) else "never" if not any(inside) else "some"


def _tap_guard(g: ConvGeometry, r: int, s: int) -> str | None:
    """The condition a thread loads tap (r, s) under: ``""`` where every output pixel's
    window has it inside the image (no test), None where none does (never loaded: its
    products are the padding's zeros), else a test of the window's bits."""
    rows = _reach(r, g.stride[0], g.padding[0], g.h, g.oh)
    cols = _reach(s, g.stride[1], g.padding[1], g.w, g.ow)
    if "never" in (rows, cols):
        return None
    tests = [f"{bits} >> {k}" if k else bits
             for bits, k, reach in (("rok", r, rows), ("cok", s, cols)) if reach == "some"]
    return " & ".join(tests + ["1u"]) if tests else ""


def _fma(j: int, value: float) -> str:
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return f"SU_FMA(a{j}, v, {bits:08X});"


def _direct_loads(g: ConvGeometry, dense: np.ndarray) -> list[str]:
    """A group's loads straight through the L1 and their products: each column the group
    uses one load at an immediate offset, a wider filter's taps under their guards."""
    taps, hw = g.r * g.s, g.h * g.w
    # a 1x1 tap is wholly inside the image or wholly in the padding (sums of zero): one
    # test around every load; a wider filter's taps each under their own
    guards = [[_tap_guard(g, r, s) for s in range(g.s)] for r in range(g.r)]
    whole = guards[0][0] if taps == 1 else ""
    out = ["  {" if not whole else f"  if ({whole}) {{"]
    for col in np.flatnonzero(dense.any(0)) if whole is not None else ():
        ch, tap = divmod(int(col), taps)
        r, s = divmod(tap, g.s)
        guard = "" if taps == 1 else guards[r][s]
        if guard is None:
            continue
        at = f"__ldg(xp + {ch * hw + r * g.w + s})"
        # the load and its products under one test (ptxas predicates them all): a zero in
        # the load's place would cost an instruction a load
        out.append(f"    if ({guard}) {{ const float v = {at};" if guard else
                   f"    {{ const float v = {at};")
        out += ["      " + _fma(j, dense[j, col]) for j in np.flatnonzero(dense[:, col])]
        out.append("    }")
    out.append("  }")
    return out


def _ring_loads(g: ConvGeometry, tile: Tile, dense: np.ndarray) -> list[str]:
    """A group's channels (1x1) through the thread's ring: the channels in batches of
    ``ring / RING_GROUPS``, one commit group a batch; before a batch's products the copies
    of the batch ``RING_GROUPS - 1`` ahead are issued into the slots the previous batch
    freed, then the wait leaves those in flight.  Slot i of the ring is the word
    ``i * T`` from the thread's first (a warp's 32 slots on 32 banks)."""
    hw, ring = g.h * g.w, tile.ring
    batch = ring // RING_GROUPS
    chans = np.flatnonzero(dense.any(0))
    batches = cdiv(chans.size, batch)

    def issue(b: int) -> list[str]:
        if b >= batches:
            return ["  SU_RING_COMMIT();"]       # an empty group keeps the waits' count
        return [f"  SU_RING_CP(sr, {(i % ring) * tile.threads * 4}, xp + {int(chans[i]) * hw});"
                for i in range(b * batch, min((b + 1) * batch, chans.size))] \
            + ["  SU_RING_COMMIT();"]

    if batches == 0:
        return []
    out = []
    for b in range(RING_GROUPS - 1):     # always RING_GROUPS - 1 groups: the waits count them
        out += issue(b)
    for b in range(batches):
        out += issue(b + RING_GROUPS - 1)
        out.append(f"  SU_RING_WAIT({RING_GROUPS - 1});")
        for i in range(b * batch, min((b + 1) * batch, chans.size)):
            col = dense[:, chans[i]]
            out.append(f"  {{ float v; SU_RING_LD(v, sr, {(i % ring) * tile.threads * 4});")
            out += ["    " + _fma(j, col[j]) for j in np.flatnonzero(col)]
            out.append("  }")
    return out


def body(g: ConvGeometry, tile: Tile, indptr, indices, data) -> str:
    """The kernel body (``SPARSE_UNROLLED_DIRECT_BODY``) of a remainder given as CSR over the
    K x (C·R·S) kernel matrix (host arrays): the layer's constants, one function a group of
    ``tile.rb`` rows, and ``group(g, ...)`` that calls a thread's.  A wider filter's taps
    load under their row's and column's bits of the window inside the image, where some
    pixel's window has them in the padding (:func:`_tap_guard`); a ring tile's channels are
    copied through the thread's ring (:func:`_ring_loads`)."""
    check_tile(Problem(g), tile)
    k, c = g.k, g.c
    groups = cdiv(k, tile.rb)
    taps = g.r * g.s
    out = ["namespace pu {",
           f"constexpr int C = {c}, H = {g.h}, W = {g.w}, K = {k}, R = {g.r}, S = {g.s}, "
           f"SH = {g.stride[0]}, "
           f"SW = {g.stride[1]}, PH = {g.padding[0]}, PW = {g.padding[1]}, OH = {g.oh}, "
           f"OW = {g.ow}, RB = {tile.rb}, T = {tile.threads}, GB = {tile.gb}, "
           f"TP = {tile.pixels}, GROUPS = {groups}, GROUPS_FIRST = {int(tile.groups_first)}, "
           f"RING = {tile.ring};"]
    for grp in range(groups):
        rows = range(grp * tile.rb, min(k, (grp + 1) * tile.rb))
        dense = np.zeros((len(rows), c * taps), np.float32)
        for j, row in enumerate(rows):
            dense[j, indices[indptr[row]:indptr[row + 1]]] = data[indptr[row]:indptr[row + 1]]
        out.append(f"template <int EPI> __device__ __noinline__ void group{grp}("
                   "const float* __restrict__ xp, unsigned rok, unsigned cok, su_ring_t sr, "
                   "Out o) {")
        out.append("  float " + ", ".join(f"a{j} = 0.f" for j in range(len(rows))) + ";")
        out += _ring_loads(g, tile, dense) if tile.ring else _direct_loads(g, dense)
        out += [f"  store<EPI>(o, {row}, a{j});" for j, row in enumerate(rows)]
        out.append("}")
    out += ["template <int EPI> __device__ __forceinline__ void group(int g, "
            "const float* __restrict__ xp, unsigned rok, unsigned cok, su_ring_t sr, Out o) {",
            "  switch (g) {"]
    out += [f"  case {n}: group{n}<EPI>(xp, rok, cok, sr, o); break;" for n in range(groups)]
    out += ["  default: break;", "  }", "}", "}  // namespace pu", ""]
    return "\n".join(out)


def epilogue(accumulate: bool, bias: bool, residual: bool, relu: bool) -> int:
    """The kernel's ``EPI``: which of the epilogue's steps it compiles in (accumulate onto
    the blocks' sums, add the bias, add the residual, ReLU)."""
    return int(accumulate) | int(bias) << 1 | int(residual) << 2 | int(relu) << 3


def kernel(weights, g: ConvGeometry, tile: Tile, epi: int = 0) -> cuda.KernelRef:
    """The kernel of ``weights``' remainder (a :class:`~tensorconv.ops.sparse_conv.
    SparseWeights`) on ``tile`` with the epilogue ``epi`` (:func:`epilogue`): its body
    written once (named by its content's hash)."""
    key = ("unrolled-direct", tile, g.h, g.w, g.stride, g.padding)
    if key not in weights.staged:
        indptr = backend.to_host(weights.indptr)
        nnz = int(indptr[-1])
        if fmas(nnz, tile) > su.MAX_FMAS:
            raise ValueError(f"the unstaged unrolled remainder of {nnz} nonzeros would be "
                             f"{fmas(nnz, tile)} instructions (at most {su.MAX_FMAS})")
        text = body(g, tile, indptr, backend.to_host(weights.indices)[:nnz],
                    backend.to_host(weights.data)[:nnz])
        path = su.body_dir() / f"pu_{hashlib.sha256(text.encode()).hexdigest()[:24]}.inc"
        if not path.is_file():
            files.atomic_write(path, text)
        weights.staged[key] = str(path)
    return cuda.kernel_ref(FILE, f"{NAME}<{epi}>",
                           {"SPARSE_UNROLLED_DIRECT_BODY": f'"{weights.staged[key]}"'})


def kernels(p: Problem, tile: Tile, weights=None, epi: int = 0) -> tuple[cuda.KernelRef, ...]:
    """The kernel a launch of ``tile`` with the epilogue ``epi`` runs (``weights`` needed:
    the body is theirs)."""
    return () if weights is None else (kernel(weights, p.geom, tile, epi),)


def instantiations() -> list[str]:
    """Every epilogue, built by CI with the example body."""
    return [f"{NAME}<{e}>" for e in range(16)]


def run(x, weights, out, g: ConvGeometry, tile: Tile, bias, residual, relu: bool,
        accumulate: bool) -> None:
    """``sparse_unrolled_direct`` on checked arguments (``accumulate``: add to what ``out``
    holds, the dense blocks' sums)."""
    p = Problem(g)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    check_tile(p, tile)
    epi = epilogue(accumulate, bias is not None, residual is not None, relu)
    launch(kernel(weights, g, tile, epi), tile.grid(p), (tile.threads,),
           (x, ptr(bias), ptr(residual), out, np.int32(g.n)), tile.smem_bytes(p))
