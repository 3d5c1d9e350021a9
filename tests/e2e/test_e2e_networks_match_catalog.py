"""The built-in PyTorch CNNs run exactly the convolutions the operator catalog lists for them, and
ViT-B/16 its convolution and dense layers, so what the collector measures for a network is what
`cdmpp e2e` imports of it."""

from __future__ import annotations

import pytest

from cdmpp.programs import catalog as C

CNNS = ("resnet18", "resnet50", "mobilenet_v1", "mobilenet_v2", "squeezenet1_1",
        "shufflenet_v2", "densenet121")


def _run_hooked(name: str, kind: str, hook):
    """Run the network at batch 1 with `hook` on each of its `torch.nn.<kind>` modules; it
    classifies 1000 ways. The model, for a look at its modules."""
    import torch

    from cdmpp.e2e.networks import torch_model

    model, inputs = torch_model(name, 1)
    for m in model.modules():
        if isinstance(m, getattr(torch.nn, kind)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        out = model(*inputs)
    assert out.shape == (1, 1000)
    return model


def _torch_convs(name: str) -> set:
    """(c, h, k, kernel, stride, depthwise) of every Conv2d the network runs at batch 1."""
    seen = set()

    def hook(conv, args, _out):
        x = args[0]
        depthwise = conv.groups > 1
        assert not depthwise or conv.groups == conv.in_channels == conv.out_channels
        seen.add((x.shape[1], x.shape[2], conv.out_channels, conv.kernel_size[0],
                  conv.stride[0], depthwise))

    _run_hooked(name, "Conv2d", hook)
    return seen


def _catalog_convs(name: str) -> set:
    out = set()
    for t in C.select(ops=["conv2d", "conv2d_bias_relu", "depthwise_conv2d"], networks=[name]):
        p = dict(t.params)
        if p.get("n") != 1:
            continue
        depthwise = t.op == "depthwise_conv2d"
        out.add((p["c"], p["h"], p["c"] if depthwise else p["k"], p["kernel"], p["stride"],
                 depthwise))
    return out


@pytest.mark.parametrize("name", CNNS)
def test_pytorch_network_runs_the_catalog_convolutions(name):
    catalogued = _catalog_convs(name)
    assert len(catalogued) >= 10
    assert _torch_convs(name) == catalogued


def test_pytorch_vit_runs_the_catalog_dense_layers_and_patch_convolution():
    import torch

    dense = set()

    def on_linear(lin, args, _out):
        x = args[0]
        dense.add((x.numel() // x.shape[-1], lin.in_features, lin.out_features))

    model = _run_hooked("vit_b16", "Linear", on_linear)
    convs = {(m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0])
             for m in model.modules() if isinstance(m, torch.nn.Conv2d)}

    catalogued = {(dict(t.params)["m"], dict(t.params)["k"], dict(t.params)["n"])
                  for t in C.select(ops=["dense", "dense_bias_gelu"], networks=["vit_b16"])
                  if dict(t.params)["m"] in (1, 197)}  # batch 1: 197 tokens, or the [CLS] head
    assert len(catalogued) == 5
    assert dense == catalogued
    catalogued_convs = {(p["c"], p["k"], p["kernel"], p["stride"])
                        for p in (dict(t.params) for t in C.select(ops=["conv2d"],
                                                                   networks=["vit_b16"]))}
    assert convs == catalogued_convs == {(3, 768, 16, 16)}
