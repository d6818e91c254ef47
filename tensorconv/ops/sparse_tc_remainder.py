"""The remainder of a sparse convolution on the tensor cores (``kernels_cu/sparse_tc_remainder.cu``,
``sparse_tc_remainder``): its tiles, how a tile covers the output and stages its input,
the per-layer k-step records it walks, and its launch.

The tiled remainder (:mod:`tensorconv.ops.sparse_tiles`) loads a staged word for every
multiply-add.  Here a warp owns 16 or 32 output rows and 32 or 64 pixels; for each chunk
of input channels the host lists the columns ``(c, r, s)`` any of those rows uses, eight
a k step, and the warp multiplies them as dense m16n8k8 tiles: the zeros cost nothing on
the tensor cores, and one gathered input value serves 16 or 32 rows.  At 8x the rows of a
group share about one column in eight, so a product does ~100-160 useful multiply-adds.
It pays at one tf32 pass (``tensorconv.precision.using("tf32")``: 1.08-1.33x the tiled
kernel on ResNet-18-8x's pruned 3x3 layers, H200); at fp32 accuracy (3xTF32) the three
passes leave it at 0.6-1.06x of the tiled kernel (``docs/notes/sparse_conv.md``), so tuned
plans time it under tf32 only.  :mod:`tensorconv.ops.sparse_conv` runs it as the
remainder kind ``"tc"``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tensorconv import backend, cuda, precision
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import (
    a_fragments,
    cdiv,
    has_tf32_mma,
    launch,
    next_pow2,
    ptr,
    resident_blocks,
    round_tf32,
)
from tensorconv.scratch import workspace

FILE = "sparse_tc_remainder.cu"


@dataclass(frozen=True)
class Problem:
    """A sparse layer's remainder: ``geom`` its convolution."""

    geom: ConvGeometry


@dataclass(frozen=True)
class Tile:
    """``wr`` x ``wp`` warps, each ``mt`` groups of 16 rows by ``nt`` tiles of 8 pixels;
    ``ck`` input channels a shared-memory stage."""

    nt: int
    mt: int
    wr: int
    wp: int
    ck: int = 16

    @property
    def rows(self) -> int:
        """Output rows a warp (a row group)."""
        return 16 * self.mt

    @property
    def pixels(self) -> int:
        """Output pixels a thread block."""
        return 8 * self.nt * self.wp

    def smem_bytes(self, p: Problem) -> int:
        return tc_geometry(p.geom, self).smem

    def grid(self, p: Problem) -> tuple[int, int, int]:
        return tc_geometry(p.geom, self).grid(p.geom, self)


# Measured (H200, ResNet-18-8x's layers, one tf32 pass): each of these the fastest on some
# layers; 16 warps a block or 8-channel stages never were.
TILES = (Tile(8, 2, 4, 2), Tile(4, 2, 4, 2), Tile(8, 1, 8, 1), Tile(8, 1, 4, 2))


def name(t: Tile) -> str:
    return f"sparse_tc_remainder<{t.nt}, {t.mt}, {t.wr}, {t.wp}>"


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``'s remainder, or None."""
    g = p.geom
    if g.groups != 1 or g.dilation != (1, 1):
        return f"the tensor-core remainder runs dense (groups 1), undilated filters, got " \
               f"groups {g.groups}, dilation {g.dilation}"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile, on a device with tf32 ``mma.sync`` and a supported problem; else none."""
    if supported(p) is not None or (facts is not None and not has_tf32_mma(facts)):
        return []
    return list(TILES)


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """32 rows a warp on four n tiles (the most frequent winner with 16 rows and 8 tiles)."""
    return Tile(4, 2, 4, 2)


SUM = "sparse_tc_remainder_sum"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The tile's kernel and the shares' sum (whether a launch shares its chunks depends
    on the compiled kernel's registers: :func:`tc_shares`)."""
    return cuda.kernel_ref(FILE, name(tile)), cuda.kernel_ref(FILE, SUM)


def tc_shares(geom: ConvGeometry, tile: Tile, g: TcGeometry, regs: int,
              facts: DeviceFacts) -> tuple[int, int]:
    """``(shares, chunks per share)``: as many shares of the channel chunks as fill one
    wave of resident blocks (``regs`` registers a thread, ``g.smem`` bytes) without
    starting a second.  A second partial wave cost more than the shares saved: on
    ResNet-18-8x's pruned 128x128 layer 4 shares of 128 blocks at 3 an SM (1.3 waves) took
    60.6 µs, 3 shares (one wave) 35.7 (H200)."""
    gx, gy, _ = g.grid(geom, tile)
    chunks = cdiv(geom.c, tile.ck)
    per_sm = resident_blocks(g.threads(tile), regs, g.smem + 1024, facts)
    want = max(1, min(chunks, facts.sm_count * per_sm // (gx * gy)))
    per_share = cdiv(chunks, want)
    return cdiv(chunks, per_share), per_share


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile."""
    return sorted({name(t) for t in TILES})


def partition(words, nt: int, wp: int) -> tuple[np.ndarray, int]:
    """The tile's pixels (``words``: each pixel's word in a stage) as ``wp * nt`` groups of
    8, a warp's n tiles: one residue class mod 4 and distinct words mod 32 in each group
    where the classes allow.  Returns ``(groups, bad)``: ``(wp * nt, 8)`` pixel indices,
    and how many lanes share a bank with another (0: every gather conflict-free)."""
    words = np.asarray(words)
    groups, left, bad = [], [], 0
    for r in range(4):
        buckets: dict = {}
        for q in np.flatnonzero(words % 4 == r):
            buckets.setdefault(int(words[q]) % 32, []).append(int(q))
        pool = sum(len(v) for v in buckets.values())
        while pool >= 8:
            keys = sorted(buckets, key=lambda k: (-len(buckets[k]), k))
            grp = [buckets[k].pop() for k in keys[:8]]
            while len(grp) < 8:                       # fewer than 8 banks: repeats
                k = max(buckets, key=lambda k: len(buckets[k]))
                grp.append(buckets[k].pop())
                bad += 1
            buckets = {k: v for k, v in buckets.items() if v}
            pool -= 8
            groups.append(grp)
        for v in buckets.values():
            left += v
    while left:
        groups.append(left[:8])
        bad += 8
        left = left[8:]
    return np.array(groups, np.int64).reshape(wp * nt, 8), bad


@dataclass(frozen=True)
class TcGeometry:
    """How a tile covers the output: ``nb`` images x ``th`` x ``tw`` output pixels a block
    (powers of two); the staged input ``iht`` lines x ``iwt`` columns a channel, lines
    ``pitch`` words apart, channels ``ch``, images ``img``, ``ck`` channels a stage;
    ``pixtab`` (2 · pixels,) int32: each lane's pixel byte offset in a stage by (warp, n
    tile, g), then the tile pixel of each (warp, n tile, column); ``bad`` the lanes whose
    gathers share a bank; ``rows`` the block's output rows, ``ldp`` the results' row
    pitch in shared memory (1 mod 32)."""

    nb: int
    th: int
    tw: int
    iht: int
    iwt: int
    pitch: int
    ch: int
    img: int
    ck: int
    pixtab: tuple
    bad: int
    rows: int
    ldp: int

    @property
    def stage_floats(self) -> int:
        return 4 * cdiv(self.nb * self.img, 4)

    @property
    def lines(self) -> int:
        return self.nb * self.ck * self.iht

    @property
    def smem(self) -> int:
        """Two input stages and the block's line table (an int2 a line), or the results'
        pass through shared memory where that is larger."""
        return 4 * max(2 * self.stage_floats + 2 * self.lines, self.rows * self.ldp)

    def threads(self, tile: Tile) -> int:
        return 32 * tile.wr * tile.wp

    def grid(self, geom: ConvGeometry, tile: Tile) -> tuple[int, int, int]:
        return (cdiv(geom.n, self.nb) * cdiv(geom.oh, self.th) * cdiv(geom.ow, self.tw),
                cdiv(cdiv(geom.k, tile.rows), tile.wr), 1)


@functools.lru_cache(maxsize=1024)
def tc_geometry(geom: ConvGeometry, tile: Tile) -> TcGeometry:
    """The output tile (the output's width up to the block's pixels, then its height, then
    images) and the least line, channel and image padding whose pixel words partition
    into conflict-free n tiles (:func:`partition`); channels 1 or 3 mod 4 words apart, so
    that a chunk's columns spread over the four residues."""
    pt = tile.pixels
    sh, sw = geom.stride
    tw = min(next_pow2(geom.ow), pt)
    th = min(next_pow2(geom.oh), pt // tw)
    nb = pt // (tw * th)
    iht, iwt = (th - 1) * sh + geom.r, (tw - 1) * sw + geom.s
    q = np.arange(pt)
    best = None
    for pitch in range(iwt, iwt + 8):
        for residue in (1, 3):
            ch = iht * pitch + (residue - iht * pitch) % 4
            for pad in range(32) if nb > 1 else (0,):
                img = tile.ck * ch + pad
                words = (q // (tw * th)) * img + (q // tw % th) * sh * pitch + q % tw * sw
                groups, bad = partition(words, tile.nt, tile.wp)
                key = (bad, nb * img)
                if best is None or key < best[0]:
                    best = (key, pitch, ch, img, groups, words)
                if bad == 0:
                    break
    (bad, _), pitch, ch, img, groups, words = best
    pixtab = np.concatenate([4 * words[groups].ravel(), groups.ravel()]).astype(np.int32)
    return TcGeometry(nb, th, tw, iht, iwt, pitch, ch, img, tile.ck, tuple(pixtab.tolist()),
                      bad, tile.rows * tile.wr, pt + 1)


class TcRecords(NamedTuple):
    """The tensor-core remainder's per-layer tables (:func:`tc_records`)."""

    recs: object
    segs: object
    row_of: object
    pixtab: object
    steps: int


def _slots(res: np.ndarray) -> np.ndarray:
    """Columns (their word offsets' residues mod 4, ``res``) in slots of 8 a k step, the
    fewest k steps: each half step (slots t = 0-3, then 4-7) takes columns of distinct
    residues, the largest buckets first, then a padding slot of a missing residue while
    the k steps have room, then repeats.  Returns the column of each slot, ``-1 - r`` for
    a padding slot of residue r."""
    buckets = [list(np.flatnonzero(res == r)) for r in range(4)]
    steps = cdiv(res.size, 8)
    spare = 8 * steps - res.size
    out = []
    for _ in range(2 * steps):
        pick, used = [], set()
        for r in sorted(range(4), key=lambda r: -len(buckets[r])):
            if buckets[r] and len(pick) < 4:
                pick.append(buckets[r].pop())
                used.add(r)
        for r in range(4):
            if len(pick) < 4 and r not in used and spare > 0:
                pick.append(-1 - r)
                spare -= 1
        while len(pick) < 4:
            pick.append(buckets[max(range(4), key=lambda r: len(buckets[r]))].pop())
        out.append(pick)
    half = np.array(out, np.int64).reshape(steps, 2, 4)
    return half.reshape(steps, 8)


def tc_records(weights, tile: Tile, g: TcGeometry, xp) -> TcRecords:
    """``weights``' remainder (a :class:`~tensorconv.ops.sparse_conv.SparseWeights`) as k-step
    records, made once per tile, staging and precision.  Rows in order, ``tile.rows`` a
    group; for each (chunk, group) the columns its rows use, in slots (:func:`_slots`).
    A record: the group's A fragments (``a_fragments`` order, each m tile's 32 lanes),
    tf32-rounded at one pass or split into tf32 parts and remainders at fp32 accuracy, then
    the slots' byte offsets in a stage as (t, t + 4) pairs.  ``recs`` (records · REC, 4)
    float32, ``segs`` (chunks, groups, 2) int32 (first record, k steps), ``row_of``
    (groups · rows,) int32."""
    exact = precision.current() != "tf32"
    key = ("tc", tile, g, exact)
    if key in weights.staged:
        return weights.staged[key]
    k, c, r, s = weights.shape
    rows, ck, rs = tile.rows, tile.ck, r * s
    indptr = backend.to_host(weights.indptr)
    nnz = int(indptr[-1])
    cols = backend.to_host(weights.indices)[:nnz].astype(np.int64)
    data = backend.to_host(weights.data)[:nnz].astype(np.float32)
    row = np.repeat(np.arange(k), np.diff(indptr))
    groups, chunks = cdiv(k, rows), cdiv(c, ck)
    row_of = np.full(groups * rows, -1, np.int64)
    row_of[:k] = np.arange(k)
    local = cols - cols // rs // ck * ck * rs                # (c % ck)·R·S + r·S + s
    offset = (local // rs) * g.ch + (local % rs // s) * g.pitch + local % s
    taps = np.arange(ck * rs)
    tap_off = (taps // rs) * g.ch + (taps % rs // s) * g.pitch + taps % s
    spare = [int(tap_off[tap_off % 4 == q].min()) if (tap_off % 4 == q).any() else 0
             for q in range(4)]
    seg = (cols // rs // ck) * groups + row // rows
    order = np.lexsort((local, seg))
    seg, local, offset, row, data = seg[order], local[order], offset[order], row[order], data[order]
    bounds = np.searchsorted(seg, np.arange(chunks * groups + 1))
    rec_a, rec_off, segs = [], [], np.zeros((chunks * groups, 2), np.int64)
    first = 0
    for i in range(chunks * groups):
        lo, hi = bounds[i], bounds[i + 1]
        if lo == hi:
            segs[i] = (first, 0)
            continue
        ucols, inv = np.unique(local[lo:hi], return_inverse=True)
        uoff = offset[lo:hi][np.searchsorted(local[lo:hi], ucols)]
        slot_col = _slots(uoff % 4)                           # (steps, 8)
        steps = slot_col.shape[0]
        where = np.empty(ucols.size, np.int64)
        flat = slot_col.ravel()
        where[flat[flat >= 0]] = np.flatnonzero(flat >= 0)
        a = np.zeros((rows, 8 * steps), np.float32)
        a[row[lo:hi] % rows, where[inv]] = data[lo:hi]
        rec_a.append(a_fragments(a).transpose(1, 0, 2, 3))   # (steps, mt, 32, 4)
        off = np.where(flat >= 0, uoff[np.maximum(flat, 0)],
                       np.array(spare)[np.maximum(-1 - flat, 0)]).reshape(steps, 8)
        rec_off.append(4 * np.stack([off[:, :4], off[:, 4:]], 2).reshape(steps, 8))
        segs[i] = (first, steps)
        first += steps
    steps_all = max(first, 1)
    areal = 32 * tile.mt * (2 if exact else 1)
    recs = np.zeros((steps_all, areal + 2, 4), np.float32)
    if first:
        a = np.concatenate(rec_a).reshape(first, 32 * tile.mt, 4)
        if exact:
            big = (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
            recs[:first, :32 * tile.mt] = big
            recs[:first, 32 * tile.mt:areal] = a - big
        else:
            recs[:first, :areal] = round_tf32(a, np)
        recs[:first, areal:] = np.concatenate(rec_off).astype(np.int32).view(np.float32) \
            .reshape(first, 2, 4)
    out = TcRecords(xp.asarray(recs.reshape(-1, 4)),
                    xp.asarray(segs.reshape(chunks, groups, 2).astype(np.int32)),
                    xp.asarray(row_of.astype(np.int32)), xp.asarray(np.array(g.pixtab, np.int32)),
                    first)
    weights.staged[key] = out
    return out


class TcLaunch(NamedTuple):
    """The tensor-core remainder's launch on one layer."""

    tile: Tile
    g: TcGeometry
    shares: int
    per_share: int
    records: TcRecords
    smem: int


def tc_launch(x, weights, geom: ConvGeometry, tile: Tile | None = None) -> TcLaunch:
    """The launch of ``tile`` (default :func:`default_tile`) on ``geom`` for ``weights``
    (its records made once), with the channel chunks shared among blocks where the blocks
    alone leave a wave short (:func:`tc_shares`)."""
    facts = backend.device_facts()
    if (why := supported(Problem(geom))) is not None:
        raise ValueError(why)
    if not has_tf32_mma(facts):
        raise ValueError("remainder='tc' needs tf32 tensor cores (sm_80 or newer)")
    if tile is None:
        tile = default_tile(Problem(geom), facts)
    elif tile not in TILES:
        raise ValueError(f"remainder_tile must be one of {TILES}, got {tile!r}")
    g = tc_geometry(geom, tile)
    regs = cuda.load(cuda.kernel_ref(FILE, name(tile))).num_regs
    shares, per_share = tc_shares(geom, tile, g, regs, facts)
    records = tc_records(weights, tile, g, backend.array_module(x))
    return TcLaunch(tile, g, shares, per_share, records, g.smem)


def run_tc(x, out, geom: ConvGeometry, tl: TcLaunch, bias, residual, relu: bool,
           accumulate: bool) -> None:
    """``sparse_tc_remainder`` (and the shares' reduction) on checked arguments."""
    tile, g, shares, per_share, rec, smem = tl
    q = geom.n * geom.oh * geom.ow
    xp = backend.array_module(x)
    partial = workspace(xp, shares * geom.k * q) if shares > 1 else None
    groups = cdiv(geom.k, tile.rows)
    ints = (geom.n, geom.c, geom.h, geom.w, geom.k, geom.oh, geom.ow, *geom.padding,
            tile.ck, g.ch, g.img, g.pitch, g.iht, g.iwt, g.nb, g.th.bit_length() - 1,
            g.tw.bit_length() - 1, cdiv(geom.ow, g.tw), cdiv(geom.oh, g.th),
            cdiv(geom.c, tile.ck), per_share, groups, g.stage_floats, g.ldp, *geom.stride,
            accumulate, relu)
    gx, gy, _ = g.grid(geom, tile)
    launch(cuda.kernel_ref(FILE, name(tile)), (gx, gy, shares), (g.threads(tile),),
           (x, rec.recs, rec.segs, rec.pixtab, rec.row_of, ptr(bias), ptr(residual),
            out, ptr(partial), *(np.int32(v) for v in ints)), smem)
    if partial is not None:
        size = geom.n * geom.k * geom.oh * geom.ow
        sms = backend.device_facts().sm_count
        launch(cuda.kernel_ref(FILE, SUM), (min(cdiv(size, 256), 8 * sms),), (256,),
               (partial, ptr(bias), ptr(residual), out, np.int32(shares), np.int64(size),
                np.int32(geom.oh * geom.ow), np.int32(geom.k), np.int32(bool(relu))))

