"""DSXplore's two baselines built from framework operators (Wang et al., IPDPS'21, §IV-A),
composed here from our differentiable slices, concatenation and (grouped) convolution, so
that their backward is what the framework's autograd makes of them, as in the paper.

* :func:`scc_channel_stack` ("Pytorch-Base", channel stack without channel-cyclic reuse):
  every filter's window is sliced out of the input (two slices when it wraps), all of them
  are concatenated into one (N, Cout·U, H, W) tensor, and a grouped 1x1 convolution with
  ``groups = Cout`` gives each filter its own U channels.
* :func:`scc_conv_stack` ("Pytorch-Opt", convolution stack with channel-cyclic reuse): only
  the ``cycle`` distinct windows are built (filter k reads window ``k mod cycle``), and one
  1x1 convolution per filter — as many as there are output channels — produces its output
  channel; the outputs are concatenated.

Both compute exactly the sliding-channel convolution of :mod:`tensorconv.reference.scc`;
the experiments time them against the dense-masked form and the SCC kernels.
"""

from __future__ import annotations

from tensorconv.autograd.functions.connection import conv2d
from tensorconv.autograd.functions.math import add, concat, reshape, take
from tensorconv.reference.scc import SCCGeometry


def _window(x, start: int, geom: SCCGeometry):
    """Channels ``start .. start + U - 1`` (mod Cin) of ``x``: one slice, or two when the
    window wraps past the last channel."""
    stop = start + geom.u
    if stop <= geom.cin:
        return [take(x, start, stop)]
    return [take(x, start, geom.cin), take(x, 0, stop - geom.cin)]


def _check(x, w, geom: SCCGeometry, b):
    if x.ndim != 4 or x.shape[1] != geom.cin:
        raise ValueError(f"x must be (N, {geom.cin}, H, W), got {tuple(x.shape)}")
    if tuple(w.shape) != (geom.cout, geom.u):
        raise ValueError(f"w must be ({geom.cout}, {geom.u}), got {tuple(w.shape)}")
    if b is not None and tuple(b.shape) != (geom.cout,):
        raise ValueError(f"b must be ({geom.cout},), got {tuple(b.shape)}")


def scc_channel_stack(x, w, geom: SCCGeometry, b=None):
    """Sliding-channel convolution as the paper's channel stack ("Base").

    Parameters
    ----------
    x : Tensor, (N, Cin, H, W)
    w : Tensor, (Cout, U)
    geom : SCCGeometry
    b : Tensor, (Cout,), optional

    Returns
    -------
    Tensor, (N, Cout, H, W)
    """
    _check(x, w, geom, b)
    starts = geom.starts()
    stacked = concat([piece for k in range(geom.cout) for piece in _window(x, int(starts[k]),
                                                                            geom)])
    return conv2d(stacked, reshape(w, (geom.cout, geom.u, 1, 1)), b, groups=geom.cout)


def scc_conv_stack(x, w, geom: SCCGeometry, b=None):
    """Sliding-channel convolution as the paper's convolution stack with channel-cyclic
    reuse ("Opt"): the ``cycle`` distinct windows built once, one 1x1 convolution per
    filter.  Arguments and result as :func:`scc_channel_stack`."""
    _check(x, w, geom, b)
    starts = geom.starts()
    windows = {}
    for k in range(min(geom.cycle, geom.cout)):   # stored once, as the paper keeps them:
        windows[k] = concat(_window(x, int(starts[k]), geom))  # a contiguous copy each
    outs = [conv2d(windows[k % geom.cycle], reshape(take(w, k, k + 1, axis=0), (1, geom.u, 1, 1)))
            for k in range(geom.cout)]
    y = concat(outs)
    return y if b is None else add(y, reshape(b, (1, geom.cout, 1, 1)))
