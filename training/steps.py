"""One training step: what runs between the backward pass and the update, the eager step
through the autograd, and the captured step where the run allows one
(:class:`tensorconv.nn.CapturedStep`).  :func:`training.train.train` chooses."""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import functions as F
from tensorconv.nn.captured import CapturedStep
from tensorconv.nn.optim import clip_grad_norm


def after_backward_hooks(opt, admm, masked, clip_grad):
    """What changes the gradients between the backward pass and the update, in this order
    (the ADMM penalty, the masks, the clipping), as one call; None where nothing does.  Both
    the eager and the captured step run it (it reads nothing on the host)."""
    hooks = [h for h in (admm and admm.after_backward, masked and masked.after_backward) if h]
    if clip_grad:
        hooks.append(lambda: clip_grad_norm(opt.params, clip_grad))
    if not hooks:
        return None

    def run():
        for hook in hooks:
            hook()
    return run


def eager_step(model, opt, x, y, reducer, after_backward, masked):
    """One training step through the autograd, as written; returns (loss, correct) on the
    device (0-d arrays)."""
    logits = model(x)
    loss = F.softmax_cross_entropy(logits, y, check=False)
    opt.zero_grad()
    if reducer is None:
        loss.backward()
    else:   # each bucket averaged over the ranks as the backward pass finishes it
        reducer.backward(loss)
    if after_backward is not None:
        after_backward()
    opt.step()
    if masked is not None:
        masked.after_step()
    return loss.data.reshape(()), (logits.data.argmax(axis=1) == y).sum()


def capture_blocker(device: str) -> str | None:
    """Why this run cannot replay a captured step, or None.  (ADMM's targets and penalty
    and the clipping's scale live on the device, so neither stops a capture.)"""
    if device != "gpu":
        return "it trains on the CPU"
    return None


def stepper(cfg, device, model, opt, batches, x_shape, after_backward, masked, reducer):
    """The run's :class:`CapturedStep`, or None for eager steps (``cfg.capture``)."""
    if cfg.capture == "off":
        return None
    blocker = capture_blocker(device)
    if blocker is not None:
        if cfg.capture == "on":
            raise ValueError(f"capture='on', but this run cannot capture its step: {blocker}")
        return None
    xp = model.xp
    x, y = ((batches.x, batches.y) if batches is not None else
            (xp.empty(x_shape, np.float32), xp.empty(x_shape[0], np.int64)))
    return CapturedStep(model, opt, x, y, strict=cfg.capture == "on", reducer=reducer,
                        after_backward=after_backward,
                        after_step=masked.after_step if masked else None)
