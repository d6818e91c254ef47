"""Tensor decompositions of convolution kernels (Tucker; CP to come)."""

from tensorconv.decomp.tucker import (
    TuckerFactors,
    flops_reduction,
    hosvd_project,
    param_reduction,
    partial_tucker,
    reconstruct,
)

__all__ = ["TuckerFactors", "flops_reduction", "hosvd_project", "param_reduction",
           "partial_tucker", "reconstruct"]
