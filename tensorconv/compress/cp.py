"""Turning a model's convolutions into CP format: ``cpize`` (CP-ALS on each kernel, or a
fresh layer whose factors a checkpoint will fill)."""

from __future__ import annotations

from tensorconv.checks import check_bool, check_finite, check_int
from tensorconv.compress.tucker import replace_layers, tucker_candidates
from tensorconv.nn.cp import CPConv2d


def cpize(model, rank: int, *, min_channels: int = 16, decompose: bool = True) -> dict:
    """Replace every dense R x S convolution (>= ``min_channels`` in and out) by a
    rank-``rank`` ``CPConv2d``, in place.

    With ``decompose`` the factors come from CP-ALS on the layer's kernel and the
    result is ``{name: relative reconstruction error}``; without it the new layers keep
    their random initialisation (weights about to be loaded from a checkpoint) and the
    result is ``{name: nan}``.
    """
    rank = check_int(rank, "rank", minimum=1)
    min_channels = check_int(min_channels, "min_channels", minimum=1)
    check_bool(decompose, "decompose")
    convs = tucker_candidates(model, min_channels)
    if decompose:  # checked for every layer before any changes
        for name, conv in convs.items():
            check_finite(conv.weight.data, f"the weights of {name!r}")
    errors, layers = {}, {}
    for name, conv in convs.items():
        if decompose:
            layers[name], errors[name] = CPConv2d.from_conv(conv, rank)
        else:
            layers[name] = CPConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, rank,
                                    conv.stride, conv.padding, bias=conv.bias is not None)
            errors[name] = float("nan")
    replace_layers(model, layers)
    return errors
