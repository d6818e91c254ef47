"""Communicators: what the :class:`~tensorconv.distributed.reducer.Reducer` sends through.

A communicator has a ``rank`` and a ``size`` and sums a float32 buffer over the ranks in
place (``all_reduce``), each rank calling its collectives in the same order; ``wait()``
returns once every collective launched so far is done (for NCCL: the caller's stream then
waits on the communication stream, nothing blocks the host).

:class:`NcclCommunicator` drives one GPU per process through CuPy's NCCL binding on its
own stream, so a bucket's all-reduce runs while the backward pass computes the next
gradients; the NCCL unique id reaches the other ranks through a file rank 0 writes
(:func:`file_exchange`) or, under ``mpirun``, through MPI (:func:`mpi_exchange`).
:class:`FakeGroup` runs ranks as threads of one process over NumPy or CuPy buffers (tests);
:class:`SoloCommunicator` is the one rank of a one-process run.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from tensorconv import backend, files
from tensorconv.checks import check_int


def write_unique_id(path, uid) -> None:
    """Rank 0: store the NCCL unique id (bytes, or the tuple of ints older CuPy returns)
    in ``path``, atomically, for the other ranks."""
    payload = {"hex": bytes(uid).hex()} if isinstance(uid, (bytes, bytearray)) else \
        {"ints": [int(v) for v in uid]}
    files.atomic_write(path, json.dumps(payload))


def read_unique_id(path, timeout: float = 120.0):
    """The other ranks: wait for rank 0's unique id in ``path`` (``TimeoutError`` after
    ``timeout`` seconds: rank 0 died or never started)."""
    deadline = time.monotonic() + timeout
    path = Path(path)
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no NCCL unique id appeared in {path} within {timeout:.0f} s "
                               "(rank 0 failed or was not started)")
        time.sleep(0.05)
    payload = json.loads(path.read_text())
    return bytes.fromhex(payload["hex"]) if "hex" in payload else tuple(payload["ints"])


def file_exchange(path):
    """The NCCL unique id shared through ``path``: rank 0 writes it, the others wait for it
    (a shared file system across machines).  Returns ``share(uid) -> uid``: rank 0 passes
    its id, the others None."""
    path = Path(path)

    def share(uid):
        if uid is not None:
            write_unique_id(path, uid)
            return uid
        return read_unique_id(path)

    return share


def mpi_exchange():
    """The NCCL unique id broadcast from rank 0 through MPI (``mpi4py``; ranks started by
    ``mpirun``): no shared file needed.  Returns ``share(uid) -> uid`` as
    :func:`file_exchange`; ``ImportError`` without mpi4py."""
    from mpi4py import MPI

    return lambda uid: MPI.COMM_WORLD.bcast(uid, root=0)


class NcclCommunicator:
    """One GPU of ``size``, as ``rank``, through NCCL on a stream of its own.

    Parameters
    ----------
    rank, size : int
    exchange : path or callable
        How the NCCL unique id reaches every rank: a path where rank 0 writes it and the
        others read it (:func:`file_exchange`), or a ``share(uid) -> uid`` function such as
        :func:`mpi_exchange`.  The current device is this rank's GPU.

    Notes
    -----
    A CUDA graph that captured this communicator's collectives (a
    :class:`~tensorconv.nn.captured.CapturedStep` of a data-parallel run) must be destroyed
    before the communicator: NCCL's destroy waits for the resources such a graph holds, so
    the other order never returns.  :meth:`CapturedStep.close
    <tensorconv.nn.captured.CapturedStep.close>` (also run when the step is collected) does
    that; :meth:`close` then ends the communicator.
    """

    def __init__(self, rank: int, size: int, exchange):
        import cupy
        from cupy.cuda import nccl

        self.size = check_int(size, "size", minimum=1)
        self.rank = check_int(rank, "rank", minimum=0)
        if rank >= size:
            raise ValueError(f"rank {rank} is not below size {size}")
        if os.environ.get("NCCL_NVLS_ENABLE") != "0":
            os.environ["NCCL_NVLS_ENABLE"] = "0"   # NVLink multicast stays off (issue 27)
        share = exchange if callable(exchange) else file_exchange(exchange)
        uid = share(nccl.get_unique_id() if rank == 0 else None)
        self._nccl = nccl
        self.comm = nccl.NcclCommunicator(size, uid, rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._cupy = cupy

    def all_reduce(self, buf) -> None:
        """Sum ``buf`` (float32 or float64, contiguous, on this GPU) over the ranks, in
        place, after everything queued so far on the current stream."""
        cp = self._cupy
        kinds = {np.dtype(np.float32): self._nccl.NCCL_FLOAT32,
                 np.dtype(np.float64): self._nccl.NCCL_FLOAT64}
        if buf.dtype not in kinds or not buf.flags.c_contiguous:
            raise TypeError(f"all_reduce takes contiguous float32 or float64, got {buf.dtype}"
                            f"{'' if buf.flags.c_contiguous else ' (not contiguous)'}")
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(cp.cuda.get_current_stream())
        self.stream.wait_event(ready)
        self.comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, kinds[buf.dtype],
                            self._nccl.NCCL_SUM, self.stream.ptr)

    def broadcast(self, buf, root: int = 0) -> None:
        """``buf`` on every rank becomes rank ``root``'s (float32, in place)."""
        cp = self._cupy
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(cp.cuda.get_current_stream())
        self.stream.wait_event(ready)
        self.comm.broadcast(buf.data.ptr, buf.data.ptr, buf.size, self._nccl.NCCL_FLOAT32,
                            root, self.stream.ptr)

    def wait(self) -> None:
        """The current stream waits for every collective launched so far."""
        cp = self._cupy
        done = cp.cuda.Event(disable_timing=True)
        done.record(self.stream)
        cp.cuda.get_current_stream().wait_event(done)

    def close(self) -> None:
        """Finish the collectives launched so far and destroy the NCCL communicator (once;
        the graphs that captured its collectives must be gone, see the class notes)."""
        if self.comm is not None:
            self.stream.synchronize()
            self.comm.destroy()
            self.comm = None


class SoloCommunicator:
    """The one rank of a one-process run: every collective is the identity (no NCCL
    needed)."""

    rank, size = 0, 1

    def all_reduce(self, buf) -> None:
        return None

    def broadcast(self, buf, root: int = 0) -> None:
        if root != 0:
            raise ValueError(f"root must be 0 in a one-rank run, got {root}")

    def wait(self) -> None:
        return None


class FakeGroup:
    """``size`` ranks run as threads of this process; :meth:`rank` gives each its
    communicator.  Collectives meet at a barrier, are summed in rank order and logged
    (``log``: ``(rank, call number, elements)`` in launch order)."""

    def __init__(self, size: int):
        self.size = check_int(size, "size", minimum=1)
        self._barrier = threading.Barrier(size)
        self._slots: dict = {}
        self._lock = threading.Lock()
        self.log: list = []

    def rank(self, rank: int) -> "FakeCommunicator":
        return FakeCommunicator(self, check_int(rank, "rank", minimum=0))

    def _collective(self, rank: int, call: int, buf, combine) -> None:
        with self._lock:
            self.log.append((rank, call, int(buf.size)))
            self._slots[rank, call] = backend.to_host(buf).copy()
        self._barrier.wait()
        parts = [self._slots[r, call] for r in range(self.size)]
        result = combine(parts)
        self._barrier.wait()
        with self._lock:
            self._slots.pop((rank, call), None)
        buf[...] = backend.array_module(buf).asarray(result)


class FakeCommunicator:
    """One rank of a :class:`FakeGroup` (synchronous collectives)."""

    def __init__(self, group: FakeGroup, rank: int):
        if rank >= group.size:
            raise ValueError(f"rank {rank} is not below size {group.size}")
        self.group, self.rank, self.size, self.calls = group, rank, group.size, 0

    def all_reduce(self, buf) -> None:
        def total(parts):
            out = parts[0].copy()
            for p in parts[1:]:
                out += p
            return out

        self.calls += 1
        self.group._collective(self.rank, self.calls, buf, total)

    def broadcast(self, buf, root: int = 0) -> None:
        self.calls += 1
        self.group._collective(self.rank, self.calls, buf, lambda parts: parts[root])

    def wait(self) -> None:
        return None
