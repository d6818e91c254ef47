"""Public functional API: one module per kernel family.

Every op accepts NumPy arrays (computed on the CPU through the references) or
GPU arrays (CuPy, or any DLPack / ``__cuda_array_interface__`` array, used
without a copy) and runs our CUDA kernels on the latter.
"""

from tensorconv.ops.conv import (
    ALGORITHMS,
    DirectConvTile,
    choose_algorithm,
    conv2d,
    conv2d_backward_data,
    conv2d_backward_weight,
    direct_conv_tile,
    igemm_splits,
)
from tensorconv.ops.conv_pool import conv2d_maxpool
from tensorconv.ops.head import gap_linear
from tensorconv.ops.norm import batch_norm_backward, batch_norm_forward
from tensorconv.ops.pointwise import conv1x1
from tensorconv.ops.pointwise_pair import conv1x1_pair
from tensorconv.ops.pool import pool2d
from tensorconv.ops.sgd import sgd_multi_tensor

__all__ = ["ALGORITHMS", "DirectConvTile", "batch_norm_backward", "batch_norm_forward",
           "choose_algorithm", "conv1x1", "conv1x1_pair", "conv2d", "conv2d_maxpool", "conv2d_backward_data", "conv2d_backward_weight",
           "direct_conv_tile", "gap_linear", "igemm_splits", "pool2d", "sgd_multi_tensor"]
