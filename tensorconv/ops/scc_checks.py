"""Checks of the sliding-channel ops' arguments (:mod:`~tensorconv.ops.scc_conv`,
:mod:`~tensorconv.ops.scc_fused`), each raising a clear error naming the argument before
any launch."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_array
from tensorconv.reference.scc import SCCGeometry


def check_geom(geom) -> SCCGeometry:
    """``geom``, checked to be an :class:`SCCGeometry`."""
    if not isinstance(geom, SCCGeometry):
        raise TypeError(f"geom must be an SCCGeometry (reference.scc.scc_geometry), got "
                        f"{type(geom).__name__}")
    return geom


def check_maps(a, name: str, channels: int, geom: SCCGeometry, xp=None):
    """``a`` as an array: a C-contiguous float32 (N, C, H, W) map of ``channels`` channels
    (on ``xp``'s device where given)."""
    a = backend.as_array(a, name)
    check_array(a, name, ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if a.shape[1] != channels:
        raise ValueError(f"{name} has {a.shape[1]} channels; the layer's "
                         f"{'input' if channels == geom.cin else 'output'} has {channels}")
    return a


def check_x_gy(x, gy, geom: SCCGeometry):
    """``(x, gy, xp)`` of a backward pass, checked: each a map of the layer's channels, on
    one device, with the same batch and spatial sizes."""
    x = check_maps(x, "x", geom.cin, geom)
    xp = backend.array_module(x)
    gy = check_maps(gy, "gy", geom.cout, geom, xp)
    if (gy.shape[0],) + tuple(gy.shape[2:]) != (x.shape[0],) + tuple(x.shape[2:]):
        raise ValueError(f"gy has shape {tuple(gy.shape)}; x is {tuple(x.shape)}: the batch "
                         f"and spatial sizes must agree")
    return x, gy, xp


def check_weights(w, geom: SCCGeometry, xp):
    """``w`` as an array: the layer's C-contiguous float32 (Cout, U) weights on ``xp``."""
    w = backend.as_array(w, "w")
    check_array(w, "w", ndim=2, dtype=np.float32, contiguous=True, xp=xp)
    if tuple(w.shape) != (geom.cout, geom.u):
        raise ValueError(f"w has shape {tuple(w.shape)}; the layer's is ({geom.cout}, {geom.u})")
    return w
