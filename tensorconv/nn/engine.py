"""Inference engine: BN folding, preallocated buffers, one CUDA graph per model.

A model is turned into a *plan*: a list of launches writing into buffers
allocated once.  Planning walks the module tree through one dispatch point,
:data:`PLANNERS` (module type -> planner); convolution-like layers are planned
through :data:`CONV_PLANNERS`, which take the batch norm to fold, a residual to
add and whether to apply ReLU, so that a structured convolution added later
only registers its own planner.  The plan is warmed up (kernels compiled,
workspaces sized), then captured into a CUDA graph on its own stream;
``engine(x)`` copies ``x`` in and replays the graph.

Only our own kernels and CuPy element-wise/reduction kernels are launched:
CuPy 14 refuses cuBLAS during stream capture, so linear layers run as 1x1
convolutions on our implicit-GEMM kernel.  With ``tune=True`` every convolution
the Tucker core kernels take (filters up to 7x7, stride 1 or 2, dense) is also
timed on the fastest of them (``"cluster"``, ``"tf32x3"`` or, 3x3 stride 1,
``"winograd"``; tuned tile, the same fused epilogue) against the implicit GEMM,
and runs on the winner; so is every stride-1 1x1 convolution on the batch-1 pointwise kernel
(``ops.conv1x1``), the classifier head fused into one launch (every head tile
timed), and so is an ImageNet stem's conv with the max pool after it
(``ops.conv2d_maxpool``, on the tensor cores).  After planning, the passes of
:data:`PLAN_PASSES` rewrite the plan: a 1x1 convolution that reads another's output is
timed chained to it in one launch
(``ops.pointwise_pair``, FMA or tensor-core tiles: a Tucker layer's last 1x1 and
the next layer's first), a residual block's 1x1 projection shortcut is timed
inside the pair that adds it, and ``tensorconv.nn.tucker`` registers one that
joins a Tucker core to the 1x1s after it (``ops.tucker_tail``).  The choices are
kept in the tune cache, where untuned engines find them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, ops
from tensorconv import graph as captured_graph
from tensorconv import precision as mma_precision
from tensorconv.autograd.functions.pooling import pool_args, pooled_size
from tensorconv.checks import check_conv_args, conv_geometry
from tensorconv.nn import layers as L
from tensorconv.nn.models.densenet import DenseLayer, DenseNet, Transition
from tensorconv.nn.models.mobilenet import MobileNetV1
from tensorconv.nn.models.resnet import BasicBlock, Bottleneck, ResNet
from tensorconv.nn.models.smallcnn import SmallCNN
from tensorconv.nn.models.vgg import VGG


class Plan:
    """Buffers allocated once and the launches (zero-argument callables) that fill them.

    A launch fetches its kernels when called, so it runs at the :mod:`tensorconv.precision`
    current then; :meth:`run` and the engine run the steps at the plan's ``precision``.
    """

    def __init__(self, xp, tune: bool = False, precision: str | None = None):
        self.xp = xp
        self.tune = tune    # planners may time tile candidates (tune cache) instead of guessing
        self.precision = mma_precision.check(precision or mma_precision.current())
        self.steps = []
        self.buffers = []   # keeps every array a launch touches alive for the graph's lifetime

    def alloc(self, shape):
        buf = self.xp.empty(tuple(int(s) for s in shape), dtype=np.float32)
        self.buffers.append(buf)
        return buf

    def keep(self, array):
        self.buffers.append(array)
        return array

    def add(self, launch, label: str = "", pointwise: "PointwiseStep | None" = None,
            core: "CoreStep | None" = None) -> None:
        """Append a launch; ``label`` names it in per-launch profiles; ``pointwise``
        describes a stride-1 1x1 convolution that :func:`fuse_pointwise_pairs` may chain,
        ``core`` a Tucker core convolution that a plan pass may fuse with what follows.
        A projection shortcut's planner sets ``shortcut`` on its launch afterwards
        (:func:`fold_projection_shortcuts`)."""
        launch.label = label
        launch.pointwise, launch.core, launch.pair, launch.shortcut = pointwise, core, None, None
        self.steps.append(launch)

    def run(self) -> None:
        with mma_precision.using(self.precision):
            for launch in self.steps:
                launch()


PLANNERS: dict = {}
CONV_PLANNERS: dict = {}


def register_planner(*types):
    """Decorator: ``fn(module, plan, x) -> output buffer`` plans modules of ``types``."""
    def deco(fn):
        for t in types:
            PLANNERS[t] = fn
        return fn
    return deco


def register_conv_planner(*types):
    """Decorator: ``fn(module, plan, x, *, bn, relu, residual) -> output`` for conv-like layers.

    A conv-like layer met on its own (a model that is one layer, a layer in a
    ``Sequential``) is planned through it with nothing folded.
    """
    def deco(fn):
        for t in types:
            CONV_PLANNERS[t] = fn
            PLANNERS.setdefault(t, _plan_conv_alone)
        return fn
    return deco


def _plan_conv_alone(m, plan, x):
    return plan_conv(m, plan, x)


def _lookup(table, module, what):
    for cls in type(module).__mro__:
        if cls in table:
            return table[cls]
    raise NotImplementedError(f"the inference engine has no {what} for {type(module).__name__}; "
                              f"register one with tensorconv.nn.engine.register_{what}")


def plan_module(module, plan: Plan, x):
    """Plan ``module`` applied to buffer ``x``; return its output buffer."""
    return _lookup(PLANNERS, module, "planner")(module, plan, x)


def plan_conv(module, plan: Plan, x, *, bn=None, relu=False, residual=None):
    """Plan a conv-like layer with a folded BN, an added residual and a ReLU."""
    return _lookup(CONV_PLANNERS, module, "conv_planner")(module, plan, x, bn=bn, relu=relu,
                                                          residual=residual)


def is_conv(module) -> bool:
    return any(cls in CONV_PLANNERS for cls in type(module).__mro__)


def bn_scale_shift(bn: L.BatchNorm2d):
    """(scale, shift) with ``bn(y) == scale * y + shift`` in evaluation mode (float64, host)."""
    gamma, beta = (backend.to_host(p.data).astype(np.float64) for p in (bn.weight, bn.bias))
    mean = backend.to_host(bn.running_mean).astype(np.float64)
    var = backend.to_host(bn.running_var).astype(np.float64)
    scale = gamma / np.sqrt(var + bn.eps)
    return scale, beta - mean * scale


def fold_bn(weight, bias, bn):
    """Weights (K, ...) and bias (K,) of ``bn(conv(x))`` as one convolution (host float32)."""
    w = backend.to_host(weight).astype(np.float64)
    b = np.zeros(w.shape[0]) if bias is None else backend.to_host(bias).astype(np.float64)
    if bn is None:
        return w.astype(np.float32), (None if bias is None else b.astype(np.float32))
    scale, shift = bn_scale_shift(bn)
    w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    return w.astype(np.float32), (b * scale + shift).astype(np.float32)


# --------------------------------------------------------------------------- layers

def _folded(m: L.Conv2d, bn, plan):
    """``m``'s weights and bias with ``bn`` folded in, on the plan's device and kept."""
    w, b = fold_bn(m.weight.data, None if m.bias is None else m.bias.data, bn)
    return plan.keep(plan.xp.asarray(w)), (None if b is None else plan.keep(plan.xp.asarray(b)))


@register_conv_planner(L.Conv2d)
def _plan_conv2d(m: L.Conv2d, plan, x, *, bn=None, relu=False, residual=None):
    w, b = _folded(m, bn, plan)
    return _plan_folded_conv2d(m, plan, x, w, b, relu, residual)


def _plan_folded_conv2d(m: L.Conv2d, plan, x, w, b, relu=False, residual=None):
    """:func:`_plan_conv2d` once BN is folded into ``w`` and ``b`` (kept by the plan)."""
    geom = check_conv_args(x, w, b, m.stride, m.padding, m.dilation, m.groups,
                           dtype=np.float32, contiguous=True)
    out = plan.alloc(geom.output_shape)
    algorithm = ops.choose_algorithm(geom)
    if residual is not None and algorithm == "direct":
        algorithm = "igemm"  # only the implicit-GEMM epilogue adds a residual
    args = (geom.stride, geom.padding, geom.dilation, geom.groups)
    ours = lambda: ops.conv2d(x, w, b, *args, relu=relu, residual=residual,  # noqa: E731
                              out=out, algorithm=algorithm)
    ours, algorithm = _pointwise_path(plan, x, w, b, geom, relu, residual, out, ours, algorithm)
    core = _core_path(plan, x, w, geom, ours, algorithm)
    from tensorconv.ops import pointwise

    pw = (PointwiseStep(x, w, b, relu, residual, out, geom) if pointwise.supported(geom) is None
          else None)
    if core is None:
        plan.add(ours, f"conv {tuple(w.shape)} on {tuple(x.shape)} {algorithm}", pw)
        return out
    from tensorconv.ops import tucker as tucker_ops

    variant, tile, prepared = core
    plan.add(lambda: tucker_ops.core_conv2d(x, w, geom.stride, geom.padding, bias=b, relu=relu,
                                            residual=residual, variant=variant, tile=tile,
                                            out=out, **prepared),
             f"conv {tuple(w.shape)} on {tuple(x.shape)} {variant} {tile}", pw)
    return out


@dataclass(frozen=True)
class PointwiseStep:
    """A planned stride-1 1x1 convolution ``out = relu?(conv(x, w) + b + residual)``
    (BN folded into ``w`` and ``b``)."""

    x: object
    w: object
    b: object
    relu: bool
    residual: object
    out: object
    geom: object


@dataclass(frozen=True)
class CoreStep:
    """A planned Tucker core convolution ``out = conv(u, w, stride, padding)``."""

    u: object
    w: object
    stride: tuple
    padding: tuple
    out: object


PLAN_PASSES: list = []


def register_plan_pass(fn):
    """Decorator: ``fn(plan)`` rewrites a finished plan (in registration order)."""
    PLAN_PASSES.append(fn)
    return fn


def _tune_pair_tiles(key, tiles, fused, replaced, flag: str) -> dict:
    """Time ``fused(tile)`` on every pair tile and ``replaced`` (the launches it would
    replace) by graph replay; store and return the verdict: the best tile, both times
    (``pair_us`` or ``folded_us``, ``two_us``) and ``flag``, whether the fused launch won."""
    from tensorconv import bench
    from tensorconv.tuning import cache

    times = {t: bench.time_graph(fused(t), repeat=10).median_us for t in tiles}
    best = min(times, key=times.get)
    fused_us = "pair_us" if flag == "pair" else "folded_us"
    verdict = {"tile": [best.p, best.cl, best.mma], fused_us: times[best],
               "two_us": bench.time_graph(replaced, repeat=10).median_us}
    verdict[flag] = verdict[fused_us] < verdict["two_us"]
    cache.store(key, verdict)
    return verdict


@register_plan_pass
def fuse_pointwise_pairs(plan: Plan) -> None:
    """Run each 1x1 convolution that reads another's output in the same launch as that
    one (``ops.pointwise_pair``) where that was timed faster than the two launches.

    The pair takes the first one's place in the plan: the second reads nothing else
    and every buffer is written once per run, so running it earlier is safe.  With
    ``plan.tune`` every tile and the two launches are timed and the verdict kept in
    the tune cache ("pointwise_pair"); untuned plans follow a stored verdict only.
    A step joins at most one pair.
    """
    from tensorconv.ops import pointwise_pair as pair
    from tensorconv.tuning import cache

    steps, taken = plan.steps, set()
    for i, first in enumerate(steps):
        a = first.pointwise
        if a is None or i in taken:
            continue
        k = next((k for k in range(i + 1, len(steps))
                  if k not in taken and steps[k].pointwise is not None
                  and steps[k].pointwise.x is a.out and steps[k].pointwise.residual is None), None)
        if k is None:
            continue
        second, b = steps[k], steps[k].pointwise
        c, m, j = a.geom.c, a.geom.k, b.geom.k
        tiles = pair.fitting_tiles(c, m, j)
        if not tiles:
            continue
        key = cache.make_key("pointwise_pair", "pointwise_pair.cu",
                             f"{a.geom}|{b.geom}|res{a.residual is not None}")
        verdict = cache.lookup(key)
        if (verdict is None and not plan.tune) or (verdict is not None and not verdict["pair"]):
            continue

        def launch(tile, packed, a=a, b=b):
            return lambda: pair.conv1x1_pair(a.x, a.w, b.w, a.b, b.b, residual=a.residual,
                                             relu1=a.relu, relu2=b.relu, tile=tile,
                                             packed=packed, y_out=a.out, z_out=b.out)

        if verdict is None:
            verdict = _tune_pair_tiles(
                key, tiles, lambda t: launch(t, pair.pack_weights(a.w, b.w, t)),
                lambda: (first(), second()), "pair")
            if not verdict["pair"]:
                continue
        tile = pair.PairTile(*verdict["tile"])
        packed = tuple(plan.keep(t) for t in pair.pack_weights(a.w, b.w, tile))
        fused = launch(tile, packed)
        fused.label = f"pointwise pair {c}->{m}->{j} on {tuple(a.x.shape)} {tile}"
        fused.pointwise, fused.core, fused.pair, fused.shortcut = None, None, (a, b), None
        steps[i] = fused
        taken.update((i, k))
    plan.steps = [s for k, s in enumerate(steps) if not (k in taken and s.pointwise is not None)]


@register_plan_pass
def fold_projection_shortcuts(plan: Plan) -> None:
    """Compute each 1x1 projection shortcut inside the chained pair that adds it as a
    residual (``ops.conv1x1_pair``'s ``skip``: the shortcut's input channels become more
    rows of the pair's first product) where that was timed faster than the two launches.

    With ``plan.tune`` every tile and the two launches are timed and the verdict kept
    in the tune cache ("shortcut_fold"); untuned plans follow a stored verdict
    only.  Runs after :func:`fuse_pointwise_pairs`, before the Tucker tails, which then
    leave a folded pair alone.
    """
    from tensorconv.ops import pointwise_pair as pair
    from tensorconv.tuning import cache

    made = {id(s.shortcut.out): s for s in plan.steps if s.shortcut is not None}
    folded = set()
    for i, step in enumerate(plan.steps):
        if step.pair is None or id(step.pair[0].residual) not in made:
            continue
        (a, b), short = step.pair, made[id(step.pair[0].residual)]
        sc = short.shortcut
        tiles = pair.fitting_tiles(a.geom.c + sc.geom.c, a.geom.k, b.geom.k)
        key = cache.make_key("shortcut_fold", "pointwise_pair.cu",
                             f"{a.geom}|{b.geom}|{sc.geom}")
        verdict = cache.lookup(key) if tiles else None
        if not tiles or (verdict is None and not plan.tune) or \
                (verdict is not None and not verdict["fold"]):
            continue
        b1 = sc.b if a.b is None else (a.b if sc.b is None else plan.keep(a.b + sc.b))

        def launch(tile, packed, a=a, b=b, sc=sc, b1=b1):
            return lambda: pair.conv1x1_pair(
                a.x, a.w, b.w, b1, b.b, skip_x=sc.x, skip_w=sc.w, skip_stride=sc.geom.stride[0],
                relu1=a.relu, relu2=b.relu, tile=tile, packed=packed, y_out=a.out, z_out=b.out)

        if verdict is None:
            verdict = _tune_pair_tiles(
                key, tiles, lambda t: launch(t, pair.pack_weights(a.w, b.w, t, sc.w)),
                lambda: (short(), step()), "fold")
            if not verdict["fold"]:
                continue
        tile = pair.PairTile(*verdict["tile"])
        fused = launch(tile, tuple(plan.keep(t) for t in pair.pack_weights(a.w, b.w, tile, sc.w)))
        fused.label = f"{step.label} + shortcut {tuple(sc.w.shape)} {tile}"
        fused.pointwise = fused.core = fused.pair = fused.shortcut = None
        plan.steps[i] = fused
        folded.add(id(short))
    plan.steps = [s for s in plan.steps if id(s) not in folded]


def _pointwise_path(plan, x, w, b, geom, relu, residual, out, general, name):
    """``(launch, name)``: the batch-1 1x1 kernel (``ops.conv1x1``, best tile) when it was
    timed faster than ``general`` (named ``name``) on this 1x1 convolution, else the latter.

    Timed only with ``plan.tune``; the verdict is kept in the tune cache.
    """
    from tensorconv import bench
    from tensorconv.ops import pointwise
    from tensorconv.tuning import cache

    if pointwise.supported(geom) is not None or not pointwise.fitting_tiles(geom):
        return general, name
    key = cache.make_key("pointwise_path", "pointwise_conv.cu",
                         f"{geom}|res{residual is not None}|{name}")
    verdict = cache.lookup(key)
    if (verdict is None and not plan.tune) or (verdict is not None and not verdict["pointwise"]):
        return general, name
    wt = plan.keep(pointwise.transpose_weights(w))

    def launch(tile):
        return lambda: ops.conv1x1(x, w, b, residual=residual, relu=relu, tile=tile, wt=wt,
                                   out=out)

    if verdict is None:
        times = {t: bench.time_graph(launch(t), repeat=10).median_us
                 for t in pointwise.fitting_tiles(geom)}
        best = min(times, key=times.get)
        verdict = {"tile": [best.p, best.kb], "pointwise_us": times[best],
                   "general_us": bench.time_graph(general, repeat=10).median_us}
        verdict["pointwise"] = verdict["pointwise_us"] < verdict["general_us"]
        cache.store(key, verdict)
    if not verdict["pointwise"]:
        return general, name
    tile = pointwise.PointwiseTile(*verdict["tile"])
    return launch(tile), f"pointwise {tile}"


def _core_path(plan, x, w, geom, general, name):
    """``(variant, tile, prepared weights)`` when a Tucker core kernel runs this convolution
    faster than ``general`` (the launch it would otherwise get, named ``name``), else None.

    With ``plan.tune`` both are timed (the core kernels tuned first) and the verdict
    stored in the tune cache; without, only a stored verdict counts.
    """
    from tensorconv import bench
    from tensorconv.ops import tucker as tucker_ops
    from tensorconv.tuning import cache, oracle

    if tucker_ops.cluster_supported(geom) is not None:
        return None
    key = cache.make_key("conv_path", "direct_conv.cu",
                         f"{cache.kernel_version('tucker_core_conv.cu')}|"
                         f"{cache.kernel_version('tucker_core_tf32x3.cu')}"
                         f"{oracle.winograd_version(geom)}|{geom}|{name}")
    verdict = cache.lookup(key)
    if verdict is None and not plan.tune:
        return None
    choice = oracle.tune_core(x, w, geom) if verdict is None else oracle.known_core_choice(geom)
    if choice is None:  # the verdict outlived the core tuning it was based on
        return None
    variant, tile = choice
    prepared = {k: plan.keep(v) for k, v in tucker_ops.prepared_weights(variant, w).items()}
    if verdict is None:
        out = plan.xp.empty(geom.output_shape, np.float32)
        core_us = bench.time_graph(lambda: tucker_ops.core_conv2d(
            x, w, geom.stride, geom.padding, variant=variant, tile=tile, out=out, **prepared),
            repeat=10).median_us
        general_us = bench.time_graph(general, repeat=10).median_us
        verdict = {"core": core_us < general_us, "core_us": core_us, "general_us": general_us}
        cache.store(key, verdict)
    return (variant, tile, prepared) if verdict["core"] else None


@register_conv_planner(L.Linear)
def _plan_linear(m: L.Linear, plan, x, *, bn=None, relu=False, residual=None):
    if bn is not None or residual is not None:
        raise NotImplementedError("a linear layer with a folded BN or a residual")
    w = plan.keep(plan.xp.asarray(backend.to_host(m.weight.data))[:, :, None, None].copy())
    b = None if m.bias is None else plan.keep(plan.xp.asarray(backend.to_host(m.bias.data)))
    n = x.shape[0]
    x4 = x.reshape(n, -1, 1, 1)
    out = plan.alloc((n, m.out_features, 1, 1))
    plan.add(lambda: ops.conv2d(x4, w, b, relu=relu, out=out, algorithm="igemm"),
             f"linear {tuple(w.shape[:2])}")
    return out.reshape(n, m.out_features)


@register_planner(L.BatchNorm2d)
def _plan_bn(m: L.BatchNorm2d, plan, x, relu: bool = False):
    xp = plan.xp
    scale, shift = bn_scale_shift(m)
    zeros, ones = xp.zeros(len(scale), np.float32), xp.ones(len(scale), np.float32)
    scale, shift = xp.asarray(scale, np.float32), xp.asarray(shift, np.float32)
    plan.keep(zeros), plan.keep(ones), plan.keep(scale), plan.keep(shift)
    out = plan.alloc(x.shape)
    plan.add(lambda: ops.norm.batch_norm_apply(x, zeros, ones, scale, shift, relu=relu, out=out))
    return out


@register_planner(L.ReLU)
def _plan_relu(m, plan, x):
    out = plan.alloc(x.shape)
    plan.add(lambda: plan.xp.maximum(x, 0, out=out))
    return out


def _plan_pool(plan, x, kernel, stride, padding, mode):
    out = plan.alloc(x.shape[:2] + pooled_size(*x.shape[2:], kernel, stride, padding))
    plan.add(lambda: ops.pool2d(x, kernel, stride, padding, mode=mode, out=out),
             f"pool {kernel} {mode}")
    return out


@register_planner(L.MaxPool2d)
def _plan_maxpool(m, plan, x):
    kernel, stride, padding = pool_args(*m.args)
    return _plan_pool(plan, x, kernel, stride, padding, "max")


@register_planner(L.AvgPool2d)
def _plan_avgpool(m, plan, x):
    kernel, stride, padding = pool_args(*m.args)
    return _plan_pool(plan, x, kernel, stride, padding, "avg")


@register_planner(L.GlobalAvgPool2d)
def _plan_gap(m, plan, x):
    out = plan.alloc(x.shape[:2])
    plan.add(lambda: plan.xp.mean(x, axis=(2, 3), out=out), "global average pool")
    return out


@register_planner(L.Flatten)
def _plan_flatten(m, plan, x):
    return x.reshape(x.shape[0], -1)


@register_planner(L.Identity)
def _plan_identity(m, plan, x):
    return x


@register_planner(L.Dropout)
def _plan_dropout(m, plan, x):
    return x  # identity at inference


@register_planner(L.Sequential)
def _plan_sequential(seq, plan, x, relu_last: bool = False):
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
            last = j + relu >= len(mods)
            x = plan_conv(m, plan, x, bn=bn, relu=relu or (last and relu_last))
            i = j + relu
        elif isinstance(m, L.BatchNorm2d) and isinstance(nxt, L.ReLU):
            x = _plan_bn(m, plan, x, relu=True)
            i += 2
        else:
            x = plan_module(m, plan, x)
            i += 1
    return x


def _plan_shortcut(shortcut, plan, x):
    """A projection shortcut, Sequential(conv, BN), as one launch; the identity as ``x``.

    A 1x1 projection's launch is described (``launch.shortcut``) so that
    :func:`fold_projection_shortcuts` may compute it inside the launch that adds it:
    its output is read by that launch only.
    """
    if isinstance(shortcut, L.Identity):
        return x
    conv, bn = shortcut
    if _lookup(CONV_PLANNERS, conv, "conv_planner") is not _plan_conv2d:
        return plan_conv(conv, plan, x, bn=bn)
    w, b = _folded(conv, bn, plan)  # once: the launch and its description share them
    out = _plan_folded_conv2d(conv, plan, x, w, b)
    geom = conv_geometry(x.shape, w.shape, conv.stride, conv.padding, conv.dilation,
                         conv.groups)
    if (geom.r, geom.s, geom.padding, geom.dilation, geom.groups) == (1, 1, (0, 0), (1, 1), 1) \
            and geom.stride[0] == geom.stride[1]:
        plan.steps[-1].shortcut = PointwiseStep(x, w, b, False, None, out, geom)
    return out


def _one_launch_or_parts(plan, key, tiles, fused, plan_parts, default_tile, tile_type):
    """Whether a fused launch replaces the modules it covers, and on which tile.

    With ``plan.tune`` and no verdict in the tune cache, ``fused(tile)`` (a launch) is
    timed on every tile of ``tiles`` and ``plan_parts(sub_plan)`` (the modules planned
    as usual; returns their output) by graph replay; the verdict (best tile, both
    times, "fused") is stored.  Untuned plans follow a stored verdict, else fuse on
    ``default_tile`` (the first tile of ``tiles`` where it is not one).

    Returns ``(tile, None)`` to fuse, or ``(None, output)`` with the parts planned.
    """
    from dataclasses import astuple

    from tensorconv import bench
    from tensorconv.tuning import cache

    verdict = cache.lookup(key)
    if verdict is None and plan.tune:
        sub = Plan(plan.xp, tune=True)
        sub.buffers = plan.buffers  # the parts' buffers live as long as the plan's
        parts_out = plan_parts(sub)
        times = {t: bench.time_graph(fused(t), repeat=10).median_us for t in tiles}
        best = min(times, key=times.get)
        verdict = {"tile": list(astuple(best)), "fused_us": times[best],
                   "two_us": bench.time_graph(sub.run, repeat=10).median_us}
        verdict["fused"] = verdict["fused_us"] <= verdict["two_us"]
        cache.store(key, verdict)
        if not verdict["fused"]:
            plan.steps += sub.steps
            return None, parts_out
    if verdict is not None and not verdict["fused"]:
        return None, plan_parts(plan)
    if verdict is not None:
        return tile_type(*verdict["tile"]), None
    return (default_tile if default_tile in tiles else tiles[0]), None


def _plan_head(plan, gap, fc, x):
    """Global average pool then a linear layer: one launch (``ops.gap_linear``, every
    head tile timed against the two launches with ``plan.tune``: verdict "head_path")
    where the head is exactly that, else module by module."""
    if not (isinstance(gap, L.GlobalAvgPool2d) and isinstance(fc, L.Linear)):
        return plan_module(fc, plan, plan_module(gap, plan, x))
    from tensorconv.ops import head
    from tensorconv.tuning import cache

    w = plan.keep(plan.xp.asarray(backend.to_host(fc.weight.data)))
    b = None if fc.bias is None else plan.keep(plan.xp.asarray(backend.to_host(fc.bias.data)))
    out = plan.alloc((x.shape[0], fc.out_features))

    def fused(tile):
        return lambda: ops.gap_linear(x, w, b, out=out, tile=tile)

    key = cache.make_key("head_path", "classifier_head.cu", f"{tuple(x.shape)}|K{w.shape[0]}")
    tile, parts = _one_launch_or_parts(
        plan, key, head.fitting_tiles(x.shape[1]), fused,
        lambda p: plan_module(fc, p, plan_module(gap, p, x)), head.DEFAULT_TILE, head.HeadTile)
    if tile is None:
        return parts
    plan.add(fused(tile), f"gap + linear {tuple(w.shape)} {tile}")
    return out


def _plan_stem(plan, stem, pool, x):
    """An ImageNet stem, ``Sequential(conv, BN, ReLU)`` then max pooling: one launch
    (``ops.conv2d_maxpool``, every fitting tile timed against the planned conv and pool
    with ``plan.tune``: verdict "stem_pool") where the kernel takes it, else the two."""
    from tensorconv.ops import conv_pool
    from tensorconv.tuning import cache

    def parts(p):
        return plan_module(pool, p, plan_module(stem, p, x))

    mods = list(stem) if isinstance(stem, L.Sequential) else []
    if not (isinstance(pool, L.MaxPool2d) and len(mods) == 3 and type(mods[0]) is L.Conv2d
            and isinstance(mods[1], L.BatchNorm2d) and isinstance(mods[2], L.ReLU)):
        return parts(plan)
    conv = mods[0]
    geom = conv_geometry(x.shape, conv.weight.data.shape, conv.stride, conv.padding,
                         conv.dilation, conv.groups)
    kernel, stride, padding = pool_args(*pool.args)
    tiles = conv_pool.fitting_tiles(geom.c, geom.r, geom.s, geom.stride[0], kernel[0], stride[0])
    if conv_pool.supported(geom, kernel, stride) is not None or not tiles:
        return parts(plan)
    w, b = _folded(conv, mods[1], plan)
    out = plan.alloc((geom.n, geom.k) + pooled_size(geom.oh, geom.ow, kernel, stride, padding))

    def fused(tile):
        packed = conv_pool.pack_weights(w, tile)
        return lambda: ops.conv2d_maxpool(x, w, b, geom.stride, geom.padding, kernel, stride,
                                          padding, relu=True, tile=tile, packed=packed, out=out)

    key = cache.make_key("stem_pool", "conv_maxpool.cu", f"{geom}|pool{kernel}{stride}{padding}")
    tile, two = _one_launch_or_parts(plan, key, tiles, fused, parts, conv_pool.DEFAULT_TILE,
                                     conv_pool.ConvPoolTile)
    if tile is None:
        return two
    plan.add(fused(tile), f"conv {tuple(w.shape)} + max pool {kernel} on {tuple(x.shape)} {tile}")
    return out


# --------------------------------------------------------------------------- blocks and models

@register_planner(BasicBlock)
def _plan_basic(b: BasicBlock, plan, x):
    short = _plan_shortcut(b.shortcut, plan, x)
    y = plan_conv(b.conv1, plan, x, bn=b.bn1, relu=True)
    return plan_conv(b.conv2, plan, y, bn=b.bn2, relu=True, residual=short)


@register_planner(Bottleneck)
def _plan_bottleneck(b: Bottleneck, plan, x):
    short = _plan_shortcut(b.shortcut, plan, x)
    y = plan_conv(b.conv1, plan, x, bn=b.bn1, relu=True)
    y = plan_conv(b.conv2, plan, y, bn=b.bn2, relu=True)
    return plan_conv(b.conv3, plan, y, bn=b.bn3, relu=True, residual=short)


@register_planner(ResNet)
def _plan_resnet(m: ResNet, plan, x):
    y = _plan_stem(plan, m.stem, m.pool, x)
    return _plan_head(plan, m.gap, m.fc, plan_module(m.stages, plan, y))


@register_planner(VGG)
def _plan_vgg(m: VGG, plan, x):
    y = plan_module(m.features, plan, x)
    return plan_module(m.fc, plan, plan_module(m.flatten, plan, y))


@register_planner(MobileNetV1, SmallCNN)
def _plan_features_gap_fc(m, plan, x):
    return _plan_head(plan, m.gap, m.fc, plan_module(m.features, plan, x))


@register_planner(DenseLayer)
def _plan_dense_layer(m: DenseLayer, plan, x):
    y = _plan_bn(m.bn1, plan, x, relu=True)
    y = plan_conv(m.conv1, plan, y, bn=m.bn2, relu=True)
    y = plan_conv(m.conv2, plan, y)
    out = plan.alloc((x.shape[0], x.shape[1] + y.shape[1]) + x.shape[2:])
    head, tail = out[:, :x.shape[1]], out[:, x.shape[1]:]
    plan.add(lambda: (head.__setitem__(Ellipsis, x), tail.__setitem__(Ellipsis, y)))
    return out


@register_planner(Transition)
def _plan_transition(m: Transition, plan, x):
    y = _plan_bn(m.bn, plan, x, relu=True)
    return plan_module(m.pool, plan, plan_conv(m.conv, plan, y))


@register_planner(DenseNet)
def _plan_densenet(m: DenseNet, plan, x):
    y = _plan_stem(plan, m.stem, m.pool, x)
    y = plan_module(m.features, plan, y)
    return _plan_head(plan, m.gap, m.fc, _plan_bn(m.bn, plan, y, relu=True))


# --------------------------------------------------------------------------- the engine

class InferenceEngine:
    """A model's forward at a fixed input shape, BN folded, replayed from a CUDA graph.

    Parameters
    ----------
    model : Module
        On the GPU (``model.to("gpu")``); it is read once, at construction.
    input_shape : tuple (N, C, H, W)
    graph : bool
        Capture the plan into a CUDA graph (default); False runs it eagerly.
    tune : bool
        Time tile candidates of tunable kernels (Tucker cores) while planning and
        keep the winners in the tune cache; default False uses tuned tiles already
        in the cache, else each kernel's default tile.
    programmatic : bool, optional
        Let each kernel of the graph launch while the one before it drains
        (:mod:`tensorconv.graph`); default: where the device supports it (sm_90).
    precision : {"fp32", "tf32"}, optional
        Of the tensor-core kernels' products (:mod:`tensorconv.precision`): planning,
        tuning (the tune cache keeps each precision's choices apart) and the graph all
        use it; default: the current one, "fp32" unless set.

    Call ``engine(x)`` with a CuPy/DLPack array of ``input_shape``; the result is
    the engine's own output buffer (overwritten by the next call) unless
    ``copy=True``.
    """

    def __init__(self, model, input_shape, *, graph: bool = True, tune: bool = False,
                 programmatic: bool | None = None, precision: str | None = None):
        cp = backend.require_cuda("InferenceEngine")
        if model.xp is not cp:
            raise ValueError("the model's parameters are on the CPU: call model.to('gpu') first")
        if len(input_shape) != 4 or model.in_channels != input_shape[1]:
            raise ValueError(f"input_shape must be (N, {model.in_channels}, H, W), "
                             f"got {tuple(input_shape)}")
        self.input_shape = tuple(int(s) for s in input_shape)
        self.plan = Plan(cp, tune=tune, precision=precision)
        self.precision = self.plan.precision
        self.stream = cp.cuda.Stream(non_blocking=True)
        with self.stream, mma_precision.using(self.precision):
            self.input = self.plan.alloc(self.input_shape)
            self.input[...] = 0
            self.output = plan_module(model, self.plan, self.input)
            for rewrite in PLAN_PASSES:
                rewrite(self.plan)
            self.plan.run()  # compile kernels, size workspaces: nothing is allocated in capture
            self.plan.run()
            self.stream.synchronize()
            self.graph = None
            if graph:
                if programmatic is None:
                    programmatic = captured_graph.supported()
                self.graph = captured_graph.CapturedGraph(self.stream, self.plan.run,
                                                          programmatic=programmatic)
        self.launches = len(self.plan.steps)

    def replay(self) -> None:
        """Run the captured graph (or the eager plan) on the engine's input buffer."""
        with self.stream:
            if self.graph is not None:
                self.graph.launch(self.stream)
            else:
                self.plan.run()

    def time(self, **kwargs):
        """Latency of :meth:`replay` (a :class:`tensorconv.bench.Timing`), events recorded on
        the engine's own stream — on any other stream they would time nothing.  ``kwargs``
        go to :func:`tensorconv.bench.time_events`."""
        from tensorconv import bench

        with self.stream:
            return bench.time_events(self.replay, **kwargs)

    def __call__(self, x, copy: bool = True):
        x = backend.as_array(x, "x")
        if tuple(x.shape) != self.input_shape:
            raise ValueError(f"x has shape {tuple(x.shape)}; the engine was built for "
                             f"{self.input_shape}")
        cp = self.plan.xp
        if not backend.is_cupy_array(x):
            raise TypeError("x must be on the GPU (a CuPy or DLPack CUDA array)")
        cp.cuda.get_current_stream().synchronize()  # x may still be being written
        with self.stream:
            self.input[...] = x
        self.replay()
        self.stream.synchronize()
        return self.output.copy() if copy else self.output
