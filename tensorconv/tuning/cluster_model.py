"""A calibrated cost estimate for the ``"cluster"`` core-convolution kernel's tiles.

Our kernel (:func:`tensorconv.ops.tucker.core_conv2d`, ``variant="cluster"``)
has many more launch shapes than the paper's scheme; this estimate orders them
without running anything: the default tile is its best, and the oracle
(:func:`tensorconv.tuning.oracle.tune_cluster_tile`) times its best few.  Each
term of :func:`features` is a cost a block pays, times the waves of blocks; the
weights are fitted (non-negative least squares on relative error) to measured
tile times, as the calibrated model of :mod:`tensorconv.tuning.tdc_model` is.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend
from tensorconv.checks import ConvGeometry
from tensorconv.ops.tucker import ClusterTile, cluster_candidates, family_first
from tensorconv.tuning import tile_fit

# µs per unit of each features() term on the H100: fit_calibration on the
# cluster rows of results/tdc_fig6_tiles_run4.csv (tests/test_tucker.py refits it); its
# pick on the later kernels' tile times (tdc_fig6_tiles_run8.csv) is the held-out check.
CALIBRATION_H100 = (0.0006440004, 0.000381176, 0.001027597, 3.677828, 0.7252201, 0.001631213)
SMEM_PER_SM = 228 * 1024


def features(geom: ConvGeometry, tile: ClusterTile, sm_count: int) -> np.ndarray:
    """Cost terms of a cluster tile, each multiplied by the waves of blocks.

    A thread's multiply-add chain (4-cycle latency over NT * PT chains); its
    SM's issue slots (multiply-adds and shared-memory loads); its SM's
    shared-memory wavefronts; one per block; the stages, weighted by the
    copies each thread issues; the partial sums a thread combines across the
    cluster (or stores, without one).
    """
    threads, ng, st = tile.threads, tile.nb // tile.nt, geom.stride[0]
    regs = 40 + 1.5 * tile.nt * tile.pt
    per_sm = max(1, min(32, 2048 // threads, int(65536 // (regs * threads)),
                        SMEM_PER_SM // max(1, tile.smem_bytes(geom))))
    blocks = int(np.prod(tile.grid(geom)))
    waves = -(-blocks // (sm_count * per_sm))
    resident = min(per_sm, -(-blocks // sm_count)) * -(-threads // 32)
    c_per = -(-geom.c // tile.splits)
    steps = c_per * geom.r                       # (channel, filter row) steps per thread
    fma = tile.nt * tile.pt * geom.s * steps
    vn4 = -(-((tile.pt - 1) * st + geom.s) // 4) * 4
    in_instr, w_instr = vn4 // 4, geom.s * -(-tile.nt // 4)
    rows_per_warp = max(1, 32 // min(ng, 32))
    in_wf = max(in_instr, -(-rows_per_warp * vn4 * 4 // 128))
    w_wf = w_instr * max(1, -(-min(ng, 32) * min(tile.nt, 4) * 4 // 128))
    iht, iwt = (tile.th - 1) * st + geom.r, (tile.tw - 1) * st + geom.s
    copies = (tile.ck * iht * iwt + tile.ck * geom.r * geom.s * tile.nb / 4) / threads
    outs = tile.nb * tile.th * tile.tw / threads
    return waves * np.array([
        fma * 4 / min(4, tile.nt * tile.pt),
        resident * (fma + steps * (in_instr + w_instr)) / 4,
        resident * steps * (in_wf + w_wf),
        1.0,
        -(-c_per // tile.ck) * (1 + copies / 8),
        outs * tile.splits if tile.splits > 1 else outs / 4,
    ])


def estimate(geom: ConvGeometry, tile: ClusterTile, sm_count: int,
             calibration=CALIBRATION_H100) -> float:
    """Estimated time (µs) of ``tile`` on ``geom``."""
    return float(np.dot(calibration, features(geom, tile, sm_count)))


def ranked_tiles(geom: ConvGeometry, smem_limit: int, sm_count: int,
                 limit: int | None = 64, clusters: bool = True) -> list[ClusterTile]:
    """Valid tiles, best estimate first.

    With ``limit``: the best two of every (nt, pt, splits) family come first,
    then the overall best, so the oracle sees every family whatever the
    estimate's bias; the chosen ``limit`` tiles are returned best estimate first.
    """
    return family_first(cluster_candidates(geom, smem_limit, clusters),
                        lambda t: estimate(geom, t, sm_count), lambda t: (t.nt, t.pt, t.splits),
                        limit)


@functools.lru_cache(maxsize=1024)
def choose_tile(geom: ConvGeometry) -> ClusterTile:
    """The estimate's best tile on the current device (no timing)."""
    facts = backend.device_facts()
    return ranked_tiles(geom, facts.smem_per_block_optin, facts.sm_count, limit=1,
                        clusters=facts.compute_capability >= (9, 0))[0]


def load_samples(path) -> list:
    """``(geom, tile, µs)`` of the ``cluster:`` rows of a ``tdc_fig6 --tiles`` CSV."""
    return tile_fit.load_tile_samples(path, "cluster:", ClusterTile)


def fit_calibration(samples, sm_count: int) -> tuple:
    """Non-negative weights minimising the relative error of :func:`estimate` on ``samples``."""
    return tile_fit.fit(features, samples, sm_count)


def pick_ratio(samples, sm_count: int, calibration=CALIBRATION_H100) -> float:
    """Geomean over shapes of (time of the estimate's pick) / (best time), among the timed tiles."""
    return tile_fit.pick_ratio(lambda g, t: estimate(g, t, sm_count, calibration), samples)
