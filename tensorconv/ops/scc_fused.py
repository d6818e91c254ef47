"""The sliding-channel convolution's two gradients in one pass (``kernels_cu/scc_conv.cu``,
``scc_bwd_onepass``): its tables, plan and launch, and the backward op.

The two-kernel backward (:func:`~tensorconv.ops.scc_conv.scc_conv2d_backward_data`, then
:func:`~tensorconv.ops.scc_conv.scc_conv2d_backward_weight`) reads gy twice and x once
more.  Here a block stages a chunk of pixels of every gy row and every x channel once,
computes the chunk's input gradient from it (each value written once) and adds it into
the layer's weight-gradient sums, held in registers over its pixel share (4 sorted
filters x 4 band offsets a thread, read as vectors of 4 pixels); the shares are then
reduced in a fixed order: deterministic, no atomics.  It takes the layers whose weights
and chunk fit a block (up to two items a thread, 8,192 weights, and the GPU's shared
memory): :func:`onepass_plan`.  (A first fused kernel, ``scc_bwd_fused``, over parts of
8 x 8 lane-per-pixel warp tiles, was slower on every layer but one and is gone:
``docs/notes/scc_conv.md``.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_bool, check_choice, output_buffer
from tensorconv.ops import _igemm, scc_tc
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu
from tensorconv.ops.scc_checks import check_geom, check_weights, check_x_gy
from tensorconv.ops.scc_conv import (
    FILE,
    _onepass_name,
    _vec,
    scc_conv2d_backward_data,
    scc_conv2d_backward_weight,
)
from tensorconv.ops.scc_tiles import F, device_tables, sorted_filters
from tensorconv.reference import scc as reference
from tensorconv.reference.scc import SCCGeometry
from tensorconv.scratch import workspace

__all__ = ["OnePass", "octet_entries", "onepass", "onepass_plan", "scc_conv2d_backward"]

BACKWARD_PATHS = ("auto", "onepass", "parts", "tc", "walk")

@functools.lru_cache(maxsize=256)
def octet_entries(geom: SCCGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The input gradient's work by channel octet: ``(oct_ptr, filters, weights)``, the
    (octet, filter) pairs where the filter's window holds one of the octet's 8 channels,
    by octet, then in window order, as CSR (``oct_ptr`` (octets + 1,), ``filters``
    (entries,)), and ``weights`` (entries, 8) the weight index ``k·U + u`` of each of the
    octet's channels, -1 where the channel lies outside the window (all int64)."""
    order, _ = sorted_filters(geom)
    cin, u = geom.cin, geom.u
    pos = np.empty(geom.cout, dtype=np.int64)
    pos[order] = np.arange(geom.cout)
    chans = geom.channels()                                   # (Cout, U)
    pairs = np.unique((chans // F) * geom.cout + pos[:, None])
    e_oct, e_k = pairs // geom.cout, order[pairs % geom.cout].astype(np.int64)
    oct_ptr = np.concatenate([[0], np.cumsum(np.bincount(e_oct, minlength=cdiv(cin, F)))])
    c = e_oct[:, None] * F + np.arange(F)                     # (entries, 8) channels
    uu = (c - geom.starts()[e_k][:, None]) % cin
    return oct_ptr, e_k, np.where((c < cin) & (uu < u), e_k[:, None] * u + uu, -1)


ONEPASS_THREADS = 256             # scc::OT: the one-pass backward's block
ONEPASS_TILE = 16                # scc::OTILE: threads a tile of 8 filters x 32 band offsets


@dataclass(frozen=True, eq=False)
class OnePass:
    """The one-pass backward's kernel (``scc_bwd_onepass``) and tables: ``tiles`` (tiles,
    2) int32 ``(filter octet, run)``, each 8 sorted filters x 32 band offsets from
    ``32·run`` past the octet's first start, every offset of each octet's band in one;
    ``oct_ptr``, ``entry_row`` (the sorted position of each entry's filter) and
    ``entry_w`` (:func:`octet_entries`); ``items`` weight-gradient items a thread,
    ``stages`` staged chunks of ``bn`` pixels, ``smem`` bytes a block; ``split``: twice
    :data:`ONEPASS_THREADS` threads, the two gradients on their own warps."""

    tiles: np.ndarray
    oct_ptr: np.ndarray
    entry_row: np.ndarray
    entry_w: np.ndarray
    items: int
    stages: int
    bn: int
    smem: int
    split: bool = False

    @property
    def threads(self) -> int:
        return 2 * ONEPASS_THREADS if self.split else ONEPASS_THREADS

    def name(self, vec: bool) -> str:
        return _onepass_name(self.items, self.stages, self.bn, self.split, vec)


@functools.lru_cache(maxsize=256)
def onepass(geom: SCCGeometry, stages: int, bn: int, smem_limit: int) -> OnePass | None:
    """The one-pass backward of ``geom`` staging ``stages`` chunks of ``bn`` pixels, or
    None where a block cannot hold it: its weight-gradient items past two a thread, its
    tables and chunks past ``smem_limit`` bytes, or w past a chunk's buffer (where it is
    staged first)."""
    order, starts = sorted_filters(geom)
    octets = cdiv(geom.cout, F)
    first = starts[::F].astype(np.int64)
    last = starts[np.minimum(np.arange(1, octets + 1) * F, geom.cout) - 1]
    runs = -(-(last - first + geom.u) // 32)
    tiles = np.stack([np.repeat(np.arange(octets), runs),
                      np.concatenate([np.arange(r) for r in runs])], axis=1).astype(np.int32)
    items = cdiv(ONEPASS_TILE * len(tiles), ONEPASS_THREADS)
    oct_ptr, e_k, entry_w = octet_entries(geom)
    rows = geom.cin + geom.cout
    smem = (4 * (cdiv(9 * len(e_k) + rows + cdiv(geom.cin, F) + 1, 4) * 4)
            + 4 * stages * rows * (bn + 4))
    if items > 2 or smem > smem_limit or rows * (bn + 4) < geom.cout * geom.u:
        return None
    pos = np.empty(geom.cout, dtype=np.int64)
    pos[order] = np.arange(geom.cout)
    i32 = np.int32
    return OnePass(tiles=tiles, oct_ptr=oct_ptr.astype(i32), entry_row=pos[e_k].astype(i32),
                   entry_w=entry_w.astype(i32), items=items, stages=stages, bn=bn, smem=smem)


def onepass_plan(geom: SCCGeometry, pixels: int, *, stages: int | None = None,
                 bn: int | None = None, shares: int | None = None,
                 split: bool | None = None):
    """``(plan, shares, per_share)`` of the one-pass backward over ``pixels`` = N x H x W
    on this device, or None where it cannot take the layer.  By default chunks of 64
    pixels (32 where those would not give every other SM one) with the next one's copies
    in flight, else one at a time; a block's share of the pixels a whole number of chunks,
    as many shares as blocks fit the GPU at once (two an SM where the shared memory
    allows); at one block an SM, twice the threads, the input gradient on half of them
    and the weight gradient on the others (``split``, forced where given: the 64-pixel
    double-buffered kernels only).  Measured on the H100 and H200
    (``docs/notes/scc_conv.md``)."""
    facts = backend.device_facts()
    sms, limit = facts.sm_count, facts.smem_per_block_optin
    wide = bn or (64 if 2 * cdiv(pixels, 64) >= sms else 32)
    plan = next((o for s in ((stages,) if stages else (2, 1))
                 for b in ((wide,) if bn else (wide, 32))
                 if (o := onepass(geom, s, b, limit)) is not None), None)
    if plan is None:
        return None
    per_sm = 2 if plan.smem + 1024 <= facts.smem_per_sm // 2 else 1
    built = (plan.stages, plan.bn) == (2, 64)      # the split kernels instantiated
    if split if split is not None else (built and per_sm == 1):
        if not built:
            return None
        plan, per_sm = replace(plan, split=True), 1
    shares = min(shares or per_sm * sms, cdiv(pixels, plan.bn))
    per_share = cdiv(cdiv(pixels, shares), plan.bn) * plan.bn
    return plan, cdiv(pixels, per_share), per_share


@functools.cache   # never evicted: captured CUDA graphs hold these addresses
def onepass_tables(geom: SCCGeometry, device: int) -> tuple:
    """The one-pass backward's tables on GPU ``device``, made once: tiles, oct_ptr,
    entry_row, entry_w (the same for every chunk shape)."""
    import cupy

    o = onepass(geom, 1, 32, 1 << 30)
    with cupy.cuda.Device(device):
        return tuple(cupy.asarray(a) for a in (o.tiles, o.oct_ptr, o.entry_row, o.entry_w))


def _run_onepass(x, gy, w, geom: SCCGeometry, out_x, out_w, launch_plan) -> None:
    xp = backend.array_module(x)
    n, _, h, wd = x.shape
    p = h * wd
    plan, shares, per_share = launch_plan
    partial = workspace(xp, shares * geom.cout * geom.u)   # graph-safe: no allocation
    device = xp.cuda.runtime.getDevice()
    order, starts = device_tables(geom, device, "sorted")
    tiles, oct_ptr, entry_row, entry_w = onepass_tables(geom, device)
    i32 = np.int32
    launch(cuda.kernel_ref(FILE, plan.name(_vec(4, p, x, gy, out_x))), (shares, 1, 1),
           (plan.threads,),
           (x, gy, w, order, starts, tiles, oct_ptr, entry_row, entry_w, out_x, partial,
            i32(geom.cin), i32(geom.cout), i32(geom.u), i32(p), i32(n * p), i32(per_share),
            i32(len(plan.tiles)), i32(len(plan.entry_row))), smem=plan.smem)
    _igemm.reduce_flat(partial, out_w, shares, geom.cout * geom.u,
                       backend.device_facts().sm_count)


def _parts(x, gy, w, geom: SCCGeometry, path: str, carry: bool, out_x, out_w):
    """The two gradients by their own kernels (``path`` "tc": forced onto the tensor
    cores; "auto": each following its verdict); on the walking tensor-core kernels, the
    weight gradient's shares summed by the input gradient's launch where ``carry``
    (:func:`~tensorconv.ops.scc_tc.run_backward`)."""
    xp = backend.array_module(x)
    n, _, h, wd = x.shape
    q, p = n * h * wd, h * wd
    out_x = output_buffer(xp, out_x, x.shape, "out_x")
    out_w = output_buffer(xp, out_w, (geom.cout, geom.u), "out_w")
    if path == "tc":
        scc_tc.check_runs_here()
    on_tc = path == "tc" or all(scc_tc.takes(geom, q, p, s) for s in ("data", "weight"))
    if carry and on_tc and scc_tc.run_backward(x, gy, w, geom, out_x, out_w):
        return out_x, out_w
    return (scc_conv2d_backward_data(gy, w, geom, path=path, out=out_x),
            scc_conv2d_backward_weight(x, gy, geom, path=path, out=out_w))


def scc_conv2d_backward(x, gy, w, geom: SCCGeometry, *, path: str = "auto", out_x=None,
                        out_w=None, carry: bool = True):
    """Both gradients of :func:`scc_conv2d` (without ReLU), ``(gx, gw)``, deterministic.

    Parameters
    ----------
    x : array, (N, Cin, H, W), float32
    gy : array, (N, Cout, H, W), float32
    w : array, (Cout, U), float32
    geom : SCCGeometry
    path : {"auto", "onepass", "parts", "tc", "walk"}
        The kernels (GPU): "onepass", one pass over gy and x for both gradients, a block
        over every filter and channel of its pixels (``scc_bwd_onepass``,
        :func:`onepass_plan`; where a block holds the layer, else a ValueError);
        "parts", :func:`scc_conv2d_backward_data` then
        :func:`scc_conv2d_backward_weight`, each with its defaults (each following its
        stored verdict: the tensor cores or the FMA kernels); "tc", the same two on the
        tensor cores at fp32 accuracy (:mod:`~tensorconv.ops.scc_tc`); "walk", both on
        the tensor cores in one walk over gy (:func:`~tensorconv.ops.scc_tc.run_both`;
        where each channel tile's filter list fits two chunks, else a ValueError);
        "auto" follows the layer's stored "backward" verdict
        (:func:`~tensorconv.ops.scc_tc.verdict`), untuned the one-pass kernel where it
        takes the layer, else "parts".
    carry : bool
        "parts" and "tc" where both gradients run the walking tensor-core kernels: the
        weight gradient first, its pixel shares summed by the input gradient's launch
        (:func:`~tensorconv.ops.scc_tc.run_backward`); False: by a launch of their own.
    out_x : array, (N, Cin, H, W), float32, optional (GPU only)
    out_w : array, (Cout, U), float32, optional (GPU only)

    Returns
    -------
    (array, array)
        gx (N, Cin, H, W) and gw (Cout, U), float32.
    """
    geom = check_geom(geom)
    check_choice(path, "path", BACKWARD_PATHS)
    check_bool(carry, "carry")
    x, gy, xp = check_x_gy(x, gy, geom)
    w = check_weights(w, geom, xp)
    n, _, h, wd = x.shape
    if xp is np:
        no_out_on_cpu(out_x=out_x, out_w=out_w)
        gx, gw = reference.scc_backward(x, w, gy, geom)
        return gx.astype(np.float32), gw.astype(np.float32)
    q, p = n * h * wd, h * wd
    one = onepass_plan(geom, q)
    if path == "onepass" and one is None:
        raise ValueError(f"path='onepass': a block of this GPU cannot hold {geom}'s "
                         f"backward (its weight gradient past two items a thread, or its "
                         f"tables and a chunk of every gy and x row past the shared "
                         f"memory); use path='parts'")
    if path == "tc":
        return _parts(x, gy, w, geom, "tc", carry, out_x, out_w)
    if path == "auto":
        path = scc_tc.verdict(geom, q, p, "backward") or "onepass"
        if path == "walk" and scc_tc.both_plan(geom, q) is None:   # another GPU's verdict
            path = "parts"
    if path == "walk":
        out_x = output_buffer(xp, out_x, (n, geom.cin, h, wd), "out_x")
        out_w = output_buffer(xp, out_w, (geom.cout, geom.u), "out_w")
        scc_tc.run_both(x, gy, w, geom, out_x, out_w)
        return out_x, out_w
    if path == "parts" or one is None:    # also a verdict from another GPU
        return _parts(x, gy, w, geom, "auto", carry, out_x, out_w)
    out_x = output_buffer(xp, out_x, (n, geom.cin, h, wd), "out_x")
    out_w = output_buffer(xp, out_w, (geom.cout, geom.u), "out_w")
    _run_onepass(x, gy, w, geom, out_x, out_w, one)
    return out_x, out_w
