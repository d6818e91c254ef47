"""Data-parallel training (issue 27): one process per GPU, gradients averaged through NCCL in
buckets that are sent while the backward pass still runs (the design of PyTorch's DDP).

* :mod:`~tensorconv.distributed.buckets` — parameters packed into buckets, in reverse order;
* :mod:`~tensorconv.distributed.comm` — the communicators: NCCL (one GPU per process, the
  unique id shared through a file) and an in-process fake for tests;
* :mod:`~tensorconv.distributed.reducer` — :class:`Reducer`, which all-reduces a bucket as
  soon as the backward pass has finished every gradient in it.
"""

from tensorconv.distributed.buckets import DEFAULT_CAP_BYTES, Bucket, make_buckets
from tensorconv.distributed.comm import FakeGroup, NcclCommunicator
from tensorconv.distributed.reducer import Reducer

__all__ = ["DEFAULT_CAP_BYTES", "Bucket", "FakeGroup", "NcclCommunicator", "Reducer",
           "make_buckets"]
