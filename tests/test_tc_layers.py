"""The tensor-core study's layer list: 33 distinct convolutions, as torchvision builds them."""

from __future__ import annotations

import pytest

from experiments._tc import LAYERS


def test_the_study_has_33_distinct_layers_11_of_resnet18():
    assert len(LAYERS) == 33
    assert sum(layer.model == "resnet18" for layer in LAYERS) == 11
    assert len({(layer.model, layer.key()) for layer in LAYERS}) == 33
    assert {layer.out for layer in LAYERS if layer.model == "resnet18"} == {112, 56, 28, 14, 7}
    assert LAYERS[11].out == 109                       # SqueezeNet's stem: 7x7 stride 2, no pad


def test_the_list_matches_torchvision():
    torch = pytest.importorskip("torch")
    models = pytest.importorskip("torchvision.models")
    from experiments._tc import Layer, distinct

    for name, build in (("resnet18", models.resnet18), ("squeezenet1_0", models.squeezenet1_0)):
        net, seen = build(), []

        def hook(m, inputs, _out, seen=seen):
            x = inputs[0]
            seen.append(Layer(name, "", m.in_channels, m.out_channels, m.kernel_size[0],
                              m.stride[0], m.padding[0], x.shape[-1]))

        for m in net.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.register_forward_hook(hook)
        with torch.no_grad():
            net.eval()(torch.zeros(1, 3, 224, 224))
        want = [layer.key() for layer in distinct(seen)]
        assert [layer.key() for layer in LAYERS if layer.model == name] == want
