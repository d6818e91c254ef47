"""Dense blocks in a pruned kernel matrix: Algorithm 1 of Rumi et al. (PACT'20, §4.1).

Rows of the K x (C·R·S) kernel matrix that share many nonzero columns are grouped by
hypergraph partitioning — each row a node, each column a hyperedge joining the rows it has
nonzeros in, the connectivity (``km1``) objective, so that few columns are split between
groups — then, in each group of at least ``b1`` rows, the columns with at least ``t2``
nonzeros form a dense block if there are at least ``b2`` of them.  The block's nonzeros leave
the matrix and the search repeats until it finds no block; what is left becomes the CSR
remainder (:mod:`tensorconv.blocksparse`).

The paper used hMETIS; we use Mt-KaHyPar (``pip install mtkahypar``; Linux x86-64 wheels for
CPython 3.10-3.13) with its deterministic preset, one initial-partitioning run instead of 20
(``partition.ini`` beside this module; ``TENSORCONV_PARTITION_CONFIG`` names another file
of Mt-KaHyPar's settings, for a study of them), and a fixed seed: a layout is the same on
any machine and thread count (``TENSORCONV_PARTITION_THREADS``, default the cores up to
16).
One change from the paper: a group row with no nonzero in the selected columns is left out
of the block (it would only add zero work), as long as ``b1`` rows remain.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorconv.blocksparse import INDEX, Layout, layout_from_pattern
from tensorconv.checks import check_int, check_real


class PartitionerUnavailableError(RuntimeError):
    """The hypergraph partitioner (Mt-KaHyPar) is not installed."""


@functools.cache
def _partitioner():
    try:
        import mtkahypar
    except ImportError as exc:
        raise PartitionerUnavailableError(
            "dense-block extraction needs the Mt-KaHyPar hypergraph partitioner: pip install "
            "mtkahypar (wheels for Linux x86-64, CPython 3.10-3.13); elsewhere a pruned "
            "layer runs on its CSR remainder alone (blocks=False)") from exc
    threads = int(os.environ.get("TENSORCONV_PARTITION_THREADS", 0)) or min(os.cpu_count() or 1, 16)
    return mtkahypar, mtkahypar.initialize(threads, False)


_CONFIG = Path(__file__).with_name("partition.ini")


def config_path() -> Path:
    """The partitioner's settings file: ``TENSORCONV_PARTITION_CONFIG`` where set (it must
    exist: a mistyped path would silently give other layouts), else ``partition.ini``."""
    chosen = os.environ.get("TENSORCONV_PARTITION_CONFIG")
    if not chosen:
        return _CONFIG
    path = Path(chosen).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"TENSORCONV_PARTITION_CONFIG names {chosen!r}, which is not "
                                f"a file")
    return path


def _context(mtk, init):
    """The partitioner's settings (:func:`config_path`), or the deterministic preset (with
    a warning) where this Mt-KaHyPar names its parameters otherwise."""
    path = config_path()
    try:
        return init.context_from_file(str(path))
    except (mtk.InvalidParameterError, mtk.SystemError, OSError) as exc:
        warnings.warn(f"Mt-KaHyPar {getattr(mtk, '__version__', '?')} does not read "
                      f"{path.name} ({str(exc).strip()}): partitioning with its deterministic "
                      f"preset, 20 initial runs (slower; other layouts)", RuntimeWarning,
                      stacklevel=3)
        return init.context_from_preset(mtk.PresetType.DETERMINISTIC)


def partition_rows(pattern, groups: int, *, seed: int = 0, epsilon: float = 0.3) -> np.ndarray:
    """A group (0 .. ``groups``-1) for every row of ``pattern`` (bool, rows x columns): rows
    sharing nonzero columns together, by Mt-KaHyPar (km1 objective, groups at most
    ``1 + epsilon`` times the mean size, deterministic for a ``seed``)."""
    pattern = np.asarray(pattern, bool)
    rows = pattern.shape[0]
    groups = check_int(groups, "groups", minimum=2)
    check_real(epsilon, "epsilon", low=0.0, low_open=True)
    if rows <= groups:
        return np.arange(rows, dtype=INDEX)
    mtk, init = _partitioner()
    edges = _hyperedges(pattern)
    ctx = _context(mtk, init)
    ctx.set_partitioning_parameters(groups, float(epsilon), mtk.Objective.KM1)
    ctx.logging = False
    mtk.set_seed(int(seed))
    graph = init.create_hypergraph(ctx, rows, len(edges), edges)
    return np.asarray(graph.partition(ctx).get_partition(), INDEX)


def _hyperedges(pattern: np.ndarray) -> list[list[int]]:
    """Each column of ``pattern`` with two or more nonzeros as the list of its rows, in
    column order (a one-row column cuts nothing).  Built from one ``nonzero`` of the
    transposed pattern and list slices: a loop over 4,608 columns took 50 ms a round."""
    cols, rows = np.nonzero(pattern.T)
    counts = np.bincount(cols, minlength=pattern.shape[1])
    ends = np.cumsum(counts)
    keep = counts > 1
    flat = rows.tolist()
    return [flat[b:e] for b, e in zip((ends - counts)[keep].tolist(), ends[keep].tolist())]


@dataclass(frozen=True)
class Extraction:
    """The layout Algorithm 1 found and its statistics: ``rounds`` of partitioning,
    ``in_blocks`` (share of the nonzeros the blocks hold), ``fill`` (nonzeros over cells in
    the blocks), ``seconds``."""

    layout: Layout
    rounds: int
    in_blocks: float
    fill: float
    seconds: float


def extract_blocks(pattern, shape, *, t1: int = 8, t2: int = 8, b1: int = 8, b2: int = 8,
                   seed: int = 0, epsilon: float = 0.3, min_gain: float = 0.0) -> Extraction:
    """Algorithm 1: dense blocks of the nonzeros of ``pattern`` and the CSR remainder.

    Parameters
    ----------
    pattern : bool array, (K, C·R·S)
        The kernel matrix's nonzeros (:func:`tensorconv.blocksparse.kernel_matrix` ``!= 0``).
    shape : (K, C, R, S)
    t1 : int
        Row groups per round (the partition's k).
    t2 : int
        Nonzeros a column needs within a group to join its block.
    b1, b2 : int
        Least rows and columns of a block.
    seed, epsilon :
        The partitioner's seed and balance slack (:func:`partition_rows`).
    min_gain : float, in [0, 1)
        Stop after a round whose blocks take less than this share of the pattern's
        nonzeros (0: the paper's loop, until a round finds no block).  Each round is one
        partition, and the late rounds of a layer find small blocks: a stop trades some
        of them for time (docs/notes/sparse_conv.md).

    Returns
    -------
    Extraction
    """
    start = time.perf_counter()
    for name, value in (("t1", t1), ("t2", t2), ("b1", b1), ("b2", b2)):
        check_int(value, name, minimum=1)
    min_gain = check_real(min_gain, "min_gain", low=0.0, high=1.0, high_open=True)
    pattern = np.asarray(pattern, bool)
    rest = pattern.copy()
    least = min_gain * int(pattern.sum())
    blocks, rounds = [], 0
    while rest.any():
        rounds += 1
        group = partition_rows(rest, max(2, t1), seed=seed + rounds, epsilon=epsilon)
        before = int(rest.sum())
        found = False
        for g in range(max(2, t1)):
            rows = np.nonzero(group == g)[0]
            if rows.size < b1:
                continue
            cols = np.nonzero(rest[rows].sum(axis=0) >= t2)[0]
            if cols.size < b2:
                continue
            used = rows[rest[np.ix_(rows, cols)].any(axis=1)]
            rows = used if used.size >= b1 else rows
            blocks.append((rows.astype(INDEX), cols.astype(INDEX)))
            rest[np.ix_(rows, cols)] = False
            found = True
        if not found or before - int(rest.sum()) < least:
            break
    layout = layout_from_pattern(pattern, shape, blocks)
    nnz = int(pattern.sum())
    held = nnz - int(rest.sum())
    cells = sum(r.size * c.size for r, c in blocks)
    return Extraction(layout, rounds, held / nnz if nnz else 0.0, held / cells if cells else 0.0,
                      time.perf_counter() - start)
