"""A convolution on the tensor cores at fp32 accuracy (``kernels_cu/tucker_core_tf32x3.cu``).

The ``"tf32x3"`` variant of :func:`tensorconv.ops.core_conv2d`: an implicit GEMM (output
pixels x output channels over input channels x taps) on ``mma.sync`` tf32 tiles, each
fp32 operand split into two tf32 parts and three products accumulated in fp32, so that
the result keeps fp32 accuracy (one tf32 pass under ``tensorconv.precision`` "tf32").
It is meant for the large planes (56 x 56 and up) where the fp32 cluster kernel is
bound by its multiply-add issue rate; on small planes the cluster kernel's split over
input channels wins.  Filters up to 7 x 7, stride 1 or 2.

:func:`estimate` (cost terms a block pays, weighted by a fit to measured tile times)
orders the tiles for the tuner (:func:`tensorconv.tuning.oracle.tune_tf32x3_tile`), and
its best is :func:`default_tile`.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry, core_conv_issue
from tensorconv.ops._launch import (
    b_fragments,
    cdiv,
    check_smem,
    check_splits,
    conv_op,
    epilogue_args,
    family_first,
    filter_cover,
    has_clusters,
    has_tf32_mma,
    launch,
    memo_list,
    push_slot_floats,
    stored_tile,
)

FILE = "tucker_core_tf32x3.cu"
Problem = ConvGeometry
WARP_TILES = (1, 2, 4)        # WM (16-pixel) and WN (8-channel) mma tiles per warp
TILE_WIDTHS = (8, 16, 32, 64)
STAGE_CHANNELS = (8, 16, 32)
SPLITS = (1, 2, 4, 8)         # blocks of a thread-block cluster that split the input channels
MAX_WARPS = 8                 # the kernel's __launch_bounds__(256)
MAX_FILTER = 7


@dataclass(frozen=True)
class Tile:
    """Launch shape of the kernel.

    A block of ``warps_m x warps_n`` warps computes ``th x tw`` output pixels
    (``th * tw = warps_m * wm * 16``) by ``warps_n * wn * 8`` output channels;
    each warp ``wm x wn`` m16n8k8 tiles; operands are staged ``ck`` input
    channels at a time.  ``splits`` blocks (a thread-block cluster) share the
    input channels and add their partial sums through distributed shared memory.
    """

    wm: int
    wn: int
    warps_m: int
    warps_n: int
    tw: int
    ck: int
    splits: int = 1

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def pixels(self) -> int:
        return self.warps_m * self.wm * 16

    @property
    def th(self) -> int:
        return self.pixels // self.tw

    @property
    def n8(self) -> int:
        """8-channel tiles per block."""
        return self.warps_n * self.wn

    def layout(self, p: Problem) -> tuple[int, int, int]:
        """(row pitch, channel plane, lead) of a staged input cube, in floats.

        When the input width is a multiple of 4 the kernel copies rows 16 bytes
        at a time from the aligned column ``lead`` words left of the tile's
        first, so the pitch covers ``lead`` too.  The plane is padded to 8 mod 32
        words so that the four channels a warp's A fragment reads at once land
        in distinct bank octets (and stays 16-byte aligned).
        """
        st = p.stride[0]
        iwt = (self.tw - 1) * st + p.s
        lead = (-p.padding[1]) % 4 if p.w % 4 == 0 else 0
        iwp = cdiv(lead + iwt, 4) * 4 if p.w % 4 == 0 else iwt
        plane = ((self.th - 1) * st + p.r) * iwp
        plane += (8 - plane) % 32
        return iwp, plane, lead

    def chunks(self, p: Problem) -> int:
        """Stages of ``ck`` input channels one block of the cluster works through."""
        return cdiv(cdiv(p.c, self.ck), self.splits)

    def stage_floats(self, p: Problem) -> int:
        """Two operand stages (one when a single stage covers a block's input channels),
        each the input cube's big and small parts and the weights."""
        stage = 2 * self.ck * self.layout(p)[1] + self.ck // 8 * p.r * p.s * self.n8 * 128
        return stage * (2 if self.chunks(p) > 1 else 1)

    @property
    def share(self) -> int:
        """Outputs (channel-major within the block) each block of a cluster owns and sums:
        a multiple of 4 (``tdcx::PushReduce`` sends runs of up to 4)."""
        return cdiv(self.n8 * 8 * self.pixels, 4 * self.splits) * 4

    def smem_bytes(self, p: Problem) -> int:
        """The stages; with splits, then the ``splits`` slots of ``share`` partial sums a
        block receives from the cluster and its mbarrier (``tdcx::PushReduce``)."""
        return 4 * (self.stage_floats(p) + push_slot_floats(self.splits, self.share))

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(pixel tiles, batch x channel blocks, splits): the cluster spans z."""
        tiles = cdiv(p.oh, self.th) * cdiv(p.ow, self.tw)
        return tiles, p.n * cdiv(p.k, 8 * self.n8), self.splits


def supported(p: Problem) -> str | None:
    """None when the kernel runs ``p``; otherwise the reason it cannot."""
    if (why := core_conv_issue(p, "tf32x3 kernel", MAX_FILTER)) is not None:
        return why
    if not has_tf32_mma(backend.device_facts()):
        return "the tf32x3 kernel needs tf32 tensor cores (sm_80 or newer)"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every tile worth timing: tiles no wider than the output (rounded up to 8), no
    more channel tiles than the output needs, stages no deeper than the input, and
    splits (only where the device has clusters) that leave every block a stage."""
    clusters = has_clusters(facts)
    n8_need, ow8, c8 = cdiv(p.k, 8), cdiv(p.ow, 8) * 8, cdiv(p.c, 8) * 8
    out = []
    for wm in WARP_TILES:
        for wn in WARP_TILES:
            for warps_m in (1, 2, 4, 8):
                for warps_n in (1, 2, 4):
                    bn8 = warps_n * wn
                    if warps_m * warps_n > MAX_WARPS or (bn8 > 1 and bn8 >= 2 * n8_need):
                        continue
                    for tw in TILE_WIDTHS:
                        pixels = warps_m * wm * 16
                        if pixels % tw or tw > ow8 or pixels // tw > 2 * p.oh:
                            continue
                        for ck in STAGE_CHANNELS:
                            if ck > max(8, c8):
                                continue
                            for splits in SPLITS if clusters else (1,):
                                if splits > cdiv(p.c, ck):
                                    continue
                                t = Tile(wm, wn, warps_m, warps_n, tw, ck, splits)
                                if t.smem_bytes(p) <= facts.smem_per_block_optin:
                                    out.append(t)
    return out


# µs per unit of each features() term on the H100: fit_calibration on the tf32x3
# rows of results/tdc_fig6_tiles_run6.csv (tests/test_tucker.py refits it); its
# pick on the later kernels' tile times (tdc_fig6_tiles_run8.csv) is the held-out check.
CALIBRATION_H100 = (0.00603017, 0.02926453, 0.0, 0.01921892, 0.416992, 4.170576, 0.0143844)
SMEM_PER_SM = 228 * 1024


def features(p: Problem, tile: Tile, sm_count: int) -> np.ndarray:
    """Cost terms of a tile, each multiplied by the waves of blocks.

    The busiest SM sub-partition's mma's (3 per m16n8k8 tile and k step); one
    warp's k steps (the load -> mma latency it cannot overlap alone); the SM's
    shared-memory wavefronts of fragment loads; the elements a thread copies
    and splits; the stages (barriers); one per block; the partial sums a block
    combines across its cluster.
    """
    warps = tile.warps_m * tile.warps_n
    regs = min(255, 100 + 12 * tile.wm * tile.wn)
    per_sm = max(1, min(64 // warps, 65536 // (regs * tile.threads),
                        SMEM_PER_SM // max(1, tile.smem_bytes(p))))
    blocks = int(np.prod(tile.grid(p)))
    waves = cdiv(blocks, sm_count * per_sm)
    resident = min(per_sm, cdiv(blocks, sm_count))
    chunks = tile.chunks(p)
    ksteps = chunks * tile.ck // 8 * p.r * p.s
    st = p.stride[0]
    cube = tile.ck * ((tile.th - 1) * st + p.r) * ((tile.tw - 1) * st + p.s)
    copies = chunks * (cube * 2 + tile.ck * p.r * p.s * tile.n8 * 8) / tile.threads
    reduce = tile.n8 * 8 * tile.pixels * tile.splits / tile.threads if tile.splits > 1 else 0.0
    return waves * np.array([
        cdiv(resident * warps, 4) * tile.wm * tile.wn * 3 * ksteps,
        ksteps,
        resident * warps * ksteps * 4 * (tile.wm + tile.wn),
        resident * copies,
        chunks,
        1.0,
        reduce,
    ])


def estimate(p: Problem, tile: Tile, sm_count: int, calibration=CALIBRATION_H100) -> float:
    """Estimated time (µs) of ``tile`` on ``p``."""
    return float(np.dot(calibration, features(p, tile, sm_count)))


@memo_list
def ranked(p: Problem, facts: DeviceFacts, limit: int | None = 64) -> list[Tile]:
    """Candidates, best estimate first; with ``limit``, the best two of every
    (wm, wn, splits) family first (:func:`tensorconv.ops._launch.family_first`)."""
    return family_first(candidates(p, facts), lambda t: estimate(p, t, facts.sm_count),
                        lambda t: (t.wm, t.wn, t.splits), limit)


@functools.lru_cache(maxsize=4096)
def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The estimate's best tile for ``p`` (no timing)."""
    tiles = ranked(p, facts, limit=1)
    if not tiles:
        raise ValueError(f"no tf32x3 tile fits {p} in shared memory")
    return tiles[0]


def tile_key(p: Problem) -> str:
    """The tune-cache key of the timed best tile for ``p``."""
    return tunecache.make_key("tf32x3_tile", FILE, p)


def tuned_tile(p: Problem) -> Tile | None:
    """The tile the tuner stored for ``p`` on this device, else None; never times."""
    return stored_tile(sys.modules[__name__], p)


def check_tile(tile: Tile, p: Problem) -> None:
    """Raise ``ValueError`` naming what is wrong with ``tile`` for ``p``."""
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not a tucker_core_tf32x3.Tile")
    if tile.wm not in WARP_TILES or tile.wn not in WARP_TILES:
        raise ValueError(f"tile.wm and tile.wn must be in {WARP_TILES}, got {tile}")
    if tile.warps_m < 1 or tile.warps_n < 1 or tile.warps_m * tile.warps_n > MAX_WARPS:
        raise ValueError(f"tile {tile} must have 1..{MAX_WARPS} warps")
    if tile.tw not in TILE_WIDTHS or tile.pixels % tile.tw:
        raise ValueError(f"tile.tw must be in {TILE_WIDTHS} and divide the block's "
                         f"{tile.pixels} pixels, got {tile}")
    if tile.ck not in STAGE_CHANNELS:
        raise ValueError(f"tile.ck must be in {STAGE_CHANNELS}, got {tile.ck}")
    check_splits(tile, SPLITS)
    check_smem(tile, tile.smem_bytes(p))


def pack_weights(w):
    """Filters (N, C, R, S) in the kernel's B-fragment order, split into tf32 (big, small)
    parts (:func:`tensorconv.ops._launch.b_fragments`): (ceil(N/8), ceil(C/8), R*S, 32, 4)."""
    return b_fragments(w)


def packed_shape(p: Problem) -> tuple[int, ...]:
    """Shape of :func:`pack_weights` for ``p``'s filters."""
    return (cdiv(p.k, 8), cdiv(p.c, 8), p.r * p.s, 32, 4)


def _name(r: int, s: int, stride: int, wm: int, wn: int, splits: int) -> str:
    return f"tdc_core_conv_tf32x3<{r}, {s}, {stride}, {wm}, {wn}, {splits}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` on ``p`` runs (at the current precision)."""
    return (cuda.kernel_ref(FILE, _name(p.r, p.s, p.stride[0], tile.wm, tile.wn,
                                        tile.splits)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every tile's template arguments on a 3x3 stride-1
    filter, and one tile on every filter size of ``filter_cover`` at either stride."""
    names = {_name(3, 3, 1, wm, wn, cl) for wm in WARP_TILES for wn in WARP_TILES
             for cl in SPLITS}
    names |= {_name(r, s, st, 2, 2, 2) for r, s in filter_cover(MAX_FILTER) for st in (1, 2)}
    return sorted(names)


def tf32x3_conv2d(x, w, stride=1, padding=0, *, bias=None, relu: bool = False, residual=None,
                  tile: Tile | None = None, packed=None, out=None):
    """``relu?(conv(x, w) + bias + residual)`` on the tensor cores at fp32 accuracy
    (3xTF32; one tf32 pass under ``tensorconv.precision`` "tf32"), fp32, NCHW.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, C, H, W), float32, C-contiguous
    w : array, (N, C, R, S), float32; R, S <= 7
    stride : int or pair, 1 or 2 (equal in both axes)
    padding : int or pair
    bias : array, (N,), float32, optional
    relu : bool
    residual : array, (B, N, OH, OW), float32, optional
    tile : Tile, optional
        Default: the tuned tile (:func:`tuned_tile`), else :func:`default_tile`.
    packed : array, optional
        :func:`pack_weights` of ``w``, prepared once.
    out : array, (B, N, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, N, OH, OW), float32
    """
    return conv_op(sys.modules[__name__], "tf32x3_conv2d", x, w, stride, padding, bias=bias,
                   relu=relu, residual=residual, tile=tile, packed=packed, out=out)


def run(x, packed, out, p: Problem, tile: Tile, epilogue=(None, None, False)) -> None:
    """Launch on checked arguments (``epilogue``: bias or None, residual or None, relu)."""
    iwp, plane, lead = tile.layout(p)
    st = p.stride[0]
    iht, iwt = (tile.th - 1) * st + p.r, (tile.tw - 1) * st + p.s
    cols = iwp // 4 if p.w % 4 == 0 else iwt
    chunks = cdiv(p.c, tile.ck)
    i32, fd = np.int32, cuda.fast_div
    launch(kernels(p, tile)[0], tile.grid(p), (tile.threads,), (
        x, packed, out, *epilogue_args(epilogue), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
        i32(p.oh), i32(p.ow), i32(p.padding[0]), i32(p.padding[1]), i32(tile.th), i32(tile.ck),
        i32(iwp), i32(plane), i32(lead), i32(p.w % 4 == 0), i32(chunks),
        i32(cdiv(chunks, tile.splits)), i32(tile.stage_floats(p)), fd(cdiv(p.ow, tile.tw)),
        fd(cdiv(p.k, 8 * tile.n8)), fd(tile.warps_m), fd(tile.tw), fd(iht * cols), fd(cols),
        fd(tile.pixels), fd(tile.share if tile.splits > 1 else 1)), tile.smem_bytes(p))
