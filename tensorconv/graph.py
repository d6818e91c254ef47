"""CUDA graphs whose kernel-to-kernel edges may be programmatic (sm_90 and later).

A graph captured from one stream is a chain: each kernel waits until the one before it
has finished and its writes are flushed, and only then does the GPU begin to launch it,
about 0.8 µs per boundary (``tensorconv.bench.launch_floor``) that a batch-1 network of
25 launches pays 25 times.  A *programmatic* edge lets the next kernel launch as the
previous one's blocks exit; the next kernel then holds at ``tc::wait_prior_grids()``
(``kernels_cu/tc_common.cuh``) until the previous kernel's writes are visible, so its
launch overlaps the previous kernel's drain.

Only edges into kernels known to make that call first are made programmatic
(:func:`tensorconv.cuda.waits_for_prior_grids`: every kernel of ``kernels_cu``); CuPy's
own kernels, copies and memsets keep ordinary edges.  Because every such kernel waits
for the one before it, which waited for its own predecessor, a kernel also sees every
earlier kernel's writes (a residual from three layers back, say).  Work captured from
several streams has forks and joins; their edges are rewritten too: ``griddepcontrol.wait``
waits for every prerequisite grid, so a join waits for all the branches it joins.

The capture and the edge rewrite go through the CUDA driver API (``libcuda``, ctypes):
CuPy's ``Stream.end_capture`` instantiates the graph at once, before its edges could be
changed.
"""

from __future__ import annotations

import ctypes
import functools

from tensorconv import backend, cuda

_CAPTURE_MODE_RELAXED = 2           # CU_STREAM_CAPTURE_MODE_RELAXED
_NODE_TYPE_KERNEL = 0               # CU_GRAPH_NODE_TYPE_KERNEL
_PORT_PROGRAMMATIC = 1              # CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
_DEPENDENCY_PROGRAMMATIC = 1        # CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC


class _EdgeData(ctypes.Structure):  # CUgraphEdgeData
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte),
                ("type", ctypes.c_ubyte), ("reserved", ctypes.c_ubyte * 5)]


class _KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p),
                ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem_bytes", ctypes.c_uint),
                ("kernel_params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


@functools.lru_cache(maxsize=None)
def _driver():
    return ctypes.CDLL("libcuda.so.1")


def _check(name: str, *args) -> None:
    """Call driver function ``name``; raise ``RuntimeError`` naming it on failure."""
    result = getattr(_driver(), name)(*args)
    if result != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorName(result, ctypes.byref(text))
        raise RuntimeError(f"{name} failed: {text.value.decode() if text.value else result}")


def supported() -> bool:
    """Whether the current device honours programmatic edges (compute capability >= 9.0)."""
    return backend.device_facts().compute_capability >= (9, 0)


class CapturedGraph:
    """The work ``fn`` issues on ``stream``, captured once and replayed with :meth:`launch`.

    Parameters
    ----------
    stream : cupy.cuda.Stream
        The stream ``fn`` issues its work on; nothing may allocate during capture.
    fn : callable
        Called once, inside the capture.
    programmatic : bool
        Make every kernel-to-kernel edge whose target waits for prior grids programmatic.

    Attributes
    ----------
    kernels : int
        Kernel nodes in the graph.
    edges : int
        Dependency edges in the graph (one stream's work: nodes - 1; forks add more).
    programmatic_edges : int
        Edges made programmatic (0 unless ``programmatic``).
    """

    def __init__(self, stream, fn, *, programmatic: bool):
        if programmatic and not supported():
            raise ValueError("programmatic=True needs compute capability 9.0 or newer; this "
                             f"device has {backend.device_facts().compute_capability}")
        self._graph = ctypes.c_void_p()
        self._exec = ctypes.c_void_p()
        handle = ctypes.c_void_p(stream.ptr)
        _check("cuStreamBeginCapture_v2", handle, _CAPTURE_MODE_RELAXED)
        try:
            fn()
        finally:
            _check("cuStreamEndCapture", handle, ctypes.byref(self._graph))
        waiting = self._waiting_kernels()
        self.kernels = len(waiting)
        count = ctypes.c_size_t()
        _check("cuGraphGetEdges", self._graph, None, None, ctypes.byref(count))
        self.edges = count.value
        self.programmatic_edges = self._make_programmatic(waiting) if programmatic else 0
        _check("cuGraphInstantiateWithFlags", ctypes.byref(self._exec), self._graph,
               ctypes.c_ulonglong(0))

    def _waiting_kernels(self) -> dict[int, bool]:
        """Kernel node -> whether its kernel waits for prior grids."""
        count = ctypes.c_size_t()
        _check("cuGraphGetNodes", self._graph, None, ctypes.byref(count))
        nodes = (ctypes.c_void_p * count.value)()
        _check("cuGraphGetNodes", self._graph, nodes, ctypes.byref(count))
        waiting = {}
        for node in nodes:
            kind = ctypes.c_int()
            _check("cuGraphNodeGetType", ctypes.c_void_p(node), ctypes.byref(kind))
            if kind.value == _NODE_TYPE_KERNEL:
                params = _KernelNodeParams()
                _check("cuGraphKernelNodeGetParams_v2", ctypes.c_void_p(node),
                       ctypes.byref(params))
                waiting[node] = cuda.waits_for_prior_grids(params.func or 0)
        return waiting

    def _make_programmatic(self, waiting: dict[int, bool]) -> int:
        count = ctypes.c_size_t()
        _check("cuGraphGetEdges", self._graph, None, None, ctypes.byref(count))
        if count.value == 0:    # one node: nothing to rewrite (the driver refuses empty arrays)
            return 0
        src = (ctypes.c_void_p * count.value)()
        dst = (ctypes.c_void_p * count.value)()
        _check("cuGraphGetEdges", self._graph, src, dst, ctypes.byref(count))
        edge = _EdgeData(from_port=_PORT_PROGRAMMATIC, type=_DEPENDENCY_PROGRAMMATIC)
        made = 0
        for a, b in zip(src, dst):
            if a in waiting and waiting.get(b, False):
                pa, pb = ctypes.c_void_p(a), ctypes.c_void_p(b)
                _check("cuGraphRemoveDependencies", self._graph, ctypes.byref(pa),
                       ctypes.byref(pb), ctypes.c_size_t(1))
                _check("cuGraphAddDependencies_v2", self._graph, ctypes.byref(pa),
                       ctypes.byref(pb), ctypes.byref(edge), ctypes.c_size_t(1))
                made += 1
        return made

    def launch(self, stream) -> None:
        """Replay the graph on ``stream``."""
        _check("cuGraphLaunch", self._exec, ctypes.c_void_p(stream.ptr))

    def __del__(self):
        if getattr(self, "_exec", None):
            _driver().cuGraphExecDestroy(self._exec)
        if getattr(self, "_graph", None):
            _driver().cuGraphDestroy(self._graph)
