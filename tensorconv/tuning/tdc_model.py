"""TDC's analytic performance model for the core-convolution tile (sections 5.3-5.5).

For a tile (TH, TW, TC) of a core convolution (C, N, H, W):

* blocks = ceil(H/TH) * ceil(W/TW) * ceil(C/TC) (times the batch), N threads each;
* per-block compute ~ (TH + R - 1)(TW + S - 1) * TC * R * S (the paper's
  FLOPs_blk; the GPU peak cancels when tiles are ranked);
* waves = ceil(blocks * N / (GPU threads * occupancy)), occupancy from the
  compiled kernel's registers and the tile's shared memory (eq. 14);
* memory volume = kernel + input + output traffic (eqs. 16-19).

The paper's model ranks tiles by waves x per-block compute, keeps the best
``top_fraction`` and returns the one with the least memory volume — without
running anything.  On an H100 that rule prefers TC = 1-2 (most blocks, least
per-block work) and lands 2.5x slower than the best tile, because it ignores
the atomic combination of C / TC partial outputs and the serial per-channel
weight loads of each thread.  The ``"calibrated"`` model adds those terms:

    time ~ a * waves * TC + b * waves * TC * TH * TW + c * (atomic outputs / 1e4)
           + d * waves + e + f * memory volume + g * waves * staged input tile

with coefficients fitted once per device by least squares on measured tile
times (:func:`fit_calibration`, data from ``tdc_fig6 --tiles``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tensorconv import backend
from tensorconv.checks import ConvGeometry
from tensorconv.ops import tucker


@dataclass(frozen=True)
class Prediction:
    tile: tucker.CoreTile
    occupancy: float
    waves: int
    compute: float      # waves x per-block compute, arbitrary units
    memory: float       # elements moved through global memory (eq. 19)


def occupancy(threads: int, regs: int, smem: int, facts) -> float:
    """Fraction of the SM's thread slots that resident blocks of this shape fill."""
    warps = -(-threads // 32)
    regs_per_block = warps * 32 * max(regs, 1)
    by_regs = facts.regs_per_sm // regs_per_block
    by_smem = facts.smem_per_sm // smem if smem else 32
    by_threads = facts.max_threads_per_sm // (warps * 32)
    blocks = max(0, min(by_regs, by_smem, by_threads, 32))
    return blocks * warps * 32 / facts.max_threads_per_sm


def memory_volume(geom: ConvGeometry, t: tucker.CoreTile) -> float:
    """Eqs. 16-19: kernel, input and output elements moved (per image, times the batch)."""
    tiles_hw = -(-geom.oh // t.th) * -(-geom.ow // t.tw)
    iht = (t.th - 1) * geom.stride[0] + geom.r
    iwt = (t.tw - 1) * geom.stride[1] + geom.s
    vol_k = tiles_hw * geom.c * geom.k * geom.r * geom.s
    vol_x = tiles_hw * geom.c * iht * iwt
    vol_y = geom.oh * geom.ow * geom.k * -(-geom.c // t.tc)
    return geom.n * (vol_x + vol_y) + vol_k


def predict(geom: ConvGeometry, t: tucker.CoreTile, regs: int, facts) -> Prediction:
    threads = tucker.tdc_threads(geom)
    occ = occupancy(threads, regs, t.smem_bytes(geom), facts)
    gpu_threads = facts.sm_count * facts.max_threads_per_sm
    waves = -(-t.blocks(geom) * threads // max(1, int(gpu_threads * occ))) if occ else 10 ** 9
    per_block = ((t.th - 1) * geom.stride[0] + geom.r) * ((t.tw - 1) * geom.stride[1] + geom.s) \
        * t.tc * geom.r * geom.s
    return Prediction(t, occ, waves, waves * per_block, memory_volume(geom, t))


def rank(geom: ConvGeometry, regs_of, facts, top_fraction: float = 0.05) -> list[Prediction]:
    """All candidates by the model's order: the compute-best ``top_fraction`` by memory first."""
    preds = [predict(geom, t, regs_of(t), facts)
             for t in tucker.candidate_tiles(geom, facts.smem_per_block_optin)]
    preds.sort(key=lambda p: p.compute)
    keep = max(1, int(round(len(preds) * top_fraction)))
    head = sorted(preds[:keep], key=lambda p: (p.memory, p.compute))
    return head + preds[keep:]


# Fitted on the tile times of two `tdc_fig6 --tiles` runs on the H100 (commits 3d07fd2 and
# ce9b5b2, 2,794 tiles each), kept as results/tdc_fig6_tiles.csv and tdc_fig6_tiles_run2.csv
# (a test refits them).  Fitted on one run and judged on the other, its picks land 1.075x and
# 1.12x from that run's best tile (geomean over the 18 shapes): run-to-run timing noise of a
# few percent is the size of the remaining gap.  The five-term model without the memory terms
# scored 1.10x and 1.11x the same way.  On a third run that the fit never saw (commit e763bfe,
# results/tdc_fig6_tiles_run3.csv) the picks land 1.083x from the best tile, and tdc_fig6's
# side-by-side timing of model and oracle tiles in that run gives 1.06x.
CALIBRATION_H100 = (0.00039, 0.020277, 0.12998, -0.843573, 6.064445, 0.018295, 1.282181)


def calibrated_features(geom: ConvGeometry, t: tucker.CoreTile, regs: int, facts):
    """(waves*TC, waves*TC*TH*TW, atomic outputs / 1e4, waves, 1, memory volume / 1e5,
    waves * staged input tile / 100) of the calibrated model."""
    threads = tucker.tdc_threads(geom)
    occ = occupancy(threads, regs, t.smem_bytes(geom), facts)
    slots = max(1, int(facts.sm_count * facts.max_threads_per_sm * occ // threads))
    waves = -(-t.blocks(geom) // slots)
    c_tiles = -(-geom.c // t.tc)
    atomics = geom.n * geom.oh * geom.ow * geom.k * c_tiles if c_tiles > 1 else 0
    staged = ((t.th - 1) * geom.stride[0] + geom.r) * ((t.tw - 1) * geom.stride[1] + geom.s) * t.tc
    return (waves * t.tc, waves * t.tc * t.th * t.tw, atomics / 1e4, waves, 1.0,
            memory_volume(geom, t) / 1e5, waves * staged / 100)


def fit_calibration(samples, facts):
    """Least-squares coefficients (relative error) from ``(geom, tile, regs, µs)`` samples."""
    import numpy as np

    a = np.array([calibrated_features(g, t, r, facts) for g, t, r, _ in samples], dtype=float)
    y = np.array([us for *_, us in samples], dtype=float)
    coef, *_ = np.linalg.lstsq(a / y[:, None], np.ones(len(y)), rcond=None)
    return tuple(float(c) for c in coef)


def load_tile_samples(path) -> list:
    """``(geom, tile, regs, µs)`` samples of the ``"tdc"`` kernel from a ``tdc_fig6 --tiles``
    CSV (batch 1, 3x3, pad 1); the rows of our own kernels (``cluster:``, ``tf32x3:``) are
    skipped."""
    from tensorconv.checks import conv_geometry
    from tensorconv.results import read_csv

    samples = []
    for row in read_csv(path):
        if ":" in row["variant"]:
            continue
        c, n, h, w = (int(v) for v in row["case"].split("_"))
        th, tw, tc = (int(v) for v in row["variant"].split("x"))
        regs = int(row["note"].split()[1])
        samples.append((conv_geometry((1, c, h, w), (n, c, 3, 3), 1, 1),
                        tucker.CoreTile(th, tw, tc), regs, row["value"]))
    return samples


@functools.lru_cache(maxsize=1024)
def choose_tile(geom: ConvGeometry, method: str = "calibrated",
                top_fraction: float = 0.05) -> tucker.CoreTile:
    """The model's tile for ``geom`` without running it.

    ``method="paper"`` is TDC's rule (top ``top_fraction`` by compute, then least
    memory); ``"calibrated"`` minimises the calibrated time estimate.  Registers
    are read from the compiled instantiations.
    """
    if method not in ("calibrated", "paper"):
        raise ValueError(f"method must be 'calibrated' or 'paper', got {method!r}")
    facts = backend.device_facts()
    regs_of = lambda t: tucker.tdc_kernel(t, geom).num_regs  # noqa: E731
    if method == "paper":
        return rank(geom, regs_of, facts, top_fraction)[0].tile
    tiles = tucker.candidate_tiles(geom, facts.smem_per_block_optin)
    return min(tiles, key=lambda t: sum(c * f for c, f in zip(
        CALIBRATION_H100, calibrated_features(geom, t, regs_of(t), facts))))
