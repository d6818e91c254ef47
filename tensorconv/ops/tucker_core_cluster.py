"""The "cluster" convolution (``kernels_cu/tucker_core_cluster.cu``): ours for the H100, the
default kernel of a Tucker core (``ops.core_conv2d``) and a candidate for dense layers.

Each thread computes NT channels x PT pixels from a cp.async-staged input cube and
weight slab; the blocks splitting the input channels form a thread-block cluster that
sums its partials through distributed shared memory (no atomics, no zero-filled output,
deterministic).  Filters up to 7 x 7, stride 1 or 2, fp32, NCHW, with a bias / residual /
ReLU epilogue.

The kernel has thousands of launch shapes; :func:`estimate` (cost terms a block pays,
times the waves of blocks, weighted by a fit to measured tile times) orders them without
running anything: :func:`default_tile` is its best, and the tuner
(:func:`tensorconv.tuning.oracle.tune_cluster_tile`) times its best few and stores the
winner, which :func:`tuned_tile` reads back.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry, core_conv_issue
from tensorconv.ops._launch import (
    cdiv,
    check_smem,
    check_splits,
    conv_op,
    crsn,
    epilogue_args,
    family_first,
    filter_cover,
    has_clusters,
    launch,
    memo_list,
    push_slot_floats,
    stored_tile,
)

FILE = "tucker_core_cluster.cu"
Problem = ConvGeometry
NT = (1, 2, 4, 8)          # channels per thread
PT = (1, 2, 4, 8)          # pixels per thread
SPLITS = (1, 2, 4, 8)      # portable cluster sizes
MAX_THREADS = 256          # the kernel's __launch_bounds__
MAX_FILTER = 7


@dataclass(frozen=True)
class Tile:
    """Launch shape of the cluster kernel.

    A block computes ``nb`` output channels x ``th`` rows x ``twg * pt`` columns
    from a ``1 / splits`` share of the input channels, staged ``ck`` channels at
    a time; each of its ``(nb / nt) * th * twg`` threads owns ``nt`` channels x
    ``pt`` consecutive pixels.  ``splits`` blocks form one thread-block cluster.
    """

    nt: int
    pt: int
    nb: int
    th: int
    twg: int
    ck: int
    splits: int

    @property
    def threads(self) -> int:
        return self.nb // self.nt * self.th * self.twg

    @property
    def tw(self) -> int:
        return self.twg * self.pt

    def stage_floats(self, p: Problem) -> int:
        """Two pipeline stages (input cube, weight slab), one when ``ck`` covers a
        split's channels; mirrors the layout computed in ``tdc_core_conv_cluster``."""
        st = p.stride[0]
        vn4 = cdiv((self.pt - 1) * st + p.s, 4) * 4
        iwp = cdiv((self.twg - 1) * self.pt * st + vn4, 4) * 4
        iht = (self.th - 1) * st + p.r
        in_stage = self.ck * iht * iwp
        w_stage = cdiv(self.ck * p.r * p.s * self.nb, 4) * 4
        nbuf = 2 if cdiv(p.c, self.splits) > self.ck else 1  # one stage needs no second
        return nbuf * (in_stage + w_stage)

    @property
    def share(self) -> int:
        """Outputs (channel-major within the tile) each block of a cluster owns and sums:
        a multiple of 4 (``tdcx::PushReduce`` sends runs of up to 4)."""
        return cdiv(self.nb * self.th * self.tw, 4 * self.splits) * 4

    def smem_bytes(self, p: Problem) -> int:
        """The stages; with splits, then the ``splits`` slots of ``share`` partial sums
        a block receives from the cluster and its mbarrier (``tdcx::PushReduce``)."""
        return 4 * (self.stage_floats(p) + push_slot_floats(self.splits, self.share))

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(pixel tiles, batch x channel tiles, splits): the cluster spans z."""
        return cdiv(p.oh, self.th) * cdiv(p.ow, self.tw), p.n * cdiv(p.k, self.nb), self.splits


def supported(p: Problem) -> str | None:
    """None when the kernel runs ``p``; otherwise the reason it cannot."""
    return core_conv_issue(p, "cluster kernel", MAX_FILTER)


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile worth timing for ``p`` that fits the device's shared memory.

    Micro-tiles NT x PT of 2..8 each; channel groups up to 16; rows 1..8 and
    column groups 1..8 within the output (plus one tile of margin); cluster
    sizes that leave at least 4 channels per block (1 only before sm_90); stage
    depths of 8, 16 or the whole split (one stage); 32..256 threads.
    """
    limit, clusters = facts.smem_per_block_optin, has_clusters(facts)
    rk = cdiv(p.k, 4) * 4
    out = []
    for nt in (2, 4, 8):
        for pt in (2, 4, 8):
            for ng in (1, 2, 4, 8, 16):
                nb = nt * ng
                if nb > max(rk, nt) or (nb < min(p.k, 16) and ng < 16):
                    continue
                for th in (1, 2, 4, 7, 8):
                    if th > p.oh:
                        continue
                    for twg in (1, 2, 4, 8):
                        if (twg - 1) * pt >= p.ow:
                            continue
                        for splits in SPLITS if clusters else (1,):
                            if p.c < 4 * splits and splits > 1:
                                continue
                            c_per = cdiv(p.c, splits)
                            for ck in sorted({min(8, c_per), min(16, c_per), c_per}):
                                t = Tile(nt, pt, nb, th, twg, ck, splits)
                                if 32 <= t.threads <= MAX_THREADS and t.smem_bytes(p) <= limit:
                                    out.append(t)
    if not out:  # tiny problems: one small tile still runs
        out.append(Tile(1, 1, 1, 1, 1, min(8, p.c), 1))
    return out


# µs per unit of each features() term on the H100: fit_calibration on the
# cluster rows of results/tdc_fig6_tiles_run4.csv (tests/test_tucker.py refits it); its
# pick on the later kernels' tile times (tdc_fig6_tiles_run8.csv) is the held-out check.
CALIBRATION_H100 = (0.0006440004, 0.000381176, 0.001027597, 3.677828, 0.7252201, 0.001631213)
SMEM_PER_SM = 228 * 1024


def features(p: Problem, tile: Tile, sm_count: int) -> np.ndarray:
    """Cost terms of a tile, each multiplied by the waves of blocks.

    A thread's multiply-add chain (4-cycle latency over NT * PT chains); its
    SM's issue slots (multiply-adds and shared-memory loads); its SM's
    shared-memory wavefronts; one per block; the stages, weighted by the
    copies each thread issues; the partial sums a thread combines across the
    cluster (or stores, without one).
    """
    threads, ng, st = tile.threads, tile.nb // tile.nt, p.stride[0]
    regs = 40 + 1.5 * tile.nt * tile.pt
    per_sm = max(1, min(32, 2048 // threads, int(65536 // (regs * threads)),
                        SMEM_PER_SM // max(1, tile.smem_bytes(p))))
    blocks = int(np.prod(tile.grid(p)))
    waves = cdiv(blocks, sm_count * per_sm)
    resident = min(per_sm, cdiv(blocks, sm_count)) * cdiv(threads, 32)
    c_per = cdiv(p.c, tile.splits)
    steps = c_per * p.r                       # (channel, filter row) steps per thread
    fma = tile.nt * tile.pt * p.s * steps
    vn4 = cdiv((tile.pt - 1) * st + p.s, 4) * 4
    in_instr, w_instr = vn4 // 4, p.s * cdiv(tile.nt, 4)
    rows_per_warp = max(1, 32 // min(ng, 32))
    in_wf = max(in_instr, cdiv(rows_per_warp * vn4 * 4, 128))
    w_wf = w_instr * max(1, cdiv(min(ng, 32) * min(tile.nt, 4) * 4, 128))
    iht, iwt = (tile.th - 1) * st + p.r, (tile.tw - 1) * st + p.s
    copies = (tile.ck * iht * iwt + tile.ck * p.r * p.s * tile.nb / 4) / threads
    outs = tile.nb * tile.th * tile.tw / threads
    return waves * np.array([
        fma * 4 / min(4, tile.nt * tile.pt),
        resident * (fma + steps * (in_instr + w_instr)) / 4,
        resident * steps * (in_wf + w_wf),
        1.0,
        cdiv(c_per, tile.ck) * (1 + copies / 8),
        outs * tile.splits if tile.splits > 1 else outs / 4,
    ])


def estimate(p: Problem, tile: Tile, sm_count: int, calibration=CALIBRATION_H100) -> float:
    """Estimated time (µs) of ``tile`` on ``p``."""
    return float(np.dot(calibration, features(p, tile, sm_count)))


@memo_list
def ranked(p: Problem, facts: DeviceFacts, limit: int | None = 64) -> list[Tile]:
    """Candidates, best estimate first; with ``limit``, the best two of every
    (nt, pt, splits) family come first (:func:`tensorconv.ops._launch.family_first`), so
    the tuner sees every family whatever the estimate's bias."""
    return family_first(candidates(p, facts), lambda t: estimate(p, t, facts.sm_count),
                        lambda t: (t.nt, t.pt, t.splits), limit)


@functools.lru_cache(maxsize=1024)
def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The estimate's best tile (no timing)."""
    return ranked(p, facts, limit=1)[0]


def tile_key(p: Problem) -> str:
    """The tune-cache key of the timed best tile for ``p``."""
    return tunecache.make_key("cluster_tile", FILE, p)


def tuned_tile(p: Problem) -> Tile | None:
    """The tile the tuner stored for ``p`` on this device, else None; never times."""
    return stored_tile(sys.modules[__name__], p)


def check_tile(tile: Tile, p: Problem) -> None:
    """Raise ``ValueError`` naming what is wrong with ``tile`` for ``p``."""
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not a tucker_core_cluster.Tile")
    if tile.nt not in NT or tile.pt not in PT:
        raise ValueError(f"tile.nt must be in {NT} and tile.pt in {PT}, got {tile}")
    check_splits(tile, SPLITS)
    if tile.nb < tile.nt or tile.nb % tile.nt:
        raise ValueError(f"tile.nb must be a positive multiple of tile.nt, got {tile}")
    if min(tile.th, tile.twg, tile.ck) < 1:
        raise ValueError(f"tile.th, tile.twg and tile.ck must be >= 1, got {tile}")
    if not 1 <= tile.threads <= MAX_THREADS:
        raise ValueError(f"tile {tile} has {tile.threads} threads; at most {MAX_THREADS}")
    check_smem(tile, tile.smem_bytes(p))


def pack_weights(w):
    """Filters (N, C, R, S) in the kernel's CRSN order (C, R, S, N) (:func:`crsn`)."""
    return crsn(w)


def packed_shape(p: Problem) -> tuple[int, ...]:
    """Shape of :func:`pack_weights` for ``p``'s filters."""
    return (p.c, p.r, p.s, p.k)


def _name(r: int, s: int, stride: int, nt: int, pt: int, splits: int) -> str:
    return f"tdc_core_conv_cluster<{r}, {s}, {stride}, {nt}, {pt}, {splits}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` on ``p`` runs."""
    return (cuda.kernel_ref(FILE, _name(p.r, p.s, p.stride[0], tile.nt, tile.pt,
                                        tile.splits)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile's template arguments on a 3x3 stride-1
    filter, and one tile on every filter size of ``filter_cover`` at either stride."""
    names = {_name(3, 3, 1, nt, pt, cl) for nt in NT for pt in PT for cl in SPLITS}
    names |= {_name(r, s, st, 4, 4, 2) for r, s in filter_cover(MAX_FILTER) for st in (1, 2)}
    return sorted(names)


def cluster_conv2d(x, w, stride=1, padding=0, *, bias=None, relu: bool = False, residual=None,
                   tile: Tile | None = None, packed=None, out=None):
    """``relu?(conv(x, w) + bias + residual)`` on the cluster kernel, fp32, NCHW.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, C, H, W), float32, C-contiguous
    w : array, (N, C, R, S), float32; R, S <= 7
    stride : int or pair, 1 or 2 (equal in both axes)
    padding : int or pair
    bias : array, (N,), float32, optional
    relu : bool
    residual : array, (B, N, OH, OW), float32, optional
        Added before the ReLU.
    tile : Tile, optional
        Default: the tuned tile (:func:`tuned_tile`), else :func:`default_tile`.
    packed : array, (C, R, S, N), optional
        :func:`pack_weights` of ``w``, prepared once.
    out : array, (B, N, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, N, OH, OW), float32
    """
    return conv_op(sys.modules[__name__], "cluster_conv2d", x, w, stride, padding, bias=bias,
                   relu=relu, residual=residual, tile=tile, packed=packed, out=out)


def run(x, packed, out, p: Problem, tile: Tile, epilogue=(None, None, False)) -> None:
    """Launch on checked arguments (``epilogue``: bias or None, residual or None, relu)."""
    st = p.stride[0]
    iht, iwt = (tile.th - 1) * st + p.r, (tile.tw - 1) * st + p.s
    vec_w = p.k % 4 == 0 and tile.nb % 4 == 0
    i32, fd = np.int32, cuda.fast_div
    launch(kernels(p, tile)[0], tile.grid(p), (tile.threads,), (
        x, packed, out, *epilogue_args(epilogue), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
        i32(p.oh), i32(p.ow), i32(p.padding[0]), i32(p.padding[1]), i32(tile.nb), i32(tile.th),
        i32(tile.ck), i32(cdiv(p.c, tile.splits)), i32(tile.stage_floats(p)),
        fd(tile.nb // tile.nt), fd(tile.twg), fd(cdiv(p.k, tile.nb)), fd(cdiv(p.ow, tile.tw)),
        fd(iht * iwt), fd(iwt), fd(tile.nb // 4 if vec_w else tile.nb), fd(tile.ck),
        fd(tile.th * tile.tw), fd(tile.tw), fd(tile.share if tile.splits > 1 else 1)),
        tile.smem_bytes(p))
