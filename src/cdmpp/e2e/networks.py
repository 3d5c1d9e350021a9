"""Built-in networks in plain PyTorch (random weights) and their import into Relax.

    mod = import_network("resnet18", batch=1)        # a Relax IRModule, function "main"
    mod = import_onnx("model.onnx", batch=4)         # needs the `onnx` package

Shapes follow the published architectures (and the operator catalog in `programs/catalog.py`):
ResNet-18/50, MobileNet-V1/V2, SqueezeNet 1.1, ShuffleNet-V2, DenseNet-121 and ViT-B/16 on
224x224 images; BERT-base and GPT-2 small on 128 tokens. BERT and GPT-2 return the last hidden
states (as Hugging Face's `BertModel` / `GPT2Model`: no LM head; GPT-2's 50257-way LM head is a
5 GFLOP dense that the catalog does not measure either), ViT-B/16 its 1000 class logits (the
catalog measures that head). BatchNorm is kept as TVM imports it from an eval-mode model (not
folded into the convolutions).

Weights are random (seeded): latency does not depend on their values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

# the architectures' numbers, shared with the operator catalog (which is light to import)
from cdmpp.programs.catalog import (DENSENET121_BLOCKS, MOBILENET_V1_BLOCKS,
                                    MOBILENET_V2_SETTINGS, RESNET_BLOCKS, SHUFFLENET_V2_STAGES,
                                    SQUEEZENET_FIRES, SQUEEZENET_POOL_BEFORE)

SEQ_LEN = 128  # BERT and GPT-2
IMAGE = 224  # CNNs and ViT
VIT_PATCH = 16
VIT_TOKENS = (IMAGE // VIT_PATCH) ** 2 + 1  # the patches and [CLS]: 197


@dataclass(frozen=True)
class NetworkSpec:
    name: str
    build: Callable  # () -> torch.nn.Module (eval mode)
    inputs: Callable  # (batch) -> tuple of example tensors
    description: str


def _nn():
    import torch
    from torch import nn

    return torch, nn


# ---- CNNs ----------------------------------------------------------------------------------------


def _conv_bn(cin, cout, kernel, stride=1, groups=1, relu=True, relu6=False):
    torch, nn = _nn()
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if relu6:
        layers.append(nn.ReLU6())
    elif relu:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _resnet(depth: int):
    torch, nn = _nn()

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride):
            super().__init__()
            self.body = nn.Sequential(_conv_bn(cin, width, 3, stride),
                                      _conv_bn(width, width, 3, 1, relu=False))
            self.down = (_conv_bn(cin, width, 1, stride, relu=False)
                         if stride != 1 or cin != width else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, width, stride):
            super().__init__()
            out = width * 4
            self.body = nn.Sequential(_conv_bn(cin, width, 1), _conv_bn(width, width, 3, stride),
                                      _conv_bn(width, out, 1, relu=False))
            self.down = (_conv_bn(cin, out, 1, stride, relu=False)
                         if stride != 1 or cin != out else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    block, counts = {18: Basic, 50: Bottleneck}[depth], RESNET_BLOCKS[depth]
    layers = [_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, n in enumerate(counts):
        width = 64 * 2**stage
        for i in range(n):
            layers.append(block(cin, width, 2 if (i == 0 and stage > 0) else 1))
            cin = width * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


def _mobilenet_v2():
    torch, nn = _nn()

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [_conv_bn(cin, hidden, 1, relu6=True)] if expand != 1 else []
            layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, relu6=True),
                       _conv_bn(hidden, cout, 1, relu=False)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    layers, cin = [_conv_bn(3, 32, 3, 2, relu6=True)], 32
    for expand, cout, repeats, stride in MOBILENET_V2_SETTINGS:
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += [_conv_bn(cin, 1280, 1, relu6=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def _mobilenet_v1():
    _, nn = _nn()
    layers, cin = [_conv_bn(3, 32, 3, 2, relu6=True)], 32
    for cout, stride in MOBILENET_V1_BLOCKS:
        layers += [_conv_bn(cin, cin, 3, stride, groups=cin, relu6=True),
                   _conv_bn(cin, cout, 1, relu6=True)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


def _squeezenet1_1():
    """As torchvision's squeezenet1_1: convolutions with bias and ReLU, no BatchNorm."""
    torch, nn = _nn()

    class Fire(nn.Module):
        def __init__(self, cin, squeeze, expand):
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
            self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
            self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

        def forward(self, x):
            x = self.squeeze(x)
            return torch.cat([self.e1(x), self.e3(x)], 1)

    layers, cin = [nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True)], 64
    for i, (squeeze, expand) in enumerate(SQUEEZENET_FIRES):
        if i in SQUEEZENET_POOL_BEFORE:
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
        layers.append(Fire(cin, squeeze, expand))
        cin = 2 * expand
    layers += [nn.Conv2d(cin, 1000, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers)


def _shufflenet_v2():
    """ShuffleNet-V2 x1.0 as in torchvision (channel split, concat and shuffle included)."""
    torch, nn = _nn()

    class Unit(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            half = cout // 2
            self.stride = stride
            self.left = (nn.Sequential(_conv_bn(cin, cin, 3, stride, groups=cin, relu=False),
                                       _conv_bn(cin, half, 1))
                         if stride == 2 else None)
            right_in = cin if stride == 2 else half
            self.right = nn.Sequential(_conv_bn(right_in, half, 1),
                                       _conv_bn(half, half, 3, stride, groups=half, relu=False),
                                       _conv_bn(half, half, 1))

        def forward(self, x):
            if self.stride == 2:
                out = torch.cat([self.left(x), self.right(x)], 1)
            else:
                a, b = x.chunk(2, dim=1)
                out = torch.cat([a, self.right(b)], 1)
            n, c, h, w = out.shape
            return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)

    layers, cin = [_conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)], 24
    for cout, repeats in SHUFFLENET_V2_STAGES:
        for i in range(repeats):
            layers.append(Unit(cin, cout, 2 if i == 0 else 1))
            cin = cout
    layers += [_conv_bn(cin, 1024, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(1024, 1000)]
    return nn.Sequential(*layers)


def _densenet121():
    """DenseNet-121 as in torchvision (pre-activation BN-ReLU-conv layers, concatenation)."""
    torch, nn = _nn()

    def bn_relu_conv(cin, cout, kernel):
        return nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(),
                             nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False))

    class DenseLayer(nn.Module):
        def __init__(self, cin):
            super().__init__()
            self.body = nn.Sequential(bn_relu_conv(cin, 128, 1), bn_relu_conv(128, 32, 3))

        def forward(self, x):
            return torch.cat([x, self.body(x)], 1)

    layers, c = [_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for block, n in enumerate(DENSENET121_BLOCKS):
        layers += [DenseLayer(c + 32 * i) for i in range(n)]
        c += 32 * n
        if block < 3:
            layers += [bn_relu_conv(c, c // 2, 1), nn.AvgPool2d(2, 2)]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(c, 1000)]
    return nn.Sequential(*layers)


# ---- transformers --------------------------------------------------------------------------------


def _transformer(kind: str, layers=12, hidden=768, heads=12, ffn=3072, vocab=None):
    """BERT-base (post-norm, erf GELU, bidirectional), GPT-2 small (pre-norm, tanh GELU,
    causal mask, fused QKV projection) or ViT-B/16 (pre-norm, erf GELU, bidirectional, fused
    QKV, 16x16 patches and a [CLS] token in place of the token embedding)."""
    torch, nn = _nn()
    gpt, vit = kind == "gpt2", kind == "vit"
    fused_qkv = pre_norm = gpt or vit
    vocab = vocab or (50257 if gpt else 30522)
    head_dim = hidden // heads

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            if fused_qkv:
                self.qkv = nn.Linear(hidden, 3 * hidden)
            else:
                self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)

        def forward(self, x, mask):
            b, s, _ = x.shape
            if fused_qkv:
                q, k, v = self.qkv(x).split(hidden, dim=2)
            else:
                q, k, v = self.q(x), self.k(x), self.v(x)
            # (B, S, H) -> (B, heads, S, head_dim)
            q, k, v = (t.reshape(b, s, heads, head_dim).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)  # (B, heads, S, S)
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            ctx = torch.softmax(scores, dim=-1) @ v  # (B, heads, S, head_dim)
            return self.out(ctx.transpose(1, 2).reshape(b, s, hidden))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.ln1, self.ln2 = Attention(), nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.gelu = nn.GELU(approximate="tanh" if gpt else "none")

        def forward(self, x, mask):
            if pre_norm:
                x = x + self.attn(self.ln1(x), mask)
                return x + self.fc2(self.gelu(self.fc1(self.ln2(x))))
            x = self.ln1(x + self.attn(x, mask))  # post-norm
            return self.ln2(x + self.fc2(self.gelu(self.fc1(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(1024 if gpt else 512, hidden)
            self.segment = None if gpt else nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden)  # GPT-2: final norm; BERT: embedding norm
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            causal = torch.ones(SEQ_LEN, SEQ_LEN, dtype=torch.bool).triu(1)
            self.register_buffer("causal", causal, persistent=False)

        def forward(self, ids):
            s = ids.shape[1]
            pos = torch.arange(s, device=ids.device)
            x = self.tok(ids) + self.pos(pos)
            mask = None
            if gpt:
                mask = self.causal[:s, :s]
            else:
                x = self.ln(x + self.segment(torch.zeros_like(ids)))
            for layer in self.layers:
                x = layer(x, mask)
            return self.ln(x) if gpt else x

    class Vit(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            self.patch = nn.Conv2d(3, hidden, VIT_PATCH, VIT_PATCH)
            self.cls = nn.Parameter(torch.randn(1, 1, hidden))
            self.pos = nn.Parameter(torch.randn(1, VIT_TOKENS, hidden))
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, classes)

        def forward(self, images):
            x = self.patch(images).flatten(2).transpose(1, 2)  # (B, 196, hidden)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            for layer in self.layers:
                x = layer(x, None)
            return self.head(self.ln(x)[:, 0])  # classify the [CLS] token

    return Vit() if vit else Model()


# ---- tiny networks for tests ---------------------------------------------------------------------


def _tiny_mlp():
    torch, nn = _nn()
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def _tiny_branch():
    torch, nn = _nn()

    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 32), nn.Linear(16, 32)

        def forward(self, x):  # (B, 16) -> (B, B): the join cannot be fused into a branch
            return torch.relu(self.a(x)) @ torch.tanh(self.b(x)).transpose(0, 1)

    return Branch()


def _images(batch):
    torch, _ = _nn()
    return (torch.randn(batch, 3, IMAGE, IMAGE),)


def _tokens(vocab):
    def make(batch):
        torch, _ = _nn()
        return (torch.randint(0, vocab, (batch, SEQ_LEN), dtype=torch.int64),)

    return make


def _vectors(batch):
    torch, _ = _nn()
    return (torch.randn(batch, 16),)


NETWORKS: dict[str, NetworkSpec] = {s.name: s for s in (
    NetworkSpec("resnet18", lambda: _resnet(18), _images, "ResNet-18, 224x224"),
    NetworkSpec("resnet50", lambda: _resnet(50), _images, "ResNet-50, 224x224"),
    NetworkSpec("mobilenet_v2", _mobilenet_v2, _images, "MobileNet-V2, 224x224"),
    NetworkSpec("bert_base", lambda: _transformer("bert"), _tokens(30522),
                f"BERT-base encoder, {SEQ_LEN} tokens"),
    NetworkSpec("gpt2", lambda: _transformer("gpt2"), _tokens(50257),
                f"GPT-2 small decoder (no LM head), {SEQ_LEN} tokens"),
    NetworkSpec("vit_b16", lambda: _transformer("vit"), _images,
                f"ViT-B/16 on 224x224 images ({VIT_TOKENS} tokens), with its classifier head"),
    NetworkSpec("mobilenet_v1", _mobilenet_v1, _images, "MobileNet-V1, 224x224"),
    NetworkSpec("squeezenet1_1", _squeezenet1_1, _images, "SqueezeNet 1.1, 224x224"),
    NetworkSpec("shufflenet_v2", _shufflenet_v2, _images, "ShuffleNet-V2 x1.0, 224x224"),
    NetworkSpec("densenet121", _densenet121, _images, "DenseNet-121, 224x224"),
    NetworkSpec("tiny_mlp", _tiny_mlp, _vectors, "Linear(16,32) -> ReLU -> Linear(32,8)"),
    NetworkSpec("tiny_branch", _tiny_branch, _vectors,
                "two parallel Linear(16,32) branches (ReLU, tanh) joined by a matmul"),
)}  # fmt: skip
BENCHMARK_NETWORKS = ("resnet18", "resnet50", "mobilenet_v2", "bert_base", "gpt2")


def spec(name: str) -> NetworkSpec:
    if name not in NETWORKS:
        import difflib

        close = difflib.get_close_matches(name, NETWORKS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown network {name!r}{hint}; built-in networks: "
                         f"{', '.join(NETWORKS)}")
    return NETWORKS[name]


def torch_model(name: str, batch: int = 1, seed: int = 0):
    """(model in eval mode, example inputs) of a built-in network."""
    torch, _ = _nn()
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    s = spec(name)
    torch.manual_seed(seed)
    model = s.build().eval()
    return model, s.inputs(batch)


def import_torch(model, inputs):
    """A Relax IRModule from a PyTorch module and example inputs (via torch.export)."""
    import torch

    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm.relax.frontend.torch import from_exported_program

    import warnings

    with warnings.catch_warnings():
        # torch 2.13 warns about its own deprecated pytree API on every export: nothing a user
        # of cdmpp can act on
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                                category=FutureWarning)
        with torch.no_grad():
            exported = torch.export.export(model, tuple(inputs))
        return from_exported_program(exported)


def import_network(name: str, batch: int = 1, seed: int = 0):
    """The Relax IRModule of a built-in network at `batch`."""
    model, inputs = torch_model(name, batch, seed)
    return import_torch(model, inputs)


def import_onnx(path, shape_dict: dict | None = None, batch: int | None = None):
    """The Relax IRModule of an ONNX file (needs the `onnx` package); an open leading (batch)
    dimension is bound to `batch` (default 1). `onnx_model.load_onnx` also says what was bound."""
    from cdmpp.e2e.onnx_model import load_onnx

    return load_onnx(path, batch=batch, shape_dict=shape_dict).mod
