"""Training in chunks that fit a time limit: whole epochs while a budget allows, each chunk
resuming from the checkpoint the previous one wrote (device sessions end between epochs)."""

from __future__ import annotations

import time
from pathlib import Path

from training import checkpoint as ckpt
from training.train import TrainConfig, train


class TimeBudget:
    """Seconds left to this process for whole epochs (None: no limit), judged by the
    slowest epoch so far with a 30 % margin, so that a device session ends between epochs.
    The process's first epoch is left out of that once a second one is timed: it pays the
    one-off kernel compilation and data loading (ResNet-50: 48 s against 23 s, which cost a
    15-epoch run its last epoch)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.start = seconds, time.perf_counter()
        self.epochs: list[float] = []

    def estimate(self) -> float:
        """Seconds the next epoch is expected to take (0 before the first)."""
        if not self.epochs:
            return 0.0
        return max(self.epochs[1:]) if len(self.epochs) > 1 else self.epochs[0]

    def fits_another_epoch(self) -> bool:
        if self.seconds is None:
            return True
        left = self.seconds - (time.perf_counter() - self.start)
        return left > 0 and left >= 1.3 * self.estimate()      # a budget of 0: no epoch

    def spend(self, fn):
        t0 = time.perf_counter()
        out = fn()
        self.epochs.append(time.perf_counter() - t0)
        return out


def train_within(cfg: TrainConfig, checkpoint: str | Path, budget: TimeBudget,
                 **kwargs) -> tuple[dict | None, bool]:
    """Train epoch by epoch into ``checkpoint`` while ``budget`` allows; a later call resumes.

    Returns the checkpoint's metadata (None before its first epoch) and whether
    the run has reached ``cfg.epochs``.
    """
    path = Path(checkpoint)

    def epochs_done() -> int:
        return ckpt.load(path)[2]["epoch"] if path.exists() else 0

    while epochs_done() < cfg.epochs and budget.fits_another_epoch():
        budget.spend(lambda: train(cfg, path, stop_after=1, **kwargs))
    meta = ckpt.load(path)[2] if path.exists() else None
    return meta, epochs_done() >= cfg.epochs
