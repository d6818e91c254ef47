"""A training step captured once into CUDA graphs and replayed.

An eager step of a small CNN is bound by the host: hundreds of Python calls, each building
autograd nodes and launching a kernel of a few microseconds.  :class:`CapturedStep` runs
the forward pass, the loss, the backward pass and the SGD update once as usual, then records
the same launches into two CUDA graphs and replays them for every later step: one driver
call per graph instead of one per kernel.

Replay is exact: the graphs hold the kernels, their arguments and their buffers as the
capture saw them.  So

* the batch is read from fixed buffers (``x``, ``y``) that the caller overwrites before each
  call (:class:`training.device_data.DeviceBatches` gathers straight into its own);
* the learning rate is read by the update kernel from a one-element device array written
  before each replay, so a schedule needs no new capture;
* everything else the graphs point at (parameters, optimiser velocities, batch-norm
  statistics, the training flags and hyper-parameters) is checked before each replay, and a
  change (``load_state_dict``, ``model.eval()``, a new momentum) makes the next call an
  eager step followed by a fresh capture, never a replay of stale pointers;
* the arrays made during a capture (activations, gradients, the loss, the update's pointer
  tables) come from memory pools of this object's own, one per graph, which nothing else
  allocates from, so no later allocation can be handed memory a replay writes.

Only kernels that allow capture may run in the step: ours and CuPy's element-wise and
reduction kernels (a linear layer runs on our convolution kernels for this reason, see
:class:`tensorconv.autograd.functions.connection.Linear`).  An operation that cannot be
captured (a host read, a host-to-device copy, cuBLAS) ends the capture; the step it belonged
to has run eagerly, and with ``strict=True`` :class:`CaptureError` says why, otherwise every
later call runs eagerly (the same kernels) and :attr:`CapturedStep.failure` says why.

In a data-parallel run the gradients' all-reduces are part of the step: NCCL's kernels are
captured on the communicator's stream, which joins the capture through an event the
compute stream records and rejoins it at :meth:`Reducer.finish
<tensorconv.distributed.Reducer.finish>`, so a replay overlaps communication with the
backward pass as an eager step does, without a host call per bucket.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv import graph as captured_graph
from tensorconv.autograd import Tensor, side_stream
from tensorconv.autograd import functions as F
from tensorconv.checks import check_bool, check_int
from tensorconv.ops.sgd import PointerTables
from tensorconv.scratch import release_workspace


class CaptureError(RuntimeError):
    """The training step could not be captured into a CUDA graph (the reason is said)."""


def default_loss(logits: Tensor, labels) -> Tensor:
    """Mean softmax cross-entropy, without the label check (a host read)."""
    return F.softmax_cross_entropy(logits, labels, check=False)


class CapturedStep:
    """Forward, loss, backward and SGD update of ``model`` on fixed batch buffers, replayed.

    Parameters
    ----------
    model : tensorconv.nn.Module
        On the GPU, in training mode, float32 parameters.
    optimizer : tensorconv.nn.optim.SGD
        Over ``model``'s parameters, each of which must receive a gradient.
    x : cupy.ndarray, (N, C, H, W), float32, C-contiguous
        The input buffer: write each batch into it before calling.
    y : cupy.ndarray, (N,), integer
        The label buffer.
    loss_fn : callable, optional
        ``loss_fn(logits, y) -> scalar Tensor``; must not read the device from the host.
        Default :func:`default_loss`.
    reducer : tensorconv.distributed.Reducer, optional
        Average the gradients over the ranks of a data-parallel run during the backward
        pass (its all-reduces, on the communicator's stream, are captured with the step:
        every rank must capture and replay the same steps).
    after_backward, after_step : callable, optional
        Run after the backward pass and after the update (masking gradients and weights,
        :class:`training.masked.MaskedTraining`); captured with the step, so they must
        change arrays in place, not replace them.
    strict : bool
        Raise :class:`CaptureError` when the step cannot be captured (after running it
        eagerly); otherwise go on eagerly and keep the reason in :attr:`failure`.
    overlap : bool or int
        Run the convolutions' weight gradients on a second stream, beside the rest of the
        backward pass (:mod:`tensorconv.autograd.side_stream`; the same results bit for
        bit); an int >= 1 names how many side streams they take in turn (True: 1, False:
        0).  Not with ``reducer``, whose all-reduces read each gradient as soon as it is
        final: there it is off.

    Attributes
    ----------
    replays : int
        Steps run by replaying the graphs.
    captures : int
        Times the step was captured (1, plus one per change of what the graphs point at).
    kernels : int
        Kernel launches in one replayed step.
    forked : int
        Weight gradients a step runs on the second stream (0 without ``overlap``).
    failure : str or None
        Why the step could not be captured (calls then run eagerly), or None.

    Notes
    -----
    Each call is one training step.  The first (and the first after a change) runs
    eagerly on this object's stream, then captures; the others replay.  Gradients are
    *assigned* by every step, as the eager loop's ``zero_grad(); backward()`` does: a
    captured step cannot accumulate gradients over several calls.
    """

    def __init__(self, model, optimizer, x, y, *, loss_fn=None, reducer=None,
                 after_backward=None, after_step=None, strict: bool = False,
                 overlap: bool = True):
        xp = backend.require_cuda("CapturedStep")
        if not backend.is_cupy_array(x) or x.ndim != 4 or x.dtype != np.float32 \
                or not x.flags.c_contiguous:
            raise TypeError("x must be a C-contiguous CuPy float32 array (N, C, H, W), got "
                            f"{type(x).__name__} {getattr(x, 'dtype', '')} "
                            f"{tuple(getattr(x, 'shape', ()))}")
        if not backend.is_cupy_array(y) or y.shape != (x.shape[0],) or y.dtype.kind not in "iu":
            raise TypeError(f"y must be a CuPy integer array of shape ({x.shape[0]},), got "
                            f"{type(y).__name__} {getattr(y, 'dtype', '')} "
                            f"{tuple(getattr(y, 'shape', ()))}")
        params = list(model.parameters())
        if [id(p) for p in params] != [id(p) for p in optimizer.params]:
            raise ValueError("optimizer must hold exactly model.parameters(), in order")
        if reducer is not None and [id(p) for p in reducer.params] != [id(p) for p in params]:
            raise ValueError("reducer must average exactly model.parameters(), in order")
        self.reducer = reducer
        self.xp, self.model, self.optimizer, self.x, self.y = xp, model, optimizer, x, y
        self.loss_fn = loss_fn or default_loss
        self.after_backward, self.after_step = after_backward, after_step
        self.strict = check_bool(strict, "strict")
        self.failure = None
        self.programmatic = captured_graph.supported()
        self._stream = xp.cuda.Stream(non_blocking=True)
        sides = (int(check_bool(overlap, "overlap")) if isinstance(overlap, (bool, np.bool_))
                 else check_int(overlap, "overlap", minimum=0))
        self._side = (tuple(xp.cuda.Stream(non_blocking=True) for _ in range(sides))
                      if sides and reducer is None else None)
        self.forked = 0
        self._lr = xp.zeros(1, np.float32)
        self._graphs = None       # (forward-backward, update)
        self._signed = None
        self._pools = self._tables = None
        self._out = None          # the loss and the correct count a replay writes
        self.replays = self.captures = self.kernels = 0

    def close(self) -> None:
        """Destroy the graphs now (a later call runs eagerly and captures again).

        Run when the step is collected, before its attributes (the reducer and its
        communicator) are released: a graph holding NCCL collectives must be destroyed
        before their communicator, whose destroy otherwise waits for it forever.
        """
        if self._graphs is not None:
            self.xp.cuda.get_current_stream().synchronize()
            self._stream.synchronize()
            for side in self._side or ():
                side.synchronize()
        self._graphs = self._signed = self._out = self._tables = None
        self._pools = None
        release_workspace(self._stream)
        for side in self._side or ():
            release_workspace(side)

    def __del__(self):
        if getattr(self, "_stream", None) is not None:
            try:
                self.close()
            except Exception:   # noqa: BLE001 - the interpreter may be shutting down
                self._graphs = None

    # ---- what the graphs point at
    def _signature(self) -> tuple:
        opt, model = self.optimizer, self.model
        arrays = ([p.data for p in opt.params] + [v for v in opt.velocity if v is not None]
                  + [b for _, b in model.named_buffers()] + [self.x, self.y])
        return (tuple(a.data.ptr for a in arrays), tuple(m.training for m in model.modules()),
                (opt.momentum, opt.weight_decay, opt.nesterov, opt.decoupled),
                tuple(p.data.shape for p in opt.params))

    # ---- one step's work, eager or inside a capture
    def _forward_backward(self):
        logits = self.model(Tensor(self.x))
        loss = self.loss_fn(logits, self.y)
        if loss.size != 1:
            raise ValueError(f"loss_fn must return one value, got shape {tuple(loss.shape)}")
        correct = (logits.data.argmax(axis=1) == self.y).sum()
        self.optimizer.zero_grad()
        if self.reducer is None:
            with side_stream.weight_gradients_on(self._side) as forks:
                loss.backward()
            self.forked = forks()
        else:   # each bucket all-reduced as soon as the backward pass has finished it
            self.reducer.backward(loss)
        if self.after_backward is not None:
            self.after_backward()
        return loss.data.reshape(()), correct

    def _update(self, lr=None, tables=None) -> None:
        self.optimizer.step(lr, tables)
        if self.after_step is not None:
            self.after_step()

    # ---- calls
    def __call__(self):
        """Run one step; return ``(loss, correct)``: 0-d device arrays (float32, int64), which
        the next call overwrites when it replays (copy them to keep them)."""
        if self.failure is not None:
            loss, correct = self._forward_backward()
            self._update()
            return loss, correct
        if self._graphs is not None and self._signature() == self._signed:
            stream = self.xp.cuda.get_current_stream()
            self._lr.fill(self.optimizer.lr)
            for g in self._graphs:
                g.launch(stream)
            self.optimizer.steps += 1
            self.replays += 1
            return self._out
        return self._eager_then_capture()

    def _eager_then_capture(self):
        xp, s = self.xp, self._stream
        caller = xp.cuda.get_current_stream()
        self._graphs, self._signed, self._out = None, None, None
        s.wait_event(caller.record())
        try:
            with s:
                # the eager step also loads every kernel and sizes this stream's workspaces,
                # so the capture below allocates only activations and gradients
                loss, correct = self._forward_backward()
                self._update()
                self._capture()
        except CaptureError as exc:
            if self.strict:
                raise
            self.failure = str(exc)
        finally:
            caller.wait_event(s.record())
        return loss, correct

    def _capture(self) -> None:
        xp, s, opt = self.xp, self._stream, self.optimizer
        # One pool per graph, used by nothing else: a block the forward-backward graph
        # freed during its capture is scratch it rewrites on every replay, so no later
        # allocation (the update's pointer tables, say) may be given it.
        fb_pool, update_pool = xp.cuda.MemoryPool(), xp.cuda.MemoryPool()
        tables = PointerTables()
        held = {}
        steps = opt.steps
        try:
            try:
                with xp.cuda.using_allocator(fb_pool.malloc):
                    fb = captured_graph.CapturedGraph(
                        s, lambda: held.update(out=self._forward_backward()),
                        programmatic=self.programmatic)
                with xp.cuda.using_allocator(update_pool.malloc):
                    opt.prepare_capture(tables)   # pointer tables of the captured gradients
                    update = captured_graph.CapturedGraph(
                        s, lambda: self._update(self._lr, tables),
                        programmatic=self.programmatic)
            except Exception as exc:
                opt.zero_grad()     # gradients the failed capture made hold nothing
                raise CaptureError(
                    f"the training step could not be captured into a CUDA graph: "
                    f"{type(exc).__name__}: {exc}") from exc
        finally:
            opt.steps = steps          # capturing the update did not run it
        self._pools, self._graphs, self._out = (fb_pool, update_pool), (fb, update), held["out"]
        self._tables = tables
        self._signed = self._signature()
        self.kernels = fb.kernels + update.kernels
        self.captures += 1
