"""Turning a model's convolutions into Tucker format (TDC): which convolutions qualify,
``tuckerize`` (decomposed or freshly initialised), and ``uniform_ranks``, the simplest
budget rule (Algorithm 1's hardware-aware choice is :mod:`tensorconv.compress.ranks`)."""

from __future__ import annotations

import numpy as np

from tensorconv.checks import check_bool, check_choice, check_finite, check_int, check_real, is_int
from tensorconv.nn.flops import count_flops_params
from tensorconv.nn.layers import Conv2d
from tensorconv.nn.tucker import TuckerConv2d


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
    if not isinstance(ranks, dict):
        raise TypeError(f"ranks must be a dict name -> (D1, D2), got {type(ranks).__name__}")
    check_bool(decompose, "decompose")
    check_int(seed, "seed", minimum=0)
    check_choice(method, "method", ("hooi", "hosvd"))
    convs = tucker_candidates(model)
    unknown = sorted(set(ranks) - set(convs))
    if unknown:
        raise ValueError(f"no dense R x S convolution named {unknown[:3]} in the model")
    for name, r in ranks.items():  # every rank checked before any layer changes
        if not isinstance(r, (tuple, list)) or len(r) != 2 or not all(map(is_int, r)):
            raise TypeError(f"ranks[{name!r}] must be a pair of ints (D1, D2), got {r!r}")
        conv = convs[name]
        if not (1 <= r[0] <= conv.in_channels and 1 <= r[1] <= conv.out_channels):
            raise ValueError(f"ranks[{name!r}] = {tuple(r)} must lie in 1..{conv.in_channels} "
                             f"and 1..{conv.out_channels}")
        if decompose:
            check_finite(conv.weight.data, f"the weights of {name!r}")
    rng = np.random.default_rng(seed)
    layers = {}
    for name, r in ranks.items():
        conv = convs[name]
        if decompose:
            layers[name] = TuckerConv2d.from_conv(conv, tuple(r), method=method)
        else:
            layers[name] = TuckerConv2d(conv.in_channels, conv.out_channels, conv.kernel_size,
                                        tuple(r), conv.stride, conv.padding,
                                        bias=conv.bias is not None, rng=rng)
            if model.xp is not np:
                layers[name].to("gpu")
    return replace_layers(model, layers)


def replace_layers(model, layers: dict):
    """Put each ``layers[name]`` in the place of the module ``name`` of ``model`` (all made
    before any is put in: a failure while making them leaves the model as it was)."""
    modules = dict(model.named_modules())
    for name, layer in layers.items():
        parent_name, _, attr = name.rpartition(".")
        setattr(modules[parent_name + "." if parent_name else ""], attr, layer)
    return model


def uniform_ranks(model, reduction: float, input_shape, *, multiple: int = 1,
                  scope: str = "model") -> dict:
    """Ranks (D1, D2) = fraction of (C, N) for every candidate conv so that the MACs
    drop by about ``reduction`` (0..1), the simplest budget rule (Algorithm 1's
    hardware-aware choice lives in ``tensorconv.compress.ranks``).

    ``scope`` says whose MACs: ``"model"`` (all of them) or ``"layers"`` (the
    candidate convolutions' only, as Algorithm 1's budget B counts them).
    """
    check_real(reduction, "reduction", low=0.0, high=1.0, low_open=True, high_open=True)
    multiple = check_int(multiple, "multiple", minimum=1)
    check_choice(scope, "scope", ("model", "layers"))
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
            kh, kw = conv.kernel_size
            hw_out = o // (conv.out_channels * conv.in_channels * kh * kw)
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
