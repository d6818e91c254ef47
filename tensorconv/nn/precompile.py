"""Compile a training step's kernels before its first step, on a pool of threads.

A training step fetches each kernel the first time it launches it, so on a machine with an
empty CuPy kernel cache the first step compiles every kernel it needs one after another
(ResNet-20's first epoch on Fashion-MNIST took 37 s on an H200, against 1.15 s for the
next).  Here
the model is run once on the CPU at batch 1 to learn each convolution's and linear layer's
input shape; at the training batch each gets the kernels its forward, data gradient (where
its input needs one) and weight gradient would launch
(:func:`tensorconv.ops.conv_algorithm.choose_algorithm` with the default tiles, as
:func:`tensorconv.ops.conv2d` and its gradients choose them), and the model's batch norms,
pooling, dropout, the loss, the SGD update and the batch gatherer add theirs;
:func:`tensorconv.cuda.compile_all` compiles them in parallel.

What is not listed (a layer of another kind: Tucker, CP, SCC or sparse layers run their own
kernels) still compiles when first launched, as before: the list only decides what is
ready early, never what runs.
"""

from __future__ import annotations

import copy

import numpy as np

from tensorconv import cuda, precision
from tensorconv.autograd import Tensor
from tensorconv.checks import check_int, conv_geometry
from tensorconv.nn.layers import BatchNorm2d, Conv2d, Dropout, Linear, MaxPool2d
from tensorconv.ops import augment as augment_op
from tensorconv.ops import batchnorm, direct_conv, dropout, pool, sgd, softmax_xent
from tensorconv.ops.conv_algorithm import choose_algorithm


def layer_inputs(model, image_shape) -> list:
    """``[(layer, input shape at batch 1, whether the input needs a gradient)]`` for every
    :class:`Conv2d` and :class:`Linear` of ``model``, in the order a forward pass on
    ``(1,) + image_shape`` calls them (once each; a layer called twice is listed twice).

    Runs on the CPU in evaluation mode (a copy when ``model`` is on the GPU), so nothing of
    the model changes: no batch-norm statistics, no dropout draws."""
    cpu = model if model.xp is np else copy.deepcopy(model).to("cpu")
    seen = []

    def record(layer):
        forward = layer.forward

        def wrapped(x, *args, **kwargs):
            seen.append((layer, tuple(x.shape), bool(x.requires_grad)))
            return forward(x, *args, **kwargs)
        return wrapped

    layers = [m for m in cpu.modules() if isinstance(m, (Conv2d, Linear))]
    was_training = cpu.training
    cpu.eval()
    try:
        for m in layers:
            m.forward = record(m)      # an instance attribute: shadows the class's method
        cpu(Tensor(np.zeros((1,) + tuple(image_shape), np.float32)))
    finally:
        for m in layers:
            del m.forward
        cpu.train(was_training)
    by_copy = {id(c): m for c, m in zip(cpu.modules(), model.modules())}
    return [(by_copy[id(layer)], shape, grad) for layer, shape, grad in seen]


def _conv_kernels(x_shape, w_shape, stride, padding, dilation, groups, modes) -> set:
    geom = conv_geometry(x_shape, w_shape, stride, padding, dilation, groups)
    refs = set()
    for mode in modes:
        refs.update(direct_conv.kernels(geom, choose_algorithm(geom, mode), None, mode))
    return refs


def training_kernels(model, batch_shape, *, label_dtype=np.int64,
                     augment: bool | None = None) -> set:
    """The kernels a training step of ``model`` on batches of ``batch_shape`` launches, as
    far as its layers are of the kinds listed in the module's docstring.

    Parameters
    ----------
    model : tensorconv.nn.Module
    batch_shape : tuple (N, C, H, W)
        The training batch.
    label_dtype : numpy dtype
        The labels' integer type (the loss's kernels are built for it).
    augment : bool, optional
        Batches gathered on the GPU (:class:`training.device_data.DeviceBatches`), with or
        without crops and flips; None: not gathered there.

    Returns
    -------
    set of tensorconv.cuda.KernelRef
    """
    if not isinstance(batch_shape, (tuple, list)) or len(batch_shape) != 4:
        raise ValueError(f"batch_shape must be (N, C, H, W), got {batch_shape!r}")
    batch_shape = tuple(check_int(v, "batch_shape", minimum=1) for v in batch_shape)
    n = batch_shape[0]
    refs = set()
    for layer, shape, input_grad in layer_inputs(model, batch_shape[1:]):
        modes = (0, 1, 2) if input_grad else (0, 2)
        if isinstance(layer, Conv2d):
            refs |= _conv_kernels((n,) + shape[1:], layer.weight.data.shape, layer.stride,
                                  layer.padding, layer.dilation, layer.groups, modes)
        else:   # a linear layer runs on the convolution kernels, as N 1x1 images
            refs |= _conv_kernels((n, shape[1], 1, 1), layer.weight.data.shape + (1, 1),
                                  1, 0, 1, 1, modes)
    kinds = {type(m) for m in model.modules()}
    if BatchNorm2d in kinds:
        refs.update(batchnorm.kernels())
    if MaxPool2d in kinds:
        refs.update(pool.train_kernels())
    if Dropout in kinds:
        refs.update(dropout.kernels())
    if np.dtype(label_dtype) in softmax_xent.LABEL_TYPES:   # else the loss refuses them
        refs.update(softmax_xent.kernels(label_dtype))
    refs.update(sgd.kernels())
    if augment is not None:
        refs.update(augment_op.kernels(bool(augment)))
    return refs


_DONE: set = set()   # what compile_training has built in this process (see its docstring)


def _structure(model) -> tuple:
    """Each module's kind, hyper-parameters and parameter shapes: what decides its layers'
    input shapes and kernels for a given batch."""
    return tuple((type(m).__name__, m.extra_repr(),
                  tuple(tuple(p.data.shape) for p in m._parameters.values() if p is not None))
                 for m in model.modules())


def compile_training(model, batch_shape, **kwargs) -> int:
    """Compile :func:`training_kernels` in parallel (a progress bar once it passes two
    seconds); return how many were compiled (not loaded already in this process).  Run it
    under the training's precision (:func:`tensorconv.precision.using`): the tensor-core
    kernels are built for it.

    A model of the same structure, batch, options and precision as an earlier call in this
    process is not walked again (0 is returned): a study that trains in many short chunks
    (``scc_table4``: 135) would otherwise pay the CPU walk on every chunk (0.1-0.3 s a
    walk of the zoo's CIFAR-sized models on the development machine's CPU)."""
    key = (_structure(model), tuple(batch_shape), precision.current(),
           tuple(sorted((k, str(v)) for k, v in kwargs.items())))
    if key in _DONE:
        return 0
    refs = training_kernels(model, batch_shape, **kwargs)
    compiled = cuda.compile_all(refs, desc=f"compiling kernels for training "
                                           f"{type(model).__name__}")
    _DONE.add(key)
    return compiled
