"""Count a model's multiply-accumulates and parameters by running it once."""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import Tensor, no_grad
from tensorconv.nn.layers import Conv2d, Linear
from tensorconv.nn.scc import SCCConv2d
from tensorconv.nn.sparse import SparseConv2d

COUNTED = (Conv2d, Linear, SparseConv2d, SCCConv2d)  # the layers whose MACs are counted


def count_flops_params(model, input_shape) -> dict:
    """MACs of every convolution and linear layer for one forward at ``input_shape``.

    Parameters
    ----------
    model : Module
    input_shape : tuple (N, C, H, W)

    Returns
    -------
    dict with ``macs``, ``flops`` (= 2 * macs), ``params`` and ``layers``, a list of
    ``(name, type, macs, params)``; BN, pooling and element-wise work is not counted; a
    pruned layer counts its nonzero weights and their multiply-adds.
    """
    was_training = model.training
    model.eval()
    x = Tensor(model.xp.zeros(input_shape, dtype=np.float32))
    with no_grad():
        model(x)
    model.train(was_training)
    layers = [(name.rstrip("."), type(m).__name__, int(m.macs), m.num_parameters())
              for name, m in model.named_modules() if isinstance(m, COUNTED)]
    macs = sum(layer[2] for layer in layers)
    return {"macs": macs, "flops": 2 * macs, "params": model.num_parameters(), "layers": layers}
