"""Per-stream float32 scratch buffers: the split partial sums and other temporaries the
kernels' launches need, kept between calls so that a launch inside CUDA-graph capture
allocates nothing (the warm-up call sized the buffer) and a captured graph's pointers stay
valid.  Calls on one stream are ordered, so they share its buffer safely.

An owner that makes a stream of its own (a captured training step, an inference engine, a
graph timed by :func:`tensorconv.timing.time_graph`) calls :func:`release_workspace` when
nothing captured on that stream will replay again; without it every such stream would keep
its buffer for the life of the process.
"""

from __future__ import annotations

import numpy as np

_workspaces: dict = {}   # (device, stream pointer) -> buffer


def workspace(xp, nfloats: int):
    """The current (device, stream)'s scratch buffer of at least ``nfloats`` float32
    (it only grows)."""
    key = (xp.cuda.runtime.getDevice(), xp.cuda.get_current_stream().ptr)
    buf = _workspaces.get(key)
    if buf is None or buf.size < nfloats:
        buf = xp.empty(nfloats, dtype=np.float32)
        _workspaces[key] = buf
    return buf


def release_workspace(stream) -> None:
    """Drop ``stream``'s scratch buffers (on every device)."""
    for key in [k for k in _workspaces if k[1] == stream.ptr]:
        del _workspaces[key]
