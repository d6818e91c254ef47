"""The schedule space of the tensor-core convolution (:mod:`tensorconv.ops.tensorcore_conv`):
its :class:`Problem`, its :class:`Tile` and every knob's legal values, the checks a tile
must pass, and the analytic rank that orders the candidates for the search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import cdiv, has_clusters, push_slot_floats, round_up, up4

BK = 32                                   # tcc::BK: K per shared-memory chunk
PAD = 8                                   # tcc::PAD: halves after each shared row
LAYOUTS = ("nchw", "nhwc")
DTYPES = ("float16", "bfloat16")
MAX_SPLITS = 16


@dataclass(frozen=True)
class Problem:
    """One convolution, the layout of its input and output, and their element type."""

    geom: ConvGeometry
    layout: str
    dtype: str = "float16"

    @property
    def m(self) -> int:
        return self.geom.n * self.geom.oh * self.geom.ow

    @property
    def k(self) -> int:
        return self.geom.c * self.geom.r * self.geom.s

    @property
    def vec_ok(self) -> bool:
        """Whether 16-byte loads fit: 8 consecutive k of a weight row (K % 8 == 0) and, in
        NHWC, 8 consecutive channels of a pixel (C % 8 == 0)."""
        return self.k % 8 == 0 and (self.layout == "nchw" or self.geom.c % 8 == 0)


@dataclass(frozen=True)
class Tile:
    """A block of ``bm`` pixels x ``bn`` output channels, warps of ``wm`` x ``wn``, K split
    ``splits`` ways, on the instructions of ``path`` (:data:`PATHS`), through a ring of
    ``stages`` shared-memory chunks, with 16-byte ``cp.async`` loads where ``vec`` (else
    one half per load, through registers).  ``cluster``: the split shares of a tile form a
    thread-block cluster and reduce through distributed shared memory (sm_90; splits in
    :data:`CLUSTER_SPLITS`); else through a global workspace.

    On the fragments path (``path`` :data:`FRAG`, 1x1 filters without padding) operands go
    from global memory straight into fragment registers: ``splits`` is the number of warps
    of one block that share each output tile's K (added in shared memory), ``stages`` the
    k-steps a warp loads ahead (:func:`frag_unroll`), and there is no ring.  The halo path
    (``path`` :data:`HALO`, NCHW) has the same meaning of ``splits`` and ``stages``; its
    blocks first copy their input rows into shared memory (:func:`halo_smem`)."""

    bm: int
    bn: int
    wm: int
    wn: int
    splits: int = 1
    path: int = 0
    stages: int = 3
    vec: bool = True
    cluster: bool = False

    @property
    def threads(self) -> int:
        warps = (self.bm // self.wm) * (self.bn // self.wn)
        return warps * 32 * (self.splits if self.path in (FRAG, HALO) else 1)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.bm, self.bn, self.wm, self.wn

    def smem_bytes(self, p: Problem) -> int:
        """The ring of operand chunks (or the fp32 result tile that reuses it), the block's
        slice of the tap table, and a cluster's push slots; on the fragments path, the fp32
        partial tiles of its K shares; on the halo path, the larger of its input copy and
        those partial tiles."""
        if self.path == HALO:
            return max(halo_smem(p, self.bm), 4 * self.splits * self.bn * (self.bm + 4))
        if self.path == FRAG:
            pad = self.bm if p.layout == "nchw" else self.bn      # tcc::Frag's row pitch
            return 4 * self.splits * self.bm * self.bn // pad * (pad + 4)
        if not self.cluster:
            return self.slots_at(p)
        return self.slots_at(p) + 4 * push_slot_floats(self.splits, self.share)

    def table_at(self, p: Problem) -> int:
        """Byte offset of the block's tap-table slice: after the ring and the result tile."""
        a_km = not (self.vec and p.layout == "nhwc") and self.path != 3
        a = BK * (self.bm + PAD) if a_km else self.bm * (BK + PAD)
        return round_up(max(2 * self.stages * (a + self.bn * (BK + PAD)),
                            4 * self.bm * (self.bn + 4)), 16)

    def slots_at(self, p: Problem) -> int:
        """Byte offset of a cluster's push slots: after the table slice (8 bytes per k)."""
        return round_up(self.table_at(p) + 8 * split_k(p, self), 16)

    @property
    def share(self) -> int:
        """Outputs of the tile each block of a cluster owns (``tdcx::PushReduce``)."""
        return up4(cdiv(self.bm * self.bn, self.splits)) if self.cluster else 1

    def grid(self, p: Problem) -> tuple[int, int, int]:
        if self.path == HALO:       # a block's pixels lie in one image
            g = p.geom
            return g.n * cdiv(g.oh * g.ow, self.bm), cdiv(g.k, self.bn), 1
        return cdiv(p.m, self.bm), cdiv(p.geom.k, self.bn), 1 if self.path == FRAG else self.splits

    def mode(self, p: Problem) -> int:
        """The kernel's MODE: bit 0 NHWC, bit 1 vector loads, bit 2 bf16."""
        return int(p.layout == "nhwc") | (int(self.vec) << 1) | (int(p.dtype == "bfloat16") << 2)


# (bm, bn, wm, wn): every block shape the file instantiates: four warps, or eight, which
# halve each warp's serial work on a block tile (at batch 1 a block's latency is the layer's).
SHAPES = ((16, 64, 16, 16), (32, 32, 16, 16), (32, 64, 16, 32), (64, 32, 32, 16),
          (64, 64, 32, 32), (64, 128, 32, 64), (128, 64, 64, 32),
          (32, 64, 16, 16), (64, 32, 16, 16), (64, 64, 32, 16), (128, 64, 32, 32))
RING_HALVES = 64   # register halves per thread the scalar loads' ring may hold
# Split shares reduced in a cluster: on mma.sync tiles of at most 64 x 64 with vector
# weight loads (modes 2 and 3), three to six stages.
CLUSTER_SPLITS = (2, 4, 8)
CLUSTER_STAGES = (3, 4, 6)
CLUSTER_SHAPES = tuple(s for s in SHAPES if s[0] <= 64 and s[1] <= 64)
# The instruction paths: mma.sync m16n8k16, WMMA with the paper's fragment shapes (m x n
# of an m x n x 16 fragment), mma.sync on operands loaded straight into fragments, and
# mma.sync on an NCHW input copied once into shared memory pixel-major (the halo path).
FRAG, HALO = 4, 5
PATHS = {0: ("mma.sync", 16, 16), 1: ("wmma", 16, 16), 2: ("wmma", 32, 8), 3: ("wmma", 8, 32),
         FRAG: ("fragments", 16, 8), HALO: ("halo", 16, 8)}
# The fragments path (tc_frag): (bm, bn, wm, wn) with warps of 8·NT pixels x 16·MT
# channels, K shared by 1-8 warps of a block.  In the probe that led to it the fastest at
# batch 1 were 32 x 32 blocks with 4 shares, and 16 x 32 with 8 on deep layers
# (docs/notes/tensorcore_conv.md).
FRAG_SHAPES = ((16, 32, 8, 32), (32, 32, 16, 32), (32, 32, 16, 16), (64, 64, 32, 32),
               (128, 32, 32, 32))
FRAG_SPLITS = (1, 2, 4, 8)
# The halo path (tc_halo): (bm, bn, wm, wn), warps of 8·NT pixels x 16·MT channels with NT
# even (one ldmatrix.x4 reads two n-tiles' operands), K shared by 1-8 warps of a block.
HALO_SHAPES = ((16, 16, 16, 16), (32, 16, 16, 16), (16, 32, 16, 16), (16, 64, 16, 32),
               (32, 32, 16, 16), (32, 64, 16, 32), (64, 32, 32, 16), (64, 64, 32, 32),
               (128, 64, 32, 32))
HALO_PAD = 8       # halves after a pixel's channels in the copy (16-byte odd pitches)
# Pipeline depths: mma.sync takes 2-8 stages (at batch 1 a chunk's time is a load latency
# over the chunks in flight); WMMA (the paper's path) double-buffers.
STAGES = {0: (2, 3, 4, 6, 8), 1: (2,), 2: (2,), 3: (2,)}
# bf16, a variant: mma.sync at the depths most layers' searches chose in fp16, which keeps
# its kernels to a third of fp16's count (each one compiled by CI and by a first run).
BF16_STAGES = {0: (3, 4)}
BF16_CLUSTER_STAGES = (3,)


def space(p: Problem) -> tuple[dict, tuple]:
    """The instruction paths and their depths, and the cluster depths, ``p``'s element type
    has kernels for."""
    if p.dtype == "bfloat16":
        return BF16_STAGES, BF16_CLUSTER_STAGES
    return STAGES, CLUSTER_STAGES


def path_fits(shape, path: int) -> bool:
    """Whether a warp tile of ``shape`` holds whole fragments of ``path`` (mma.sync reads
    16 x 16 of A and of B per ldmatrix.x4); WMMA, the paper's path, runs four warps; the
    fragments and halo paths have shapes of their own (:data:`FRAG_SHAPES`,
    :data:`HALO_SHAPES`)."""
    if path == FRAG:
        return tuple(shape) in FRAG_SHAPES
    if path == HALO:
        return tuple(shape) in HALO_SHAPES
    _, fm, fn = PATHS[path]
    warps = (shape[0] // shape[2]) * (shape[1] // shape[3])
    return shape[2] % fm == 0 and shape[3] % fn == 0 and (path == 0 or warps == 4)


def ring_fits(shape, stages: int, mode: int) -> bool:
    """Whether the register ring of the scalar loads (A unless NHWC with vector loads, B
    unless vector loads: one chunk's halves per thread per stage) stays within
    :data:`RING_HALVES` (more spills)."""
    threads = (shape[0] // shape[2]) * (shape[1] // shape[3]) * 32
    a = shape[0] * BK // threads if mode != 3 else 0
    b = shape[1] * BK // threads if not mode & 2 else 0
    return (a + b) * stages <= RING_HALVES


def frag_unroll(shape) -> int:
    """The k-steps a warp of the fragments path loads ahead (the kernel's U): four while a
    warp's tile is at most two fragments, else two (registers)."""
    return 4 if (shape[2] // 8) * (shape[3] // 16) <= 2 else 2


def frag_shares(shape) -> tuple[int, ...]:
    """The K shares of :data:`FRAG_SPLITS` a block of ``shape`` takes: at most 1,024
    threads, and 512 where a warp holds four fragments or more (registers)."""
    warps = (shape[0] // shape[2]) * (shape[1] // shape[3])
    most = 1024 if (shape[2] // 8) * (shape[3] // 16) <= 2 else 512
    return tuple(k for k in FRAG_SPLITS if warps * 32 * k <= most)


def halo_shares(shape) -> tuple[int, ...]:
    """The K shares of :data:`FRAG_SPLITS` a halo block of ``shape`` takes: at most 512
    threads (its A fragments are loaded a group ahead: at 1,024 threads' 64 registers
    they spill)."""
    warps = (shape[0] // shape[2]) * (shape[1] // shape[3])
    return tuple(k for k in frag_shares(shape) if warps * 32 * k <= 512)


def frag_fits(p: Problem) -> str | None:
    """Why ``p`` cannot run on the fragments path, or None: a 1x1 filter without padding,
    and a channel count divisible by 4 (a lane's operands are four consecutive channels)."""
    g = p.geom
    if (g.r, g.s) != (1, 1) or g.padding != (0, 0):
        return f"the fragments path runs 1x1 filters without padding, got {g.r}x{g.s} " \
               f"padding {g.padding}"
    if g.c % 4:
        return f"the fragments path needs a channel count divisible by 4, got C={g.c}"
    return None


def halo_rows(p: Problem, bm: int) -> int:
    """The most input rows a halo block of ``bm`` consecutive output pixels of one image
    reads: the output rows it touches, strided, plus the filter's height."""
    g = p.geom
    ohw = g.oh * g.ow
    return max(((min(p0 + bm, ohw) - 1) // g.ow - p0 // g.ow) * g.stride[0] + g.r
               for p0 in range(0, ohw, bm))


def halo_pitch(p: Problem) -> int:
    """Halves per pixel in a halo block's copy: the channels rounded up to a 16-wide
    k-step, then :data:`HALO_PAD` (an odd multiple of 16 bytes: conflict-free ldmatrix)."""
    return round_up(p.geom.c, 16) + HALO_PAD


def halo_cols(p: Problem) -> int:
    """Columns in a halo block's copy: every input column a filter of the row touches,
    padding included ((OW - 1)·stride + S)."""
    g = p.geom
    return (g.ow - 1) * g.stride[1] + g.s


def halo_smem(p: Problem, bm: int) -> int:
    """Bytes of a halo block's input copy: rows x columns x pitch halves."""
    return 2 * halo_rows(p, bm) * halo_cols(p) * halo_pitch(p)


def halo_fits(p: Problem, facts: DeviceFacts | None = None) -> str | None:
    """Why ``p`` cannot run on the halo path, or None: an NCHW input, a channel count
    divisible by 4 (a lane's weight operand is four consecutive channels), and the
    smallest block's copy within the shared memory a block may have."""
    if p.layout != "nchw":
        return f"the halo path reads NCHW inputs, got {p.layout}"
    if p.geom.c % 4:
        return f"the halo path needs a channel count divisible by 4, got C={p.geom.c}"
    limit = (facts or backend.device_facts()).smem_per_block_optin
    need = min(halo_smem(p, s[0]) for s in HALO_SHAPES)
    if need > limit:
        return f"the halo path's input copy needs {need} bytes of shared memory (limit {limit})"
    return None


def supported(p: Problem) -> str | None:
    """Why ``p`` cannot run here, or None."""
    g = p.geom
    if g.groups != 1:
        return f"groups={g.groups}: the tensor-core kernel runs dense convolutions only"
    if g.dilation != (1, 1):
        return f"dilation={g.dilation}: the tensor-core kernel runs undilated convolutions only"
    if p.layout not in LAYOUTS:
        return f"layout must be one of {LAYOUTS}, got {p.layout!r}"
    if p.dtype not in DTYPES:
        return f"the tensor-core kernel runs {' or '.join(DTYPES)}, got {p.dtype}"
    if max(g.n * g.c * g.h * g.w, p.m * g.k) >= 2**31:
        return "the input or the output has 2**31 elements or more (32-bit offsets)"
    return None


def split_k(p: Problem, tile: Tile) -> int:
    """K per split share: a multiple of BK, so no share starts inside a chunk."""
    return round_up(cdiv(p.k, tile.splits), BK)


def check_tile(tile: Tile, p: Problem, facts: DeviceFacts | None = None) -> None:
    """Raise ``ValueError`` unless ``tile`` is one the file instantiates and fits ``p``."""
    if isinstance(tile, Tile) and tile.path == HALO:
        if (tile.shape not in HALO_SHAPES or tile.splits not in halo_shares(tile.shape)
                or tile.stages != frag_unroll(tile.shape) or tile.vec or tile.cluster):
            raise ValueError(f"a halo tile (path {HALO}) needs a shape in {HALO_SHAPES}, "
                             f"splits in halo_shares(shape), stages frag_unroll(shape) and "
                             f"no vec or cluster; got {tile!r}")
        facts = facts or backend.device_facts()
        if (why := halo_fits(p, facts)) is not None:
            raise ValueError(f"{tile}: {why}")
        if tile.smem_bytes(p) > facts.smem_per_block_optin:
            raise ValueError(f"{tile}: its input copy needs {tile.smem_bytes(p)} bytes of "
                             f"shared memory (limit {facts.smem_per_block_optin})")
        return
    if isinstance(tile, Tile) and tile.path == FRAG:
        if (tile.shape not in FRAG_SHAPES or tile.splits not in frag_shares(tile.shape)
                or tile.stages != frag_unroll(tile.shape) or tile.vec or tile.cluster):
            raise ValueError(f"a fragments tile (path {FRAG}) needs a shape in {FRAG_SHAPES}, "
                             f"splits in frag_shares(shape), stages frag_unroll(shape) and "
                             f"no vec or cluster; got {tile!r}")
        if (why := frag_fits(p)) is not None:
            raise ValueError(f"{tile}: {why}")
        return
    stages, cluster_stages = space(p)
    if not isinstance(tile, Tile) or tile.shape not in SHAPES or tile.path not in stages \
            or not path_fits(tile.shape, tile.path) or tile.stages not in stages[tile.path]:
        raise ValueError(f"tile must be a Tile of one of the shapes {SHAPES} on a path "
                         f"({sorted(stages)}) whose fragments it holds, with stages in "
                         f"{stages} ({p.dtype}), got {tile!r}")
    if not 1 <= tile.splits <= MAX_SPLITS:
        raise ValueError(f"tile.splits must be in 1..{MAX_SPLITS}, got {tile.splits}")
    if tile.vec and not p.vec_ok:
        raise ValueError(f"tile.vec needs K % 8 == 0 (and C % 8 == 0 in NHWC); this layer "
                         f"has C={p.geom.c}, K={p.k} ({p.layout})")
    if tile.cluster and (tile.splits not in CLUSTER_SPLITS or tile.path != 0 or not tile.vec
                         or tile.shape not in CLUSTER_SHAPES
                         or tile.stages not in cluster_stages):
        raise ValueError(f"a cluster tile needs splits in {CLUSTER_SPLITS}, path 0, vector "
                         f"loads, stages in {cluster_stages} ({p.dtype}) and a shape in "
                         f"{CLUSTER_SHAPES}; got {tile}")
    if tile.cluster and not has_clusters(facts or backend.device_facts()):
        raise ValueError(f"{tile} needs thread-block clusters (sm_90)")
    if not ring_fits(tile.shape, tile.stages, tile.mode(p)):
        raise ValueError(f"{tile}: the scalar loads' register ring of {tile.stages} stages "
                         f"exceeds {RING_HALVES} halves per thread ({p.layout}); use fewer "
                         f"stages or vector loads")


def candidates(p: Problem, facts: DeviceFacts, paths=tuple(PATHS),
               max_splits: int = MAX_SPLITS, vec=(True, False)) -> list[Tile]:
    """Every shape on each of ``paths`` it fits, at each pipeline depth of the path, with
    split counts up to ``max_splits`` whose shares hold at least two chunks and none is
    empty, with and without vector loads (``vec``; with only where the layer allows),
    cheapest by :func:`_cost` first, then the halo and the fragments tiles where the layer
    takes them; bf16 in its smaller space (:func:`space`)."""
    vecs = [v for v in vec if p.vec_ok or not v]
    stages, cluster_stages = space(p)
    ring = [q for q in paths if q in stages]
    out = []
    for shape in SHAPES:
        for path in (q for q in ring if path_fits(shape, q)):
            for splits in range(1, max_splits + 1):
                if splits > 1 and split_k(p, Tile(*shape, splits)) < 2 * BK:
                    break
                if cdiv(p.k, split_k(p, Tile(*shape, splits))) < splits:
                    continue        # shares are whole chunks: this many leave one empty
                out += [t for st in stages[path] for v in vecs
                        if ring_fits(shape, st, (t := Tile(*shape, splits, path, st, v)).mode(p))]
                if (splits in CLUSTER_SPLITS and path == 0 and shape in CLUSTER_SHAPES
                        and p.vec_ok and has_clusters(facts)):
                    out += [Tile(*shape, splits, 0, st, True, True) for st in cluster_stages
                            if ring_fits(shape, st, Tile(*shape).mode(p))]
    out.sort(key=lambda t: _cost(p, t, facts))
    # The halo and fragments tiles rank after the ring's: their cost is not calibrated, and
    # a layer's untuned default stays the ring tile it was measured on (the search times
    # every candidate, so a tuned layer takes whichever is faster).
    if HALO in paths and halo_fits(p, facts) is None:
        halo = [Tile(*shape, k, HALO, frag_unroll(shape), False) for shape in HALO_SHAPES
                for k in halo_shares(shape)]
        out += sorted((t for t in halo if t.smem_bytes(p) <= facts.smem_per_block_optin),
                      key=lambda t: _cost(p, t, facts))
    if FRAG in paths and frag_fits(p) is None:
        out += sorted((Tile(*shape, k, FRAG, frag_unroll(shape), False)
                       for shape in FRAG_SHAPES for k in frag_shares(shape)),
                      key=lambda t: _cost(p, t, facts))
    return out


def _cost(p: Problem, t: Tile, facts: DeviceFacts) -> tuple:
    """An analytic rank: waves of blocks over the SMs (four blocks each), times a block's
    chunks, each the padded multiply-adds of the tile plus a fixed latency (worth a 64 x 64
    chunk), plus the split reduction's traffic; then vector loads, mma.sync and three
    stages first among equals.  Among fragments tiles: a vector tile over its share of K
    (its shares add in shared memory), at the blocks an SM holds of its threads."""
    if t.path in (FRAG, HALO):
        waves = cdiv(int(np.prod(t.grid(p))), min(4, 2048 // t.threads) * facts.sm_count)
        per_block = cdiv(p.k, BK * t.splits) * (t.bm * t.bn + 64 * 64) * BK
        return (waves * per_block, False, True, True, 0, -t.bm * t.bn)
    blocks = int(np.prod(t.grid(p)))
    waves = cdiv(blocks, 4 * facts.sm_count)
    chunks = cdiv(split_k(p, t), BK)
    per_block = chunks * (t.bm * t.bn + 64 * 64) * BK * (1 if t.vec else 2)
    reduce = (t.splits > 1) * t.splits * p.m * p.geom.k * 8 / (4 * facts.sm_count)
    reduce /= 4 if t.cluster else 1
    return (waves * per_block + reduce, not t.vec, t.path != 0, not t.cluster,
            abs(t.stages - 3), -t.bm * t.bn)
