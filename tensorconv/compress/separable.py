"""Depthwise-separable versions of the zoo's networks, as DSXplore (Wang et al., IPDPS'21,
§V) defines them: the chosen convolutions become a depthwise convolution then a pointwise
stage — sliding-channel (DW + SCC), grouped (DW + GPW) or full (DW + PW).

* VGG-16/19: every 3x3 convolution but the first;
* ResNet-18 (basic blocks): both 3x3 convolutions of each block;
* ResNet-50 (bottlenecks): each block's 3x3 convolution;
* MobileNet: each block's pointwise convolution becomes the SCC or GPW (its depthwise
  convolution is already there).
"""

from __future__ import annotations

import numpy as np

from tensorconv.checks import check_choice, check_int
from tensorconv.compress.tucker import replace_layers
from tensorconv.nn.layers import Conv2d
from tensorconv.nn.models.mobilenet import MobileNetV1
from tensorconv.nn.models.resnet import BasicBlock, Bottleneck, ResNet
from tensorconv.nn.models.vgg import VGG
from tensorconv.nn.scc import SCCConv2d, Separable

POINTWISE = ("scc", "gpw", "pw")


def separable_candidates(model) -> dict:
    """{name: Conv2d} of the convolutions DSXplore replaces in ``model`` (see above)."""
    named = {name.rstrip("."): m for name, m in model.named_modules()}
    if isinstance(model, VGG):
        convs = [n for n, m in named.items() if type(m) is Conv2d and m.kernel_size != (1, 1)]
        return {n: named[n] for n in convs[1:]}
    if isinstance(model, ResNet):
        out = {}
        for n, m in named.items():
            if isinstance(m, BasicBlock):
                out.update({f"{n}.conv1": m.conv1, f"{n}.conv2": m.conv2})
            elif isinstance(m, Bottleneck):
                out[f"{n}.conv2"] = m.conv2
        return out
    if isinstance(model, MobileNetV1):
        return {n: m for n, m in named.items() if type(m) is Conv2d and m.kernel_size == (1, 1)
                and m.groups == 1}
    raise ValueError(f"no depthwise-separable form of a {type(model).__name__} (VGG, ResNet, "
                     f"MobileNetV1)")


def _pointwise(kind: str, cin: int, cout: int, cg: int, co: float, rng):
    if kind == "scc":
        return SCCConv2d(cin, cout, cg, co, rng=rng)
    if kind == "gpw":
        if cin % cg or cout % cg:
            raise ValueError(f"cg={cg} must divide {cin} and {cout} channels for a grouped 1x1")
        return Conv2d(cin, cout, 1, groups=cg, bias=False, rng=rng)
    return Conv2d(cin, cout, 1, bias=False, rng=rng)


def separable(model, pointwise: str = "scc", *, cg: int = 2, co: float = 0.5, seed: int = 0):
    """Make ``model`` depthwise-separable in place (every layer built before any is
    replaced); returns it.

    Parameters
    ----------
    pointwise : {"scc", "gpw", "pw"}
        The pointwise stage: sliding-channel (``cg`` groups, overlap ``co``), grouped
        1x1 (``cg`` groups) or full 1x1.
    """
    check_choice(pointwise, "pointwise", POINTWISE)
    check_int(cg, "cg", minimum=1)
    rng = np.random.default_rng(seed)
    layers = {}
    for name, conv in separable_candidates(model).items():
        pw = _pointwise(pointwise, conv.in_channels, conv.out_channels, cg, co, rng)
        if isinstance(model, MobileNetV1):
            layers[name] = pw                          # its depthwise stage is already there
        else:
            layers[name] = Separable(conv, pw, rng)
    if model.xp is not np:
        for layer in layers.values():
            layer.to("gpu")
    return replace_layers(model, layers)
