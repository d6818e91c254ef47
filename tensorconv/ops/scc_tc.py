"""Sliding-channel convolution on the tensor cores at fp32 accuracy (``kernels_cu/scc_tc.cu``):
the forward pass and both gradients as 3xTF32 ``mma.sync`` GEMMs over the same sorted
filters, bands and per-tile filter lists as the FMA kernels of :mod:`~tensorconv.ops.scc_conv`
(whose public ops run these with ``path="tc"``); this module owns their tiles and launches,
and reads the verdicts that decide ``path="auto"``.

Neither family wins everywhere (``docs/notes/scc_conv.md``): the FMA kernels are faster
on large maps, the tensor cores on some weight gradients of small maps and on the widest
layers.  So ``"auto"`` follows a verdict measured on this device
(:func:`tensorconv.tuning.scc_paths.tune` times both and stores one per side in the tune
cache, keyed by the layer, the pixels, the plane and both sources) and, untuned, runs the
FMA kernels.

The forward and the input gradient of layers with work enough (:data:`MIN_WALK_MACS`) run
``scc_tc_walk``: a block of 128 threads splits its rows' weights once, into shared memory
in fragment order, and walks pixel tiles with every chunk one ``cp.async`` ring
and the weight gradient ``scc_tc_wgrad`` (:mod:`~tensorconv.ops.scc_tc_walk`); the others
run ``scc_tc``.  Where both gradients walk, :func:`run_backward` has the input gradient's
blocks sum the weight gradient's pixel shares (no launch of their own).

Each ``scc_tc`` block is BM (16-128) rows x BN (64 or 128) columns, 256 threads: rows are sorted
filters (forward, weight gradient) or input channels (input gradient); columns are pixels,
flat over the batch, or the weight gradient's band channels.  Rows take the size of least
multiply-adds, dense-masked zeros counted (as the FMA kernels choose theirs); the input
gradient shares each tile's filter list, the weight gradient the pixels, over more blocks
where the tiles alone leave SMs idle, the shares summed in a fixed order: deterministic.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, precision, tunecache
from tensorconv.checks import check_choice
from tensorconv.ops import _igemm, scc_tc_walk
from tensorconv.ops._launch import cdiv, launch, ptr
from tensorconv.ops.scc_tiles import band_spans, data_tiles, device_tables, least_work
from tensorconv.reference.scc import SCCGeometry
from tensorconv.scratch import workspace

__all__ = ["ROWS", "COLS", "SIDES", "TcTile", "both_plan", "check_runs_here", "data_plan",
           "data_rows",
           "decision_key", "forget_verdicts", "forward_tile", "instantiations", "kernels",
           "run_backward", "run_backward_data", "run_backward_weight", "run_both", "run_forward",
           "runs_here", "takes",
           "verdict", "walk_plan", "walk_verdict", "weight_plan"]

FILE = "scc_tc.cu"
MODES = (0, 1, 2)                  # forward, input gradient, weight gradient
ROWS = (16, 32, 64, 128)           # block rows instantiated in scc_tc.cu
COLS = (64, 128)                   # block columns
BK, THREADS, STAGES, LDK = 16, 256, 4, 20   # scctc:: constants of the .cu
MIN_SLICES = 8                     # a reduction share is at least this many BK slices
MIN_COMPUTE_CAPABILITY = (8, 0)    # mma.sync m16n8k8 tf32
SIDES = ("forward", "data", "weight", "backward")   # the verdicts: see decision_key


@dataclass(frozen=True)
class TcTile:
    """A block of ``rows`` x ``cols`` outputs of GEMM ``mode`` (0 forward, 1 input
    gradient, 2 weight gradient)."""

    mode: int
    rows: int
    cols: int

    @property
    def name(self) -> str:
        return f"scc_tc<{self.mode}, {self.rows}, {self.cols}>"

    @property
    def smem(self) -> int:
        """Dynamic shared-memory bytes: STAGES slices of A (m-major) and B (k-major, or
        n-major in mode 2)."""
        b = self.cols * LDK if self.mode == 2 else BK * (self.cols + 8)
        return 4 * STAGES * (self.rows * LDK + b)


def instantiations() -> list[str]:
    """The template instances CI's nvcc build compiles."""
    return sorted([TcTile(m, r, c).name for m in MODES for r in ROWS for c in COLS]
                  + scc_tc_walk.instantiations())


def kernels(*_) -> tuple[cuda.KernelRef, ...]:
    """Every kernel of the file, and the split reduction the gradients use."""
    return tuple(cuda.kernel_ref(FILE, n) for n in instantiations()) + (_igemm.reduce_ref(),)


def runs_here() -> bool:
    """Whether the current GPU has the ``mma.sync`` tf32 these kernels use."""
    return tuple(backend.device_facts().compute_capability) >= MIN_COMPUTE_CAPABILITY


def check_runs_here() -> None:
    """``ValueError`` for ``path="tc"`` on a GPU without tf32 ``mma.sync``."""
    if not runs_here():
        raise ValueError(f"path='tc' needs compute capability "
                         f"{MIN_COMPUTE_CAPABILITY[0]}.{MIN_COMPUTE_CAPABILITY[1]} or newer; "
                         f"this GPU has {backend.device_facts().compute_capability}")


BACKWARD_CHOICES = ("onepass", "parts", "walk")   # the "backward" verdict's values


def decision_key(geom: SCCGeometry, pixels: int, plane: int, side: str) -> str:
    """The tune-cache key of ``side``'s verdict for ``geom`` over ``pixels`` = N x H x W
    with planes of ``plane`` = H x W pixels: "forward", "data" or "weight" (``{"tc":
    bool}``: the tensor cores or the FMA kernels; ``"walk": bool``, their walking
    kernels; "data" also ``"rows"``, the walk's block rows), or "backward" (``{"path": one of
    BACKWARD_CHOICES}``: the one-pass FMA backward, the two gradients apart, each by its
    own verdict, or both in one tensor-core walk, :func:`run_both`)."""
    check_choice(side, "side", SIDES)
    problem = f"{geom.cin},{geom.cout},{geom.cg},{geom.co!r},{pixels},{plane}"
    return tunecache.make_key(f"scc_path:{side}", ("scc_conv.cu", FILE), problem)


def _decode_tc(v):
    if (not isinstance(v, dict) or not isinstance(v.get("tc"), bool)
            or not isinstance(v.get("walk", False), bool)
            or v.get("rows") not in (None, *scc_tc_walk.WALK_SHAPES)):
        raise ValueError("expected {'tc': bool, 'walk': bool (optional), 'rows': one of "
                         f"{tuple(scc_tc_walk.WALK_SHAPES)} (optional), ...}}")
    return v["tc"], v.get("walk"), v.get("rows")


def _decode_backward(v):
    if isinstance(v, dict) and v.get("path") in BACKWARD_CHOICES:
        return v["path"]
    if isinstance(v, dict) and "path" not in v and isinstance(v.get("fused"), bool):
        # stored for the first fused kernel, which the one-pass kernel replaced
        return "onepass" if v["fused"] else "parts"
    raise ValueError(f"expected {{'path': one of {BACKWARD_CHOICES}, ...}}")


@functools.lru_cache(maxsize=4096)
def _verdict(geom: SCCGeometry, pixels: int, plane: int, side: str, where: tuple):
    del where   # part of the memo's key only: the cache file, the device, the precision
    decode = _decode_backward if side == "backward" else _decode_tc
    return tunecache.known(decision_key(geom, pixels, plane, side), decode)


def verdict(geom: SCCGeometry, pixels: int, plane: int, side: str) -> bool | str | None:
    """The stored verdict of ``side`` (:func:`decision_key`): a bool (the tensor cores or
    not) for a GEMM, the path for "backward", None untuned; memoised
    (:func:`forget_verdicts` after storing new ones)."""
    v = _verdict(geom, pixels, plane, side, _where())
    return v[0] if isinstance(v, tuple) else v


def walk_verdict(geom: SCCGeometry, pixels: int, plane: int, side: str) -> bool | None:
    """Whether ``side``'s tensor-core GEMM runs the walking kernels
    (:mod:`~tensorconv.ops.scc_tc_walk`) by its stored verdict; None untuned (or tuned
    before they existed): then :func:`walk_plan`'s size rule decides."""
    v = _verdict(geom, pixels, plane, side, _where())
    return v[1] if isinstance(v, tuple) else None


def data_rows(geom: SCCGeometry, pixels: int, plane: int) -> int:
    """The input gradient's walking block rows: the stored "data" verdict's where it
    names them (the tuner times each), else the rows of least work."""
    v = _verdict(geom, pixels, plane, "data", _where())
    return v[2] if isinstance(v, tuple) and v[2] is not None else _data_rows(geom)


def _where() -> tuple:
    return str(tunecache.cache_path()), tunecache.device_name(), precision.current()


def forget_verdicts() -> None:
    """Drop the memo of :func:`verdict` (the tuner calls it after storing)."""
    _verdict.cache_clear()


def takes(geom: SCCGeometry, pixels: int, plane: int, side: str) -> bool:
    """Whether ``path="auto"`` runs ``side`` ("forward", "data", "weight") of ``geom``
    here on these kernels: where its stored verdict says so and the GPU has them."""
    return runs_here() and verdict(geom, pixels, plane, side) is True


@functools.lru_cache(maxsize=256)
def _band_rows(geom: SCCGeometry, cols: int | None) -> int:
    """Rows of sorted filters a forward (``cols`` None: its reduction is the band) or
    weight-gradient (its columns are the band, ``cols`` wide) tile takes: least
    multiply-adds, BK slices or band column tiles rounded up."""
    costs = {}
    for r in sorted(ROWS, reverse=True):
        spans = band_spans(geom, r)
        width = cdiv(spans, BK) * BK if cols is None else -(-spans // cols) * cols
        costs[r] = float(np.sum(width) * r)
    return least_work(costs)


def _pixel_cols(row_tiles: int, pixels: int, sm_count: int) -> int:
    """Pixels a block of the forward or the input gradient: 128 where those blocks still
    give every SM two, else 64."""
    return 128 if row_tiles * cdiv(pixels, 128) >= 2 * sm_count else 64


def forward_tile(geom: SCCGeometry, pixels: int, sm_count: int) -> TcTile:
    """The forward's tile: rows of least work, :func:`_pixel_cols` pixels."""
    rows = _band_rows(geom, None)
    return TcTile(0, rows, _pixel_cols(cdiv(geom.cout, rows), pixels, sm_count))


@functools.lru_cache(maxsize=256)
def _data_rows(geom: SCCGeometry) -> int:
    costs = {}
    for r in sorted(ROWS, reverse=True):
        ptr_, _ = data_tiles(geom, r)
        costs[r] = float(np.sum(cdiv(np.diff(ptr_), BK) * BK) * r)
    return least_work(costs)


def data_plan(geom: SCCGeometry, pixels: int, sm_count: int,
              splits: int | None = None) -> tuple[TcTile, int, int]:
    """``(tile, splits, per_split)`` of the input gradient: rows of least work,
    :func:`_pixel_cols` pixels; the tiles' filter lists shared (``splits``, by
    default enough for two blocks an SM, each share at least :data:`MIN_SLICES` slices),
    ``per_split`` entries a share."""
    rows = _data_rows(geom)
    tiles = cdiv(geom.cin, rows)
    cols = _pixel_cols(tiles, pixels, sm_count)
    ptr_, _ = data_tiles(geom, rows)
    longest = max(int(np.max(np.diff(ptr_))), 1)
    if splits is None:
        blocks = tiles * cdiv(pixels, cols)
        splits = max(1, min(cdiv(2 * sm_count, blocks), cdiv(longest, MIN_SLICES * BK)))
    per_split, splits = _igemm.split_depth(longest, BK, splits)
    return TcTile(1, rows, cols), splits, per_split


def weight_plan(geom: SCCGeometry, pixels: int, sm_count: int,
                splits: int | None = None) -> tuple[TcTile, int, int, int]:
    """``(tile, band tiles, splits, per_split)`` of the weight gradient: rows and band
    columns (64 or 128) of least work; pixel shares (``splits``, by default about four
    blocks an SM, each share at least :data:`MIN_SLICES` slices), ``per_split`` pixels
    a share."""
    costs = {}
    for cols in sorted(COLS, reverse=True):
        rows = _band_rows(geom, cols)
        spans = band_spans(geom, rows)
        costs[(rows, cols)] = float(np.sum(-(-spans // cols) * cols) * rows)
    rows, cols = least_work(costs)
    bands = int(np.max(-(-band_spans(geom, rows) // cols)))
    if splits is None:
        blocks = cdiv(geom.cout, rows) * bands
        splits = max(1, min(cdiv(4 * sm_count, blocks), cdiv(pixels, MIN_SLICES * BK)))
    per_split, splits = _igemm.split_depth(pixels, BK, splits)
    return TcTile(2, rows, cols), bands, splits, per_split


def walk_plan(geom: SCCGeometry, pixels: int, mode: int, *, force: bool = False,
              rows: int | None = None):
    """:func:`scc_tc_walk.walk_plan <tensorconv.ops.scc_tc_walk.walk_plan>` for the forward
    (``mode`` 0), the input gradient (1) or both gradients (2) with this module's rows of
    least work, or the input gradient's on ``rows``."""
    if mode not in (0, 1, 2):
        raise ValueError(f"mode must be 0 (forward), 1 (input gradient) or 2 (both "
                         f"gradients), got {mode!r}")
    if rows is not None and mode != 1:
        raise ValueError("rows are chosen for the input gradient's walk (mode 1) only")
    if rows is None:
        rows = _band_rows(geom, None) if mode == 0 else _data_rows(geom)
    return scc_tc_walk.walk_plan(geom, pixels, mode, rows, force=force)


def _load(tile: TcTile):
    return cuda.kernel_ref(FILE, tile.name)


def run_forward(x, w, geom: SCCGeometry, bias, relu: bool, out, *,
                walk: bool | None = None) -> None:
    """``out`` = relu?(scc(x, w) + bias) on checked CuPy arrays: scc_tc_walk where
    :func:`walk_plan` has a plan (``walk`` True: wherever it has one, ignoring the size;
    False: never; None: as the stored verdict says, :func:`walk_verdict`), else scc_tc."""
    n, _, h, wd = x.shape
    q, i32 = n * h * wd, np.int32
    walk = walk_verdict(geom, q, h * wd, "forward") if walk is None else walk
    if walk is not False and (plan := walk_plan(geom, q, 0, force=bool(walk))) is not None:
        scc_tc_walk.run_walk(plan, x, w, geom, bias, relu, out)
        return
    sms = backend.device_facts().sm_count
    tile = forward_tile(geom, q, sms)
    order, starts = device_tables(geom, x.device.id, "sorted")
    rows = cdiv(geom.cout, tile.rows)
    launch(_load(tile), (cdiv(q, tile.cols), rows, 1), (THREADS,),
           (w, x, order, starts, order, order, ptr(bias), out, i32(geom.cin),
            i32(geom.cout), i32(geom.u), i32(h * wd), i32(q), i32(0), i32(bool(relu))),
           smem=tile.smem)


def run_backward_data(gy, w, geom: SCCGeometry, splits: int | None, out, *,
                      walk: bool | None = None, rows: int | None = None) -> None:
    """``out`` = the input gradient of checked CuPy arrays: scc_tc_walk (every block
    holds its tile's whole filter list, so no shares) on ``rows`` (by default
    :func:`data_rows`) as :func:`run_forward` chooses it, unless ``splits`` asks for
    shares; else scc_tc."""
    n, _, h, wd = gy.shape
    q, i32 = n * h * wd, np.int32
    walk = walk_verdict(geom, q, h * wd, "data") if walk is None else walk
    rows = data_rows(geom, q, h * wd) if rows is None else rows
    if (splits is None and walk is not False
            and (plan := walk_plan(geom, q, 1, force=bool(walk), rows=rows)) is not None):
        scc_tc_walk.run_walk(plan, gy, w, geom, None, False, out)
        return
    sms = backend.device_facts().sm_count
    tile, splits, per_split = data_plan(geom, q, sms, splits)
    device = gy.device.id
    order, _ = device_tables(geom, device, "sorted")
    (starts,) = device_tables(geom, device, "starts")
    tile_ptr, tile_k = device_tables(geom, device, "tiles", tile.rows)
    size = q * geom.cin
    xp = backend.array_module(gy)
    partial = out if splits == 1 else workspace(xp, splits * size)   # graph-safe
    rows = cdiv(geom.cin, tile.rows)
    launch(_load(tile), (cdiv(q, tile.cols), rows, splits), (THREADS,),
           (w, gy, order, starts, tile_ptr, tile_k, ptr(None), partial, i32(geom.cin),
            i32(geom.cout), i32(geom.u), i32(h * wd), i32(q), i32(per_split), i32(0)),
           smem=tile.smem)
    if splits > 1:
        _igemm.reduce_flat(partial, out, splits, size, sms)


def run_backward(x, gy, w, geom: SCCGeometry, out_x, out_w, *,
                 rows: int | None = None) -> bool:
    """Both gradients of checked CuPy arrays on the walking kernels, the weight gradient
    first and its shares summed by the input gradient's blocks before their own work (no
    launch of their own: 2.5-3 µs of a 16x16 layer's graph, ``docs/notes/scc_conv.md``),
    where both sides take the walking kernels as :func:`run_backward_data` and
    :func:`run_backward_weight` choose them, the weight gradient has shares, and the input
    gradient's grid can carry their sum (:func:`~tensorconv.ops.scc_tc_walk.carries`);
    False, nothing launched, elsewhere.  ``rows``: the input gradient's block rows (by
    default :func:`data_rows`)."""
    n, _, h, wd = x.shape
    q, p = n * h * wd, h * wd
    data, weight = walk_verdict(geom, q, p, "data"), walk_verdict(geom, q, p, "weight")
    if data is False or weight is False:
        return False
    rows = data_rows(geom, q, p) if rows is None else rows
    dplan = walk_plan(geom, q, 1, force=bool(data), rows=rows)
    wplan = scc_tc_walk.wgrad_plan(geom, q, backend.device_facts().sm_count,
                                   force=bool(weight))
    if (dplan is None or wplan is None or wplan[2] == 1
            or not scc_tc_walk.carries(dplan, geom, q, geom.cout * geom.u)):
        return False
    carry = scc_tc_walk.run_wgrad(wplan, x, gy, geom, out_w, reduce=False)
    scc_tc_walk.run_walk(dplan, gy, w, geom, None, False, out_x, carry=carry)
    return True


def both_plan(geom: SCCGeometry, pixels: int):
    """scc_tc_walk's mode-2 plan (both gradients in one walk) for ``geom`` over ``pixels``
    = N x H x W, whatever the size; None where it has none (a filter list past
    :data:`~tensorconv.ops.scc_tc_walk.BOTH_CHUNKS` chunks) or the GPU lacks the
    kernels."""
    return walk_plan(geom, pixels, 2, force=True) if runs_here() else None


def run_both(x, gy, w, geom: SCCGeometry, out_x, out_w) -> None:
    """Both gradients of checked CuPy arrays in one walk over gy
    (:func:`~tensorconv.ops.scc_tc_walk.run_both`); ValueError where :func:`both_plan`
    has no plan."""
    n, _, h, wd = x.shape
    plan = both_plan(geom, n * h * wd)
    if plan is None:
        raise ValueError(f"path='walk': {geom}'s filter lists are longer than "
                         f"{scc_tc_walk.BOTH_CHUNKS} chunks of the walk (or this GPU lacks "
                         f"tf32 mma.sync); use path='parts'")
    scc_tc_walk.run_both(plan, x, gy, w, geom, out_x, out_w)


def run_backward_weight(x, gy, geom: SCCGeometry, splits: int | None, out, *,
                        walk: bool | None = None) -> None:
    """``out`` = the weight gradient of checked CuPy arrays: scc_tc_wgrad where
    :func:`~tensorconv.ops.scc_tc_walk.wgrad_plan` has a plan (``walk`` True: whatever
    the size; False: never), else scc_tc's mode 2."""
    n, _, h, wd = x.shape
    q, i32 = n * h * wd, np.int32
    sms = backend.device_facts().sm_count
    walk = walk_verdict(geom, q, h * wd, "weight") if walk is None else walk
    plan = scc_tc_walk.wgrad_plan(geom, q, sms, splits, force=bool(walk))
    if walk is not False and plan is not None:
        scc_tc_walk.run_wgrad(plan, x, gy, geom, out)
        return
    tile, bands, splits, per_split = weight_plan(geom, q, sms, splits)
    order, starts = device_tables(geom, x.device.id, "sorted")
    size = geom.cout * geom.u
    xp = backend.array_module(x)
    partial = out if splits == 1 else workspace(xp, splits * size)   # graph-safe
    launch(_load(tile), (bands, cdiv(geom.cout, tile.rows), splits), (THREADS,),
           (gy, x, order, starts, order, order, ptr(None), partial, i32(geom.cin),
            i32(geom.cout), i32(geom.u), i32(h * wd), i32(q), i32(per_split), i32(0)),
           smem=tile.smem)
    if splits > 1:
        _igemm.reduce_flat(partial, out, splits, size, sms)
