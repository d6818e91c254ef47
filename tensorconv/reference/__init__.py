"""NumPy ground truth for every op: slow, written to be obviously correct.

Every CUDA kernel of the toolkit is tested against a function of this package.
Inputs may be any float dtype (tests pass float64 for an exact reference);
CuPy inputs are copied to the host first.
"""

from tensorconv.reference.conv import (
    conv1x1,
    conv2d,
    conv2d_backward_data,
    conv2d_backward_weight,
    cp_conv2d,
    depthwise_conv2d,
)
from tensorconv.reference.loss import softmax_cross_entropy, softmax_cross_entropy_backward
from tensorconv.reference.norm import batch_norm_backward, batch_norm_forward
from tensorconv.reference.pool import gap_linear, pool2d
from tensorconv.reference.scc import scc_backward, scc_forward, scc_geometry
from tensorconv.reference.sparse import sparse_conv2d

__all__ = ["batch_norm_backward", "batch_norm_forward", "conv1x1", "conv2d",
           "conv2d_backward_data", "conv2d_backward_weight", "cp_conv2d", "depthwise_conv2d",
           "gap_linear", "pool2d", "scc_backward", "scc_forward", "scc_geometry",
           "softmax_cross_entropy", "softmax_cross_entropy_backward", "sparse_conv2d"]
