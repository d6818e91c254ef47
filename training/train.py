"""Plain SGD training of a zoo model on Fashion-MNIST (or the synthetic test set).

Checkpoints are written atomically after every epoch and hold the model, the
optimiser, the epoch, the history and the state of the one random generator
that shuffles and augments, so a resumed run continues bit-for-bit on the CPU.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import tensorconv
from tensorconv import backend, data, files, precision
from tensorconv.autograd import Tensor, no_grad
from tensorconv.autograd import functions as F
from tensorconv.autograd.functions.loss import check_labels
from tensorconv.checks import check_bool, check_choice, check_int, check_real
from tensorconv.compress import cpize, tuckerize
from tensorconv.compress.prune import load_masks, magnitude_masks
from tensorconv.compress.separable import POINTWISE, separable
from tensorconv.nn import MODELS, get_model
from tensorconv.nn.optim import SGD, cosine_lr, step_lr
from tensorconv.nn.precompile import compile_training
from training import checkpoint as ckpt
from training import steps
from training.admm_prune import ADMMPrune
from training.admm_tucker import ADMMTucker
from training.device_data import DeviceBatches
from training.masked import MaskedTraining
from training.parallel import Parallel

# Config fields a resumed run may change; every other field must match the checkpoint.
_RESUMABLE_CHANGES = {"epochs", "device", "device_data", "capture"}  # same results either way


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored in its checkpoints)."""

    model: str = "resnet20"
    dataset: str = "fashion_mnist"     # or "synthetic" (tests)
    epochs: int = 30
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4
    schedule: str = "cosine"           # or "step" (x0.1 at 50% and 75% of the epochs)
    warmup_epochs: int = 1
    augment: bool = True               # random crop (padding 4) and horizontal flip
    device_data: bool = True           # the training set on the device, batches made there
    capture: str = "auto"              # the step replayed as CUDA graphs: "auto" where the run
                                       # allows (the GPU), "on" (or fail), "off" (eager steps)
    precision: str = "fp32"            # the tensor-core convolutions' products: "fp32"
                                       # (3xTF32) or "tf32" (one pass, cuDNN's TF32 accuracy)
    pad_to: int | None = 32
    train_limit: int | None = None
    test_limit: int | None = None
    clip_grad: float | None = None
    seed: int = 0
    device: str = "auto"               # "cpu", "gpu" or "auto"
    init_from: str | None = None       # checkpoint whose model weights start this run
    tucker_ranks: dict | None = None   # conv name -> (D1, D2): train a Tucker-format model
    tucker_init: str = "decompose"     # "decompose" the starting weights, or "random"
    cp_rank: int | None = None         # train a CP-format model (every dense conv with >= 16
                                       # channels in and out, decomposed at this rank)
    admm_ranks: dict | None = None     # conv name -> (D1, D2): ADMM towards these ranks
    admm_rho: float = 1e-3
    admm_rho_growth: float = 1.3
    admm_prune_ratio: float | None = None  # ADMM pruning: every prunable conv keeps 1/ratio
    prune_ratio: float | None = None   # hard-prune the starting weights to 1/ratio, train masked
    prune_masks: str | None = None     # an .npz of masks (tensorconv.compress.prune.save_masks)
    pointwise: str | None = None       # "scc", "gpw" or "pw": the depthwise-separable form
    cg: int = 2                        # its channel groups (scc, gpw)
    co: float = 0.5                    # its channel overlap (scc)

    def __post_init__(self):
        """Every field checked when the config is made, before any data or model is built."""
        check_choice(self.model, "model", sorted(MODELS))
        for name in ("epochs", "batch_size"):
            check_int(getattr(self, name), name, minimum=1)
        for name in ("warmup_epochs", "seed"):
            check_int(getattr(self, name), name, minimum=0)
        for name in ("train_limit", "test_limit", "cp_rank"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, minimum=1)
        if self.pad_to is not None:
            check_int(self.pad_to, "pad_to", minimum=1)
        check_real(self.lr, "lr", low=0.0, low_open=True)
        check_real(self.momentum, "momentum", low=0.0, high=1.0, high_open=True)
        check_real(self.weight_decay, "weight_decay", low=0.0)
        check_real(self.admm_rho, "admm_rho", low=0.0, low_open=True)
        check_real(self.admm_rho_growth, "admm_rho_growth", low=1.0)
        if self.clip_grad is not None:
            check_real(self.clip_grad, "clip_grad", low=0.0, low_open=True)
        for name in ("nesterov", "augment", "device_data"):
            check_bool(getattr(self, name), name)
        for name, allowed in (("schedule", ("cosine", "step")), ("device", ("auto", "cpu", "gpu")),
                              ("dataset", ("fashion_mnist", "synthetic")),
                              ("capture", ("auto", "on", "off")),
                              ("precision", precision.PRECISIONS),
                              ("tucker_init", ("decompose", "random"))):
            check_choice(getattr(self, name), name, allowed)
        if self.tucker_ranks and self.cp_rank:
            raise ValueError("tucker_ranks and cp_rank are two formats: give one")
        for name in ("admm_prune_ratio", "prune_ratio"):
            if getattr(self, name) is not None:
                check_real(getattr(self, name), name, low=1.0)
        if self.admm_ranks and self.admm_prune_ratio:
            raise ValueError("admm_ranks and admm_prune_ratio are two ADMM constraints: give one")
        if self.prune_ratio and self.prune_masks:
            raise ValueError("prune_ratio and prune_masks both give masks: give one")
        if (self.prune_ratio or self.prune_masks) and (self.tucker_ranks or self.cp_rank):
            raise ValueError("pruning masks apply to a dense model, not a Tucker or CP one")
        check_int(self.cg, "cg", minimum=1)
        check_real(self.co, "co", low=0.0, high=1.0, high_open=True)
        if self.pointwise is not None:
            check_choice(self.pointwise, "pointwise", POINTWISE)
            if self.tucker_ranks or self.cp_rank or self.init_from:
                raise ValueError("a depthwise-separable model trains from scratch, alone")


@dataclass
class TrainResult:
    model: object
    history: list = field(default_factory=list)   # one dict per epoch
    step_losses: list = field(default_factory=list)  # (global step, loss), every log interval
    finished: bool = False


def load_data(cfg: TrainConfig):
    """Train and test :class:`tensorconv.data.Dataset` for ``cfg``."""
    if cfg.dataset == "fashion_mnist":
        train = data.load_fashion_mnist("train", pad_to=cfg.pad_to, limit=cfg.train_limit)
        test = data.load_fashion_mnist("test", pad_to=cfg.pad_to, limit=cfg.test_limit)
    elif cfg.dataset == "synthetic":
        size = cfg.pad_to or 8
        train = data.synthetic_dataset(cfg.train_limit or 256, size=size, seed=cfg.seed)
        test = data.synthetic_dataset(cfg.test_limit or 128, size=size, seed=cfg.seed,
                                      sample_seed=cfg.seed + 1)
    else:
        raise ValueError(f"dataset must be 'fashion_mnist' or 'synthetic', got {cfg.dataset!r}")
    return train, test


def augment_batch(x: np.ndarray, rng: np.random.Generator, fill: float, pad: int = 4):
    """Random crop of the zero-padded (value ``fill``) image, then a random horizontal flip."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    oy, ox = rng.integers(0, 2 * pad + 1, size=(2, n))
    rows = oy[:, None] + np.arange(h)
    cols = ox[:, None] + np.arange(w)
    flip = rng.random(n) < 0.5
    cols = np.where(flip[:, None], cols[:, ::-1], cols)
    out = padded[np.arange(n)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def learning_rate(cfg: TrainConfig, step: int, steps_per_epoch: int) -> float:
    total = cfg.epochs * steps_per_epoch
    if cfg.schedule == "cosine":
        return cosine_lr(cfg.lr, step, total, cfg.warmup_epochs * steps_per_epoch)
    if cfg.schedule == "step":
        return step_lr(cfg.lr, step // steps_per_epoch, (cfg.epochs // 2, 3 * cfg.epochs // 4))
    raise ValueError(f"schedule must be 'cosine' or 'step', got {cfg.schedule!r}")


def evaluate(model, dataset, xp, batch_size: int = 1000) -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` on ``dataset`` (evaluation mode, no graph)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    with no_grad():
        for xb, yb in data.batches(dataset, batch_size, shuffle=False):
            logits = model(Tensor(xp.asarray(xb)))
            y = xp.asarray(yb)
            loss_sum += float(F.softmax_cross_entropy(logits, y, check=False).item()) * len(yb)
            correct += int((logits.data.argmax(axis=1) == y).sum())
    model.train()
    return loss_sum / len(dataset), correct / len(dataset)


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "gpu" if backend.gpu_available() else "cpu"
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu', 'gpu' or 'auto', got {device!r}")
    if device == "gpu":
        backend.require_cuda("training on the GPU")
    return device


def _init_from(model, cfg: TrainConfig) -> None:
    """Start from the model weights of another run's checkpoint (same zoo model)."""
    state, _, meta = ckpt.load(cfg.init_from)
    saved = meta["config"]
    if saved.get("model") != cfg.model or saved.get("tucker_ranks") or saved.get("cp_rank"):
        raise ckpt.CheckpointMismatchError(
            f"init_from {cfg.init_from} holds a {saved.get('model')!r} model (Tucker ranks: "
            f"{bool(saved.get('tucker_ranks'))}, CP rank: {saved.get('cp_rank')}); this run "
            f"builds a dense {cfg.model!r}")
    model.load_state_dict(state)


def _restore(path: Path, cfg: TrainConfig, model, opt):
    model_state, opt_state, meta = ckpt.load(path)
    if meta.get("slim") and meta["epoch"] < cfg.epochs:
        raise ckpt.CheckpointError(
            f"checkpoint {path} was slimmed to its weights (training.checkpoint.slim): it "
            f"cannot resume training to {cfg.epochs} epochs; start from it with init_from")
    saved = meta["config"]
    now = json.loads(json.dumps(dataclasses.asdict(cfg)))  # as stored: tuples become lists
    # a setting added since the checkpoint was written reads as its default
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    diff = {k: (saved.get(k, defaults[k]), v) for k, v in now.items()
            if k not in _RESUMABLE_CHANGES and saved.get(k, defaults[k]) != v}
    if diff:
        raise ckpt.CheckpointMismatchError(
            f"checkpoint {path} was written by another run (model {saved.get('model')!r}); "
            f"differing settings (checkpoint, now): {diff}. Use another checkpoint path.")
    try:
        model.load_state_dict(model_state)
        if not meta.get("slim"):      # finished: no step follows that the velocity would feed
            opt.load_state_dict(opt_state)
    except ValueError as exc:
        raise ckpt.CheckpointMismatchError(
            f"checkpoint {path} does not fit {cfg.model}: {exc}") from exc
    return meta


def _share(cfg, parallel) -> int:
    """The images of a global batch this process trains on."""
    return cfg.batch_size if parallel is None else parallel.check_batch(cfg.batch_size)


def train(cfg: TrainConfig, checkpoint: str | Path | None = None, *, stop_after: int | None = None,
          progress: bool = True, log_every: int = 25, parallel: Parallel | None = None
          ) -> TrainResult:
    """Train ``cfg.model``; resume from ``checkpoint`` when it exists.

    Parameters
    ----------
    checkpoint : path, optional
        Written atomically after every epoch; read first if present.
    stop_after : int, optional
        Stop after this many epochs in this call (a chunk of a longer run that a
        later call resumes).
    log_every : int
        Steps between host reads of the loss (progress bar, NaN check).
    parallel : Parallel, optional
        This process's rank of a data-parallel run (:mod:`training.parallel`): it trains
        on its share of each global batch of ``cfg.batch_size``; rank 0 evaluates and
        writes the checkpoint.

    Raises
    ------
    CheckpointMismatchError
        The checkpoint belongs to another model or configuration (nothing is overwritten).
    CheckpointError
        The checkpoint is damaged or not a tensorconv checkpoint (nothing is overwritten).
    tensorconv.files.ReadOnlyFileError
        The checkpoint exists and is read-only.
    FloatingPointError
        The loss became NaN or infinite; the message names the epoch and step.
    """
    # What earlier runs of this process left in reference cycles (models, their data and
    # captured steps on the GPU) is freed first: the cycle collector counts objects, not
    # bytes, and a study training run after run (scc_table4: 135 one-epoch chunks) ran
    # out of GPU memory waiting for it.
    gc.collect()
    with precision.using(cfg.precision):   # every kernel the run fetches, and its graphs
        return _train(cfg, checkpoint, stop_after, progress, log_every, parallel)


def _train(cfg: TrainConfig, checkpoint, stop_after, progress, log_every, parallel):
    """:func:`train`'s body, under the run's precision."""
    from tqdm import tqdm

    if checkpoint is not None:
        files.check_writable(Path(checkpoint))  # said now, not after the first epoch
    device = _resolve_device(cfg.device)
    train_set, test_set = load_data(cfg)
    model = get_model(cfg.model, in_channels=train_set.images.shape[1],
                      num_classes=len(train_set.classes), seed=cfg.seed)
    check_labels(train_set.labels, len(train_set), model.num_classes)
    check_labels(test_set.labels, len(test_set), model.num_classes)
    if cfg.pointwise:
        separable(model, cfg.pointwise, cg=cfg.cg, co=cfg.co, seed=cfg.seed)
    if cfg.init_from:
        _init_from(model, cfg)
    if cfg.tucker_ranks:
        tuckerize(model, {k: tuple(v) for k, v in cfg.tucker_ranks.items()},
                  decompose=cfg.tucker_init == "decompose", seed=cfg.seed)
    if cfg.cp_rank:  # a resumed run loads its factors: no need to decompose again
        cpize(model, cfg.cp_rank,
              decompose=not (checkpoint is not None and Path(checkpoint).exists()))
    if device == "gpu":   # the step's kernels built in parallel, not one by one in step 1
        compile_training(model, (_share(cfg, parallel),) + train_set.images.shape[1:],
                         label_dtype=train_set.labels.dtype,
                         augment=cfg.augment if cfg.device_data else None)
        model.to("gpu")
    xp = model.xp
    admm = (ADMMTucker(model, cfg.admm_ranks, cfg.admm_rho, cfg.admm_rho_growth)
            if cfg.admm_ranks else
            ADMMPrune(model, cfg.admm_prune_ratio, cfg.admm_rho, cfg.admm_rho_growth)
            if cfg.admm_prune_ratio else None)
    opt = SGD(model.parameters(), cfg.lr, cfg.momentum, cfg.nesterov, cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    result = TrainResult(model)
    start_epoch = 0
    masks = (load_masks(cfg.prune_masks) if cfg.prune_masks else
             magnitude_masks(model, cfg.prune_ratio) if cfg.prune_ratio else None)
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        meta = _restore(path, cfg, model, opt)
        rng.bit_generator.state = meta["rng_state"]
        if admm is not None and not meta.get("slim"):   # slim: finished, ADMM's state dropped
            admm.load_state(meta["extra"], meta["admm_rho"])
        masks = MaskedTraining.masks_in(meta["extra"]) or masks  # the run's own, as they were
        start_epoch = meta["epoch"]
        result.history, result.step_losses = meta["history"], meta["step_losses"]

    masked = MaskedTraining(model, masks) if masks else None
    reducer, main = None, parallel is None or parallel.main
    if parallel is not None:
        parallel.check_batch(cfg.batch_size)
        parallel.broadcast_model(model)
        parallel.shard_dropout(model)
        if parallel.sync_bn:
            parallel.sync_batch_norm(model)
        reducer = parallel.reducer(model) if parallel.size > 1 else None
    steps_per_epoch = len(train_set) // cfg.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"batch_size {cfg.batch_size} exceeds the {len(train_set)} training "
                         "images")
    fill = float(train_set.images.min())
    rows = None if parallel is None else slice(
        parallel.rank * parallel.check_batch(cfg.batch_size),
        (parallel.rank + 1) * parallel.check_batch(cfg.batch_size))
    batches = (DeviceBatches(train_set, xp, cfg.batch_size, cfg.augment, fill, rows)
               if cfg.device_data else None)
    end_epoch = cfg.epochs if stop_after is None else min(cfg.epochs, start_epoch + stop_after)
    share = _share(cfg, parallel)
    after_backward = steps.after_backward_hooks(opt, admm, masked, cfg.clip_grad)
    stepper = steps.stepper(cfg, device, model, opt, batches,
                       (share,) + train_set.images.shape[1:], after_backward, masked, reducer)
    warned = False
    for epoch in range(start_epoch, end_epoch):
        t0 = time.perf_counter()
        model.train()
        if batches is not None:
            batches.start_epoch(rng, steps_per_epoch)   # the host path's draws, at once
        else:
            order = rng.permutation(len(train_set))
        step_loss = xp.empty(steps_per_epoch, np.float32)   # device-side: no per-step read
        step_right = xp.empty(steps_per_epoch, np.int64)
        bar = tqdm(range(steps_per_epoch), desc=f"{cfg.model} epoch {epoch + 1}/{cfg.epochs}",
                   disable=not (progress and main), leave=False)
        for i in bar:
            step = epoch * steps_per_epoch + i
            if batches is not None:
                xb, y = batches.batch(i)
            else:
                idx = order[i * cfg.batch_size:(i + 1) * cfg.batch_size]
                xb, yb = train_set.images[idx], train_set.labels[idx]
                if cfg.augment:
                    xb = augment_batch(xb, rng, fill)    # the whole global batch: one stream
                if parallel is not None:
                    xb, yb = parallel.shard(xb), parallel.shard(yb)
                xb, y = xp.asarray(xb), xp.asarray(yb)
            opt.lr = learning_rate(cfg, step, steps_per_epoch)
            if stepper is not None:
                if batches is None:
                    stepper.x[...] = xb
                    stepper.y[...] = y
                loss_d, right_d = stepper()
                if stepper.failure and not warned:
                    warned = True
                    warnings.warn(f"training eagerly: {stepper.failure}", RuntimeWarning,
                                  stacklevel=2)
            else:
                loss_d, right_d = steps.eager_step(model, opt, Tensor(xb), y, reducer,
                                              after_backward, masked)
            step_loss[i] = loss_d
            step_right[i] = right_d
            if (i + 1) % log_every == 0 or i + 1 == steps_per_epoch:
                recent = backend.to_host(step_loss[max(0, i + 1 - log_every):i + 1])
                bad = np.flatnonzero(~np.isfinite(recent))
                if bad.size:
                    at = i + 1 - len(recent) + int(bad[0])
                    raise FloatingPointError(
                        f"loss became {recent[bad[0]]} at epoch {epoch + 1}, step {at + 1} "
                        f"(lr {opt.lr:.4g}); the last checkpoint ({path}) is untouched")
                result.step_losses.append((step + 1, float(recent[-1])))
                bar.set_postfix(loss=f"{recent.mean():.3f}", lr=f"{opt.lr:.3g}")
        train_loss = float(backend.to_host(step_loss).mean())
        right = int(backend.to_host(step_right).sum())
        if parallel is not None:
            train_loss, right = parallel.end_epoch(model, train_loss, right)
        train_acc = right / (steps_per_epoch * cfg.batch_size)
        test_loss, test_acc = evaluate(model, test_set, xp) if main else (math.nan, math.nan)
        result.history.append({"epoch": epoch + 1, "train_loss": train_loss, "train_acc": train_acc,
                               "test_loss": test_loss, "test_acc": test_acc, "lr": opt.lr,
                               "seconds": time.perf_counter() - t0,
                               "step": "eager" if stepper is None or stepper.failure else
                                       "captured"})
        if admm is not None:
            admm.end_epoch()
            result.history[-1].update(admm_gap=admm.gap(), admm_rho=admm.rho)
        if progress and main:
            print(f"epoch {epoch + 1}/{cfg.epochs}: train loss {train_loss:.4f} acc {train_acc:.4f}"
                  f" | test loss {test_loss:.4f} acc {test_acc:.4f}"
                  f" | {result.history[-1]['seconds']:.1f}s")
        if path is not None and main:
            ckpt.save(path, model_state=model.state_dict(), optimizer_state=opt.state_dict(),
                      meta={"config": dataclasses.asdict(cfg), "epoch": epoch + 1,
                            "history": result.history, "step_losses": result.step_losses,
                            "rng_state": rng.bit_generator.state,
                            "admm_rho": admm.rho if admm is not None else None,
                            "tensorconv": tensorconv.__version__},
                      extra={**(admm.state_arrays() if admm is not None else {}),
                             **(masked.state_arrays() if masked is not None else {})})
    if stepper is not None:
        stepper.close()     # its graphs, buffers and scratch now, not when collected
    result.finished = (result.history[-1]["epoch"] if result.history else 0) >= cfg.epochs
    if main and result.history and not math.isfinite(result.history[-1]["test_loss"]):
        raise FloatingPointError("test loss is not finite after training")
    return result
