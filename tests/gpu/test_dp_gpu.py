"""Data parallelism on real GPUs through NCCL (issue 27), one process per GPU through the
launcher (:mod:`training.launch`): two ranks train the same steps as one GPU at the same
global batch and end with the same losses and weights within float reduction-order
tolerance, eagerly and with the step (all-reduces included) replayed as CUDA graphs; and
``tensorconv run train --gpus 2`` trains a batch-norm model whose checkpoint one GPU
resumes.  Needs two GPUs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from training.launch import launch

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_gpus(monkeypatch):
    import cupy as cp

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs (nvidia-h200-x2 or larger)")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _ranks(tmp_path, gpus, steps, capture, kind="plain"):
    out = tmp_path / f"{gpus}-{capture}-{kind}"
    out.mkdir()
    code = launch([sys.executable, "-m", "tests.gpu.dp_rank", str(out), str(steps), capture,
                   kind], gpus)
    assert code == 0, f"{gpus} rank(s) failed with exit status {code}"
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(gpus)]


def _state(run):
    return {k[2:]: v for k, v in run.items() if k.startswith("s:")}


@pytest.mark.parametrize("capture", ["off", "on"])
@pytest.mark.parametrize("kind", ["plain", "syncbn"])
def test_two_gpus_train_like_one_at_the_same_global_batch(tmp_path, two_gpus, capture, kind):
    """Without batch norm, or with it synchronised over the ranks."""
    from tests.gpu.dp_rank import model

    steps = 5
    one = _ranks(tmp_path, 1, steps, capture, kind)[0]
    two = _ranks(tmp_path, 2, steps, capture, kind)
    if capture == "on":            # the first step runs eagerly and is captured
        assert int(one["replays"]) == int(two[0]["replays"]) == steps - 1
    a, b, ref = _state(two[0]), _state(two[1]), _state(one)
    assert a.keys() == ref.keys() and any("running_var" in k for k in a) == (kind == "syncbn")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)   # one model on both ranks
        np.testing.assert_allclose(a[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)
    first = next(iter(model(kind).state_dict().values()))
    assert not np.allclose(next(iter(a.values())), first)       # it trained
    np.testing.assert_allclose((two[0]["losses"] + two[1]["losses"]) / 2, one["losses"],
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
