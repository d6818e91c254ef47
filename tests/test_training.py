"""The training loop: exact resume, atomic checkpoints, clear failures."""

from __future__ import annotations

import numpy as np
import pytest

from training import checkpoint as ckpt
from training import train as train_mod
from training.train import TrainConfig, augment_batch, train


def _cfg(**kw):
    base = dict(model="small_cnn", dataset="synthetic", epochs=2, batch_size=32, lr=0.05,
                train_limit=128, test_limit=64, pad_to=8, device="cpu", warmup_epochs=0)
    base.update(kw)
    return TrainConfig(**base)


def test_resume_is_bit_identical(tmp_path):
    full = train(_cfg(), tmp_path / "full.npz", progress=False)
    part = train(_cfg(), tmp_path / "part.npz", stop_after=1, progress=False)  # "killed" after 1
    assert not part.finished and len(part.history) == 1
    resumed = train(_cfg(), tmp_path / "part.npz", progress=False)
    assert resumed.finished
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert [h["test_loss"] for h in full.history] == [h["test_loss"] for h in resumed.history]


def test_training_learns_the_synthetic_set(tmp_path):
    result = train(_cfg(epochs=4, train_limit=256, augment=False), progress=False)
    assert result.history[-1]["test_acc"] > 0.9


def test_checkpoint_from_another_model_is_refused_and_kept(tmp_path):
    path = tmp_path / "run.npz"
    train(_cfg(epochs=1), path, progress=False)
    before = path.read_bytes()
    with pytest.raises(ckpt.CheckpointMismatchError, match="small_cnn"):
        train(_cfg(model="resnet20"), path, progress=False)
    with pytest.raises(ckpt.CheckpointMismatchError, match="batch_size"):
        train(_cfg(batch_size=16), path, progress=False)
    assert path.read_bytes() == before


def test_nan_loss_stops_with_the_step(tmp_path, monkeypatch):
    real = train_mod.load_data

    def poisoned(cfg):
        tr, te = real(cfg)
        tr.images[:] = np.nan  # every batch's loss is NaN: the first step must be named
        return tr, te

    monkeypatch.setattr(train_mod, "load_data", poisoned)
    path = tmp_path / "c.npz"
    with pytest.raises(FloatingPointError, match=r"loss became nan at epoch 1, step 1 "):
        train(_cfg(epochs=1), path, progress=False, log_every=3)
    assert not path.exists()


def test_labels_out_of_range_are_refused(monkeypatch):
    real = train_mod.load_data

    def bad_labels(cfg):
        tr, te = real(cfg)
        tr.labels[3] = 99
        return tr, te

    monkeypatch.setattr(train_mod, "load_data", bad_labels)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 4\)"):
        train(_cfg(), progress=False)


def test_interrupted_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    train(_cfg(epochs=1), path, progress=False)
    before = path.read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(epochs=2), path, progress=False)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]  # no temporary left behind


def test_bad_config():
    with pytest.raises(ValueError, match="dataset"):
        train(_cfg(dataset="mnist"), progress=False)
    with pytest.raises(ValueError, match="device"):
        train(_cfg(device="tpu"), progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        train(_cfg(batch_size=4096), progress=False)


def test_augment_batch_crops_and_flips(rng):
    x = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
    y = augment_batch(x, np.random.default_rng(0), fill=-9.0)
    assert y.shape == x.shape and y.flags.c_contiguous
    # every output is a shifted (maybe mirrored) window of the padded input
    pad = np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)), constant_values=-9.0)
    for i in range(16):
        hits = [np.array_equal(y[i, 0], cand[oy:oy + 8, ox:ox + 8])
                for cand in (pad[i, 0], pad[i, 0][:, ::-1]) for oy in range(9) for ox in range(9)]
        assert any(hits)


# ---- ADMM towards Tucker ranks, decomposition, fine-tuning (TDC's Algorithm 1)
ADMM_RANKS = {"features.4": (8, 8), "features.8": (8, 16)}


def test_admm_closes_the_gap_and_resumes_exactly(tmp_path):
    base = train(_cfg(epochs=1), tmp_path / "base.npz", progress=False)
    assert base.finished
    cfg = _cfg(epochs=3, train_limit=512, init_from=str(tmp_path / "base.npz"),
               admm_ranks=ADMM_RANKS, admm_rho=1.0, admm_rho_growth=2.0)
    full = train(cfg, tmp_path / "admm.npz", progress=False)
    gaps = [h["admm_gap"] for h in full.history]
    assert gaps[-1] < gaps[0]
    part = train(cfg, tmp_path / "admm2.npz", stop_after=2, progress=False)
    resumed = train(cfg, tmp_path / "admm2.npz", progress=False)
    assert part.history[:2] == resumed.history[:2]
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_decompose_then_finetune_and_direct_tucker(tmp_path):
    from tensorconv.nn.tucker import TuckerConv2d

    base = train(_cfg(epochs=4, augment=False, train_limit=256), tmp_path / "base.npz",
                 progress=False)
    full_ranks = {"features.4": (16, 32), "features.8": (32, 64)}  # exact decomposition
    ft = train(_cfg(epochs=1, augment=False, train_limit=256, lr=1e-6, warmup_epochs=0,
                    init_from=str(tmp_path / "base.npz"), tucker_ranks=full_ranks),
               progress=False)
    assert isinstance(ft.model.features[4], TuckerConv2d)
    assert abs(ft.history[-1]["test_acc"] - base.history[-1]["test_acc"]) <= 0.02
    direct = train(_cfg(epochs=1, tucker_ranks=ADMM_RANKS, tucker_init="random"), progress=False)
    assert direct.model.features[8].ranks == (8, 16)


def test_init_from_another_model_is_refused(tmp_path):
    train(_cfg(epochs=1), tmp_path / "base.npz", progress=False)
    with pytest.raises(ckpt.CheckpointMismatchError, match="init_from"):
        train(_cfg(model="resnet20", init_from=str(tmp_path / "base.npz")), progress=False)
    with pytest.raises(ValueError, match="ADMM ranks name"):
        train(_cfg(admm_ranks={"features.99": (2, 2)}), progress=False)


def test_cp_finetune_from_a_dense_checkpoint_resumes_exactly(tmp_path):
    from tensorconv.nn.cp import CPConv2d

    train(_cfg(epochs=1, augment=False), tmp_path / "base.npz", progress=False)
    cfg = _cfg(epochs=2, lr=0.01, init_from=str(tmp_path / "base.npz"), cp_rank=3)
    full = train(cfg, tmp_path / "full.npz", progress=False)
    assert sum(isinstance(m, CPConv2d) for _, m in full.model.named_modules()) >= 2
    train(cfg, tmp_path / "part.npz", stop_after=1, progress=False)
    resumed = train(cfg, tmp_path / "part.npz", progress=False)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="two formats"):
        train(_cfg(cp_rank=2, tucker_ranks=ADMM_RANKS), progress=False)
    with pytest.raises(ckpt.CheckpointMismatchError, match="CP rank: 3"):
        train(_cfg(init_from=str(tmp_path / "full.npz")), progress=False)


@pytest.mark.parametrize("field,value,exc,msg", [
    ("epochs", 0, ValueError, "epochs must be >= 1"),
    ("epochs", 2.5, TypeError, "epochs must be an int"),
    ("batch_size", -1, ValueError, "batch_size must be >= 1"),
    ("train_limit", -5, ValueError, "train_limit must be >= 1"),
    ("lr", float("nan"), ValueError, "lr must be finite"),
    ("lr", 0.0, ValueError, "lr must be > 0"),
    ("momentum", 1.0, ValueError, "momentum must be < 1"),
    ("model", "nosuchmodel", ValueError, "model must be one of"),
    ("schedule", "linear", ValueError, "schedule must be one of"),
    ("augment", "yes", TypeError, "augment must be True or False"),
    ("cp_rank", 0, ValueError, "cp_rank must be >= 1"),
])
def test_a_config_is_checked_when_it_is_made(field, value, exc, msg):
    with pytest.raises(exc, match=msg):
        _cfg(**{field: value})


def test_a_damaged_checkpoint_is_one_clear_error_and_kept(tmp_path):
    path = tmp_path / "run.npz"
    train(_cfg(epochs=1), path, progress=False)
    path.write_bytes(path.read_bytes()[:300])
    before = path.read_bytes()
    with pytest.raises(ckpt.CheckpointError, match="run.npz is not a tensorconv checkpoint"):
        train(_cfg(), path, progress=False)
    assert path.read_bytes() == before


def test_a_read_only_checkpoint_is_refused_before_training(tmp_path):
    from tensorconv.files import ReadOnlyFileError

    path = tmp_path / "run.npz"
    train(_cfg(epochs=1), path, progress=False)
    before = path.read_bytes()
    path.chmod(0o444)
    with pytest.raises(ReadOnlyFileError, match="run.npz is read-only"):
        train(_cfg(), path, progress=False)
    assert path.read_bytes() == before


def _timeless(history):
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


def test_admm_pruning_then_masked_fine_tuning_resumes_exactly(tmp_path):
    from tensorconv.compress import prune

    admm = _cfg(model="small_cnn", epochs=2, admm_prune_ratio=4.0, admm_rho=1e-2)
    first = train(admm, tmp_path / "admm.npz", progress=False)
    extra = ckpt.load(tmp_path / "admm.npz")[2]["extra"]
    for name, conv in prune.prune_candidates(first.model).items():
        z = extra[f"z/{name}"]                            # Z: on the constraint set
        assert np.count_nonzero(z) <= prune.keep_count(z.size, 4.0)
        assert extra[f"u/{name}"].shape == conv.weight.shape
    half = train(admm, tmp_path / "half.npz", stop_after=1, progress=False)
    again = train(admm, tmp_path / "half.npz", progress=False)   # ADMM state resumes exactly
    assert _timeless(half.history[:1]) == _timeless(first.history[:1])
    assert [h["admm_gap"] for h in again.history] == [h["admm_gap"] for h in first.history]
    tune = _cfg(epochs=2, init_from=str(tmp_path / "admm.npz"), prune_ratio=4.0)
    full = train(tune, tmp_path / "full.npz", progress=False)
    part = train(tune, tmp_path / "part.npz", stop_after=1, progress=False)
    resumed = train(tune, tmp_path / "part.npz", progress=False)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    convs = prune.prune_candidates(full.model)
    masks = ckpt.load(tmp_path / "full.npz")[2]["extra"]
    for name, conv in convs.items():
        mask = masks[f"mask/{name}"]
        assert mask.sum() == prune.keep_count(mask.size, 4.0)
        assert np.all(conv.weight.data[~mask] == 0)          # pruned weights stayed zero
    assert _timeless(part.history) == _timeless(full.history[:1])


def test_a_slim_checkpoint_starts_a_run_but_cannot_resume_one(tmp_path):
    admm = _cfg(model="small_cnn", epochs=2, admm_prune_ratio=4.0, admm_rho=1e-2)
    path, copy = tmp_path / "admm.npz", tmp_path / "admm_copy.npz"
    first = train(admm, path, progress=False)
    copy.write_bytes(path.read_bytes())
    before = path.stat().st_size
    assert ckpt.slim(path) == path and ckpt.slim(path) == path          # idempotent
    state, opt, meta = ckpt.load(path)
    assert meta["slim"] and not meta["extra"] and opt["velocity"] == [] and meta["epoch"] == 2
    assert path.stat().st_size < before / 2
    full = ckpt.load(copy)[0]
    assert all(np.array_equal(state[k], full[k]) for k in full)
    again = train(admm, path, progress=False)                    # finished: nothing to train
    assert again.finished and _timeless(again.history) == _timeless(first.history)
    with pytest.raises(ckpt.CheckpointError, match="slimmed"):
        train(_cfg(model="small_cnn", epochs=3, admm_prune_ratio=4.0, admm_rho=1e-2), path,
              progress=False)
    runs = [train(_cfg(epochs=1, init_from=str(src), prune_ratio=4.0), progress=False)
            for src in (path, copy)]
    a, b = (r.model.state_dict() for r in runs)
    assert all(np.array_equal(a[k], b[k]) for k in a)            # the same start either way


def test_training_under_masks_from_a_file(tmp_path):
    from tensorconv.compress import prune
    from tensorconv.nn import get_model

    model = get_model("small_cnn", in_channels=1, num_classes=4)
    masks = prune.magnitude_masks(model, 8.0)
    prune.save_masks(tmp_path / "m.npz", masks)
    assert set(prune.load_masks(tmp_path / "m.npz")) == set(masks)
    result = train(_cfg(epochs=1, prune_masks=str(tmp_path / "m.npz")), progress=False)
    for name, conv in prune.prune_candidates(result.model).items():
        assert np.all(conv.weight.data[~masks[name]] == 0)
    (tmp_path / "bad.npz").write_bytes(b"nope")
    with pytest.raises(ValueError, match="bad.npz is not a masks file"):
        prune.load_masks(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="prune_ratio and prune_masks"):
        _cfg(prune_ratio=4.0, prune_masks="m.npz")
    with pytest.raises(ValueError, match="two ADMM constraints"):
        _cfg(admm_prune_ratio=4.0, admm_ranks={"a": (1, 1)})


def test_a_dw_scc_model_trains_and_resumes_exactly(tmp_path):
    with pytest.raises(ValueError, match="no depthwise-separable form"):
        train(_cfg(pointwise="scc"), progress=False)          # small_cnn has none
    cfg = _cfg(model="vgg16", epochs=2, pad_to=32, train_limit=64, test_limit=32,
               batch_size=16, pointwise="scc", cg=2, co=0.5)
    full = train(cfg, tmp_path / "full.npz", progress=False)
    train(cfg, tmp_path / "part.npz", stop_after=1, progress=False)
    resumed = train(cfg, tmp_path / "part.npz", progress=False)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="pointwise must be one of"):
        _cfg(pointwise="dw")


def test_precision_is_checked_and_old_checkpoints_read_it_as_fp32(tmp_path):
    with pytest.raises(ValueError, match="precision"):
        _cfg(precision="bf16")
    path = tmp_path / "run.npz"
    train(_cfg(epochs=1), path, progress=False)
    model_state, opt_state, meta = ckpt.load(path)
    del meta["config"]["precision"]                  # as written before the setting existed
    ckpt.save(path, model_state=model_state, optimizer_state=opt_state, meta=meta)
    assert train(_cfg(epochs=2), path, progress=False).finished


def test_the_time_budget_judges_epochs_by_the_slowest_but_the_first(monkeypatch):
    """The first epoch (kernel compilation, data loading) is left out of the estimate once
    a second is timed; the slowest of the rest, with 30 % to spare, decides."""
    from training import chunks

    clock = [0.0]
    monkeypatch.setattr(chunks.time, "perf_counter", lambda: clock[0])

    def epoch(seconds):
        def run():
            clock[0] += seconds
        return run

    budget = chunks.TimeBudget(200.0)
    assert budget.estimate() == 0.0 and budget.fits_another_epoch()
    budget.spend(epoch(48.0))                        # cold: compiles
    assert budget.estimate() == 48.0
    for _ in range(5):
        budget.spend(epoch(23.0))
    assert budget.estimate() == 23.0                 # 163 s used, 37 left >= 1.3 x 23
    assert budget.fits_another_epoch()
    budget.spend(epoch(25.0))                        # 188 s used: 12 left
    assert budget.estimate() == 25.0 and not budget.fits_another_epoch()
    assert chunks.TimeBudget(None).fits_another_epoch()
    assert not chunks.TimeBudget(0).fits_another_epoch()   # even on a clock standing still


def test_admm_state_keeps_its_arrays_and_the_values_of_the_rule_it_replaced(rng):
    """Z, U and rho are written into the arrays they started in (a captured step replays the
    penalty gradient on the arrays it was captured with), with the values the out-of-place
    updates gave: the epoch's Z and U, rho's growth, the penalty gradient, a resume."""
    from tensorconv.nn import get_model
    from training.admm_prune import ADMMPrune

    model = get_model("small_cnn", in_channels=1, num_classes=10, seed=0)
    admm = ADMMPrune(model, 4.0, 0.5, 1.5)
    held = {n: (admm.z[n], admm.u[n]) for n in admm.convs}
    rho_array = admm._rho_array
    for c in admm.convs.values():
        c.weight.data = (c.weight.data + rng.standard_normal(c.weight.shape)).astype(np.float32)
    for step in range(2):
        want_z = {n: admm.project(n, c.weight.data + admm.u[n]).astype(np.float32)
                  for n, c in admm.convs.items()}
        want_u = {n: admm.u[n] + c.weight.data - want_z[n] for n, c in admm.convs.items()}
        admm.end_epoch()
        for n in admm.convs:
            assert admm.z[n] is held[n][0] and admm.u[n] is held[n][1]
            np.testing.assert_array_equal(admm.z[n], want_z[n])
            np.testing.assert_array_equal(admm.u[n], want_u[n])
    assert admm.rho == 0.5 * 1.5 * 1.5 and admm._rho_array is rho_array
    assert rho_array.dtype == np.float32 and rho_array == np.float32(1.125)
    grads = {n: rng.standard_normal(c.weight.shape).astype(np.float32)
             for n, c in admm.convs.items()}
    for n, c in admm.convs.items():
        c.weight.grad = grads[n].copy()
    admm.after_backward()
    for n, c in admm.convs.items():   # what a Python float rho gave
        want = grads[n] + 1.125 * (c.weight.data - admm.z[n] + admm.u[n])
        assert c.weight.grad.dtype == np.float32
        np.testing.assert_array_equal(c.weight.grad, want)

    fresh = ADMMPrune(get_model("small_cnn", in_channels=1, num_classes=10, seed=1), 4.0, 0.5,
                      1.5)
    kept = {n: fresh.z[n] for n in fresh.convs}
    fresh.load_state(admm.state_arrays(), admm.rho)
    assert fresh.rho == admm.rho and fresh._rho_array == rho_array
    for n in fresh.convs:
        assert fresh.z[n] is kept[n]
        np.testing.assert_array_equal(fresh.z[n], admm.z[n])
        np.testing.assert_array_equal(fresh.u[n], admm.u[n])
    bad = admm.state_arrays()
    name = next(iter(admm.convs))
    bad[f"z/{name}"] = bad[f"z/{name}"][:1]
    with pytest.raises(ValueError, match=f"z/{name}"):
        fresh.load_state(bad, 1.0)


def test_admm_and_clipping_no_longer_stop_a_capture():
    """Only the CPU keeps a run's step from a CUDA graph now; ADMM and clipping run in the
    same hook the eager step runs."""
    from training.steps import capture_blocker

    assert capture_blocker("gpu") is None
    assert "CPU" in capture_blocker("cpu")
    with pytest.raises(ValueError, match="cannot capture its step: it trains on the CPU"):
        train(_cfg(capture="on", admm_prune_ratio=4.0, clip_grad=1.0), progress=False)
