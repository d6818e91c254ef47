"""The data gradient of a 1x1, padding-0, strided convolution as a compact GEMM and a spread
(``kernels_cu/zero_insert.cu``).

Input pixel (h, w) of such a layer feeds output pixel (h / sh, w / sw) where both divide and
nothing else, so its data gradient is the stride-1 data gradient of the (N, C, OH, OW)
grid the filter reads (one dense GEMM, :mod:`tensorconv.ops.igemm_tf32x3`'s mode 1) spread
over the input's grid with zeros between.  The phase-split GEMM (mode 3) wrote it a phase
at a time, every other value of a row, and three phases in four are blocks of zeros: for
ResNet-18's projections at batch 128 on an H200 that ran 1.2-2.4x as long as this pair
(``docs/notes/igemm_tf32x3.md``).  No launch shape to choose: no ``Problem`` or ``Tile``.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import (
    ConvGeometry,
    check_array,
    check_residual,
    conv_geometry,
    output_buffer,
    pair,
)
from tensorconv.ops import igemm_tf32x3
from tensorconv.ops._launch import NULL, cdiv, launch, no_out_on_cpu
from tensorconv.reference import conv as ref

FILE = "zero_insert.cu"
THREADS = 256
_INT32 = 2**31


def kernels() -> tuple[cuda.KernelRef, ...]:
    """The spread's kernel (the GEMM's: :func:`data_gradient_kernels`)."""
    return (cuda.kernel_ref(FILE, "zero_insert"),)


def instantiations() -> list[str]:
    """No templates: the file's plain kernel is all CI's nvcc build needs."""
    return []


def compact(geom: ConvGeometry) -> ConvGeometry:
    """The stride-1 1x1 convolution of the (N, C, OH, OW) pixels ``geom`` reads."""
    return conv_geometry((geom.n, geom.c, geom.oh, geom.ow),
                         (geom.k, geom.c // geom.groups, 1, 1), 1, 0, 1, geom.groups)


def takes(geom: ConvGeometry) -> bool:
    """Whether ``geom``'s data gradient runs as the compact GEMM and a spread: a 1x1,
    padding-0, undilated, strided convolution within the kernels' 32-bit indexes."""
    return ((geom.r, geom.s) == (1, 1) and geom.padding == (0, 0) and geom.stride != (1, 1)
            and geom.dilation == (1, 1) and geom.n * geom.c * geom.h * geom.w < _INT32
            and igemm_tf32x3.supported(igemm_tf32x3.problem(compact(geom), 1)) is None)


def data_gradient_kernels(geom: ConvGeometry, facts) -> tuple[cuda.KernelRef, ...]:
    """What :func:`data_gradient` launches for ``geom``."""
    p = igemm_tf32x3.problem(compact(geom), 1)
    return igemm_tf32x3.kernels(p, igemm_tf32x3.default_tile(p, facts)) + kernels()


def data_gradient(w, gy, addend, out, geom: ConvGeometry, xp) -> None:
    """``out`` = the data gradient of ``geom`` (:func:`takes`) from ``w`` and ``gy`` (+
    ``addend``), on checked C-contiguous float32 arrays."""
    cg = compact(geom)
    p = igemm_tf32x3.problem(cg, 1)
    comp = xp.empty((cg.n, cg.c, cg.h, cg.w), np.float32)
    igemm_tf32x3.run(p, w, gy, None, None, comp,
                     igemm_tf32x3.default_tile(p, backend.device_facts()), False, xp)
    run(comp, addend, out, geom.stride)


def run(comp, addend, out, stride) -> None:
    """Launch on checked arguments: ``comp`` (N, C, OH, OW) into ``out`` (N, C, H, W)."""
    n, c, h, w = out.shape
    oh, ow = comp.shape[2:]
    sh, sw = stride
    total = n * c * h * w
    magic = [np.uint32(0xFFFFFFFF // d) for d in (h * w, w, sh, sw)]
    i32 = np.int32
    launch(kernels()[0], (min(cdiv(total, THREADS), 1 << 16),), (THREADS,),
           (comp, NULL if addend is None else addend, out, i32(total), i32(h * w), i32(w),
            i32(oh * ow), i32(ow), i32(sh), i32(sw), *magic))


def zero_insert2d(comp, x_shape, stride, *, addend=None, out=None):
    """``comp`` spread over the grid of ``x_shape`` at ``stride``, zeros between, plus
    ``addend``: out[n, c, h, w] = comp[n, c, h / sh, w / sw] where both divide.

    Parameters
    ----------
    comp : array, (N, C, OH, OW), float32, C-contiguous
        OH = ceil(H / sh), OW = ceil(W / sw).
    x_shape : tuple (N, C, H, W)
    stride : int or (int, int)
    addend : array, (N, C, H, W), float32, optional
    out : array, (N, C, H, W), float32, optional (GPU only)

    Returns
    -------
    array, (N, C, H, W), float32
    """
    comp = backend.as_array(comp, "comp")
    xp = backend.array_module(comp)
    check_array(comp, "comp", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    stride = pair(stride, "stride", minimum=1)
    if len(x_shape) != 4 or any(int(d) < 1 for d in x_shape):
        raise ValueError(f"x_shape must be (N, C, H, W) of positive sizes, got {x_shape!r}")
    n, c, h, w = (int(d) for d in x_shape)
    want = (n, c, cdiv(h, stride[0]), cdiv(w, stride[1]))
    if tuple(comp.shape) != want:
        raise ValueError(f"comp has shape {tuple(comp.shape)}; x_shape {tuple(x_shape)} at "
                         f"stride {stride} needs {want}")
    if n * c * h * w >= _INT32:
        raise ValueError("zero_insert2d indexes in 32 bits: N*C*H*W must be < 2**31")
    addend = check_residual(addend, (n, c, h, w), xp, "addend")
    if xp is np:
        no_out_on_cpu(out=out)
        return ref.zero_insert(comp, (n, c, h, w), stride, addend)
    out = output_buffer(xp, out, (n, c, h, w))
    run(comp, addend, out, stride)
    return out
