"""The k-step records of :mod:`tensorconv.ops.sparse_pairs_tc`: a pruned kernel's columns
(K x C R S, column ``c R S + r S + s``; a 1x1 kernel's input channels) paired for
``mma.sp``'s 1:2 format (a block of output rows, few rows in both columns of a pair), and
each k step's kept values and selectors in the operand layouts of ``mma.sp`` m16n8k16
.tf32 (selector 0), as a probe on the H200 measured them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tensorconv.ops._launch import cdiv, round_tf32

KS = 16             # kernel columns a k step: eight pairs
STEP_MULTIPLE = 2   # a row block's k steps come in multiples of this (the kernel's stage)


_LANE, _REG = np.arange(32)[:, None], np.arange(4)[None, :]
# A (16 rows x 8 kept values): lane (g, t) register i holds row SLOT_ROW[lane, i] of the m16
# tile and its value of pair SLOT_PAIR[lane, i] (the dense m16n8k8 A fragment's places).
SLOT_ROW = _LANE // 4 + 8 * (_REG & 1)
SLOT_PAIR = _LANE % 4 + 4 * (_REG >> 1)
# B (16 k rows x 8 pixels): the kernel gives lane (g, t) register i the im2col row t + 4 i
# of the stage, pixel g.  Pair j multiplies the stage rows PAIR_ROWS[j] (its first and
# second column): the host lists each step's columns in those rows.
PAIR_ROWS = np.array([(2 * j, 2 * j + 1) for j in range(8)], np.int64)
# Metadata: for row r (0-15) of an m16 tile and pair j, the lane 4 (r % 8) + META_HOLDER
# [r, j] and the nibble META_NIBBLE[r, j] of its word that select the pair's value: FIRST
# its first column's, SECOND its second's.
META_HOLDER = np.array([[j // 4 for j in range(8)] for r in range(16)], np.int64)
META_NIBBLE = np.array([[j % 4 + 4 * (r // 8) for j in range(8)] for r in range(16)], np.int64)
FIRST, SECOND = 0x4, 0xE



def pair_channels(masks: np.ndarray) -> list[tuple[int, int]]:
    """Pairs of columns covering every column ``masks`` uses, few rows in both of a pair.

    Parameters
    ----------
    masks : array, (C, W), uint64: column c's rows as a bit set of W words

    Returns
    -------
    list of (a, b): ``b`` is -1 where ``a`` has no partner (an odd count).  Greedy: the
    columns used by most rows first, each paired with the unpaired column sharing the
    fewest rows with it (ties: the one used by most rows, then the lowest).
    """
    used = np.flatnonzero(masks.any(axis=1))
    if used.size == 0:
        return []
    # the columns in the order they are taken, each word of every column a row (W, U): a
    # column's rows shared with all others are then W vector operations, and the choice
    # one argmin over a key, not a sort a turn (a 3x3 layer has thousands of columns)
    words = np.ascontiguousarray(masks[used].T)
    weight = np.zeros(used.size, np.int64)
    for wd in words:
        weight += np.bitwise_count(wd)
    order = np.lexsort((used, -weight))
    words, weight, cols = np.ascontiguousarray(words[:, order]), weight[order], used[order]
    # one key a candidate, smallest best: fewest shared rows, then most rows, then the
    # lowest column; a taken column's key is above every free one's
    k2 = np.int64(masks.shape[0])
    k1 = (weight[0] + 1) * k2
    taken = (64 * masks.shape[1] + 1) * k1
    key0 = (weight[0] - weight) * k2 + cols
    clash = np.empty(cols.size, np.int64)
    out = []
    for i in range(cols.size):
        if key0[i] >= taken:
            continue
        key0[i] = taken
        clash[:] = 0
        for wd in words:
            clash += np.bitwise_count(wd & wd[i])
        key = clash * k1 + key0
        j = int(np.argmin(key))
        if key[j] >= taken:
            out.append((int(cols[i]), -1))
            continue
        key0[j] = taken
        out.append((int(cols[i]), int(cols[j])))
    return out


def block_schedule(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, nrows: int,
                   c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The column pairs of one block of ``nrows`` rows whose nonzeros are ``(rows, cols,
    vals)`` (rows local to the block, within ``c`` columns).

    Returns
    -------
    pairs : (P, 2) int64, a pair's columns (``b`` = ``a`` where it has no partner)
    kept : (nrows, P) float32, each row's value in each pair (0 where none)
    second : (nrows, P) bool, whether it is the pair's second column's value
    moved : int, the nonzeros placed after the first round

    Rounds of :func:`pair_channels` over the nonzeros not yet placed: in a pair where a row
    has both, the first column's value is placed, the second's waits for a later round.
    """
    words = cdiv(max(nrows, 1), 64)
    left = np.ones(rows.size, bool)
    pairs, kept, second = [], [], []
    moved = 0
    while left.any():
        if len(kept) == 1:
            moved = int(left.sum())
        idx = np.flatnonzero(left)
        r, cc, v = rows[idx], cols[idx], vals[idx]
        masks = np.zeros((c, words), np.uint64)
        bit = np.left_shift(np.uint64(1), (r % 64).astype(np.uint64))
        np.bitwise_or.at(masks, (cc, r // 64), bit)
        plist = pair_channels(masks)
        slot = np.full((c, 2), -1, np.int64)            # channel -> (pair, side)
        for i, (a, b) in enumerate(plist):
            slot[a] = (i, 0)
            if b >= 0:
                slot[b] = (i, 1)
        p_of, side = slot[cc, 0], slot[cc, 1]
        k_all = np.zeros((nrows, len(plist)), np.float32)
        s_all = np.zeros((nrows, len(plist)), bool)
        # the first channels' values first: where a row has both, the second waits
        first = side == 0
        k_all[r[first], p_of[first]] = v[first]
        left[idx[first]] = False
        sec = np.flatnonzero(~first)
        free = k_all[r[sec], p_of[sec]] == 0
        hit = sec[free & ~np.isin(r[sec] * len(plist) + p_of[sec],
                                  r[first] * len(plist) + p_of[first])]
        k_all[r[hit], p_of[hit]] = v[hit]
        s_all[r[hit], p_of[hit]] = True
        left[idx[hit]] = False
        pairs += [(a, a if b < 0 else b) for a, b in plist]
        kept.append(k_all)
        second.append(s_all)
    if not pairs:
        return (np.zeros((0, 2), np.int64), np.zeros((nrows, 0), np.float32),
                np.zeros((nrows, 0), bool), 0)
    return np.array(pairs, np.int64), np.concatenate(kept, 1), np.concatenate(second, 1), moved


class PairRecords(NamedTuple):
    """A layer's k steps for one tile (:func:`pair_records`): ``recs`` (steps · rows/16 ·
    40, 4) float32 (each m16 tile's A fragments, 32 lanes x 4, then its metadata words, 32
    lanes; rows/16 tiles a step), ``cols`` (steps, 16) int32 (each k row's kernel column),
    ``segs`` (row blocks, 2) int32 (first step, steps), ``steps`` in all, ``pairs`` the
    column pairs in all,
    ``moved`` the nonzeros placed after a block's first round, ``rows`` the tile's rows
    a block, ``max_steps`` the most steps of a row block, ``columns`` the kernel
    matrix's."""

    recs: object
    cols: object
    segs: object
    steps: int
    pairs: int
    moved: int
    rows: int
    max_steps: int
    columns: int


def fragments(kept: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One m16 tile's k steps in the kernel's order: ``kept`` and ``second`` (16, 8·S)
    as the A fragments (S, 32, 4) float32 (tf32-rounded) and metadata words (S, 32)
    uint32 (:data:`META_HOLDER`, :data:`META_NIBBLE`)."""
    s = kept.shape[1] // 8
    k3 = kept.reshape(16, s, 8)
    a = k3[SLOT_ROW, :, SLOT_PAIR].transpose(2, 0, 1)     # (S, 32, 4)
    a = round_tf32(np.ascontiguousarray(a, np.float32), np)
    code = np.where(second.reshape(16, s, 8), SECOND, FIRST).astype(np.uint32)
    meta = np.full((s, 32), 0x44444444, np.uint32)
    holders = np.zeros((s, 32), np.uint32)
    for r in range(16):
        for j in range(8):
            ln = 4 * (r % 8) + META_HOLDER[r, j]
            sh = np.uint32(4 * META_NIBBLE[r, j])
            holders[:, ln] |= code[r, :, j] << sh
    held = np.zeros(32, bool)
    held[4 * (np.arange(16) % 8)[:, None] + META_HOLDER] = True
    meta[:, held] = holders[:, held]
    return a, meta


def pair_records(indptr, indices, data, k: int, c: int, rows: int, xp) -> PairRecords:
    """The k-step records of a (``k``, ``c``) kernel matrix given in CSR (host arrays; ``c``
    its columns, C R S), blocks of ``rows`` output rows (a multiple of 16: a tile's), on
    ``xp``'s device."""
    if rows <= 0 or rows % 16:
        raise ValueError(f"rows must be a positive multiple of 16, got {rows}")
    indptr = np.asarray(indptr, np.int64)
    nnz = int(indptr[-1])
    cols = np.asarray(indices, np.int64)[:nnz]
    vals = np.asarray(data, np.float32)[:nnz]
    if nnz and (cols.min() < 0 or cols.max() >= c):
        raise ValueError(f"indices must lie in [0, {c}), got {cols.min()}..{cols.max()}")
    row = np.repeat(np.arange(k), np.diff(indptr))
    bm = rows
    blocks = cdiv(k, bm)
    recs, chans, segs = [], [], np.zeros((blocks, 2), np.int64)
    first = npairs = moved = 0
    for b in range(blocks):
        lo, hi = indptr[b * bm], indptr[min(k, (b + 1) * bm)]
        pairs, kept, second, mv = block_schedule(row[lo:hi] - b * bm, cols[lo:hi],
                                                 vals[lo:hi], bm, c)
        npairs += len(pairs)
        moved += mv
        steps = cdiv(len(pairs), 8 * STEP_MULTIPLE) * STEP_MULTIPLE
        segs[b] = (first, steps)
        if steps == 0:
            continue
        pad = 8 * steps - len(pairs)
        if pad:
            pairs = np.concatenate([pairs, np.zeros((pad, 2), np.int64)])
            kept = np.concatenate([kept, np.zeros((bm, pad), np.float32)], 1)
            second = np.concatenate([second, np.zeros((bm, pad), bool)], 1)
        ch = np.zeros((steps, KS), np.int64)
        p3 = pairs.reshape(steps, 8, 2)
        for j in range(8):
            ch[:, PAIR_ROWS[j, 0]] = p3[:, j, 0]
            ch[:, PAIR_ROWS[j, 1]] = p3[:, j, 1]
        a_part = np.zeros((steps, bm // 16, 32, 4), np.float32)
        e_part = np.zeros((steps, bm // 16, 32), np.uint32)
        for m in range(bm // 16):
            a_part[:, m], e_part[:, m] = fragments(kept[16 * m:16 * m + 16],
                                                   second[16 * m:16 * m + 16])
        # a step: every m16 tile's A fragments, then every m16 tile's metadata words
        recs.append(np.concatenate([a_part.reshape(steps, -1),
                                    e_part.view(np.float32).reshape(steps, -1)], 1))
        chans.append(ch)
        first += steps
    steps_all = max(first, 1)
    rec_all = np.zeros((steps_all, bm * 10), np.float32)
    ch_all = np.zeros((steps_all, KS), np.int32)
    if first:
        rec_all[:first] = np.concatenate(recs)
        ch_all[:first] = np.concatenate(chans)
    return PairRecords(xp.asarray(rec_all.reshape(-1, 4)), xp.asarray(ch_all),
                       xp.asarray(segs.astype(np.int32)), first, npairs, moved, bm,
                       int(segs[:, 1].max()) if blocks else 0, c)


def dense_csr(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (K, C, R, S) kernel's nonzeros as CSR arrays (indptr, indices, data) over its
    K x C R S matrix (column ``c R S + r S + s``)."""
    w2 = np.asarray(w, np.float32).reshape(w.shape[0], -1)
    rows, cols = np.nonzero(w2)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=w2.shape[0]))])
    return indptr, cols, w2[rows, cols]


