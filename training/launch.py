"""The data-parallel launcher: ``tensorconv run train --gpus N ...`` starts N copies of the
command, one per GPU, and stops them all when one fails.

Each process gets its rank, the world size and the path where rank 0 writes the NCCL unique
id (``TENSORCONV_RANK``, ``TENSORCONV_WORLD_SIZE``, ``TENSORCONV_NCCL_ID``), one GPU
(``CUDA_VISIBLE_DEVICES``: the parent's r-th visible device, else r) and
``NCCL_NVLS_ENABLE=0`` (NVLink multicast stays off on these machines).  Several nodes: run
the command under ``mpirun`` instead (``-x NCCL_NVLS_ENABLE=0`` where that matters);
:meth:`training.parallel.Parallel.from_env` reads Open MPI's, MPICH's and Intel MPI's rank
variables, drives the GPU of the rank's place on its machine, and gets the NCCL id through
mpi4py's broadcast, or, without mpi4py, from ``TENSORCONV_NCCL_ID``: a fresh path (no
earlier run's file: the other ranks read the first id they find) on a shared file system.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tensorconv.checks import check_int
from training.parallel import ENV_ID, ENV_RANK, ENV_SIZE

GRACE_SECONDS = 10.0     # after SIGTERM, before SIGKILL


def devices(gpus: int, visible: str | None) -> list[str]:
    """The device each rank sees: the r-th of the parent's ``CUDA_VISIBLE_DEVICES``, or r."""
    if visible is None or not visible.strip():
        return [str(r) for r in range(gpus)]
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if len(ids) < gpus:
        raise ValueError(f"--gpus {gpus}, but CUDA_VISIBLE_DEVICES lists {len(ids)}: {visible}")
    return ids[:gpus]


def launch(command: list, gpus: int, *, poll: float = 0.1) -> int:
    """Run ``gpus`` copies of ``command`` (an argv list) as ranks 0..gpus-1; return 0 when
    every one succeeds, else the first failure's exit status (the others are stopped:
    SIGTERM, then SIGKILL after :data:`GRACE_SECONDS`)."""
    check_int(gpus, "gpus", minimum=1)
    if not command:
        raise ValueError("command is empty")
    ids = devices(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    tmp = Path(tempfile.mkdtemp(prefix="tensorconv-nccl-"))
    procs = []
    try:
        for rank in range(gpus):
            env = dict(os.environ, NCCL_NVLS_ENABLE="0", CUDA_VISIBLE_DEVICES=ids[rank])
            env.update({ENV_RANK: str(rank), ENV_SIZE: str(gpus), ENV_ID: str(tmp / "nccl.id")})
            procs.append(subprocess.Popen(command, env=env))
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                _stop(procs)
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            time.sleep(poll)
    except BaseException:
        _stop(procs)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _stop(procs) -> None:
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
