"""The unstaged 1x1 remainder kernel (``sparse_csr_pointwise`` in
``kernels_cu/sparse_conv.cu``): its template tiles (warps a block, rows a warp, pixels a
lane, tap pairs a batch), the channel shares that give a launch enough warps, the measured
rule that picks a tile, the per-layer tables it walks, and its launch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry
from tensorconv.ops import _igemm
from tensorconv.ops._launch import cdiv, launch, ptr
from tensorconv.ops.sparse_staging import gathered_geometry
from tensorconv.ops.sparse_tiles import balanced_rows
from tensorconv.scratch import workspace

FILE = "sparse_conv.cu"


@dataclass(frozen=True)
class PointwiseTile:
    """The unstaged 1x1 remainder kernel's template (``sparse_csr_pointwise``): ``warps``
    warps a block sharing its ``32 * px`` pixels (``px`` a lane), ``rw`` row slots a
    warp (``warps * rw`` a block); ``batch`` tap pairs loaded together before their
    products (1: one pair after another).  Batches put more loads in flight a warp: on
    trained 1x1 layers with few pixels and long rows (GoogLeNet-8x's 16x480 on 16x16,
    ResNet-18-8x's 512x256 shortcut on 8x8) the fastest batched tile ran 1.1-1.4x the
    fastest unbatched one, and on 32x32 maps 0.86-0.9x (H200, batch 32,
    ``docs/notes/sparse_conv.md``), so both are timed by a tuned plan."""

    warps: int
    rw: int
    px: int
    batch: int = 1

    @property
    def rb(self) -> int:
        return self.warps * self.rw


POINTWISE_TILES = (tuple(PointwiseTile(w, rw, px) for w in (4, 8, 16) for rw in (1, 2, 4)
                         for px in (1, 2, 4))
                   # batched: 8 input loads a lane in flight; the blocks of 8 or 16 warps
                   # the fastest batched tiles had, on one or two pixels a lane
                   + tuple(PointwiseTile(w, rw, px, 8 // px) for w in (8, 16)
                           for rw in (1, 2, 4) for px in (1, 2)))
_POINTWISE_WARPS = 16      # warps an SM the rule asks of a launch
_SHARE_CHANNELS = 32       # the fewest channels a share of a pointwise launch walks


def pointwise_warps(geom: ConvGeometry, tile: PointwiseTile, shares: int = 1) -> int:
    """The warps a pointwise launch of ``tile`` runs on ``geom``."""
    q = geom.n * geom.oh * geom.ow
    return tile.warps * cdiv(q, 32 * tile.px) * cdiv(geom.k, tile.rb) * shares


def pointwise_shares(geom: ConvGeometry, tile: PointwiseTile, sm_count: int = 132) -> int:
    """The channel shares of a pointwise launch: where its blocks give an SM under
    ``_POINTWISE_WARPS`` warps, the channels split among blocks (at least
    ``_SHARE_CHANNELS`` a share) until they do, into partial outputs added afterwards in
    a fixed order (deterministic)."""
    want = _POINTWISE_WARPS * sm_count
    have = pointwise_warps(geom, tile)
    if have >= want:
        return 1
    return max(1, min(cdiv(want, have), geom.c // _SHARE_CHANNELS))


def default_pointwise_tile(geom: ConvGeometry, sm_count: int = 132) -> PointwiseTile:
    """A measured rule (H200, 27 trained 1x1 layers of ResNet-18-8x and GoogLeNet-8x at
    batch 32, every tile timed: ``docs/notes/sparse_conv.md``).  Among the tiles of 8 or
    16 warps that leave at most a fifth of a launch's row slots empty, those that give
    every SM ``_RULE_WARPS`` warps (channel shares counted); of those, the most rows a
    block (each input value the block reads then serves more rows: fewer passes over the
    input), then the most pixels a lane.  Where none does, the tile with the most warps
    (then the most a block).  Unbatched tiles only: the rule was measured on them, and
    the batched ones win where a tuned plan finds it (:class:`PointwiseTile`)."""
    k = geom.k
    plain = [t for t in POINTWISE_TILES if t.batch == 1]   # the rule's measured ground
    cand = [t for t in plain if t.warps >= 8 and cdiv(k, t.rb) * t.rb <= 1.2 * k]
    cand = cand or [t for t in plain if t.rb <= max(4, k)]

    def launched(t):
        return pointwise_warps(geom, t, pointwise_shares(geom, t, sm_count))

    fits = [t for t in cand if launched(t) >= _RULE_WARPS * sm_count]
    if not fits:
        return max(cand, key=lambda t: (launched(t), t.warps, t.rb))
    return max(fits, key=lambda t: (t.rb, t.px))


_RULE_WARPS = 32


class PointwiseTables(NamedTuple):
    """The unstaged 1x1 remainder's tables (:func:`pointwise_tables`)."""

    slot_tab: object
    taps: object
    row_of: object


def share_bounds(c: int, shares: int) -> np.ndarray:
    """``(shares + 1,)`` int64: the first channel of each share of ``c`` channels split as
    evenly as whole channels allow, then ``c``."""
    return np.arange(shares + 1, dtype=np.int64) * c // shares


def pointwise_tables(weights, tile: PointwiseTile, shares: int, xp) -> PointwiseTables:
    """``sparse_csr_pointwise``'s tables for ``weights`` (a 1x1 kernel's
    :class:`~tensorconv.ops.sparse_conv.SparseWeights`), made once per block of rows and
    channel shares: the row slots of :func:`balanced_rows` (``row_of`` ``(slots,)``
    int32, each slot's kernel row or -1); each slot's nonzeros, share by share
    (:func:`share_bounds`), as ``taps`` ``(n, 2)`` float32, the weight and (its int32
    bits) the channel's offset ``c·H·W``, each (share, slot) run padded to an even length
    by a zero weight at offset 0; ``slot_tab`` ``(shares, slots, 2)`` int32, each run's
    (first tap, count), both even."""
    key = ("pointwise", tile.rb, shares)
    if key not in weights.staged:
        k, c = weights.shape[:2]
        indptr = backend.to_host(weights.indptr).astype(np.int64)
        nnz = int(indptr[-1])
        counts = np.diff(indptr)
        row_of = balanced_rows(counts, tile.rb, tile.warps)
        slots = row_of.size
        cols = backend.to_host(weights.indices)[:nnz].astype(np.int64)
        row = np.repeat(np.arange(k), counts)
        slot_of = np.empty(k, np.int64)
        slot_of[row_of[row_of >= 0]] = np.flatnonzero(row_of >= 0)
        share = np.searchsorted(share_bounds(c, shares), cols, side="right") - 1
        cell = share * slots + slot_of[row]                 # each nonzero's (share, slot)
        run = np.bincount(cell, minlength=shares * slots)
        padded = run + run % 2
        starts = np.cumsum(padded) - padded
        order = np.lexsort((cols, cell))
        rank = np.arange(nnz) - (np.cumsum(run) - run)[cell[order]]
        taps = np.zeros((max(int(padded.sum()), 2), 2), np.float32)
        if nnz:
            at = starts[cell[order]] + rank
            taps[at, 0] = backend.to_host(weights.data)[:nnz][order]
            offsets = backend.to_host(weights.col_off)[cols[order]]
            taps[at, 1] = offsets.astype(np.int32).view(np.float32)
        slot_tab = np.stack([starts, padded], 1).reshape(shares, slots, 2)
        weights.staged[key] = PointwiseTables(xp.asarray(slot_tab, np.int32),
                                              xp.asarray(taps), xp.asarray(row_of, np.int32))
    return weights.staged[key]


def gathered_weights(weights, hw, xp):
    """``weights`` (a 1x1 kernel's :class:`~tensorconv.ops.sparse_conv.SparseWeights`) as
    the pointwise kernel reads them from a gathered input of ``hw`` = (OH, OW): channel
    ``c`` at ``c·OH·OW``; made once and kept with ``weights``."""
    key = ("gathered", tuple(hw))
    if key not in weights.staged:
        c = weights.shape[1]
        weights.staged[key] = replace(weights, hw=tuple(hw), staged={},
                                      col_off=xp.arange(c, dtype=np.int32) * (hw[0] * hw[1]))
    return weights.staged[key]


def kernel_name(t: PointwiseTile) -> str:
    """The kernel template instantiation that runs tile ``t``."""
    return f"sparse_csr_pointwise<{t.warps}, {t.rw}, {t.px}, {t.batch}>"


def launch_pointwise(x, weights, out, geom: ConvGeometry, bias, residual, relu,
                     accumulate: bool, tile: PointwiseTile | None = None,
                     gather: bool = False) -> None:
    """``sparse_csr_pointwise`` on a 1x1 filter (checked by the caller: ``weights`` the
    layer's :class:`~tensorconv.ops.sparse_conv.SparseWeights`), its channels shared
    among blocks where :func:`pointwise_shares` says, the shares then added in order;
    where ``gather``, on the pixels it reads copied first into a compact input, at stride
    1 (:func:`~tensorconv.ops.sparse_staging.gathered_geometry`)."""
    sm_count = backend.device_facts().sm_count
    xp = backend.array_module(x)
    compact, stride = None, geom.stride
    if gather:     # one scratch request for both the copy and the shares' partials
        geom = gathered_geometry(geom)
        weights = gathered_weights(weights, (geom.h, geom.w), xp)
        compact = geom.n * geom.c * geom.h * geom.w
    if tile is None:
        tile = default_pointwise_tile(geom, sm_count)
    elif tile not in POINTWISE_TILES:
        raise ValueError(f"remainder_tile must be one of {POINTWISE_TILES}, got {tile!r}")
    shares = pointwise_shares(geom, tile, sm_count)
    tables = pointwise_tables(weights, tile, shares, xp)
    slots = int(tables.row_of.size)
    q = geom.n * geom.oh * geom.ow
    size = (compact or 0) + (shares * geom.k * q if shares > 1 else 0)
    scratch = workspace(xp, size) if size else None
    partial = scratch[compact or 0:size] if shares > 1 else None
    if gather:
        gathered = scratch[:compact].reshape(geom.n, geom.c, geom.h, geom.w)
        gathered[...] = x[:, :, ::stride[0], ::stride[1]]
        x = gathered
    ints = (geom.n, geom.c, geom.h, geom.w, geom.k, geom.oh, geom.ow, *geom.stride,
            *geom.padding, slots, accumulate, bool(relu))
    launch(cuda.kernel_ref(FILE, kernel_name(tile)),
           (cdiv(q, 32 * tile.px), slots // tile.rb, shares), (32 * tile.warps,),
           (x, tables.slot_tab, tables.taps, tables.row_of, ptr(bias), ptr(residual), out,
            ptr(partial), *(np.int32(v) for v in ints)))
    if partial is not None:
        kernel, grid, rints = _igemm.reduce_config(geom, 0, shares, bool(relu), sm_count)
        kernel(grid, (256, 1, 1), (partial, ptr(bias), ptr(residual), out) + rints)
