"""Per-stream float32 scratch buffers and int32 counters: the split partial sums and other
temporaries the kernels' launches need, kept between calls so that a launch inside
CUDA-graph capture allocates nothing (the warm-up call sized the buffer) and a captured
graph's pointers stay valid (a buffer a larger one replaced is kept too).  Calls on one
stream are ordered, so they share its buffer safely; calls on two streams (an engine's
module branches side by side) each use their own.

An owner that makes a stream of its own (a captured training step, an inference engine, a
graph timed by :func:`tensorconv.timing.time_graph`) calls :func:`release_workspace` when
nothing captured on that stream will replay again; without it every such stream would keep
its buffer for the life of the process."""

from __future__ import annotations

import numpy as np

_workspaces: dict = {}   # (device, stream pointer) -> float32 buffer
_counters: dict = {}     # (device, stream pointer) -> zeroed int32 counters
_outgrown: dict = {}     # (device, stream pointer) -> buffers a larger one replaced


def _key(xp):
    return xp.cuda.runtime.getDevice(), xp.cuda.get_current_stream().ptr


def _grown(table: dict, key, n: int, make):
    buf = table.get(key)
    if buf is None or buf.size < n:
        if buf is not None:   # a graph captured before may hold it: kept until released
            _outgrown.setdefault(key, []).append(buf)
        buf = table[key] = make(n)
    return buf


def workspace(xp, nfloats: int):
    """The current (device, stream)'s scratch buffer of at least ``nfloats`` float32
    (it only grows)."""
    return _grown(_workspaces, _key(xp), nfloats, lambda n: xp.empty(n, dtype=np.float32))


def counters(xp, count: int):
    """The current (device, stream)'s int32 counters, at least ``count`` of them (a power
    of two, at least 1024), zeroed when made: kernels that count arrivals in them (the last
    of a tile's split shares reduces) leave them zeroed.  Per stream, like the workspace,
    so that kernels running side by side on two streams never share one."""
    size = 1 << max(10, (max(count, 1) - 1).bit_length())
    return _grown(_counters, _key(xp), size, lambda n: xp.zeros(n, dtype=np.int32))


def release_workspace(stream) -> None:
    """Drop ``stream``'s scratch buffers and counters (on every device)."""
    for table in (_workspaces, _counters, _outgrown):
        for key in [k for k in table if k[1] == stream.ptr]:
            del table[key]
