"""Gradient averaging across ranks, overlapped with the backward pass.

:class:`Reducer` hands the backward pass a callback (``loss.backward(on_leaf_done=
reducer.leaf_done)``); as soon as every gradient of a bucket is final, the bucket's
gradients are packed into its flat buffer and all-reduced, while the backward pass goes on
computing earlier layers' gradients.  Buckets go out strictly in order (bucket k only after
k - 1), so every rank issues the same collectives in the same order even when their
backward passes finish gradients in different orders.  :meth:`Reducer.finish` sends what
is left (a parameter that got no gradient counts as zeros, on every rank alike), waits,
and leaves each parameter's ``.grad`` the mean over the ranks: a view of the bucket, which
the optimizer step that follows reads.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.distributed.buckets import DEFAULT_CAP_BYTES, bucket_of, make_buckets


class Reducer:
    """Averages the gradients of ``params`` over the ranks of ``comm``, in buckets.

    Parameters
    ----------
    params : list of Parameter
        Every rank's model's ``parameters()``, in the same order (float32).
    comm : communicator
        :class:`~tensorconv.distributed.comm.NcclCommunicator` or a fake rank.
    cap_bytes : int
        The most bytes a bucket holds (PyTorch DDP's 25 MiB by default).

    Use per step: ``reducer.backward(loss)`` (:meth:`begin`,
    ``loss.backward(on_leaf_done=reducer.leaf_done)``, :meth:`finish`), then the optimizer
    step.
    """

    def __init__(self, params, comm, cap_bytes: int = DEFAULT_CAP_BYTES):
        self.params = list(params)
        if not self.params:
            raise ValueError("params is empty: nothing to reduce")
        bad = [i for i, p in enumerate(self.params) if p.data.dtype != np.float32]
        if bad:
            raise TypeError(f"the reducer averages float32 gradients; parameter {bad[0]} is "
                            f"{self.params[bad[0]].data.dtype}")
        self.comm = comm
        self.buckets = make_buckets([p.data.size for p in self.params], 4, cap_bytes)
        owner = bucket_of(self.buckets)
        self._index = {id(p): i for i, p in enumerate(self.params)}
        self._owner = [int(owner[i]) for i in range(len(self.params))]
        xp = backend.array_module(self.params[0].data)
        self._flat = [xp.zeros(b.size, np.float32) for b in self.buckets]
        self._where = {}
        for b in self.buckets:
            for i, off in zip(b.params, b.offsets):
                self._where[i] = (b.index, off)
        self.begin()

    def backward(self, loss) -> None:
        """``loss.backward()`` with every gradient averaged over the ranks, each bucket
        all-reduced as soon as the pass has finished it."""
        self.begin()
        loss.backward(on_leaf_done=self.leaf_done)
        self.finish()

    def begin(self) -> None:
        """Before a step's backward pass: no gradient done, no bucket sent."""
        self._missing = [len(b.params) for b in self.buckets]
        self._done = [False] * len(self.params)
        self._next = 0
        self.launched_at: list = []      # leaves done when each bucket went out (for tests)
        self._leaves_done = 0

    def leaf_done(self, leaf) -> None:
        """The backward pass's callback: ``leaf``'s gradient is final."""
        i = self._index.get(id(leaf))
        if i is None or self._done[i]:
            return                       # not one of ours (an input), or said twice
        self._done[i] = True
        self._leaves_done += 1
        self._missing[self._owner[i]] -= 1
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._send(self._next)

    def _send(self, k: int) -> None:
        b, flat = self.buckets[k], self._flat[k]
        for i, off in zip(b.params, b.offsets):
            g = self.params[i].grad
            n = self.params[i].data.size
            if g is None:
                flat[off:off + n] = 0
            else:
                flat[off:off + n] = g.reshape(-1)
        self.comm.all_reduce(flat)
        self.launched_at.append(self._leaves_done)
        self._next = k + 1

    def finish(self) -> None:
        """After the backward pass: send the buckets still unsent, wait for all, and leave
        every parameter's ``.grad`` the mean over the ranks."""
        while self._next < len(self.buckets):
            self._send(self._next)
        self.comm.wait()
        scale = np.float32(1.0 / self.comm.size)
        for flat in self._flat:
            flat *= scale
        for i, p in enumerate(self.params):
            k, off = self._where[i]
            p.grad = self._flat[k][off:off + p.data.size].reshape(p.data.shape)
