"""The block-sparse format of a pruned convolution kernel (Rumi et al., PACT'20, §3-4).

A kernel ``w`` (K, C, R, S) is the K x (C·R·S) *kernel matrix* ``w.reshape(K, -1)``: row k is
output channel k, column ``c·R·S + r·S + s`` is input channel c at filter tap (r, s).  A
:class:`Layout` covers the matrix with *dense blocks* — a sorted list of rows and a sorted list of
columns each, whose every cell is stored, zeros included — and a *CSR remainder* for the
nonzeros no block holds.  Blocks may share rows (their products accumulate into the same output
channel) and their rectangles may overlap; a cell belongs to the first block that covers it (its
*owner*), later blocks store a zero there, so that every weight is stored exactly once.

:func:`pack` puts a kernel's values into a layout (refusing nonzeros the layout does not cover);
:meth:`BlockSparse.to_kernel` is its inverse.  :meth:`Layout.mask` is what stays trainable after
re-pruning: every cell of every block, and the remainder's nonzeros.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tensorconv.checks import check_array, check_int

INDEX = np.int32


def kernel_matrix(w) -> np.ndarray:
    """The K x (C·R·S) kernel matrix of ``w`` (K, C, R, S): a view, column c·R·S + r·S + s."""
    check_array(w, "w", ndim=4)
    return w.reshape(w.shape[0], -1)


def column_taps(cols, shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(c, r, s)`` of kernel-matrix columns ``cols`` of a kernel of ``shape`` (K, C, R, S):
    what an implicit im2col reads for each column."""
    _, _, r_size, s_size = shape
    cols = np.asarray(cols)
    return cols // (r_size * s_size), (cols // s_size) % r_size, cols % s_size


def _check_index_list(a, name: str, size: int, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D list of {what} indices, got shape "
                         f"{a.shape}")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got {a.dtype}")
    if a.min() < 0 or a.max() >= size:
        raise ValueError(f"{name} holds {what} indices outside 0..{size - 1} "
                         f"(min {a.min()}, max {a.max()})")
    if np.any(np.diff(a) <= 0):
        raise ValueError(f"{name} must be strictly increasing (sorted, no duplicates)")
    return a.astype(INDEX)


@dataclass(frozen=True, eq=False)
class Layout:
    """Where the weights of a block-sparse kernel are stored.

    Attributes
    ----------
    shape : (K, C, R, S)
        The kernel's shape.
    blocks : tuple of (rows, cols)
        Each a pair of strictly increasing int32 arrays: the block's kernel-matrix rows and
        columns.
    indptr, indices : int32 arrays, (K + 1,) and (nnz,)
        The CSR pattern of the remainder (columns strictly increasing within a row).
    """

    shape: tuple
    blocks: tuple
    indptr: np.ndarray
    indices: np.ndarray

    def __post_init__(self):
        if not isinstance(self.shape, tuple) or len(self.shape) != 4:
            raise ValueError(f"shape must be (K, C, R, S), got {self.shape!r}")
        for i, n in enumerate(self.shape):
            check_int(n, f"shape[{i}]", minimum=1)
        k, cols = self.rows, self.cols
        checked = []
        for b, block in enumerate(self.blocks):
            if not isinstance(block, tuple) or len(block) != 2:
                raise ValueError(f"blocks[{b}] must be a (rows, cols) pair")
            checked.append((_check_index_list(block[0], f"blocks[{b}] rows", k, "row"),
                            _check_index_list(block[1], f"blocks[{b}] cols", cols, "column")))
        object.__setattr__(self, "blocks", tuple(checked))
        indptr, indices = np.asarray(self.indptr), np.asarray(self.indices)
        if indptr.shape != (k + 1,) or indptr.dtype.kind not in "iu":
            raise ValueError(f"indptr must be {k + 1} integers (one more than the rows), got "
                             f"shape {indptr.shape} of {indptr.dtype}")
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
            raise ValueError("indptr must start at 0, not decrease, and end at len(indices)")
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise ValueError(f"indices must be a 1-D integer array, got shape {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= cols):
            raise ValueError(f"indices hold columns outside 0..{cols - 1}")
        for row in range(k):
            seg = indices[indptr[row]:indptr[row + 1]]
            if np.any(np.diff(seg) <= 0):
                raise ValueError(f"indices of row {row} must be strictly increasing (sorted, "
                                 f"no duplicates)")
        object.__setattr__(self, "indptr", indptr.astype(INDEX))
        object.__setattr__(self, "indices", indices.astype(INDEX))
        covered = np.zeros((k, cols), bool)
        for rows, bcols in self.blocks:
            covered[np.ix_(rows, bcols)] = True
        inside = covered[self.csr_rows, self.indices]
        if inside.any():
            i = int(np.argmax(inside))
            raise ValueError(f"remainder entry (row {self.csr_rows[i]}, column "
                             f"{self.indices[i]}) lies inside a dense block: a weight is "
                             f"stored once")

    @property
    def rows(self) -> int:
        """K: rows of the kernel matrix."""
        return self.shape[0]

    @property
    def cols(self) -> int:
        """C·R·S: columns of the kernel matrix."""
        return int(np.prod(self.shape[1:]))

    @property
    def csr_rows(self) -> np.ndarray:
        """The row of each remainder entry (int32, (nnz,))."""
        return np.repeat(np.arange(self.rows, dtype=INDEX), np.diff(self.indptr))

    def owner(self) -> np.ndarray:
        """(K, C·R·S) int32: the block owning each cell (the first that covers it),
        ``len(blocks)`` for a remainder entry, -1 for a cell nothing stores."""
        own = np.full((self.rows, self.cols), -1, INDEX)
        own[self.csr_rows, self.indices] = len(self.blocks)
        for b in range(len(self.blocks) - 1, -1, -1):
            rows, cols = self.blocks[b]
            own[np.ix_(rows, cols)] = b
        return own

    def mask(self) -> np.ndarray:
        """(K, C·R·S) bool: the cells this layout stores (trainable after re-pruning)."""
        return self.owner() >= 0

    def digest(self) -> str:
        """A short hash of the layout (shape, blocks, remainder pattern): the tune cache keys
        a sparse layer's choices by it, since the sizes alone do not say how it runs."""
        h = hashlib.sha1(repr(self.shape).encode())
        for a in (self.indptr, self.indices, *(i for block in self.blocks for i in block)):
            h.update(np.ascontiguousarray(a, INDEX).tobytes())
            h.update(b"|")
        return h.hexdigest()[:16]

    def stored(self) -> int:
        """How many values the layout stores (block cells, overlaps counted once per block,
        plus the remainder's entries)."""
        return sum(r.size * c.size for r, c in self.blocks) + int(self.indices.size)


@dataclass(frozen=True, eq=False)
class BlockSparse:
    """A kernel's values in a :class:`Layout`: ``values[b]`` (float32, (rows, cols)) per
    block, ``data`` (float32, (nnz,)) for the remainder.  Cells a block does not own hold 0."""

    layout: Layout
    values: tuple
    data: np.ndarray

    @property
    def shape(self) -> tuple:
        return self.layout.shape

    def to_matrix(self) -> np.ndarray:
        """The dense K x (C·R·S) kernel matrix (float32)."""
        lay = self.layout
        out = np.zeros((lay.rows, lay.cols), np.float32)
        for (rows, cols), v in zip(lay.blocks, self.values):
            out[np.ix_(rows, cols)] += v
        out[lay.csr_rows, lay.indices] += self.data
        return out

    def to_kernel(self) -> np.ndarray:
        """The dense kernel (K, C, R, S), float32."""
        return self.to_matrix().reshape(self.shape)

    def nonzeros(self) -> int:
        """Nonzero weights stored (block zeros not counted)."""
        return int(sum(np.count_nonzero(v) for v in self.values) + np.count_nonzero(self.data))


def layout_from_pattern(pattern, shape, blocks=()) -> Layout:
    """The layout of ``blocks`` (a list of (rows, cols)) plus a CSR remainder holding every
    cell of ``pattern`` (bool, K x C·R·S) no block covers."""
    pattern = np.asarray(pattern, bool)
    k, cols = shape[0], int(np.prod(shape[1:]))
    if pattern.shape != (k, cols):
        raise ValueError(f"pattern must be ({k}, {cols}) for a kernel of shape {shape}, got "
                         f"{pattern.shape}")
    rest = pattern.copy()
    for rows, bcols in blocks:
        rest[np.ix_(np.asarray(rows), np.asarray(bcols))] = False
    indptr = np.concatenate([[0], np.cumsum(rest.sum(axis=1))]).astype(INDEX)
    return Layout(tuple(int(n) for n in shape), tuple(blocks), indptr,
                  np.nonzero(rest)[1].astype(INDEX))


def pack(w, layout: Layout) -> BlockSparse:
    """The values of kernel ``w`` (K, C, R, S) in ``layout``.

    Raises
    ------
    ValueError
        ``w``'s shape differs from the layout's, or ``w`` has nonzeros in cells the layout
        does not store (they would be lost).
    """
    w = np.asarray(w)
    if tuple(w.shape) != layout.shape:
        raise ValueError(f"w has shape {tuple(w.shape)}; the layout is for {layout.shape}")
    matrix = kernel_matrix(w)
    owner = layout.owner()
    lost = np.count_nonzero((owner < 0) & (matrix != 0))
    if lost:
        raise ValueError(f"w has {lost} nonzeros the layout does not store (they would be "
                         f"lost): prune them first, or build the layout from w's pattern")
    values = []
    for b, (rows, cols) in enumerate(layout.blocks):
        cell = np.ix_(rows, cols)
        values.append(np.where(owner[cell] == b, matrix[cell], 0).astype(np.float32))
    data = matrix[layout.csr_rows, layout.indices].astype(np.float32)
    return BlockSparse(layout, tuple(values), data)
