"""Tucker-format convolution layers (TDC): ``TuckerConv2d`` and ``tuckerize``.

A ``TuckerConv2d`` runs a 1x1 convolution C -> D1, the core R x S convolution
D1 -> D2 (with the layer's stride and padding) and a 1x1 convolution D2 -> N;
it trains through the autograd like any layer and runs on the TDC core kernel
in the inference engine.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend
from tensorconv.checks import check_conv_args, conv_geometry
from tensorconv.decomp import tucker as td
from tensorconv.nn.layers import Conv2d
from tensorconv.nn.module import Module


class TuckerConv2d(Module):
    """Tucker-format convolution with ranks (D1, D2).

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size : int or (int, int)
    ranks : (D1, D2)
        Input and output channels of the core convolution.
    stride, padding : as :class:`Conv2d`
    bias : bool
    rng : numpy Generator, optional
        For the random initialisation (training a Tucker model from scratch).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, ranks, stride=1,
                 padding=0, bias: bool = False, rng=None):
        super().__init__()
        d1, d2 = (int(r) for r in ranks)
        if not (1 <= d1 <= in_channels and 1 <= d2 <= out_channels):
            raise ValueError(f"ranks (D1, D2) = {(d1, d2)} must lie in 1..{in_channels} and "
                             f"1..{out_channels}")
        self.first = Conv2d(in_channels, d1, 1, bias=False, rng=rng)
        self.core = Conv2d(d1, d2, kernel_size, stride, padding, bias=False, rng=rng)
        self.last = Conv2d(d2, out_channels, 1, bias=bias, rng=rng)
        self.in_channels, self.out_channels, self.ranks = in_channels, out_channels, (d1, d2)
        self.kernel_size, self.stride, self.padding = self.core.kernel_size, stride, padding
        self.macs = 0

    def forward(self, x):
        y = self.last(self.core(self.first(x)))
        self.macs = self.first.macs + self.core.macs + self.last.macs
        return y

    def num_macs(self) -> int:
        return self.macs

    @classmethod
    def from_conv(cls, conv: Conv2d, ranks, *, method: str = "hooi") -> "TuckerConv2d":
        """Decompose a trained ``Conv2d`` (HOOI or truncated HOSVD) into a ``TuckerConv2d``."""
        if conv.groups != 1 or conv.dilation not in (1, (1, 1)):
            raise ValueError("only dense, undilated convolutions have a Tucker format here")
        w = conv.weight.data
        if method == "hooi":
            f = td.partial_tucker(w.astype(np.float64) if backend.array_module(w) is np else w, ranks)
        elif method == "hosvd":
            f = td.hosvd(w, ranks)
        else:
            raise ValueError(f"method must be 'hooi' or 'hosvd', got {method!r}")
        layer = cls(conv.in_channels, conv.out_channels, conv.kernel_size, ranks, conv.stride,
                    conv.padding, bias=conv.bias is not None)
        xp = backend.array_module(w)
        dt = w.dtype
        layer.first.weight.data = xp.ascontiguousarray(f.u_in.T[:, :, None, None].astype(dt))
        layer.core.weight.data = xp.ascontiguousarray(f.core.astype(dt))
        layer.last.weight.data = xp.ascontiguousarray(f.u_out[:, :, None, None].astype(dt))
        if conv.bias is not None:
            layer.last.bias.data = conv.bias.data.copy()
        return layer

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"ranks={self.ranks}, stride={self.stride}, padding={self.padding}")


def tucker_candidates(model, min_channels: int = 16) -> dict:
    """Convolutions a Tucker format applies to: dense, R x S > 1, undilated, and at
    least ``min_channels`` in and out (a stem reading 1-3 image channels is left alone)."""
    return {name.rstrip("."): m for name, m in model.named_modules()
            if type(m) is Conv2d and m.groups == 1 and m.kernel_size != (1, 1)
            and m.dilation in (1, (1, 1))
            and min(m.in_channels, m.out_channels) >= min_channels}


def tuckerize(model, ranks: dict, *, decompose: bool = True, method: str = "hooi", seed: int = 0):
    """Replace the named convolutions of ``model`` by ``TuckerConv2d`` layers, in place.

    Parameters
    ----------
    ranks : dict name -> (D1, D2)
        Names as in ``model.named_modules()`` (e.g. ``"stages.0.0.conv1"``).
    decompose : bool
        True: initialise from the trained weights (HOOI / HOSVD); False: random
        initialisation (training the Tucker model from scratch).
    """
    convs = tucker_candidates(model)
    unknown = sorted(set(ranks) - set(convs))
    if unknown:
        raise ValueError(f"no dense R x S convolution named {unknown[:3]} in the model")
    rng = np.random.default_rng(seed)
    for name, r in ranks.items():
        conv = convs[name]
        if decompose:
            layer = TuckerConv2d.from_conv(conv, r, method=method)
        else:
            layer = TuckerConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, r,
                                 conv.stride, conv.padding, bias=conv.bias is not None, rng=rng)
            if model.xp is not np:
                layer.to("gpu")
        parent_name, _, attr = name.rpartition(".")
        parent = dict(model.named_modules())[parent_name + "." if parent_name else ""]
        setattr(parent, attr, layer)
    return model


def uniform_ranks(model, reduction: float, input_shape, *, multiple: int = 1,
                  scope: str = "model") -> dict:
    """Ranks (D1, D2) = fraction of (C, N) for every candidate conv so that the MACs
    drop by about ``reduction`` (0..1), the simplest budget rule (Algorithm 1's
    hardware-aware choice lives in ``tensorconv.tuning.ranks``).

    ``scope`` says whose MACs: ``"model"`` (all of them) or ``"layers"`` (the
    candidate convolutions' only, as Algorithm 1's budget B counts them).
    """
    from tensorconv.nn.flops import count_flops_params

    if not 0 < reduction < 1:
        raise ValueError(f"reduction must be in (0, 1), got {reduction}")
    if scope not in ("model", "layers"):
        raise ValueError(f"scope must be 'model' or 'layers', got {scope!r}")
    base = count_flops_params(model, input_shape)
    convs = tucker_candidates(model)
    per_layer = {name.rstrip("."): macs for name, _, macs, _ in base["layers"]}
    whole = base["macs"] if scope == "model" else sum(per_layer[name] for name in convs)
    target = whole * (1 - reduction)

    def total(frac):
        macs = whole
        for name, conv in convs.items():
            d1, d2 = _ranks(conv, frac, multiple)
            o = per_layer[name]
            hw_out = o // (conv.out_channels * conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1])
            hw_in = hw_out * (conv.stride if isinstance(conv.stride, int) else conv.stride[0]) ** 2
            kh, kw = conv.kernel_size
            new = hw_in * conv.in_channels * d1 + hw_out * d2 * (kh * kw * d1 + conv.out_channels)
            macs += new - o
        return macs

    lo, hi = 1e-3, 1.0
    if total(lo) > target:  # rank-1 cores everywhere would still miss it
        reach = 1 - total(lo) / whole
        raise ValueError(f"a {reduction:.0%} MAC reduction is out of reach by decomposing the "
                         f"{len(convs)} candidate convolutions (at most {reach:.1%}, with "
                         f"rank-1 cores)")
    for _ in range(40):  # bisection on the shared fraction
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(mid) < target else (lo, mid)
    return {name: _ranks(conv, lo, multiple) for name, conv in convs.items()}


def _ranks(conv, frac, multiple):
    def r(ch):
        v = max(1, int(round(ch * frac / multiple)) * multiple)
        return min(ch, v)
    return r(conv.in_channels), r(conv.out_channels)


# ---- inference: the engine plans a TuckerConv2d as 1x1 -> core (the tuned core kernel) -> 1x1
# (BN, residual and ReLU in the last 1x1's epilogue), or as one fused launch where that was
# timed faster; once the plan is complete, a core and the 1x1s after it (the layer's last,
# chained with the next layer's first) become one launch where they fit and that was faster
def _register_engine_planner():
    from dataclasses import asdict

    from tensorconv import bench
    from tensorconv.nn import engine
    from tensorconv.ops import tucker as tucker_ops
    from tensorconv.ops import tucker_layer as fused
    from tensorconv.tuning import cache, oracle

    def plan_three(m: TuckerConv2d, plan, x, bn, relu, residual):
        y = engine.plan_conv(m.first, plan, x)
        core = m.core
        w = plan.keep(plan.xp.ascontiguousarray(core.weight.data))
        geom = check_conv_args(y, w, None, core.stride, core.padding, 1, 1,
                               dtype=np.float32, contiguous=True)
        if tucker_ops.cluster_supported(geom):
            z = engine.plan_conv(core, plan, y)  # a core the cluster kernel does not take
        else:
            if plan.tune:
                variant, tile = oracle.tune_core(y, w, geom)
            else:
                variant, tile = oracle.default_core(geom)
            prepared = {k: plan.keep(v)
                        for k, v in tucker_ops.prepared_weights(variant, w).items()}
            z = plan.alloc(geom.output_shape)
            plan.add(lambda: tucker_ops.core_conv2d(y, w, geom.stride, geom.padding,
                                                    variant=variant, tile=tile, out=z, **prepared),
                     f"{variant} core {tuple(w.shape)} {tile}",
                     core=engine.CoreStep(y, w, geom.stride, geom.padding, z))
        return engine.plan_conv(m.last, plan, z, bn=bn, relu=relu, residual=residual)

    @engine.register_conv_planner(TuckerConv2d)
    def plan_tucker(m: TuckerConv2d, plan, x, *, bn=None, relu=False, residual=None):
        """The fused launch when the tune cache says it beat the three launches on this layer
        (``plan.tune`` times both and records the winner); else the three launches."""
        core = m.core
        geom = conv_geometry((x.shape[0], m.ranks[0], x.shape[2], x.shape[3]),
                             core.weight.data.shape, core.stride, core.padding)
        if fused.fused_supported(geom) is not None:
            return plan_three(m, plan, x, bn, relu, residual)
        u3, b3 = engine.fold_bn(m.last.weight.data,
                                None if m.last.bias is None else m.last.bias.data, bn)
        n = u3.shape[0]
        key = cache.make_key("tucker_path", "tucker_layer.cu",
                             f"{geom}|C{x.shape[1]}|D{m.ranks}|N{n}|res{residual is not None}")
        choice = cache.lookup(key)
        three = None
        if plan.tune and choice is None:
            sub = engine.Plan(plan.xp, tune=True)
            three = plan_three(m, sub, x, bn, relu, residual)
            three_us = bench.time_graph(sub.run, repeat=10).median_us
            tile = oracle.tune_fused_tile(x, m.first.weight.data, core.weight.data, u3, b3,
                                          geom.stride, geom.padding)[0]
            packed = fused.pack_weights(m.first.weight.data, core.weight.data, u3, b3,
                                        tile.cluster, xp=plan.xp)
            out = plan.xp.empty((x.shape[0], n, geom.oh, geom.ow), np.float32)
            fused_us = bench.time_graph(lambda: fused.tucker_layer(
                x, packed, geom.stride, geom.padding, residual=residual, relu=relu, tile=tile,
                out=out), repeat=10).median_us
            choice = {"fused": fused_us < three_us, "tile": asdict(tile),
                      "fused_us": fused_us, "three_us": three_us}
            cache.store(key, choice)
        if choice is None or not choice["fused"]:
            if three is not None:  # already planned (and timed) on the side: take it over
                plan.steps += sub.steps
                plan.buffers += sub.buffers
                return three
            return plan_three(m, plan, x, bn, relu, residual)
        tile = fused.FusedTile(**choice["tile"])
        packed = fused.pack_weights(m.first.weight.data, core.weight.data, u3, b3, tile.cluster,
                                    xp=plan.xp)
        for a in (packed.u1t, packed.core, packed.u3t, packed.bias):
            plan.keep(a)
        out = plan.alloc((x.shape[0], n, geom.oh, geom.ow))
        plan.add(lambda: fused.tucker_layer(x, packed, geom.stride, geom.padding,
                                            residual=residual, relu=relu, tile=tile, out=out),
                 f"fused tucker {m.ranks} on {tuple(x.shape)} {tile}")
        return out

    @engine.register_plan_pass
    def fuse_tucker_tails(plan: engine.Plan) -> None:
        """Run a Tucker core and the launch after it that reads its output — the layer's
        last 1x1, or that 1x1 chained with the next layer's first — as one launch
        (``ops.tucker_tail``) where all their weights fit one block and that was timed
        faster.  With ``plan.tune`` every tile and the two launches are timed and the
        verdict kept in the tune cache ("tucker_tail"); untuned plans follow a stored
        verdict only."""
        from tensorconv.ops import tucker_tail as tail

        steps, i = plan.steps, 0
        while i + 1 < len(steps):
            first, second = steps[i], steps[i + 1]
            c = first.core
            last, nxt = second.pair or (second.pointwise, None)
            if c is None or last is None or last.x is not c.out:
                i += 1
                continue
            core_geom = conv_geometry(c.u.shape, c.w.shape, c.stride, c.padding)
            rows, d2, m = core_geom.c * core_geom.r * core_geom.s, core_geom.k, last.geom.k
            j = 0 if nxt is None else nxt.geom.k
            tiles = tail.fitting_tiles(rows, d2, m, j)
            key = cache.make_key("tucker_tail", "tucker_tail.cu",
                                 f"{core_geom}|{last.geom}|{None if nxt is None else nxt.geom}|"
                                 f"res{last.residual is not None}")
            verdict = cache.lookup(key) if tiles else None
            if not tiles or (verdict is None and not plan.tune) or \
                    (verdict is not None and not verdict["tail"]):
                i += 1
                continue

            def launch(tile, packed, c=c, last=last, nxt=nxt):
                return lambda: tail.tucker_tail(
                    c.u, c.w, c.stride, c.padding, last.w, None if nxt is None else nxt.w,
                    last.b, None if nxt is None else nxt.b, residual=last.residual,
                    relu1=last.relu, relu2=nxt is not None and nxt.relu, tile=tile,
                    packed=packed, y_out=last.out, z_out=None if nxt is None else nxt.out)

            def pack(c=c, last=last, nxt=nxt):
                return tail.pack_weights(c.w, last.w, None if nxt is None else nxt.w)

            if verdict is None:
                times = {t: bench.time_graph(launch(t, pack()), repeat=10).median_us
                         for t in tiles}
                best = min(times, key=times.get)
                verdict = {"tile": best.p, "tail_us": times[best],
                           "two_us": bench.time_graph(lambda: (first(), second()),
                                                      repeat=10).median_us}
                verdict["tail"] = verdict["tail_us"] < verdict["two_us"]
                cache.store(key, verdict)
                if not verdict["tail"]:
                    i += 1
                    continue
            tile = tail.TailTile(verdict["tile"])
            fused_step = launch(tile, tuple(None if a is None else plan.keep(a) for a in pack()))
            fused_step.label = (f"tucker tail {tuple(c.w.shape)} -> {m}"
                                f"{f' -> {j}' if nxt is not None else ''} {tile}")
            fused_step.pointwise = fused_step.core = fused_step.pair = fused_step.shortcut = None
            steps[i:i + 2] = [fused_step]
            i += 1


_register_engine_planner()
