"""Data-parallel training on the CPU (issue 27): the launcher (processes, environment,
stopping all when one fails) and the training loop's ranks as threads over a fake group
(same weights on every rank, one checkpoint, resumable on another number of ranks)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from experiments.train import _without_gpus
from tensorconv.distributed import FakeGroup
from training import checkpoint as ckpt
from training.launch import devices, launch
from training.parallel import Parallel
from training.train import TrainConfig, train


def _cfg(**kw):
    base = dict(model="small_cnn", dataset="synthetic", epochs=2, batch_size=32, lr=0.05,
                train_limit=128, test_limit=64, pad_to=8, device="cpu", warmup_epochs=0)
    base.update(kw)
    return TrainConfig(**base)


def test_each_rank_gets_its_environment_and_one_device(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    code = ("import os, pathlib; e = os.environ; "
            "pathlib.Path(r'%s', e['TENSORCONV_RANK']).write_text("
            "','.join([e['TENSORCONV_WORLD_SIZE'], e['CUDA_VISIBLE_DEVICES'], "
            "e['NCCL_NVLS_ENABLE'], e['TENSORCONV_NCCL_ID']]))" % tmp_path)
    assert launch([sys.executable, "-c", code], 2) == 0
    got = {r: (tmp_path / str(r)).read_text().split(",") for r in (0, 1)}
    assert [got[r][:3] for r in (0, 1)] == [["2", "4", "0"], ["2", "5", "0"]]
    assert got[0][3] == got[1][3] and got[0][3].endswith("nccl.id")
    assert devices(2, None) == ["0", "1"]
    with pytest.raises(ValueError, match="lists 1"):
        devices(2, "3")


def test_one_failing_rank_stops_the_others(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)    # two ranks, whatever it says
    code = "import os, sys, time; r = int(os.environ['TENSORCONV_RANK']); " \
           "sys.exit(3) if r == 1 else time.sleep(60)"
    start = time.monotonic()
    assert launch([sys.executable, "-c", code], 2) == 3
    assert time.monotonic() - start < 30               # rank 0 was stopped, not awaited


def test_one_rank_from_the_environment_needs_no_nccl(monkeypatch, tmp_path):
    from tensorconv.distributed.comm import SoloCommunicator

    monkeypatch.setenv("TENSORCONV_RANK", "0")
    monkeypatch.setenv("TENSORCONV_WORLD_SIZE", "1")
    monkeypatch.setenv("TENSORCONV_NCCL_ID", str(tmp_path / "id"))
    par = Parallel.from_env()
    assert par.main and par.size == 1 and isinstance(par.comm, SoloCommunicator)
    monkeypatch.delenv("TENSORCONV_NCCL_ID")
    with pytest.raises(RuntimeError, match="TENSORCONV_NCCL_ID is not"):
        Parallel.from_env()
    for var in ("TENSORCONV_RANK", "TENSORCONV_WORLD_SIZE"):
        monkeypatch.delenv(var)
    assert Parallel.from_env() is None


def test_ranks_are_read_from_our_launcher_and_from_mpirun():
    from training.parallel import local_device, ranks_from_env

    assert ranks_from_env({}) is None
    assert ranks_from_env({"TENSORCONV_RANK": "1", "TENSORCONV_WORLD_SIZE": "2"}) == \
        (1, 2, None, "TENSORCONV_RANK")
    ompi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    assert ranks_from_env(ompi) == (5, 8, 1, "OMPI_COMM_WORLD_RANK")
    assert ranks_from_env({"PMI_RANK": "3", "PMI_SIZE": "4"}) == (3, 4, None, "PMI_RANK")
    with pytest.raises(RuntimeError, match="PMI_SIZE is not"):
        ranks_from_env({"PMI_RANK": "3"})
    # the GPU a rank drives: ours sees one; MPI: its place on the machine, else its rank
    assert local_device(3, None, 1, ours=True) == 0
    assert local_device(5, 1, 4, ours=False) == 1
    assert local_device(6, None, 4, ours=False) == 2


def test_under_mpirun_the_nccl_id_travels_through_mpi4py_or_a_named_file(monkeypatch,
                                                                         tmp_path):
    import types

    from training.parallel import id_exchange

    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert id_exchange("OMPI_COMM_WORLD_RANK", {**env, "TENSORCONV_NCCL_ID": "/x/id"}) == \
        Path("/x/id")
    sent = []

    class World:
        def bcast(self, obj, root):
            sent.append((obj, root))
            return b"rank 0's id"

    mpi = types.ModuleType("mpi4py")
    mpi.MPI = types.SimpleNamespace(COMM_WORLD=World())
    monkeypatch.setitem(sys.modules, "mpi4py", mpi)
    share = id_exchange("OMPI_COMM_WORLD_RANK", env)
    assert share(None) == b"rank 0's id" and sent == [(None, 0)]
    monkeypatch.setitem(sys.modules, "mpi4py", None)          # not installed
    with pytest.raises(RuntimeError, match="pip install mpi4py"):
        id_exchange("OMPI_COMM_WORLD_RANK", env)
    with pytest.raises(RuntimeError, match="TENSORCONV_NCCL_ID is not") as exc:
        id_exchange("TENSORCONV_RANK", {})
    assert "mpi4py" not in str(exc.value)                      # our launcher sets the file


def test_the_file_exchange_hands_rank_0_s_id_to_the_others(tmp_path):
    from tensorconv.distributed.comm import file_exchange

    share = file_exchange(tmp_path / "nccl.id")
    got = []
    reader = threading.Thread(target=lambda: got.append(share(None)))
    reader.start()
    time.sleep(0.1)
    assert share(b"\x07id") == b"\x07id"
    reader.join(timeout=10)
    assert got == [b"\x07id"]


def test_the_ranks_command_drops_gpus():
    assert _without_gpus(["--model", "resnet20", "--gpus", "4", "--quick"]) == \
        ["--model", "resnet20", "--quick"]
    assert _without_gpus(["--gpus=2", "--epochs", "3"]) == ["--epochs", "3"]


@pytest.mark.parametrize("have,argv,said", [
    (0, ["--gpus", "2"], "CuPy sees none here"),
    (2, ["--gpus", "4"], "this machine has 2 GPU(s)"),
    (2, ["--gpus", "2", "--batch-size", "127"], "--batch-size 127 does not split over 2 GPUs")])
def test_the_train_command_refuses_gpus_it_cannot_use_before_starting_a_rank(
        monkeypatch, capsys, have, argv, said):
    import experiments.train as cmd

    started = []
    monkeypatch.setattr(cmd, "launch", lambda *a: started.append(a) or 0)
    monkeypatch.setattr(cmd, "_gpu_count", lambda: have)
    monkeypatch.delenv("TENSORCONV_RANK", raising=False)
    with pytest.raises(SystemExit) as exc:
        cmd.main(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err
    assert started == []


def _threads(size, fn):
    group, errors, out = FakeGroup(size), [], [None] * size

    def body(r):
        try:
            out[r] = fn(Parallel(r, size, group.rank(r)))
        except BaseException as exc:   # noqa: BLE001 - re-raised below
            errors.append(exc)
            group._barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def test_ranks_train_one_model_and_rank_0_alone_writes_a_resumable_checkpoint(tmp_path):
    path = tmp_path / "dp.npz"
    cfg = _cfg()
    results = _threads(2, lambda par: train(cfg, path, stop_after=1, progress=False,
                                            parallel=par))
    for p0, p1 in zip(results[0].model.parameters(), results[1].model.parameters()):
        np.testing.assert_array_equal(p0.data, p1.data)       # one model on every rank
    assert np.isfinite(results[0].history[0]["test_acc"])
    assert np.isnan(results[1].history[0]["test_acc"])         # rank 1 does not evaluate
    state, _, meta = ckpt.load(path)
    assert meta["epoch"] == 1
    for name, p in results[0].model.named_parameters():
        np.testing.assert_array_equal(state[name], p.data)
    # the second epoch on one process, then on four ranks from the same checkpoint
    one = train(cfg, path, progress=False)
    assert [h["epoch"] for h in one.history] == [1, 2]
    more = tmp_path / "dp4.npz"
    _threads(2, lambda par: train(cfg, more, stop_after=1, progress=False, parallel=par))
    four = _threads(4, lambda par: train(cfg, more, progress=False, parallel=par))
    assert [h["epoch"] for h in four[0].history] == [1, 2]


def test_ranks_with_synchronised_batch_norm_train_the_model_one_process_trains(tmp_path):
    cfg = _cfg(epochs=1)
    one = train(cfg, None, progress=False)
    two = _threads(2, lambda par: train(cfg, None, progress=False,
                                        parallel=Parallel(par.rank, par.size, par.comm,
                                                          sync_bn=True)))
    assert any(type(m).__name__ == "BatchNorm2d" for m in one.model.modules())
    state, synced = one.model.state_dict(), two[0].model.state_dict()
    for k in state:
        np.testing.assert_allclose(synced[k], state[k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert two[0].history[0]["train_loss"] == pytest.approx(one.history[0]["train_loss"],
                                                            rel=1e-5)


def test_a_global_batch_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match="does not split over 3 ranks"):
        _threads(3, lambda par: train(_cfg(batch_size=32), None, progress=False,
                                      parallel=par))
