"""Planning the layers around the convolutions: batch norm, ReLU, pooling, flatten, identity,
dropout, ``Sequential`` runs (conv -> BN -> ReLU folded into one launch), and the two
fusions a CNN's ends offer: the classifier head (global average pool + linear) and the
ImageNet stem (conv, BN, ReLU, max pool) as one launch each where that is faster."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import conv_geometry, pool_args, pooled_size
from tensorconv.engine.choice import plan_one_launch_or_parts
from tensorconv.engine.dense import DENSE_FILES
from tensorconv.engine.fold import bn_scale_shift, folded
from tensorconv.engine.plan import Plan, Step
from tensorconv.engine.registry import is_conv, plan_conv, plan_module
from tensorconv.nn import layers as L
from tensorconv.ops import batchnorm, classifier_head, conv_maxpool, direct_conv, pool


def plan_bn(m: L.BatchNorm2d, plan: Plan, x, relu: bool = False):
    """A lone batch norm (no conv to fold it into), with an optional ReLU, as one launch."""
    xp = plan.xp
    scale, shift = bn_scale_shift(m)
    zeros, ones = plan.keep(xp.zeros(len(scale), np.float32)), plan.keep(xp.ones(len(scale),
                                                                              np.float32))
    scale, shift = plan.keep(xp.asarray(scale, np.float32)), plan.keep(xp.asarray(shift,
                                                                              np.float32))
    out = plan.alloc(x.shape)
    plan.add(lambda: batchnorm.batch_norm_apply(x, zeros, ones, scale, shift, relu=relu,
                                                out=out),
             f"batch norm{' + relu' if relu else ''} on {tuple(x.shape)}",
             batchnorm.kernels()[2:3])
    return out


def plan_relu(m, plan: Plan, x):
    out = plan.alloc(x.shape)
    plan.add(lambda: plan.xp.maximum(x, 0, out=out), "relu")
    return out


def _plan_pool(plan: Plan, x, kernel, stride, padding, mode, ceil_mode=False):
    out = plan.alloc(x.shape[:2] + pooled_size(*x.shape[2:], kernel, stride, padding,
                                               ceil_mode))
    plan.add(lambda: pool.pool2d(x, kernel, stride, padding, mode=mode, ceil_mode=ceil_mode,
                                 out=out),
             f"pool {kernel} {mode}", pool.kernels(mode))
    return out


def plan_maxpool(m: L.MaxPool2d, plan: Plan, x):
    return _plan_pool(plan, x, *pool_args(*m.args), "max", m.ceil_mode)


def plan_avgpool(m: L.AvgPool2d, plan: Plan, x):
    return _plan_pool(plan, x, *pool_args(*m.args), "avg")


def plan_gap(m, plan: Plan, x):
    out = plan.alloc(x.shape[:2])
    plan.add(lambda: plan.xp.mean(x, axis=(2, 3), out=out), "global average pool")
    return out


def plan_flatten(m, plan: Plan, x):
    return x.reshape(x.shape[0], -1)


def plan_identity(m, plan: Plan, x):
    return x  # also Dropout: the identity at inference


def plan_sequential(seq: L.Sequential, plan: Plan, x):
    """Conv -> BN (-> ReLU) runs fold into one launch; a lone BN -> ReLU pair into another."""
    mods = list(seq)
    i = 0
    while i < len(mods):
        m = mods[i]
        nxt = mods[i + 1] if i + 1 < len(mods) else None
        if is_conv(m):
            bn = nxt if isinstance(nxt, L.BatchNorm2d) else None
            j = i + 1 + (bn is not None)
            relu = j < len(mods) and isinstance(mods[j], L.ReLU)
            x = plan_conv(m, plan, x, bn=bn, relu=relu)
            i = j + relu
        elif isinstance(m, L.BatchNorm2d) and isinstance(nxt, L.ReLU):
            x = plan_bn(m, plan, x, relu=True)
            i += 2
        else:
            x = plan_module(m, plan, x)
            i += 1
    return x


def plan_head(plan: Plan, gap, fc, x):
    """Global average pool then a linear layer: one launch (``ops.gap_linear``) where the
    head is exactly that and the choice did not find the two launches faster; else
    module by module."""
    if not (isinstance(gap, L.GlobalAvgPool2d) and isinstance(fc, L.Linear)):
        return plan_module(fc, plan, plan_module(gap, plan, x))
    w = plan.keep(plan.xp.asarray(backend.to_host(fc.weight.data)))
    b = None if fc.bias is None else plan.keep(plan.xp.asarray(backend.to_host(fc.bias.data)))
    out = plan.alloc((x.shape[0], fc.out_features))
    p = classifier_head.Problem(x.shape[0], x.shape[1], x.shape[2] * x.shape[3], w.shape[0])

    def launch(tile):
        return Step(lambda: classifier_head.gap_linear(x, w, b, out=out, tile=tile),
                    f"gap + linear {tuple(w.shape)} {tile}", classifier_head.kernels(p, tile))

    tiles = classifier_head.candidates(p, backend.device_facts())
    return plan_one_launch_or_parts(
        plan, "head", (classifier_head.FILE, direct_conv.FILE), f"{tuple(x.shape)}|K{p.k}",
        launch=launch, out=out, plan_parts=lambda q: plan_module(fc, q, plan_module(gap, q, x)),
        tiles=lambda: tiles, decode=lambda v: classifier_head.Tile(*v), allowed=tiles,
        default=classifier_head.default_tile(p, backend.device_facts()))


def plan_stem(plan: Plan, stem, pool_layer, x):
    """An ImageNet stem, ``Sequential(conv, BN, ReLU)`` then max pooling: one launch
    (``ops.conv2d_maxpool``, on the tensor cores) where the kernel takes it and the choice
    did not find the conv and the pool faster; else the two."""
    def plan_two(p):
        return plan_module(pool_layer, p, plan_module(stem, p, x))

    mods = list(stem) if isinstance(stem, L.Sequential) else []
    if not (isinstance(pool_layer, L.MaxPool2d) and not pool_layer.ceil_mode and len(mods) == 3
            and type(mods[0]) is L.Conv2d
            and isinstance(mods[1], L.BatchNorm2d) and isinstance(mods[2], L.ReLU)):
        return plan_two(plan)
    conv = mods[0]
    geom = conv_geometry(x.shape, conv.weight.data.shape, conv.stride, conv.padding,
                         conv.dilation, conv.groups)
    p = conv_maxpool.Problem(geom, *pool_args(*pool_layer.args))
    tiles = conv_maxpool.candidates(p, backend.device_facts())
    if conv_maxpool.supported(p) is not None or not tiles:
        return plan_two(plan)
    w, b = folded(conv, mods[1], plan)
    out = plan.alloc(p.output_shape)

    def launch(tile):
        packed = plan.keep(conv_maxpool.pack_weights(w, tile))
        return Step(lambda: conv_maxpool.conv2d_maxpool(
            x, w, b, geom.stride, geom.padding, p.pool_kernel, p.pool_stride, p.pool_padding,
            relu=True, tile=tile, packed=packed, out=out),
            f"conv {tuple(w.shape)} + max pool {p.pool_kernel} on {tuple(x.shape)} {tile}",
            conv_maxpool.kernels(p, tile))

    return plan_one_launch_or_parts(
        plan, "stem_pool", (conv_maxpool.FILE, pool.FILE) + DENSE_FILES, p,
        launch=launch, out=out, plan_parts=plan_two, tiles=lambda: tiles,
        decode=lambda v: conv_maxpool.Tile(*v), allowed=tiles,
        default=conv_maxpool.default_tile(p, backend.device_facts()))
