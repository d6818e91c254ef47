"""The body ``kernels_cu/sparse_unrolled_direct.cu`` includes for one layer's remainder
(``SPARSE_UNROLLED_DIRECT_BODY``), written from its weights: the layer's constants, one
function a row group (a split tile's group one a share of its columns), each thread's loads
of the columns its group uses at immediate offsets, and the nonzeros as ``fma``
instructions with immediate weights; or, on a ring tile, the loads as ``cp.async`` copies
into the thread's ring of shared-memory slots.  The tile (a
:class:`tensorconv.ops.sparse_unrolled_direct.Tile`) is checked by the op module, which
compiles and launches the kernel.
"""

from __future__ import annotations

import struct

import numpy as np

from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import cdiv

# A ring tile's copies are committed in RING_GROUPS groups a ring: a thread keeps
# RING - RING / RING_GROUPS input words in flight (sparse_unrolled_direct.RING)
RING_GROUPS = 8


def _reach(tap: int, stride: int, pad: int, size: int, out: int) -> str:
    """Where a filter's ``tap`` (along one axis) lands for the layer's output positions:
    ``"always"`` inside the image, ``"never"`` (only padding), or ``"some"``."""
    inside = [0 <= o * stride - pad + tap < size for o in range(out)]
    return "always" if all(inside) else "never" if not any(inside) else "some"


def tap_guard(g: ConvGeometry, r: int, s: int) -> str | None:
    """The condition a thread loads tap (r, s) under: ``""`` where every output pixel's
    window has it inside the image (no test), None where none does (never loaded: its
    products are the padding's zeros), else a test of the window's bits."""
    rows = _reach(r, g.stride[0], g.padding[0], g.h, g.oh)
    cols = _reach(s, g.stride[1], g.padding[1], g.w, g.ow)
    if "never" in (rows, cols):
        return None
    tests = [f"{bits} >> {k}" if k else bits
             for bits, k, reach in (("rok", r, rows), ("cok", s, cols)) if reach == "some"]
    return " & ".join(tests + ["1u"]) if tests else ""


def _fma(j: int, value: float) -> str:
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return f"SU_FMA(a{j}, v, {bits:08X});"


def _direct_loads(g: ConvGeometry, dense: np.ndarray, cols: np.ndarray) -> list[str]:
    """A group's loads of the columns ``cols`` (of its K x (C·R·S) matrix ``dense``)
    straight through the L1 and their products: each column one load at an immediate
    offset, a wider filter's taps under their guards."""
    taps, hw = g.r * g.s, g.h * g.w
    # a 1x1 tap is wholly inside the image or wholly in the padding (sums of zero): one
    # test around every load; a wider filter's taps each under their own
    guards = [[tap_guard(g, r, s) for s in range(g.s)] for r in range(g.r)]
    whole = guards[0][0] if taps == 1 else ""
    out = ["  {" if not whole else f"  if ({whole}) {{"]
    for col in cols if whole is not None else ():
        ch, tap = divmod(int(col), taps)
        r, s = divmod(tap, g.s)
        guard = "" if taps == 1 else guards[r][s]
        if guard is None:
            continue
        at = f"__ldg(xp + {ch * hw + r * g.w + s})"
        # the load and its products under one test (ptxas predicates them all): a zero in
        # the load's place would cost an instruction a load
        out.append(f"    if ({guard}) {{ const float v = {at};" if guard else
                   f"    {{ const float v = {at};")
        out += ["      " + _fma(j, dense[j, col]) for j in np.flatnonzero(dense[:, col])]
        out.append("    }")
    out.append("  }")
    return out


def _ring_loads(g: ConvGeometry, tile, dense: np.ndarray) -> list[str]:
    """A group's channels (1x1) through the thread's ring: the channels in batches of
    ``ring / RING_GROUPS``, one commit group a batch; before a batch's products the copies
    of the batch ``RING_GROUPS - 1`` ahead are issued into the slots the previous batch
    freed, then the wait leaves those in flight.  Slot i of the ring is the word
    ``i * T`` from the thread's first (a warp's 32 slots on 32 banks)."""
    hw, ring = g.h * g.w, tile.ring
    batch = ring // RING_GROUPS
    chans = np.flatnonzero(dense.any(0))
    batches = cdiv(chans.size, batch)

    def issue(b: int) -> list[str]:
        if b >= batches:
            return ["  SU_RING_COMMIT();"]       # an empty group keeps the waits' count
        return [f"  SU_RING_CP(sr, {(i % ring) * tile.threads * 4}, xp + {int(chans[i]) * hw});"
                for i in range(b * batch, min((b + 1) * batch, chans.size))] \
            + ["  SU_RING_COMMIT();"]

    if batches == 0:
        return []
    out = []
    for b in range(RING_GROUPS - 1):     # always RING_GROUPS - 1 groups: the waits count them
        out += issue(b)
    for b in range(batches):
        out += issue(b + RING_GROUPS - 1)
        out.append(f"  SU_RING_WAIT({RING_GROUPS - 1});")
        for i in range(b * batch, min((b + 1) * batch, chans.size)):
            col = dense[:, chans[i]]
            out.append(f"  {{ float v; SU_RING_LD(v, sr, {(i % ring) * tile.threads * 4});")
            out += ["    " + _fma(j, col[j]) for j in np.flatnonzero(col)]
            out.append("  }")
    return out


def split_columns(dense: np.ndarray, ks: int) -> list[np.ndarray]:
    """The columns a group uses (``dense``: its rows of the K x (C·R·S) matrix) in ``ks``
    consecutive shares of about equal work, a load and its products a column."""
    cols = np.flatnonzero(dense.any(0))
    work = np.cumsum(1 + np.count_nonzero(dense[:, cols], axis=0))
    total = int(work[-1]) if cols.size else 0
    cuts = np.searchsorted(work, [total * q / ks for q in range(1, ks)], side="left")
    return np.split(cols, cuts)


def _split_store(tile, part: int, rows: range) -> list[str]:
    """A split group's end: a later share (``part`` > 0) writes its sums to shared memory
    and arrives at the block's barrier; the first waits there and stores every share's sum.
    Slot ``j`` of share ``q`` is word ``((q - 1) * RB + j) * TP`` from the thread's own."""
    tp, rb = tile.pixels, tile.rb

    def slot(q: int, j: int) -> str:
        return f"pu_ring[{((q - 1) * rb + j) * tp} + tx]"

    if part:
        return [f"  {slot(part, j)} = a{j};" for j in range(len(rows))] + ["  PU_BAR_ARRIVE();"]
    return ["  PU_BAR_SYNC();"] + [
        f"  store<EPI>(o, {row}, a{j} + " + " + ".join(slot(q, j) for q in range(1, tile.ks))
        + ");" for j, row in enumerate(rows)]


def write(g: ConvGeometry, tile, indptr, indices, data) -> str:
    """The kernel body (``SPARSE_UNROLLED_DIRECT_BODY``) of a remainder given as CSR over the
    K x (C·R·S) kernel matrix (host arrays): the layer's constants, one function a group of
    ``tile.rb`` rows, and ``group(g, ...)`` that calls a thread's.  A wider filter's taps
    load under their row's and column's bits of the window inside the image, where some
    pixel's window has them in the padding (:func:`tap_guard`); a ring tile's channels are
    copied through the thread's ring (:func:`_ring_loads`); a split tile's group is ``ks``
    functions, one a share of its columns (:func:`split_columns`), the first adding the
    others' sums (:func:`_split_store`)."""
    k, c = g.k, g.c
    groups = cdiv(k, tile.rb)
    taps = g.r * g.s
    out = ["namespace pu {",
           f"constexpr int C = {c}, H = {g.h}, W = {g.w}, K = {k}, R = {g.r}, S = {g.s}, "
           f"SH = {g.stride[0]}, "
           f"SW = {g.stride[1]}, PH = {g.padding[0]}, PW = {g.padding[1]}, OH = {g.oh}, "
           f"OW = {g.ow}, RB = {tile.rb}, T = {tile.threads}, GB = {tile.gb}, "
           f"TP = {tile.pixels}, GROUPS = {groups}, GROUPS_FIRST = {int(tile.groups_first)}, "
           f"RING = {tile.ring}, KS = {tile.ks};"]
    for grp in range(groups):
        rows = range(grp * tile.rb, min(k, (grp + 1) * tile.rb))
        dense = np.zeros((len(rows), c * taps), np.float32)
        for j, row in enumerate(rows):
            dense[j, indices[indptr[row]:indptr[row + 1]]] = data[indptr[row]:indptr[row + 1]]
        shares = split_columns(dense, tile.ks)
        for part, cols in enumerate(shares):
            out.append(f"template <int EPI> __device__ __noinline__ void {_name(grp, part, tile)}("
                       "const float* __restrict__ xp, unsigned rok, unsigned cok, su_ring_t sr, "
                       "int tx, Out o) {")
            out.append("  float " + ", ".join(f"a{j} = 0.f" for j in range(len(rows))) + ";")
            out += _ring_loads(g, tile, dense) if tile.ring else _direct_loads(g, dense, cols)
            out += ([f"  store<EPI>(o, {row}, a{j});" for j, row in enumerate(rows)]
                    if tile.ks == 1 else _split_store(tile, part, rows))
            out.append("}")
    out += ["template <int EPI> __device__ __forceinline__ void group(int g, "
            "const float* __restrict__ xp, unsigned rok, unsigned cok, su_ring_t sr, int tx, "
            "Out o) {",
            "  switch (g) {"]
    out += [f"  case {n * tile.ks + q}: {_name(n, q, tile)}<EPI>(xp, rok, cok, sr, tx, o); break;"
            for n in range(groups) for q in range(tile.ks)]
    out += ["  default: break;", "  }", "}", "}  // namespace pu", ""]
    return "\n".join(out)


def _name(grp: int, part: int, tile) -> str:
    """The function of group ``grp``'s share ``part``."""
    return f"group{grp}" if tile.ks == 1 else f"group{grp}_{part}"
