"""Tensor decompositions of convolution kernels: Tucker (``tucker``) and CP (``cp``)."""

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
