"""Planning a Tucker-format layer (TDC): 1x1 -> core (the tuned core kernel) -> 1x1, with BN,
residual and ReLU in the last 1x1's epilogue, or one fused launch where the choice found
that faster; and the pass that runs a core with the 1x1s after it (its layer's last,
chained with the next layer's first) as one launch where their weights fit one block."""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_conv_args, conv_geometry
from tensorconv.engine.choice import one_launch_or_parts, plan_one_launch_or_parts, tick
from tensorconv.engine.dense import CORE_FILES, DENSE_FILES
from tensorconv.engine.fold import fold_bn
from tensorconv.engine.passes import PAIR_FILES
from tensorconv.engine.plan import Core, Plan, Step, inherit
from tensorconv.engine.registry import plan_conv
from tensorconv.nn.tucker import TuckerConv2d
from tensorconv.ops import core_conv, tucker_core_cluster, tucker_layer, tucker_tail
from tensorconv.tuning import oracle


def _core_choice(plan: Plan, u, w, geom):
    """``(variant, tile)`` of the core: the stored choice, else tuned (a tuned plan), else
    the default (:func:`tensorconv.ops.core_conv.default_choice`)."""
    if (hit := core_conv.tuned_choice(geom)) is not None:
        return hit
    if not plan.tune:
        return core_conv.default_choice(geom)
    tick(plan, "core kernels")
    if plan.dry:
        plan.kernels.update(oracle.core_kernels(geom))
        return core_conv.default_choice(geom)
    return oracle.tune_core(u, w, geom)


def plan_three(m: TuckerConv2d, plan: Plan, x, bn, relu, residual):
    """The layer as three launches: first 1x1, the core on its kernel, last 1x1 (+ epilogue)."""
    y = plan_conv(m.first, plan, x)
    core = m.core
    w = plan.keep(plan.xp.ascontiguousarray(core.weight.data))
    geom = check_conv_args(y, w, None, core.stride, core.padding, 1, 1, dtype=np.float32,
                           contiguous=True)
    if tucker_core_cluster.supported(geom) is not None:
        z = plan_conv(core, plan, y)  # a core the core kernels do not take
    else:
        variant, tile = _core_choice(plan, y, w, geom)
        packed = plan.keep(core_conv.pack_weights(variant, w))
        z = plan.alloc(geom.output_shape)
        plan.add(lambda: core_conv.core_conv2d(y, w, geom.stride, geom.padding, variant=variant,
                                               tile=tile, packed=packed, out=z),
                 f"{variant} core {tuple(w.shape)} {tile}",
                 core_conv.kernels(geom, variant, tile),
                 core=Core(y, w, geom.stride, geom.padding, z))
    return plan_conv(m.last, plan, z, bn=bn, relu=relu, residual=residual)


def plan_tucker(m: TuckerConv2d, plan: Plan, x, *, bn=None, relu=False, residual=None):
    """One fused launch where the choice found it faster than the three; else the three."""
    core = m.core
    geom = conv_geometry((x.shape[0], m.ranks[0], x.shape[2], x.shape[3]),
                         core.weight.data.shape, core.stride, core.padding)
    if tucker_layer.supported(geom) is not None:
        return plan_three(m, plan, x, bn, relu, residual)
    u1, w = m.first.weight.data, core.weight.data
    u3, b3 = fold_bn(m.last.weight.data, None if m.last.bias is None else m.last.bias.data, bn)
    p = tucker_layer.Problem(geom, x.shape[1], u3.shape[0])
    out = plan.alloc((x.shape[0], p.n, geom.oh, geom.ow))

    def launch(tile):
        packed = tucker_layer.pack_weights(u1, w, u3, b3, tile.cluster, xp=plan.xp)
        return Step(lambda: tucker_layer.tucker_layer_conv2d(
            x, packed, geom.stride, geom.padding, residual=residual, relu=relu, tile=tile,
            out=out), f"fused tucker {m.ranks} on {tuple(x.shape)} {tile}",
            tucker_layer.kernels(p, tile))

    facts = backend.device_facts()
    return plan_one_launch_or_parts(
        plan, "tucker_layer", (tucker_layer.FILE,) + DENSE_FILES,
        f"{p}|res{residual is not None}", launch=launch, out=out,
        plan_parts=lambda q: plan_three(m, q, x, bn, relu, residual),
        tiles=lambda: [oracle.tune_fused_tile(x, u1, w, u3, b3, geom.stride, geom.padding)[0]],
        decode=lambda v: tucker_layer.Tile(*v), allowed=tucker_layer.candidates(p, facts),
        candidate_kernels=lambda: [k for t in tucker_layer.ranked(p, facts, limit=16)
                                   for k in tucker_layer.kernels(p, t)])


def fuse_tucker_tails(plan: Plan) -> None:
    """Run a Tucker core and the launch after it that reads its output — the layer's last
    1x1, or that 1x1 chained with the next layer's first — as one launch
    (``ops.tucker_tail_conv2d``) where all their weights fit one block and the choice found
    that faster than the two launches."""
    steps, i = plan.steps, 0
    facts = backend.device_facts()
    while i + 1 < len(steps):
        first, second = steps[i], steps[i + 1]
        c = first.core
        last, nxt = second.pair or (second.pointwise, None)
        if c is None or last is None or last.x is not c.out:
            i += 1
            continue
        core_geom = conv_geometry(c.u.shape, c.w.shape, c.stride, c.padding)
        p = tucker_tail.Problem(core_geom, last.geom.k, 0 if nxt is None else nxt.geom.k)
        tiles = tucker_tail.candidates(p, facts)
        if not tiles:
            i += 1
            continue

        def launch(tile, c=c, last=last, nxt=nxt, p=p):
            w_next = None if nxt is None else nxt.w
            packed = tucker_tail.pack_weights(c.w, last.w, w_next)
            return Step(lambda: tucker_tail.tucker_tail_conv2d(
                c.u, c.w, c.stride, c.padding, last.w, w_next, last.b,
                None if nxt is None else nxt.b, residual=last.residual, relu1=last.relu,
                relu2=nxt is not None and nxt.relu, tile=tile, packed=packed, y_out=last.out,
                z_out=None if nxt is None else nxt.out),
                f"tucker tail {tuple(c.w.shape)} -> {p.m}{f' -> {p.j}' if p.j else ''} {tile}",
                tucker_tail.kernels(p, tile))

        choice = one_launch_or_parts(
            plan, "tucker_tail", (tucker_tail.FILE,) + CORE_FILES + PAIR_FILES,
            f"{core_geom}|{last.geom}|{None if nxt is None else nxt.geom}|"
            f"res{last.residual is not None}", tiles=lambda t=tiles: t, launch=launch,
            parts=lambda f=first, s=second: [f, s], decode=lambda v: tucker_tail.Tile(*v),
            allowed=tiles)
        if choice.fused:
            steps[i:i + 2] = [inherit(launch(choice.tile), first, second)]
        i += 1
