"""Where every planner and rewrite pass of the inference engine is registered: one table
for convolution-like layers, one for the other modules, and the passes in the order they
run.  A new kernel family adds its engine module (like :mod:`tensorconv.engine.tucker`)
and its rows here."""

from __future__ import annotations

from tensorconv.engine import cp, dense, half, layers, models, passes, scc, sparse, tucker
from tensorconv.engine.registry import (
    register_conv_planner,
    register_half_planner,
    register_planner,
)
from tensorconv.nn import layers as L
from tensorconv.nn.cp import CPConv2d
from tensorconv.nn.models.densenet import DenseLayer, DenseNet, Transition
from tensorconv.nn.models.googlenet import GoogLeNet, Inception
from tensorconv.nn.models.mobilenet import MobileNetV1
from tensorconv.nn.models.resnet import BasicBlock, Bottleneck, ResNet
from tensorconv.nn.models.smallcnn import SmallCNN
from tensorconv.nn.models.squeezenet import Fire, SqueezeNet
from tensorconv.nn.models.vgg import VGG
from tensorconv.nn.scc import SCCConv2d, Separable
from tensorconv.nn.sparse import SparseConv2d
from tensorconv.nn.tucker import TuckerConv2d

# conv-like layers: planned with the batch norm to fold, a residual to add and a ReLU
CONV_PLANNERS = {
    L.Conv2d: dense.plan_conv2d,
    L.Linear: dense.plan_linear,
    TuckerConv2d: tucker.plan_tucker,
    CPConv2d: cp.plan_cp,
    SparseConv2d: sparse.plan_sparse_conv2d,
    SCCConv2d: scc.plan_scc_conv,
    Separable: scc.plan_separable,
}

PLANNERS = {
    L.BatchNorm2d: layers.plan_bn,
    L.ReLU: layers.plan_relu,
    L.MaxPool2d: layers.plan_maxpool,
    L.AvgPool2d: layers.plan_avgpool,
    L.GlobalAvgPool2d: layers.plan_gap,
    L.Flatten: layers.plan_flatten,
    L.Identity: layers.plan_identity,
    L.Dropout: layers.plan_identity,
    L.Sequential: layers.plan_sequential,
    BasicBlock: models.plan_basic,
    Bottleneck: models.plan_bottleneck,
    ResNet: models.plan_resnet,
    VGG: models.plan_vgg,
    MobileNetV1: models.plan_features_gap_fc,
    SmallCNN: models.plan_features_gap_fc,
    DenseLayer: models.plan_dense_layer,
    Transition: models.plan_transition,
    DenseNet: models.plan_densenet,
    Inception: models.plan_inception,
    GoogLeNet: models.plan_googlenet,
    Fire: models.plan_fire,
    SqueezeNet: models.plan_squeezenet,
}

# the fp16 NHWC path (InferenceEngine(dtype="float16")): what it runs, nothing else
HALF_CONV_PLANNERS = {L.Conv2d: half.plan_conv2d, L.Linear: half.plan_linear}
HALF_PLANNERS = {
    L.BatchNorm2d: half.plan_bn_alone,
    L.ReLU: half.plan_relu,
    L.MaxPool2d: half.plan_maxpool,
    L.AvgPool2d: half.plan_avgpool,
    L.GlobalAvgPool2d: half.plan_gap,
    L.Flatten: half.plan_flatten,
    L.Identity: half.plan_identity,
    L.Dropout: half.plan_identity,
    L.Sequential: half.plan_sequential,
    BasicBlock: half.plan_basic,
    Bottleneck: half.plan_bottleneck,
    ResNet: half.plan_resnet,
    VGG: models.plan_vgg,
    Fire: half.plan_fire,
    SqueezeNet: models.plan_squeezenet,
}

# the rewrite passes over a finished plan, in order: pairs first (shortcuts fold into
# pairs; Tucker tails take a core with the pair after it and leave folded pairs alone);
# then each step chosen alone against its fallback, in the whole plan; the sections of
# module branches, once the steps are final
PASSES = (passes.fuse_pointwise_pairs, passes.fold_projection_shortcuts, tucker.fuse_tucker_tails,
          passes.choose_fallbacks, passes.choose_sections)

for module_type, planner in CONV_PLANNERS.items():
    register_conv_planner(module_type, planner)
for module_type, planner in PLANNERS.items():
    register_planner(module_type, planner)
for module_type, planner in HALF_CONV_PLANNERS.items():
    register_half_planner(module_type, planner, conv=True)
for module_type, planner in HALF_PLANNERS.items():
    register_half_planner(module_type, planner)
