"""Weight gradients on a second stream, so that they overlap the rest of the backward pass.

A convolution's weight gradient is read by nothing until the optimiser's update: the
backward pass goes on from its data gradient.  Inside :func:`weight_gradients_on`,
:class:`~tensorconv.autograd.functions.connection.Conv2d` issues its weight gradient on the
given stream, forked from the current one after the output gradient is made, and the
current stream waits for all of them when the block ends.  The weight gradients then share
the GPU with the data gradients and batch norms the main stream runs meanwhile, filling
what a lone kernel leaves idle (ResNet-18's captured step at batch 128 ran 1.10x faster
on an H200: ``docs/notes/training_speed.md``).  Captured into a CUDA graph
(:class:`tensorconv.nn.CapturedStep`) the fork and the join become the graph's edges.

The results are the same bit for bit: the same kernels on the same values, only in
another order in time.  The arrays a forked kernel reads (the layer's input and output
gradient) are held until the join, so that no allocation on the main stream reuses their
memory while the forked kernel may still be reading it.  That is the cost: each
convolution's output gradient lives until the join, the end of the backward pass, instead
of until its layer's gradients are made (the inputs live that long anyway: the backward
pass keeps every function until it ends), so the peak memory of the backward pass grows by
up to the convolutions' output sizes.

Not for a backward pass whose gradients are read before it ends (a data-parallel
reducer's ``on_leaf_done`` sends each gradient as soon as it is final): there the weight
gradient would not be ready on the stream that reads it.
"""

from __future__ import annotations

import contextlib
import threading

from tensorconv import backend

_state = threading.local()


class _Fork:
    """The streams weight gradients go to (in turn), and what their kernels read until the
    join."""

    def __init__(self, streams):
        self.streams = streams
        self.held: list = []
        self.forks = 0

    def used(self):
        """The streams that have run a weight gradient so far."""
        return self.streams[:min(self.forks, len(self.streams))]

    def run(self, fn, *reads):
        """``fn()`` on the next stream once the current stream's work so far is done;
        ``reads`` (the arrays ``fn`` reads) are held until the join."""
        cp = backend.require_cuda("a weight gradient on a side stream")
        stream = self.streams[self.forks % len(self.streams)]
        stream.wait_event(cp.cuda.get_current_stream().record())
        with stream:
            out = fn()
        self.held.append(reads)
        self.forks += 1
        return out


def active():
    """The active fork (inside :func:`weight_gradients_on`), or None."""
    return getattr(_state, "fork", None)


def on_side(fn, *reads, when: bool = True):
    """``fn()`` on the side stream if one is active and ``when`` (``reads`` held until the
    join), else ``fn()`` on the current stream.  ``when`` is False for a gradient that a
    function on the main stream will read during the backward pass (a weight that is not a
    leaf: its creator's backward consumes it)."""
    fork = active()
    return fn() if fork is None or not when else fork.run(fn, *reads)


def settle() -> None:
    """Make the current stream wait for what the side stream has run so far (before the
    main stream reads a forked gradient: a leaf's second gradient added to its first)."""
    fork = active()
    if fork is not None and fork.forks:
        _join(backend.require_cuda("a side stream's join"), fork)


@contextlib.contextmanager
def weight_gradients_on(stream):
    """Within the block, convolutions' weight gradients run on ``stream``; at its end the
    current stream waits for them.

    Parameters
    ----------
    stream : cupy.cuda.Stream, sequence of them, or None
        Not the current stream.  Several: the weight gradients take them in turn, so that
        successive layers' gradients may run side by side too.  None: the block changes
        nothing.

    Yields
    ------
    int-returning callable
        ``forks()``: how many weight gradients went to ``stream`` so far.
    """
    if stream is None:
        yield lambda: 0
        return
    cp = backend.require_cuda("weight gradients on a side stream")
    streams = tuple(stream) if isinstance(stream, (tuple, list)) else (stream,)
    if not streams:
        raise ValueError("stream must name at least one stream, got an empty sequence")
    for s in streams:
        if not isinstance(s, cp.cuda.Stream):
            raise TypeError(f"stream must be a cupy.cuda.Stream, got {type(s).__name__}")
    if any(s.ptr == cp.cuda.get_current_stream().ptr for s in streams):
        raise ValueError("stream must not be the current stream (nothing would overlap)")
    if len({s.ptr for s in streams}) != len(streams):
        raise ValueError("stream must not name the same stream twice")
    if active() is not None:
        raise RuntimeError("weight_gradients_on is already active in this thread")
    fork = _state.fork = _Fork(streams)
    try:
        yield lambda: fork.forks
    except BaseException:
        with contextlib.suppress(Exception):   # the block's own error is the one to see
            _join(cp, fork)
        raise
    else:
        _join(cp, fork)
    finally:
        _state.fork = None
        fork.held.clear()


def _join(cp, fork) -> None:
    main = cp.cuda.get_current_stream()
    for stream in fork.used():
        main.wait_event(stream.record())
