"""Layers, models, optimisers and the inference engine."""

from tensorconv.nn.captured import CapturedStep, CaptureError
from tensorconv.nn.flops import count_flops_params
from tensorconv.nn.layers import (
                                  AvgPool2d,
                                  BatchNorm2d,
                                  Conv2d,
                                  Dropout,
                                  Flatten,
                                  GlobalAvgPool2d,
                                  Identity,
                                  Linear,
                                  MaxPool2d,
                                  ReLU,
                                  Sequential,
)
from tensorconv.nn.models import MODELS, get_model
from tensorconv.nn.module import Module, Parameter

__all__ = ["MODELS", "AvgPool2d", "BatchNorm2d", "CaptureError", "CapturedStep", "Conv2d",
           "Dropout", "Flatten", "GlobalAvgPool2d", "Identity", "Linear", "MaxPool2d", "Module",
           "Parameter", "ReLU", "Sequential", "count_flops_params", "get_model"]
