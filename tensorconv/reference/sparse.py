"""Reference sparse convolution: a :class:`~tensorconv.blocksparse.BlockSparse` kernel applied
part by part, as the kernels compute it — each dense block a GEMM over the implicit im2col
columns it lists, accumulated into the output rows it lists; the CSR remainder row by row."""

from __future__ import annotations

import numpy as np

from tensorconv.blocksparse import BlockSparse
from tensorconv.checks import check_array, check_bools, conv_geometry
from tensorconv.reference.conv import _host, _windows


def sparse_conv2d(x, packed: BlockSparse, bias=None, stride=1, padding=0, *, relu=False,
                  residual=None):
    """``relu?(conv(x, w) + bias + residual)`` with ``w`` in block-sparse form.

    Parameters
    ----------
    x : ndarray, (N, C, H, W), float
    packed : BlockSparse, of a (K, C, R, S) kernel
    bias : ndarray, (K,), optional
    residual : ndarray, (N, K, OH, OW), optional
    stride, padding : int or (int, int)

    Returns
    -------
    ndarray, (N, K, OH, OW), dtype of ``x``
    """
    if not isinstance(packed, BlockSparse):
        raise TypeError(f"packed must be a BlockSparse, got {type(packed).__name__}")
    check_bools(relu=relu)
    check_array(x, "x", ndim=4)
    geom = conv_geometry(x.shape, packed.shape, stride, padding)
    x, bias, residual = _host(x, bias, residual)
    n, plane = geom.n, geom.oh * geom.ow
    cols = _windows(x, geom).transpose(0, 1, 4, 5, 2, 3).reshape(n, -1, plane)  # (N, CRS, P)
    out = np.zeros((n, geom.k, plane), x.dtype)
    lay = packed.layout
    for (rows, bcols), values in zip(lay.blocks, packed.values):
        out[:, rows] += np.einsum("rc,ncp->nrp", values.astype(x.dtype), cols[:, bcols])
    for row in range(lay.rows):
        lo, hi = lay.indptr[row], lay.indptr[row + 1]
        if hi > lo:
            out[:, row] += np.einsum("c,ncp->np", packed.data[lo:hi].astype(x.dtype),
                                     cols[:, lay.indices[lo:hi]])
    out = out.reshape(geom.output_shape)
    if bias is not None:
        out += np.asarray(bias, x.dtype)[None, :, None, None]
    if residual is not None:
        out += residual
    return np.maximum(out, 0) if relu else out
