"""Planning the model zoo's blocks and networks: residual blocks (BN folded, the residual
and ReLU in the last convolution's epilogue), ResNets, VGG, MobileNet, the small CNN,
DenseNets, GoogLeNet and SqueezeNet (stem and head fused where faster)."""

from __future__ import annotations

from tensorconv.engine.dense import plan_shortcut
from tensorconv.engine.layers import plan_bn, plan_head, plan_stem
from tensorconv.engine.plan import Plan
from tensorconv.engine.registry import plan_conv, plan_module
from tensorconv.nn.models.densenet import DenseLayer, DenseNet, Transition
from tensorconv.nn.models.googlenet import GoogLeNet, Inception
from tensorconv.nn.models.resnet import BasicBlock, Bottleneck, ResNet
from tensorconv.nn.models.squeezenet import Fire, SqueezeNet
from tensorconv.nn.models.vgg import VGG


def plan_residual(b, plan: Plan, x, convs, shortcut=plan_shortcut):
    """A residual block: its shortcut and its main path up to the last convolution as two
    branches (the projection runs beside them), then the last convolution adding the
    shortcut before its ReLU.  ``convs`` are the main path's (conv, bn) pairs; ``shortcut``
    plans the block's shortcut module (the fp16 path passes its own)."""
    par = plan.branches()
    with par.branch():
        short = shortcut(b.shortcut, plan, x)
    with par.branch():
        y = x
        for conv, bn in convs[:-1]:
            y = plan_conv(conv, plan, y, bn=bn, relu=True)
    conv, bn = convs[-1]
    return plan_conv(conv, plan, y, bn=bn, relu=True, residual=short)


def plan_basic(b: BasicBlock, plan: Plan, x):
    return plan_residual(b, plan, x, [(b.conv1, b.bn1), (b.conv2, b.bn2)])


def plan_bottleneck(b: Bottleneck, plan: Plan, x):
    return plan_residual(b, plan, x, [(b.conv1, b.bn1), (b.conv2, b.bn2), (b.conv3, b.bn3)])


def plan_resnet(m: ResNet, plan: Plan, x):
    y = plan_stem(plan, m.stem, m.pool, x)
    return plan_head(plan, m.gap, m.fc, plan_module(m.stages, plan, y))


def plan_vgg(m: VGG, plan: Plan, x):
    y = plan_module(m.features, plan, x)
    if m.head == "gap":
        return plan_head(plan, m.gap, m.fc, y)
    return plan_module(m.fc, plan, plan_module(m.flatten, plan, y))


def plan_features_gap_fc(m, plan: Plan, x):
    """MobileNet and the small CNN: features, then the head."""
    return plan_head(plan, m.gap, m.fc, plan_module(m.features, plan, x))


def plan_dense_layer(m: DenseLayer, plan: Plan, x):
    y = plan_bn(m.bn1, plan, x, relu=True)
    y = plan_conv(m.conv1, plan, y, bn=m.bn2, relu=True)
    y = plan_conv(m.conv2, plan, y)
    return plan_concat(plan, [x, y], "dense concat")


def plan_concat(plan: Plan, parts: list, label: str, par=None):
    """One buffer holding ``parts`` (N, C_i, H, W) one after another over channels: one
    step, or with ``par`` (the :class:`~tensorconv.engine.plan.Branches` that made the
    parts, in order) one copy in each part's branch."""
    x = parts[0]
    out = plan.alloc((x.shape[0], sum(p.shape[1] for p in parts)) + x.shape[2:])
    edges = [0]
    for p in parts:
        edges.append(edges[-1] + p.shape[1])
    slots = [out[:, a:b] for a, b in zip(edges, edges[1:])]
    if par is None:
        plan.add(lambda: [s.__setitem__(Ellipsis, p) for s, p in zip(slots, parts)], label)
        return out
    for i, (slot, part) in enumerate(zip(slots, parts)):
        with par.branch(i):
            plan.add(lambda s=slot, p=part: s.__setitem__(Ellipsis, p), f"{label} part {i}")
    return out


def plan_branches(plan: Plan, x, paths: list) -> tuple:
    """Each module of ``paths`` applied to ``x`` in a branch of its own; returns the
    outputs and the :class:`~tensorconv.engine.plan.Branches`."""
    par, outs = plan.branches(), []
    for path in paths:
        with par.branch():
            outs.append(plan_module(path, plan, x))
    return outs, par


def plan_inception(m: Inception, plan: Plan, x):
    """The four branches (each conv with its BN folded and ReLU fused) side by side, each
    copying its output into the concat."""
    outs, par = plan_branches(plan, x, m.branches())
    return plan_concat(plan, outs, "inception concat", par)


def plan_googlenet(m: GoogLeNet, plan: Plan, x):
    y = plan_module(m.inceptions, plan, plan_module(m.stem, plan, x))
    return plan_head(plan, m.gap, m.fc, y)


def plan_fire(m: Fire, plan: Plan, x):
    """The squeeze convolution, then both expand convolutions (bias and ReLU fused) side
    by side, each copying its output into the concat."""
    s = plan_conv(m.squeeze, plan, x, relu=True)
    par, outs = plan.branches(), []
    for conv in (m.expand1x1, m.expand3x3):
        with par.branch():
            outs.append(plan_conv(conv, plan, s, relu=True))
    return plan_concat(plan, outs, "fire concat", par)


def plan_squeezenet(m: SqueezeNet, plan: Plan, x):
    """Features, then the classifier (its 1x1 convolution with ReLU fused, the global
    pool); both planned through the plan's tables, so fp32 and fp16 alike."""
    return plan_module(m.classifier, plan, plan_module(m.features, plan, x))


def plan_transition(m: Transition, plan: Plan, x):
    y = plan_bn(m.bn, plan, x, relu=True)
    return plan_module(m.pool, plan, plan_conv(m.conv, plan, y))


def plan_densenet(m: DenseNet, plan: Plan, x):
    y = plan_stem(plan, m.stem, m.pool, x)
    y = plan_module(m.features, plan, y)
    return plan_head(plan, m.gap, m.fc, plan_bn(m.bn, plan, y, relu=True))
