"""A calibrated cost estimate for the ``"tf32x3"`` core-convolution kernel's tiles.

Like :mod:`tensorconv.tuning.cluster_model` for the cluster kernel: each term
of :func:`features` is a cost a block pays, times the waves of blocks, and the
weights are fitted (non-negative least squares on relative error) to measured
tile times.  The default tile is the estimate's best; the tuner
(:func:`tensorconv.tuning.oracle.tune_tf32x3_tile`) times the best few of
every family.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend
from tensorconv.checks import ConvGeometry
from tensorconv.ops.tucker import family_first
from tensorconv.ops.tucker_tf32x3 import Tf32x3Tile, candidates
from tensorconv.tuning import tile_fit

# µs per unit of each features() term on the H100: fit_calibration on the tf32x3
# rows of results/tdc_fig6_tiles_run6.csv (tests/test_tucker.py refits it); its
# pick on the later kernels' tile times (tdc_fig6_tiles_run8.csv) is the held-out check.
CALIBRATION_H100 = (0.00603017, 0.02926453, 0.0, 0.01921892, 0.416992, 4.170576, 0.0143844)
SMEM_PER_SM = 228 * 1024


def features(geom: ConvGeometry, tile: Tf32x3Tile, sm_count: int) -> np.ndarray:
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
                        SMEM_PER_SM // max(1, tile.smem_bytes(geom))))
    blocks = int(np.prod(tile.grid(geom)))
    waves = -(-blocks // (sm_count * per_sm))
    resident = min(per_sm, -(-blocks // sm_count))
    chunks = tile.chunks(geom)
    ksteps = chunks * tile.ck // 8 * geom.r * geom.s
    st = geom.stride[0]
    cube = tile.ck * ((tile.th - 1) * st + geom.r) * ((tile.tw - 1) * st + geom.s)
    copies = chunks * (cube * 2 + tile.ck * geom.r * geom.s * tile.n8 * 8) / tile.threads
    reduce = tile.n8 * 8 * tile.pixels * tile.splits / tile.threads if tile.splits > 1 else 0.0
    return waves * np.array([
        -(-resident * warps // 4) * tile.wm * tile.wn * 3 * ksteps,
        ksteps,
        resident * warps * ksteps * 4 * (tile.wm + tile.wn),
        resident * copies,
        chunks,
        1.0,
        reduce,
    ])


def estimate(geom: ConvGeometry, tile: Tf32x3Tile, sm_count: int,
             calibration=CALIBRATION_H100) -> float:
    """Estimated time (µs) of ``tile`` on ``geom``."""
    return float(np.dot(calibration, features(geom, tile, sm_count)))


def ranked_tiles(geom: ConvGeometry, smem_limit: int, sm_count: int,
                 limit: int | None = 64, clusters: bool = True) -> list[Tf32x3Tile]:
    """Valid tiles, best estimate first; with ``limit``, the best two of every
    (wm, wn, splits) family first (:func:`tensorconv.ops.tucker.family_first`)."""
    return family_first(candidates(geom, smem_limit, clusters),
                        lambda t: estimate(geom, t, sm_count), lambda t: (t.wm, t.wn, t.splits),
                        limit)


@functools.lru_cache(maxsize=4096)
def choose_tile(geom: ConvGeometry) -> Tf32x3Tile:
    """The estimate's best tile for ``geom`` on this device."""
    facts = backend.device_facts()
    tiles = ranked_tiles(geom, facts.smem_per_block_optin, facts.sm_count, limit=1,
                         clusters=facts.compute_capability >= (9, 0))
    if not tiles:
        raise ValueError(f"no tf32x3 tile fits {geom} in shared memory")
    return tiles[0]


def load_samples(path) -> list:
    """``(geom, tile, µs)`` of the ``tf32x3:`` rows of a ``tdc_fig6 --tiles`` CSV."""
    return tile_fit.load_tile_samples(path, "tf32x3:", Tf32x3Tile)


def fit_calibration(samples, sm_count: int) -> tuple:
    """Non-negative weights minimising the relative error of :func:`estimate` on ``samples``."""
    return tile_fit.fit(features, samples, sm_count)


def pick_ratio(samples, sm_count: int, calibration=CALIBRATION_H100) -> float:
    """Geomean over shapes of (time of the estimate's pick) / (best time), among the timed tiles."""
    return tile_fit.pick_ratio(lambda g, t: estimate(g, t, sm_count, calibration), samples)
