"""TDC's analytic performance model for the core-convolution tile (sections 5.3-5.5).

For a tile (TH, TW, TC) of a core convolution (C, N, H, W):

* blocks = ceil(H/TH) * ceil(W/TW) * ceil(C/TC) (times the batch), N threads each;
* per-block compute ~ (TH + R - 1)(TW + S - 1) * TC * R * S (the paper's
  FLOPs_blk; the GPU peak cancels when tiles are ranked);
* waves = ceil(blocks * N / (GPU threads * occupancy)), occupancy from the
  compiled kernel's registers and the tile's shared memory (eq. 14);
* memory volume = kernel + input + output traffic (eqs. 16-19).

The model ranks tiles by waves x per-block compute, keeps the best
``top_fraction`` and returns the one with the least memory volume — without
running anything.
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


@functools.lru_cache(maxsize=1024)
def choose_tile(geom: ConvGeometry, top_fraction: float = 0.05) -> tucker.CoreTile:
    """The model's tile for ``geom`` (registers read from the compiled instantiations)."""
    facts = backend.device_facts()
    return rank(geom, lambda t: tucker.tdc_kernel(t, geom).num_regs, facts, top_fraction)[0].tile
