"""Differentiable functions, each a forward/backward pair on NumPy or CuPy arrays."""

from tensorconv.autograd.functions.activation import dropout, relu
from tensorconv.autograd.functions.connection import conv2d, linear
from tensorconv.autograd.functions.loss import accuracy, softmax_cross_entropy
from tensorconv.autograd.functions.math import add, concat, flatten, mul, reshape, take
from tensorconv.autograd.functions.normalization import batch_norm2d
from tensorconv.autograd.functions.pooling import avg_pool2d, global_avg_pool2d, max_pool2d
from tensorconv.autograd.functions.scc import scc_conv
from tensorconv.autograd.functions.scc_stacks import scc_channel_stack, scc_conv_stack

__all__ = ["accuracy", "add", "avg_pool2d", "batch_norm2d", "concat", "conv2d", "dropout",
           "flatten", "global_avg_pool2d", "linear", "max_pool2d", "mul", "relu", "reshape",
           "scc_channel_stack", "scc_conv", "scc_conv_stack", "softmax_cross_entropy", "take"]
