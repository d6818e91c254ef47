"""Planning dense convolutions and linear layers: which of our kernels runs each.

A convolution runs on the implicit GEMM (or, for depthwise and thin groups, the direct
kernel) unless a choice (:func:`tensorconv.engine.choice.one_launch_or_parts`) found a
faster path: a stride-1 1x1 convolution on the batch-1 pointwise kernel, any convolution
the core kernels take on the fastest of them (cluster, tf32x3 or Winograd, tuned tile).
Linear layers run as 1x1 convolutions on the implicit GEMM: CuPy refuses cuBLAS during
graph capture.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_conv_args, conv_geometry
from tensorconv.engine.choice import one_launch_or_parts
from tensorconv.engine.fold import folded
from tensorconv.engine.plan import Plan, Pointwise, Step
from tensorconv.engine.registry import conv_planner, plan_conv
from tensorconv.nn import layers as L
from tensorconv.ops import (
    core_conv,
    direct_conv,
    pointwise_conv,
    tucker_core_cluster,
    winograd_conv,
)
from tensorconv.tuning import oracle

CORE_FILES = tuple(k.FILE for k in core_conv.KERNELS.values())
# every kernel a planned dense convolution may run, whichever path its choices took
DENSE_FILES = direct_conv.FILES + (pointwise_conv.FILE,) + CORE_FILES


def plan_conv2d(m: L.Conv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    w, b = folded(m, bn, plan)
    return plan_folded_conv2d(m, plan, x, w, b, relu, residual)


def plan_folded_conv2d(m: L.Conv2d, plan: Plan, x, w, b, relu=False, residual=None, out=None):
    """:func:`plan_conv2d` once BN is folded into ``w`` and ``b`` (kept by the plan), into
    ``out`` (a plan buffer of the output's shape) or a new buffer."""
    geom = check_conv_args(x, w, b, m.stride, m.padding, m.dilation, m.groups,
                           dtype=np.float32, contiguous=True)
    if out is None:
        out = plan.alloc(geom.output_shape)
    elif tuple(out.shape) != geom.output_shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {geom.output_shape}")
    general = _general_step(plan, x, w, b, geom, relu, residual, out)
    step = plan.append(_core_step(plan, x, w, b, geom, relu, residual, out, general) or general)
    if pointwise_conv.supported(geom) is None:
        step.pointwise = Pointwise(x, w, b, relu, residual, out, geom)
    return out


def _general_step(plan, x, w, b, geom, relu, residual, out) -> Step:
    """The implicit GEMM (or the direct kernel) — or, for a stride-1 1x1 convolution where
    the choice found it faster, the batch-1 pointwise kernel on its best tile."""
    algorithm = direct_conv.choose_algorithm(geom)
    if algorithm == "winograd":   # its weights packed here: nothing allocates in the graph
        return _winograd_step(plan, x, w, b, geom, relu, residual, out)
    conv = (geom.stride, geom.padding, geom.dilation, geom.groups)
    general = Step(lambda: direct_conv.conv2d(x, w, b, *conv, relu=relu, residual=residual,
                                              out=out, algorithm=algorithm),
                   f"conv {tuple(w.shape)} on {tuple(x.shape)} {algorithm}",
                   direct_conv.kernels(geom, algorithm))
    tiles = (pointwise_conv.candidates(geom, backend.device_facts())
             if pointwise_conv.supported(geom) is None else [])
    if not tiles:
        return general
    packed = plan.keep(pointwise_conv.pack_weights(w))

    def launch(tile):
        return Step(lambda: pointwise_conv.conv1x1(x, w, b, residual=residual, relu=relu,
                                                   tile=tile, packed=packed, out=out),
                    f"conv {tuple(w.shape)} on {tuple(x.shape)} pointwise {tile}",
                    pointwise_conv.kernels(geom, tile))

    choice = one_launch_or_parts(
        plan, "pointwise_path", (pointwise_conv.FILE,) + direct_conv.FILES,
        f"{geom}|res{residual is not None}|{algorithm}", tiles=lambda: tiles, launch=launch,
        parts=lambda: [general], decode=lambda v: pointwise_conv.Tile(*v), allowed=tiles)
    return launch(choice.tile) if choice.fused else general


def _winograd_step(plan, x, w, b, geom, relu, residual, out) -> Step:
    """The default's Winograd forward (a training-sized batch of a thin 3x3 layer) on
    weights packed once, at plan time, and its batch tile."""
    packed = plan.keep(winograd_conv.pack_weights(w))
    tile = winograd_conv.tuned_tile(geom) or winograd_conv.batch_tile(geom, backend.device_facts())
    return Step(lambda: winograd_conv.winograd_conv2d(x, w, geom.padding, bias=b, relu=relu,
                                                      residual=residual, tile=tile,
                                                      packed=packed, out=out),
                f"conv {tuple(w.shape)} on {tuple(x.shape)} winograd {tile}",
                winograd_conv.kernels(geom, tile))


def _core_step(plan, x, w, b, geom, relu, residual, out, general: Step) -> Step | None:
    """The convolution on the fastest core kernel (tuned tile) where the choice found that
    faster than ``general``, else None."""
    if tucker_core_cluster.supported(geom) is not None:
        return None

    def launch(choice):
        variant, tile = choice
        packed = plan.keep(core_conv.pack_weights(variant, w))
        return Step(lambda: core_conv.core_conv2d(
            x, w, geom.stride, geom.padding, bias=b, relu=relu, residual=residual,
            variant=variant, tile=tile, packed=packed, out=out),
            f"conv {tuple(w.shape)} on {tuple(x.shape)} {variant} {tile}",
            core_conv.kernels(geom, variant, tile))

    choice = one_launch_or_parts(
        plan, "core_path", DENSE_FILES,
        f"{geom}|{'+'.join(k.name for k in general.kernels)}",
        tiles=lambda: [oracle.tune_core(x, w, geom)], launch=launch, parts=lambda: [general],
        encode=core_conv.encode_choice,
        decode=lambda v: core_conv.check_choice(geom, core_conv.decode_choice(v)),
        candidate_kernels=lambda: oracle.core_kernels(geom))
    return launch(choice.tile) if choice.fused else None


def plan_linear(m: L.Linear, plan: Plan, x, *, bn=None, relu=False, residual=None):
    if bn is not None or residual is not None:
        raise NotImplementedError("a linear layer with a folded BN or a residual")
    w = plan.keep(plan.xp.asarray(m.weight.data)[:, :, None, None].copy())
    b = None if m.bias is None else plan.keep(plan.xp.asarray(m.bias.data).copy())
    n = x.shape[0]
    x4 = x.reshape(n, -1, 1, 1)
    out = plan.alloc((n, m.out_features, 1, 1))
    geom = conv_geometry(x4.shape, w.shape)
    plan.add(lambda: direct_conv.conv2d(x4, w, b, relu=relu, out=out, algorithm="igemm"),
             f"linear {tuple(w.shape[:2])}", direct_conv.kernels(geom, "igemm"))
    return out.reshape(n, m.out_features)


def plan_shortcut(shortcut, plan: Plan, x):
    """A projection shortcut, Sequential(conv, BN), as one launch; the identity as ``x``.

    A 1x1 projection's step is described (``Step.shortcut``) so that
    ``fold_projection_shortcuts`` may compute it inside the launch that adds it: its
    output is read by that launch only.
    """
    if isinstance(shortcut, L.Identity):
        return x
    conv, bn = shortcut
    if conv_planner(conv) is not plan_conv2d:
        return plan_conv(conv, plan, x, bn=bn)
    w, b = folded(conv, bn, plan)  # once: the launch and its description share them
    out = plan_folded_conv2d(conv, plan, x, w, b)
    geom = conv_geometry(x.shape, w.shape, conv.stride, conv.padding, conv.dilation,
                         conv.groups)
    if (geom.r, geom.s, geom.padding, geom.dilation, geom.groups) == (1, 1, (0, 0), (1, 1), 1) \
            and geom.stride[0] == geom.stride[1]:
        plan.steps[-1].shortcut = Pointwise(x, w, b, False, None, out, geom)
    return out
