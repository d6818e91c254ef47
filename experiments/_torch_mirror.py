"""The same network in PyTorch, weights copied: the cuDNN baseline of end-to-end timings.

:func:`to_torch` walks one of our models and builds ``torch.nn`` modules that
compute the same evaluation-mode forward (a ``CPConv2d`` becomes its four
convolutions, a ``TuckerConv2d`` its three and a depthwise-separable block its depthwise
and (grouped) pointwise convolutions, the way a PyTorch user runs them).
Experiments only: the
library never imports PyTorch.
"""

from __future__ import annotations

from tensorconv import backend
from tensorconv.nn import layers as L
from tensorconv.nn.cp import CPConv2d
from tensorconv.nn.models.densenet import DenseLayer, DenseNet, Transition
from tensorconv.nn.models.googlenet import GoogLeNet, Inception
from tensorconv.nn.models.resnet import BasicBlock, Bottleneck, ResNet
from tensorconv.nn.models.smallcnn import SmallCNN
from tensorconv.nn.models.squeezenet import Fire, SqueezeNet
from tensorconv.nn.models.vgg import VGG
from tensorconv.nn.scc import Separable
from tensorconv.nn.tucker import TuckerConv2d


def _tensor(a):
    import torch

    return torch.from_numpy(backend.to_host(a).copy())


def to_torch(m):
    """A ``torch.nn.Module`` (CPU, eval mode) equal to our module ``m`` at inference."""
    import torch
    import torch.nn as tnn

    class Residual(tnn.Module):
        """relu(body(x) + shortcut(x)), our basic and bottleneck blocks."""

        def __init__(self, body, shortcut):
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x):
            return torch.relu(self.body(x) + self.shortcut(x))

    class Concat(tnn.Module):
        """cat([x, body(x)]) over channels, our DenseNet layer."""

        def __init__(self, body):
            super().__init__()
            self.body = body

        def forward(self, x):
            return torch.cat([x, self.body(x)], dim=1)

    class Branches(tnn.Module):
        """cat([b(x) for b in branches]) over channels, our inception module."""

        def __init__(self, branches):
            super().__init__()
            self.branches = tnn.ModuleList(branches)

        def forward(self, x):
            return torch.cat([b(x) for b in self.branches], dim=1)

    if isinstance(m, L.Conv2d):
        t = tnn.Conv2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding,
                       m.dilation, m.groups, bias=m.bias is not None)
        t.weight.data = _tensor(m.weight.data)
        if m.bias is not None:
            t.bias.data = _tensor(m.bias.data)
        return t
    if isinstance(m, L.BatchNorm2d):
        t = tnn.BatchNorm2d(m.channels, eps=m.eps)
        t.weight.data, t.bias.data = _tensor(m.weight.data), _tensor(m.bias.data)
        t.running_mean.data, t.running_var.data = _tensor(m.running_mean), _tensor(m.running_var)
        return t
    if isinstance(m, L.Linear):
        t = tnn.Linear(m.in_features, m.out_features, bias=m.bias is not None)
        t.weight.data = _tensor(m.weight.data)
        if m.bias is not None:
            t.bias.data = _tensor(m.bias.data)
        return t
    simple = {L.ReLU: tnn.ReLU, L.Identity: tnn.Identity, L.Dropout: tnn.Identity,
              L.Flatten: tnn.Flatten}
    for ours, theirs in simple.items():
        if isinstance(m, ours):
            return theirs()
    if isinstance(m, L.MaxPool2d):
        return tnn.MaxPool2d(*m.args, ceil_mode=m.ceil_mode)
    if isinstance(m, L.AvgPool2d):
        return tnn.AvgPool2d(*m.args)
    if isinstance(m, L.GlobalAvgPool2d):
        return tnn.Sequential(tnn.AdaptiveAvgPool2d(1), tnn.Flatten())
    if isinstance(m, L.Sequential):
        return tnn.Sequential(*(to_torch(c) for c in m))
    if isinstance(m, CPConv2d):
        return tnn.Sequential(*(to_torch(c) for c in (m.contract_in, m.conv_h, m.conv_w,
                                                      m.contract_out)))
    if isinstance(m, TuckerConv2d):
        return tnn.Sequential(*(to_torch(c) for c in (m.first, m.core, m.last)))
    if isinstance(m, Separable):    # DW + GPW / PW (an SCC pointwise stage has no mirror)
        return tnn.Sequential(to_torch(m.depthwise), to_torch(m.bn), tnn.ReLU(),
                              to_torch(m.pointwise))
    if isinstance(m, DenseLayer):
        return Concat(tnn.Sequential(to_torch(m.bn1), tnn.ReLU(), to_torch(m.conv1),
                                     to_torch(m.bn2), tnn.ReLU(), to_torch(m.conv2)))
    if isinstance(m, Transition):
        return tnn.Sequential(to_torch(m.bn), tnn.ReLU(), to_torch(m.conv), to_torch(m.pool))
    if isinstance(m, DenseNet):
        return tnn.Sequential(to_torch(m.stem), to_torch(m.pool), to_torch(m.features),
                              to_torch(m.bn), tnn.ReLU(), to_torch(m.gap), to_torch(m.fc)).eval()
    if isinstance(m, BasicBlock):
        body = tnn.Sequential(to_torch(m.conv1), to_torch(m.bn1), tnn.ReLU(), to_torch(m.conv2),
                              to_torch(m.bn2))
        return Residual(body, to_torch(m.shortcut))
    if isinstance(m, Bottleneck):
        body = tnn.Sequential(to_torch(m.conv1), to_torch(m.bn1), tnn.ReLU(), to_torch(m.conv2),
                              to_torch(m.bn2), tnn.ReLU(), to_torch(m.conv3), to_torch(m.bn3))
        return Residual(body, to_torch(m.shortcut))
    if isinstance(m, ResNet):
        return tnn.Sequential(to_torch(m.stem), to_torch(m.pool), to_torch(m.stages),
                              to_torch(m.gap), to_torch(m.fc)).eval()
    if isinstance(m, VGG):
        return tnn.Sequential(to_torch(m.features), to_torch(m.flatten), to_torch(m.fc)).eval()
    if isinstance(m, Inception):
        return Branches([to_torch(b) for b in m.branches()])
    if isinstance(m, GoogLeNet):
        return tnn.Sequential(to_torch(m.stem), to_torch(m.inceptions), to_torch(m.gap),
                              to_torch(m.fc)).eval()
    if isinstance(m, Fire):
        squeeze = tnn.Sequential(to_torch(m.squeeze), tnn.ReLU())
        return tnn.Sequential(squeeze, Branches([
            tnn.Sequential(to_torch(m.expand1x1), tnn.ReLU()),
            tnn.Sequential(to_torch(m.expand3x3), tnn.ReLU())]))
    if isinstance(m, SqueezeNet):
        return tnn.Sequential(to_torch(m.features), to_torch(m.classifier)).eval()
    if isinstance(m, SmallCNN):
        return tnn.Sequential(to_torch(m.features), to_torch(m.gap), to_torch(m.fc)).eval()
    raise NotImplementedError(f"no PyTorch mirror for {type(m).__name__}")
