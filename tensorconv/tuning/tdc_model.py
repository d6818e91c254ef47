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
weight loads of each thread.  The calibrated form adds those terms
(:func:`tensorconv.ops.tucker_core_tdc.calibrated_features`, the kernel's default
tile), with coefficients fitted once per device by least squares on measured tile
times (:func:`fit_calibration`, data from ``tdc_fig6 --tiles``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend
from tensorconv.checks import ConvGeometry, conv_geometry
from tensorconv.ops import tucker_core_tdc as tdc
from tensorconv.results import read_csv


@dataclass(frozen=True)
class Prediction:
    tile: tdc.Tile
    occupancy: float
    waves: int
    compute: float      # waves x per-block compute, arbitrary units
    memory: float       # elements moved through global memory (eq. 19)


def predict(geom: ConvGeometry, t: tdc.Tile, regs: int, facts) -> Prediction:
    threads = tdc.threads(geom)
    occ = tdc.occupancy(threads, regs, t.smem_bytes(geom), facts)
    gpu_threads = facts.sm_count * facts.max_threads_per_sm
    waves = -(-t.blocks(geom) * threads // max(1, int(gpu_threads * occ))) if occ else 10 ** 9
    per_block = ((t.th - 1) * geom.stride[0] + geom.r) * ((t.tw - 1) * geom.stride[1] + geom.s) \
        * t.tc * geom.r * geom.s
    return Prediction(t, occ, waves, waves * per_block, tdc.memory_volume(geom, t))


def rank(geom: ConvGeometry, regs_of, facts, top_fraction: float = 0.05) -> list[Prediction]:
    """All candidates by the model's order: the compute-best ``top_fraction`` by memory first."""
    preds = [predict(geom, t, regs_of(t), facts) for t in tdc.candidates(geom, facts)]
    preds.sort(key=lambda p: p.compute)
    keep = max(1, int(round(len(preds) * top_fraction)))
    head = sorted(preds[:keep], key=lambda p: (p.memory, p.compute))
    return head + preds[keep:]


def fit_calibration(samples, facts):
    """Least-squares coefficients (relative error) from ``(geom, tile, regs, µs)`` samples."""
    a = np.array([tdc.calibrated_features(g, t, r, facts) for g, t, r, _ in samples],
                 dtype=float)
    y = np.array([us for *_, us in samples], dtype=float)
    coef, *_ = np.linalg.lstsq(a / y[:, None], np.ones(len(y)), rcond=None)
    return tuple(float(c) for c in coef)


def load_tile_samples(path) -> list:
    """``(geom, tile, regs, µs)`` samples of the ``"tdc"`` kernel from a ``tdc_fig6 --tiles``
    CSV (batch 1, 3x3, pad 1); the rows of our own kernels (``cluster:``, ``tf32x3:``) are
    skipped."""
    samples = []
    for row in read_csv(path):
        if ":" in row["variant"]:
            continue
        c, n, h, w = (int(v) for v in row["case"].split("_"))
        th, tw, tc = (int(v) for v in row["variant"].split("x"))
        regs = int(row["note"].split()[1])
        samples.append((conv_geometry((1, c, h, w), (n, c, 3, 3), 1, 1),
                        tdc.Tile(th, tw, tc), regs, row["value"]))
    return samples


@functools.lru_cache(maxsize=1024)
def choose_tile(geom: ConvGeometry, method: str = "calibrated",
                top_fraction: float = 0.05) -> tdc.Tile:
    """The model's tile for ``geom`` without running it.

    ``method="paper"`` is TDC's rule (top ``top_fraction`` by compute, then least
    memory); ``"calibrated"`` minimises the calibrated time estimate (the kernel's
    :func:`~tensorconv.ops.tucker_core_tdc.default_tile`).  Registers are read from the
    compiled instantiations.
    """
    if method not in ("calibrated", "paper"):
        raise ValueError(f"method must be 'calibrated' or 'paper', got {method!r}")
    facts = backend.device_facts()
    if method == "paper":
        return rank(geom, lambda t: tdc.registers(geom, t), facts, top_fraction)[0].tile
    return tdc.default_tile(geom, facts)
