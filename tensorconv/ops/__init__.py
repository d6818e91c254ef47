"""The public functional API: one module per kernel family, every public op exported here.

Every op accepts NumPy arrays (computed on the CPU through :mod:`tensorconv.reference`,
where the op has a CPU path) or GPU arrays (CuPy, or any DLPack /
``__cuda_array_interface__`` array, used without a copy) and runs our CUDA kernels on
the latter.  Bad input raises ``ValueError`` / ``TypeError`` naming the argument before
any launch.

Each module ``ops/<stem>.py`` wraps ``kernels_cu/<stem>.cu`` and follows one skeleton
(``docs/ops.md`` is the page to read before adding a family): ``Problem`` (the sizes of
one call) and ``Tile`` (a launch shape: ``smem_bytes(problem)``, ``grid(problem)``),
``supported``, ``candidates(problem, facts)``, ``default_tile(problem, facts)``,
``pack_weights``, ``kernels(problem, tile)`` and ``instantiations()``, then the public
op: checks, the NumPy reference or a GPU-only error, the tile, one shared launch helper
(:mod:`tensorconv.ops._launch`).  :mod:`tensorconv.ops.core_conv` alone has no ``.cu``:
it dispatches a dense convolution to the fastest of the kernels that take it.
"""

from tensorconv.ops import (
                            augment,
                            batchnorm,
                            classifier_head,
                            conv_maxpool,
                            core_conv,
                            cp_conv,
                            depthwise_conv,
                            direct_conv,
                            direct_wgrad,
                            dropout,
                            igemm_tf32x3,
                            pointwise_conv,
                            pointwise_pair,
                            pool,
                            scc_conv,
                            scc_tc,
                            sgd,
                            softmax_xent,
                            sparse_blocks_tc,
                            sparse_conv,
                            sparse_pairs_tc,
                            sparse_tc_remainder,
                            sparse_unrolled,
                            sparse_unrolled_direct,
                            tensorcore_conv,
                            tucker_core_cluster,
                            tucker_core_tdc,
                            tucker_core_tf32x3,
                            tucker_layer,
                            tucker_tail,
                            winograd_conv,
                            winograd_wgrad,
                            zero_insert,
)
from tensorconv.ops.augment import gather_augment
from tensorconv.ops.batchnorm import batch_norm_apply, batch_norm_backward, batch_norm_forward
from tensorconv.ops.classifier_head import gap_linear
from tensorconv.ops.conv_maxpool import conv2d_maxpool
from tensorconv.ops.core_conv import core_conv2d
from tensorconv.ops.cp_conv import cp_conv2d
from tensorconv.ops.depthwise_conv import depthwise_conv2d
from tensorconv.ops.direct_conv import conv2d, conv2d_backward_data, conv2d_backward_weight
from tensorconv.ops.dropout import dropout_backward, dropout_forward
from tensorconv.ops.pointwise_conv import conv1x1
from tensorconv.ops.pointwise_pair import conv1x1_pair
from tensorconv.ops.pool import pool2d
from tensorconv.ops.scc_conv import (
    scc_conv2d,
    scc_conv2d_backward_data,
    scc_conv2d_backward_weight,
)
from tensorconv.ops.scc_fused import scc_conv2d_backward
from tensorconv.ops.sgd import sgd_multi_tensor
from tensorconv.ops.softmax_xent import softmax_xent_backward, softmax_xent_forward
from tensorconv.ops.sparse_conv import sparse_conv2d
from tensorconv.ops.sparse_pairs_tc import sparse_pairs_conv2d
from tensorconv.ops.tensorcore_conv import tc_conv2d
from tensorconv.ops.tucker_core_cluster import cluster_conv2d
from tensorconv.ops.tucker_core_tdc import tdc_conv2d
from tensorconv.ops.tucker_core_tf32x3 import tf32x3_conv2d
from tensorconv.ops.tucker_layer import tucker_layer_conv2d
from tensorconv.ops.tucker_tail import tucker_tail_conv2d
from tensorconv.ops.winograd_conv import winograd_conv2d
from tensorconv.ops.zero_insert import zero_insert2d

# every kernel module, by the .cu file it wraps (the build command and the tests walk it)
FAMILIES = {m.FILE: m for m in (augment, batchnorm, classifier_head, conv_maxpool, cp_conv,
                                depthwise_conv, direct_conv, direct_wgrad, dropout,
                                igemm_tf32x3, pointwise_conv, pointwise_pair, pool, scc_conv,
                                scc_tc, sgd, softmax_xent, sparse_blocks_tc, sparse_conv,
                                sparse_pairs_tc, sparse_tc_remainder, sparse_unrolled,
                                sparse_unrolled_direct,
                                tensorcore_conv,
                                tucker_core_cluster, tucker_core_tdc, tucker_core_tf32x3,
                                tucker_layer, tucker_tail, winograd_conv,
                                winograd_wgrad, zero_insert)}

__all__ = ["FAMILIES", "augment", "batchnorm", "classifier_head", "conv_maxpool",
           "core_conv", "cp_conv", "depthwise_conv", "direct_conv", "direct_wgrad", "dropout",
           "igemm_tf32x3", "pointwise_conv", "pointwise_pair", "pool", "scc_conv",
           "scc_tc", "sgd", "softmax_xent", "sparse_blocks_tc", "sparse_conv",
           "sparse_pairs_tc", "sparse_tc_remainder", "sparse_unrolled", "sparse_unrolled_direct",
           "tensorcore_conv",
           "tucker_core_cluster", "tucker_core_tdc", "tucker_core_tf32x3",
           "tucker_layer", "tucker_tail", "winograd_conv", "winograd_wgrad", "zero_insert",
           "batch_norm_apply",
           "batch_norm_backward", "batch_norm_forward", "cluster_conv2d", "conv1x1",
           "conv1x1_pair", "conv2d", "conv2d_backward_data", "conv2d_backward_weight",
           "conv2d_maxpool", "core_conv2d", "cp_conv2d", "depthwise_conv2d",
           "dropout_backward", "dropout_forward", "gap_linear", "gather_augment",
           "pool2d", "scc_conv2d", "scc_conv2d_backward", "scc_conv2d_backward_data",
           "scc_conv2d_backward_weight", "sgd_multi_tensor", "softmax_xent_backward",
           "softmax_xent_forward", "sparse_conv2d", "sparse_pairs_conv2d",
           "tc_conv2d", "tdc_conv2d", "tf32x3_conv2d", "tucker_layer_conv2d",
           "tucker_tail_conv2d", "winograd_conv2d", "zero_insert2d"]
