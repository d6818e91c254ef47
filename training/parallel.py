"""One rank of data-parallel training (issue 27): what ``tensorconv run train --gpus N``
adds to the training loop of :func:`training.train.train`.

Every rank draws the same permutation and augmentation (one seed, one generator state, the
same checkpoint), augments the whole global batch and keeps its ``batch_size / N`` rows, so
the global batch is the one a single GPU would see.  Gradients are averaged by a
:class:`~tensorconv.distributed.Reducer` during the backward pass; batch-norm statistics stay
per rank (as in PyTorch's DDP) unless ``sync_bn``: then every batch-norm layer normalises
with the statistics of the whole global batch, forward and backward (as PyTorch's
``SyncBatchNorm``), and the ranks train as one GPU would, up to rounding.  Rank 0
evaluates, prints and writes the checkpoint (atomically); every rank resumes from it,
whatever the number of ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_int
from tensorconv.distributed import NcclCommunicator, Reducer
from tensorconv.distributed.comm import SoloCommunicator, mpi_exchange

# What the launcher sets in each process it starts.
ENV_RANK, ENV_SIZE, ENV_ID = "TENSORCONV_RANK", "TENSORCONV_WORLD_SIZE", "TENSORCONV_NCCL_ID"
# Each starter's (rank, size, rank on this machine) variables: ours (one visible GPU per
# process, so no local rank), Open MPI's, MPICH's and Intel MPI's.
STARTERS = ((ENV_RANK, ENV_SIZE, None),
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
            ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"))


def ranks_from_env(environ) -> tuple[int, int, int | None, str] | None:
    """``(rank, size, local rank or None, the rank variable)`` of the starter that set
    ``environ``, or None for a process nobody started as a rank."""
    for rank_var, size_var, local_var in STARTERS:
        if rank_var in environ:
            if size_var not in environ:
                raise RuntimeError(f"{rank_var} is set but {size_var} is not")
            local = environ.get(local_var) if local_var else None
            return (int(environ[rank_var]), int(environ[size_var]),
                    None if local is None else int(local), rank_var)
    return None


def local_device(rank: int, local: int | None, devices: int, ours: bool) -> int:
    """The GPU (of the ``devices`` this process sees) a rank drives: the one our launcher
    left visible; under MPI the rank's place on its machine, else its rank, modulo the
    devices."""
    if ours:
        return 0
    return (local if local is not None else rank) % max(1, devices)


def id_exchange(rank_var: str, environ):
    """How this rank gets the NCCL unique id: the file ``TENSORCONV_NCCL_ID`` names, else
    (under MPI) an MPI broadcast through mpi4py."""
    if ENV_ID in environ:
        return Path(environ[ENV_ID])
    if rank_var != ENV_RANK:
        try:
            return mpi_exchange()
        except ImportError:
            pass
    raise RuntimeError(f"{rank_var} is set but {ENV_ID} is not: give every rank the path (on "
                       "a shared file system) where rank 0 writes the NCCL id"
                       + ("" if rank_var == ENV_RANK else ", or pip install mpi4py to "
                          "broadcast it through MPI"))


@dataclass
class Parallel:
    """This process's place among ``size`` ranks and its communicator."""

    rank: int
    size: int
    comm: object
    sync_bn: bool = False

    def __post_init__(self):
        check_int(self.size, "size", minimum=1)
        check_int(self.rank, "rank", minimum=0)
        if self.rank >= self.size:
            raise ValueError(f"rank {self.rank} is not below size {self.size}")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, sync_bn: bool = False) -> "Parallel | None":
        """The rank the launcher (or ``mpirun``: Open MPI's, MPICH's or Intel MPI's
        variables) started, NCCL on this rank's GPU (made the current device); None in a
        process started otherwise."""
        found = ranks_from_env(os.environ)
        if found is None:
            return None
        rank, size, local, rank_var = found
        exchange = id_exchange(rank_var, os.environ)
        if size == 1:
            return cls(rank, size, SoloCommunicator(), sync_bn)   # nothing to exchange
        import cupy

        cupy.cuda.Device(local_device(rank, local, cupy.cuda.runtime.getDeviceCount(),
                                      rank_var == ENV_RANK)).use()
        return cls(rank, size, NcclCommunicator(rank, size, exchange), sync_bn)

    def close(self) -> None:
        """End the communicator (after the captured steps that used it are gone)."""
        close = getattr(self.comm, "close", None)
        if close is not None:
            close()

    def sync_batch_norm(self, model) -> int:
        """Synchronise every batch-norm layer of ``model`` over the ranks (its batch
        statistics those of all the ranks' images); return how many there are."""
        from tensorconv.nn.layers import BatchNorm2d

        layers = [m for m in model.modules() if isinstance(m, BatchNorm2d)]
        for m in layers:
            m.group = self.comm if self.size > 1 else None
        return len(layers)

    def shard_dropout(self, model) -> int:
        """Let every dropout layer of ``model`` draw this rank's rows' masks of the global
        batch (those the one-GPU run draws for them); return how many there are."""
        from tensorconv.nn.layers import Dropout

        layers = [m for m in model.modules() if isinstance(m, Dropout)]
        for m in layers:
            m.shard = (self.rank, self.size)
        return len(layers)

    def check_batch(self, batch_size: int) -> int:
        """Rows of the global batch this rank trains on."""
        if batch_size % self.size:
            raise ValueError(f"batch_size {batch_size} does not split over {self.size} ranks")
        return batch_size // self.size

    def shard(self, rows):
        """This rank's rows of a global batch."""
        n = self.check_batch(len(rows))
        return rows[self.rank * n:(self.rank + 1) * n]

    def reducer(self, model) -> Reducer:
        return Reducer(model.parameters(), self.comm)

    def broadcast_model(self, model) -> None:
        """Every float32 parameter and buffer becomes rank 0's (a fresh start or a resume
        begins from one model everywhere)."""
        for p in model.parameters():
            self.comm.broadcast(p.data, 0)
        for _, b in model.named_buffers():
            if b.dtype == np.float32 and b.flags.c_contiguous:
                self.comm.broadcast(b, 0)
        self.comm.wait()

    def end_epoch(self, model, loss_mean: float, correct: int) -> tuple[float, int]:
        """The epoch's training loss (mean over the ranks' equal shares) and correct count
        (summed)."""
        xp = model.xp
        totals = xp.asarray([loss_mean, float(correct)], dtype=np.float32)
        self.comm.all_reduce(totals)
        self.comm.wait()
        loss_sum, right = backend.to_host(totals)
        return float(loss_sum) / self.size, int(round(float(right)))
