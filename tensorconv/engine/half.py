"""The fp16 inference path (issue 24): float16 NHWC buffers end to end.

Every convolution runs on the tensor cores (:func:`tensorconv.ops.tc_conv2d`: fp16 in, fp32
accumulation, fp16 out) with its batch norm folded and bias, residual and ReLU in its
epilogue; pooling on ``pool.cu``'s fp16 NHWC kernel; the head as a global average pool (in
fp32) then a linear layer as a 1x1 tensor-core convolution.  The engine's input stays
(N, C, H, W) float32 and its first step converts it; the output is float16.

A layer this path has no planner for (depthwise or grouped convolutions, a lone batch
norm, flattening a map larger than 1x1) raises ``NotImplementedError`` naming it, at
planning time.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_window_fits, pool_args, pooled_size
from tensorconv.engine.fold import folded
from tensorconv.engine.models import plan_residual
from tensorconv.engine.plan import Plan
from tensorconv.engine.registry import is_conv, plan_conv, plan_module
from tensorconv.nn import layers as L
from tensorconv.ops import pool
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.tuning.tc_search import BUDGET, tune_tc_tile


def plan_input(plan: Plan, x):
    """(N, C, H, W) float32 ``x`` -> a float16 NHWC buffer, one CuPy copy per call."""
    n, c, h, w = x.shape
    out = plan.alloc((n, h, w, c))
    plan.add(lambda: out.__setitem__(Ellipsis, x.transpose(0, 2, 3, 1)), "to fp16 NHWC")
    return out


def _tile(plan: Plan, p: tcc.Problem, x, w):
    """The tile of ``p``: searched now when the plan tunes (its candidates recorded by a
    dry plan), else the stored one or the analytic rank's first."""
    facts = backend.device_facts()
    if plan.tune and plan.dry:
        plan.kernels.update(k for t in tcc.candidates(p, facts)[:BUDGET]
                            for k in tcc.kernels(p, t))
    elif plan.tune:
        return tune_tc_tile(x, w, p.geom.stride, p.geom.padding, layout="nhwc")[0]
    return tcc.tuned_tile(p) or tcc.default_tile(p, facts)


def _conv(plan: Plan, x, w, b, stride, padding, relu, residual, what: str, out=None):
    """``relu?(conv(x, w) + b + residual)`` on fp16 NHWC buffers; ``w`` (Cout, C, R, S)
    float32 with BN folded, ``b`` float32 or None; into ``out`` (a channel slice of a
    planned buffer) when given."""
    p = tcc.problem(x.shape, w.shape, stride, padding, "nhwc")
    if (why := tcc.supported(p)) is not None:
        raise NotImplementedError(f"the fp16 engine cannot run {what}: {why}")
    b = None if b is None else plan.keep(plan.xp.asarray(b, np.float32))
    out = plan.alloc(tcc.output_shape(p)) if out is None else out
    tile = _tile(plan, p, x, w)
    packed = plan.keep(tcc.pack_weights(w, "nhwc", tile=tile))
    plan.add(lambda: tcc.tc_conv2d(x, w, b, stride, padding, layout="nhwc", relu=relu,
                                   residual=residual, tile=tile, packed=packed, out=out),
             f"fp16 conv {tuple(w.shape)} on {tuple(x.shape)} {tile}", tcc.kernels(p, tile))
    return out


def plan_conv2d(m: L.Conv2d, plan: Plan, x, *, bn=None, relu=False, residual=None, out=None):
    if m.groups != 1 or m.dilation not in (1, (1, 1)):
        raise NotImplementedError(f"the fp16 engine runs dense undilated convolutions; "
                                  f"{m!r} has groups={m.groups}, dilation={m.dilation}")
    w, b = folded(m, bn, plan)
    return _conv(plan, x, w, b, m.stride, m.padding, relu, residual, repr(m), out=out)


def plan_fire(m, plan: Plan, x):
    """The squeeze convolution, then both expand convolutions writing their channel
    slices of one (N, H, W, e1 + e3) buffer: the concat costs no launch."""
    s = plan_conv2d(m.squeeze, plan, x, relu=True)
    e1 = m.expand1x1.out_channels
    out = plan.alloc(s.shape[:3] + (m.out_channels,))
    par = plan.branches()     # side by side: they write disjoint channels
    with par.branch():
        plan_conv2d(m.expand1x1, plan, s, relu=True, out=out[..., :e1])
    with par.branch():
        plan_conv2d(m.expand3x3, plan, s, relu=True, out=out[..., e1:])
    return out


def plan_linear(m: L.Linear, plan: Plan, x, *, bn=None, relu=False, residual=None):
    """A linear layer on (N, C) as a 1x1 convolution of an (N, 1, 1, C) map."""
    if bn is not None or residual is not None:
        raise NotImplementedError("a linear layer with a folded BN or a residual")
    w = plan.keep(plan.xp.asarray(m.weight.data, np.float32)[:, :, None, None].copy())
    b = None if m.bias is None else m.bias.data
    n = x.shape[0]
    out = _conv(plan, x.reshape(n, 1, 1, -1), w, b, 1, 0, relu, None, repr(m))
    return out.reshape(n, m.out_features)


def plan_relu(m, plan: Plan, x):
    out = plan.alloc(x.shape)
    plan.add(lambda: plan.xp.maximum(x, 0, out=out), "fp16 relu")
    return out


def _plan_pool(plan: Plan, x, args, mode: str, ceil_mode: bool = False):
    (kh, kw), stride, padding = pool_args(*args)
    n, h, w, c = x.shape
    check_window_fits(h + 2 * padding[0], w + 2 * padding[1], (kh, kw))
    out = plan.alloc((n, *pooled_size(h, w, (kh, kw), stride, padding, ceil_mode), c))
    plan.add(lambda: pool.pool2d(x, (kh, kw), stride, padding, mode=mode, layout="nhwc",
                                 ceil_mode=ceil_mode, out=out),
             f"fp16 pool {kh}x{kw} {mode}", pool.kernels(mode, "nhwc"))
    return out


def plan_maxpool(m: L.MaxPool2d, plan: Plan, x):
    return _plan_pool(plan, x, m.args, "max", m.ceil_mode)


def plan_avgpool(m: L.AvgPool2d, plan: Plan, x):
    return _plan_pool(plan, x, m.args, "avg")


def plan_gap(m, plan: Plan, x):
    """Global average pool of an (N, H, W, C) map, summed in fp32."""
    acc = plan.keep(plan.xp.empty((x.shape[0], x.shape[3]), np.float32))
    out = plan.alloc(acc.shape)

    def run():
        plan.xp.mean(x, axis=(1, 2), dtype=np.float32, out=acc)
        out[...] = acc

    plan.add(run, "fp16 global average pool")
    return out


def plan_flatten(m, plan: Plan, x):
    if x.ndim == 4 and x.shape[1:3] != (1, 1):
        raise NotImplementedError(f"the fp16 engine flattens (N, H, W, C) maps only at 1x1 "
                                  f"(NHWC order differs from the model's NCHW); got "
                                  f"{tuple(x.shape)}")
    return x.reshape(x.shape[0], -1)


def plan_identity(m, plan: Plan, x):
    return x


def plan_bn_alone(m, plan: Plan, x):
    raise NotImplementedError("the fp16 engine folds batch norm into the convolution before "
                              "it; a batch norm with none is not supported")


def plan_sequential(seq: L.Sequential, plan: Plan, x):
    """Conv -> BN (-> ReLU) runs fold into one launch; everything else module by module."""
    mods, i = list(seq), 0
    while i < len(mods):
        m = mods[i]
        if is_conv(m):
            nxt = mods[i + 1] if i + 1 < len(mods) else None
            bn = nxt if isinstance(nxt, L.BatchNorm2d) else None
            j = i + 1 + (bn is not None)
            relu = j < len(mods) and isinstance(mods[j], L.ReLU)
            x = plan_conv(m, plan, x, bn=bn, relu=relu)
            i = j + relu
        else:
            x = plan_module(m, plan, x)
            i += 1
    return x


def _shortcut(shortcut, plan: Plan, x):
    if isinstance(shortcut, L.Identity):
        return x
    conv, bn = shortcut
    return plan_conv(conv, plan, x, bn=bn)


def plan_basic(b, plan: Plan, x):
    return plan_residual(b, plan, x, [(b.conv1, b.bn1), (b.conv2, b.bn2)], _shortcut)


def plan_bottleneck(b, plan: Plan, x):
    return plan_residual(b, plan, x, [(b.conv1, b.bn1), (b.conv2, b.bn2), (b.conv3, b.bn3)],
                         _shortcut)


def plan_resnet(m, plan: Plan, x):
    y = plan_module(m.pool, plan, plan_module(m.stem, plan, x))
    y = plan_module(m.gap, plan, plan_module(m.stages, plan, y))
    return plan_module(m.fc, plan, y)
