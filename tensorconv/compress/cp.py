"""Turning a model's convolutions into CP format: ``cpize`` (CP-ALS on each kernel, or a
fresh layer whose factors a checkpoint will fill)."""

from __future__ import annotations

from tensorconv.compress.tucker import tucker_candidates
from tensorconv.nn.cp import CPConv2d


def cpize(model, rank: int, *, min_channels: int = 16, decompose: bool = True) -> dict:
    """Replace every dense R x S convolution (>= ``min_channels`` in and out) by a
    rank-``rank`` ``CPConv2d``, in place.

    With ``decompose`` the factors come from CP-ALS on the layer's kernel and the
    result is ``{name: relative reconstruction error}``; without it the new layers keep
    their random initialisation (weights about to be loaded from a checkpoint) and the
    result is ``{name: nan}``.
    """
    errors = {}
    modules = dict(model.named_modules())
    for name, conv in tucker_candidates(model, min_channels).items():
        if decompose:
            layer, errors[name] = CPConv2d.from_conv(conv, rank)
        else:
            layer = CPConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, rank,
                             conv.stride, conv.padding, bias=conv.bias is not None)
            errors[name] = float("nan")
        parent_name, _, attr = name.rpartition(".")
        setattr(modules[parent_name + "." if parent_name else ""], attr, layer)
    return errors
