"""Data parallelism on real GPUs through NCCL (issue 27), one process per GPU through the
launcher (:mod:`training.launch`): two and four ranks train the same steps as one GPU at
the same global batch and end with the same losses and weights within float
reduction-order tolerance, eagerly and with the step (all-reduces included) replayed as
CUDA graphs; and ``tensorconv run train --gpus 2`` trains a batch-norm model whose
checkpoint one GPU resumes.  Needs two GPUs (four for the four-rank cases)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from training.launch import launch

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _gpus(monkeypatch, n):
    import cupy as cp

    if cp.cuda.runtime.getDeviceCount() < n:
        pytest.skip(f"needs {n} GPUs (nvidia-h200-x{n} or larger)")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def two_gpus(monkeypatch):
    _gpus(monkeypatch, 2)


def _ranks(tmp_path, gpus, steps, capture, kind="plain"):
    out = tmp_path / f"{gpus}-{capture}-{kind}"
    out.mkdir()
    code = launch([sys.executable, "-m", "tests.gpu.dp_rank", str(out), str(steps), capture,
                   kind], gpus)
    assert code == 0, f"{gpus} rank(s) failed with exit status {code}"
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(gpus)]


def _state(run):
    return {k[2:]: v for k, v in run.items() if k.startswith("s:")}


@pytest.mark.parametrize("gpus", [2, 4])
@pytest.mark.parametrize("capture", ["off", "on"])
@pytest.mark.parametrize("kind", ["plain", "syncbn"])
def test_several_gpus_train_like_one_at_the_same_global_batch(tmp_path, monkeypatch, gpus,
                                                                capture, kind):
    """Without batch norm, or with it synchronised over the ranks."""
    from tests.gpu.dp_rank import model

    _gpus(monkeypatch, gpus)
    steps = 5
    one = _ranks(tmp_path, 1, steps, capture, kind)[0]
    many = _ranks(tmp_path, gpus, steps, capture, kind)
    if capture == "on":            # the first step runs eagerly and is captured
        assert int(one["replays"]) == steps - 1
        assert all(int(r["replays"]) == steps - 1 for r in many)
    states, ref = [_state(r) for r in many], _state(one)
    a = states[0]
    assert a.keys() == ref.keys() and any("running_var" in k for k in a) == (kind == "syncbn")
    for k in a:
        for other in states[1:]:
            np.testing.assert_array_equal(a[k], other[k], err_msg=k)   # one model everywhere
        np.testing.assert_allclose(a[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)
    first = next(iter(model(kind).state_dict().values()))
    assert not np.allclose(next(iter(a.values())), first)       # it trained
    np.testing.assert_allclose(sum(r["losses"] for r in many) / gpus, one["losses"],
                               rtol=1e-4)


def test_the_train_command_on_two_gpus_writes_a_checkpoint_one_gpu_resumes(tmp_path, two_gpus):
    from experiments.train import main
    from training import checkpoint as ckpt
    from training.train import TrainConfig, train

    path = tmp_path / "dp.ckpt.npz"
    args = ["--model", "small_cnn", "--dataset", "synthetic", "--epochs", "2", "--batch-size",
            "64", "--train-limit", "1024", "--out", str(tmp_path), "--checkpoint", str(path),
            "--stop-after", "1"]
    assert main(args + ["--gpus", "2"]) == 0
    _, _, meta = ckpt.load(path)
    assert meta["epoch"] == 1 and meta["history"][0]["step"] == "captured"
    cfg = TrainConfig(**meta["config"])
    result = train(cfg, path, progress=False)          # the second epoch on one GPU
    assert [h["epoch"] for h in result.history] == [1, 2]
    assert np.isfinite(result.history[-1]["test_loss"])
