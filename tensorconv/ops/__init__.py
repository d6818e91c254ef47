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
    direct_conv_tile,
    igemm_splits,
)

__all__ = ["ALGORITHMS", "DirectConvTile", "choose_algorithm", "conv2d", "direct_conv_tile",
           "igemm_splits"]
