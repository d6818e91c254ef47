"""Model zoo, by name: ``get_model("resnet20", in_channels=1, num_classes=10)``."""

from __future__ import annotations

from functools import partial

from tensorconv.checks import check_choice
from tensorconv.nn.models.densenet import DenseNet, densenet121, densenet201
from tensorconv.nn.models.googlenet import GoogLeNet, Inception, googlenet
from tensorconv.nn.models.mobilenet import MobileNetV1, mobilenet_v1
from tensorconv.nn.models.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet20, resnet50
from tensorconv.nn.models.smallcnn import SmallCNN, small_cnn
from tensorconv.nn.models.squeezenet import Fire, SqueezeNet, squeezenet1_0
from tensorconv.nn.models.vgg import VGG, vgg16, vgg19

MODELS = {
    "resnet20": resnet20,
    "resnet18": resnet18,
    "resnet18_imagenet": partial(resnet18, stem="imagenet", num_classes=1000),
    "resnet50": resnet50,
    "resnet50_cifar": partial(resnet50, stem="cifar", num_classes=10),
    "vgg16": vgg16,
    "vgg19": vgg19,
    "vgg16_imagenet": partial(vgg16, head="gap", num_classes=1000),
    "vgg19_imagenet": partial(vgg19, head="gap", num_classes=1000),
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v1_imagenet": partial(mobilenet_v1, stem_stride=2, num_classes=1000),
    "densenet121": densenet121,
    "densenet201": densenet201,
    "googlenet": googlenet,
    "squeezenet1_0": squeezenet1_0,
    "small_cnn": small_cnn,
}


def get_model(name: str, **kwargs):
    """Build a model of the zoo; ``kwargs`` go to its constructor (in_channels, num_classes,
    seed)."""
    check_choice(name, "name", sorted(MODELS))
    return MODELS[name](**kwargs)


__all__ = ["MODELS", "BasicBlock", "Bottleneck", "DenseNet", "Fire", "GoogLeNet", "Inception",
           "MobileNetV1", "ResNet", "SmallCNN", "SqueezeNet", "VGG", "densenet121", "densenet201",
           "get_model", "googlenet", "mobilenet_v1", "resnet18", "resnet20", "resnet50",
           "small_cnn", "squeezenet1_0", "vgg16", "vgg19"]
