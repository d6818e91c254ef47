"""A training batch gathered from a dataset on the GPU, randomly cropped and flipped
(``kernels_cu/augment.cu``): the augmentation of :func:`training.train.augment_batch`
without host work, so the training loop neither copies nor waits per step.

The random draws (crop offsets, flips) are made by the caller, with the same generator
calls as the host path, so the two give the same batches.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import check_array, check_bool, check_int, output_buffer
from tensorconv.ops._launch import cdiv, launch, no_out_on_cpu

FILE = "augment.cu"
THREADS = 256


def _name(augment: bool) -> str:
    return f"gather_augment<{int(augment)}>"


def kernels(augment: bool = True) -> tuple[cuda.KernelRef, ...]:
    """The kernel a call with (or without) augmentation launches."""
    return (cuda.kernel_ref(FILE, _name(augment)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: with and without augmentation."""
    return sorted(_name(a) for a in (False, True))


def gather_augment(images, index, oy=None, ox=None, flip=None, *, pad: int = 4,
                   fill: float = 0.0, out=None, checked: bool = True):
    """``images[index]``, each cropped from its image padded by ``pad`` (value ``fill``) at
    offset (``oy``, ``ox``) and flipped left-right where ``flip``.

    Parameters
    ----------
    images : array, (N, C, H, W), float32, C-contiguous
    index : array, (B,), int32: rows of ``images`` (each in 0..N-1)
    oy, ox : array, (B,), int32, in 0..2·pad, optional
    flip : array, (B,), bool or uint8, optional
        Give all three for augmentation, none for a plain gather.
    pad : int
    fill : float
        The value of the padding (the dataset's background).
    out : array, (B, C, H, W), float32, optional (GPU only)
    checked : bool
        Check that ``index``, ``oy`` and ``ox`` lie in range (on the GPU this reads them
        back: a wait).  A caller whose values are in range by construction passes False.

    Returns
    -------
    array, (B, C, H, W), float32
    """
    images, index = backend.as_array(images, "images"), backend.as_array(index, "index")
    xp = backend.array_module(images)
    check_array(images, "images", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    check_array(index, "index", ndim=1, dtype=np.int32, contiguous=True, xp=xp)
    check_int(pad, "pad", minimum=0)
    check_bool(checked, "checked")
    if isinstance(fill, (bool, np.bool_)) or not isinstance(fill, (int, float, np.number)):
        raise TypeError(f"fill must be a real number, got {fill!r}")
    fill = float(fill)          # any value, NaN included: the padding is data
    augment = [a is not None for a in (oy, ox, flip)]
    if any(augment) and not all(augment):
        raise ValueError("give oy, ox and flip together (augmentation), or none of them")
    n, c, h, w = images.shape
    b = index.shape[0]
    if checked and b and (int(index.min()) < 0 or int(index.max()) >= n):
        raise ValueError(f"index must lie in 0..{n - 1}")
    if all(augment):
        oy, ox = backend.as_array(oy, "oy"), backend.as_array(ox, "ox")
        flip = backend.as_array(flip, "flip")
        if flip.dtype not in (np.bool_, np.uint8):
            raise TypeError(f"flip must be bool or uint8, got {flip.dtype}")
        for name, a, dtype in (("oy", oy, np.int32), ("ox", ox, np.int32),
                               ("flip", flip, flip.dtype)):
            check_array(a, name, ndim=1, dtype=dtype, contiguous=True, xp=xp)
            if a.shape[0] != b:
                raise ValueError(f"{name} has {a.shape[0]} entries; index has {b}")
        if checked and b and (min(int(oy.min()), int(ox.min())) < 0
                              or max(int(oy.max()), int(ox.max())) > 2 * pad):
            raise ValueError(f"oy and ox must lie in 0..{2 * pad}")
    if xp is np:
        no_out_on_cpu(out=out)
        return _reference(images, index, oy, ox, flip, pad, fill)
    out = output_buffer(xp, out, (b, c, h, w))
    if not out.size:
        return out
    blocks = min(cdiv(out.size, THREADS), 32 * backend.device_facts().sm_count)
    null = np.uintp(0)
    flags = flip.view(np.uint8) if all(augment) else null
    i32 = np.int32
    launch(kernels(all(augment))[0], (blocks,), (THREADS,), (
        images, index, oy if all(augment) else null, ox if all(augment) else null, flags, out,
        i32(b), i32(c), i32(h), i32(w), i32(pad), np.float32(fill)))
    return out


def _reference(images, index, oy, ox, flip, pad: int, fill: float):
    """The batch in NumPy, by the kernel's index formulas."""
    x = images[index]
    if oy is None:
        return np.ascontiguousarray(x)
    b, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    rows = oy[:, None] + np.arange(h)
    cols = np.where(flip.astype(bool)[:, None], ox[:, None] + (w - 1 - np.arange(w)),
                    ox[:, None] + np.arange(w))
    out = padded[np.arange(b)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
