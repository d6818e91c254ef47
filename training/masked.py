"""Training under pruning masks: a masked weight stays exactly zero (its gradient is
dropped before the optimiser step and the weight re-zeroed after it, so momentum and weight
decay cannot revive it).  The masks travel in the run's checkpoints, so a resumed run keeps
them whatever the weights have become."""

from __future__ import annotations

from tensorconv import backend
from tensorconv.compress.prune import apply_masks, check_masks

PREFIX = "mask/"


class MaskedTraining:
    """Keep ``masks`` ({conv name: host bool array}) on ``model`` through training; the
    weights are masked at once."""

    def __init__(self, model, masks: dict):
        convs = check_masks(model, masks)
        apply_masks(model, masks)
        self.host = dict(masks)
        self.masks = {n: (c.weight, c.weight.xp.asarray(masks[n], dtype=c.weight.dtype))
                      for n, c in convs.items()}

    def after_backward(self) -> None:
        for w, m in self.masks.values():
            if w.grad is not None:
                w.grad = w.grad * m

    def after_step(self) -> None:
        for w, m in self.masks.values():
            w.data *= m     # in place: a captured training step replays it on the same array

    def state_arrays(self) -> dict:
        return {PREFIX + n: backend.to_host(m) for n, m in self.host.items()}

    @staticmethod
    def masks_in(arrays: dict) -> dict:
        """The masks among a checkpoint's extra arrays."""
        return {k[len(PREFIX):]: v.astype(bool) for k, v in arrays.items()
                if k.startswith(PREFIX)}
