"""Built-in catalog of real operators with the shapes of real networks.

Each network is described by a small generator that walks its architecture and yields one
`(op, params)` layer per operator instance; the catalog dedupes those layers by shape and merges
the names of the networks that contain them. A `Task` builds its float32 `PrimFunc` from the
same TOPI compute the measured data in `shared/data/<device>/` was made from, so one shape gives
a structurally equal function (and the directory names there equal the task names here).

Conventions (fixed by the measured data): dense is `dense_MxKxN` with B stored [N, K];
batch_matmul is `bmm_BxMxKxN` with Y stored [B, N, K] (QK^T is `bmm_12xSx64xS`, attn*V is
`bmm_12xSxSx64`); 3x3/7x7/16x16 convs always name their stride, 1x1 and convbr convs only
when strided. `conv2d_bias_relu` (BN folded into the bias) is catalogued for the ResNets' 3x3
convs, which also appear as plain `conv2d`; other conv-bn-relu layers appear as `conv2d` only.

Beyond the networks, a sweep: `matmul_bias` (`matmulb_MxKxN`, the weight stored [K, N]) over
every (K, N) pair of `SWEEP_DIMS`, at two token counts M, and alignment pairs (`ALIGN_K` x
`ALIGN_N`: N a multiple of 256, 512 or 1024 between those sizes) at one M. Untuned, TVM runs
each Linear layer of an imported network this way, reading the weight with a stride of N along
the reduction, so its time per operation depends on K and N through cache conflicts (measured:
BERT-base's 768->3072 layer runs 1.8x slower than its 3072->768 one, for the same work). Our
networks hold three (K, N) pairs, too few to learn that from. Sweep tasks belong to no network
(`networks` is empty): a by-network split keeps them on the training side.

The four CNNs of catalog version 4 (MobileNet-V1, SqueezeNet 1.1, ShuffleNet-V2, DenseNet-121)
bring 1x1 and depthwise convolutions from networks other than ResNet-50 and MobileNet-V2, so a
model that has never seen those two still trains on such layers. Their conv-BN-ReLU layers are
`conv2d_bias_relu` (MobileNet-V1 keeps V2's conv + `relu6`).

A second sweep (catalog version 5, `conv_sweep`): 1x1 and depthwise 3x3 convolutions over a
ladder of channel counts and resolutions, leaving out every shape a network has, so held-out
networks keep their own layers and a model still sees many more such convolutions.

Not catalogued: GPT-2's 50257-way LM head (a 5-20 GFLOP dense that would dominate measuring),
attention scaling/masking, grouped convs (none of our networks has one), concatenation and
channel shuffle (data movement), DenseNet's pre-activation BN-ReLU and 2x2 average pools.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# 2: + the matmul_bias sweep; 3: + its alignment pairs; 4: + 4 CNNs; 5: + the convolution sweep
CATALOG_VERSION = "5"
NETWORKS = ("resnet18", "resnet50", "mobilenet_v2", "bert_base", "gpt2", "vit_b16",
            "mobilenet_v1", "squeezenet1_1", "shufflenet_v2", "densenet121")
OPS = (
    "conv2d", "conv2d_bias_relu", "depthwise_conv2d", "dense", "dense_bias_gelu",
    "batch_matmul", "softmax", "layer_norm", "max_pool2d", "global_avg_pool2d",
    "add_relu", "add", "relu6", "matmul_bias",
)  # fmt: skip

CNN_BATCHES = (1, 4)  # ResNets, MobileNet-V2 and ViT
SEQ_LENGTHS = (64, 128, 256)  # BERT and GPT-2, batch 1
SWEEP_DIMS = (256, 512, 768, 1024, 2048, 3072, 4096)  # K and N of the matmul_bias sweep
# two M per (K, N): the power of two nearest each of SWEEP_MACS / (K N), within [8, 2048]
SWEEP_MACS = (2**26, 2**28)
# Alignment pairs (one M, for SWEEP_MACS[0]): in SWEEP_DIMS every large N but 3072 is a power of
# two, so "N is large" and "N is a multiple of 1024" coincide there, and a model learnt that
# large N is slow; GPT-2's 768 -> 2304 layer (N a multiple of 256 only) runs at the cost per
# multiply-add of N = 768 and was predicted 2.25x too slow. These N are multiples of 256 of
# every alignment between the sweep's sizes (data/README.md has what they cost).
ALIGN_K = (768, 1536, 2304, 3072)
ALIGN_N = (768, 1280, 1536, 1792, 2304, 2560, 3072, 3584)
# The convolution sweep (catalog version 5): 1x1 and depthwise 3x3 convolutions over a ladder
# of channel counts and resolutions (alternately at batch 1 and 4; of the 1x1 ones every third
# point of the grid, of no more than CONV_SWEEP_MACS multiply-adds), none with the shape of a
# network's layer.
# 1x1 and depthwise convolutions were 72% of the by-network split's error and, apart from the
# held-out networks, only a few networks have them (docs/model.md).
CONV_SWEEP_CHANNELS = (16, 24, 40, 64, 96, 144, 240, 384, 576, 960, 1536)
CONV_SWEEP_SIZES = (7, 14, 28, 56, 112)
CONV_SWEEP_MACS = 2**28

Params = tuple[tuple[str, int], ...]
Layer = tuple[str, Params]


@dataclass(frozen=True)
class Task:
    """One operator at one shape, with the networks that contain it."""

    name: str  # unique, equal to the measured-data directory name
    op: str  # operator family, one of OPS
    params: Params  # shape parameters, sorted by key
    networks: tuple[str, ...]  # sorted

    def prim_func(self):
        """The `tvm.tirx.PrimFunc` of this task (TOPI compute, float32)."""
        return _BUILDERS[self.op](**dict(self.params))


# ---- layers: (op, params) records --------------------------------------------------------------


def _layer(op: str, **params: int) -> Layer:
    return op, tuple(sorted(params.items()))


def _conv(n, c, h, k, kernel, stride=1, pad=None, relu=False) -> Layer:
    """Square NCHW conv; 'same' padding unless given (the ViT patch embedding uses 0)."""
    pad = kernel // 2 if pad is None else pad
    op = "conv2d_bias_relu" if relu else "conv2d"
    return _layer(op, n=n, c=c, h=h, w=h, k=k, kernel=kernel, stride=stride, pad=pad)


def _dwconv(n, c, h, stride) -> Layer:
    return _layer("depthwise_conv2d", n=n, c=c, h=h, w=h, kernel=3, stride=stride, pad=1)


def _eltwise(op: str, *shape: int) -> Layer:
    return _layer(op, **{f"d{i}": d for i, d in enumerate(shape)})


def _dense(m, k, n, gelu=False) -> Layer:
    return _layer("dense_bias_gelu" if gelu else "dense", m=m, k=k, n=n)


# ---- networks ----------------------------------------------------------------------------------

RESNET_BLOCKS = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3)}


def _basic_block(n, c, h, width, stride) -> Iterator[Layer]:
    """ResNet-18 block: conv-bn-relu, conv-bn, (downsample), add+relu."""
    yield _conv(n, c, h, width, 3, stride)
    yield _conv(n, c, h, width, 3, stride, relu=True)  # the same conv with BN folded + ReLU
    yield _conv(n, width, h // stride, width, 3)
    if stride != 1 or c != width:
        yield _conv(n, c, h, width, 1, stride)
    yield _eltwise("add_relu", n, width, h // stride, h // stride)


def _bottleneck(n, c, h, width, stride) -> Iterator[Layer]:
    """ResNet-50 block as in torchvision (v1.5): the stride sits on the 3x3 conv."""
    out, ho = width * 4, h // stride
    yield _conv(n, c, h, width, 1)
    yield _conv(n, width, h, width, 3, stride)
    yield _conv(n, width, h, width, 3, stride, relu=True)
    yield _conv(n, width, ho, out, 1)
    if stride != 1 or c != out:
        yield _conv(n, c, h, out, 1, stride)
    yield _eltwise("add_relu", n, out, ho, ho)


def _resnet(depth: int, n: int) -> Iterator[Layer]:
    yield _conv(n, 3, 224, 64, 7, 2)
    yield _layer("max_pool2d", n=n, c=64, h=112, w=112, kernel=3, stride=2, pad=1)
    block = _basic_block if depth < 50 else _bottleneck
    c, h = 64, 56
    for stage, blocks in enumerate(RESNET_BLOCKS[depth]):
        width = 64 << stage
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            yield from block(n, c, h, width, stride)
            c, h = (width if depth < 50 else width * 4), h // stride
    yield _layer("global_avg_pool2d", n=n, c=c, h=h, w=h)
    yield _dense(n, c, 1000)


# (expansion t, output channels c, repeats n, first stride s), from the MobileNet-V2 paper
MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip


def _inverted_residual(n, c, h, out, stride, expand) -> Iterator[Layer]:
    hidden, ho = c * expand, h // stride
    if expand != 1:
        yield _conv(n, c, h, hidden, 1)
        yield _eltwise("relu6", n, hidden, h, h)
    yield _dwconv(n, hidden, h, stride)
    yield _eltwise("relu6", n, hidden, ho, ho)
    yield _conv(n, hidden, ho, out, 1)  # linear bottleneck: no activation
    if stride == 1 and c == out:
        yield _eltwise("add", n, out, ho, ho)


def mobilenet_v2(n: int) -> Iterator[Layer]:
    yield _conv(n, 3, 224, 32, 3, 2)
    yield _eltwise("relu6", n, 32, 112, 112)
    c, h = 32, 112
    for expand, out, repeats, first_stride in MOBILENET_V2_SETTINGS:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            yield from _inverted_residual(n, c, h, out, stride, expand)
            c, h = out, h // stride
    yield _conv(n, c, h, 1280, 1)
    yield _eltwise("relu6", n, 1280, h, h)
    yield _layer("global_avg_pool2d", n=n, c=1280, h=h, w=h)
    yield _dense(n, 1280, 1000)


# (output channels, depthwise stride) of MobileNet-V1's separable blocks; the last depthwise
# conv has stride 1, as in every common implementation (the paper's table says 2 at 7x7)
MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                       *((512, 1),) * 5, (1024, 2), (1024, 1))  # fmt: skip
# (squeeze, expand) channels of SqueezeNet 1.1's eight fire modules, and the fire modules a
# 3x3 max pool precedes
SQUEEZENET_FIRES = ((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256),
                    (64, 256))  # fmt: skip
SQUEEZENET_POOL_BEFORE = (2, 4)
SHUFFLENET_V2_STAGES = ((116, 4), (232, 8), (464, 4))  # (output channels, units) per stage
DENSENET121_BLOCKS = (6, 12, 24, 16)  # dense layers per block


def mobilenet_v1(n: int) -> Iterator[Layer]:
    """MobileNet-V1 (width 1.0): a 3x3 stem, then 13 depthwise-separable blocks (each conv
    followed by BN + ReLU6, BN folded)."""
    yield _conv(n, 3, 224, 32, 3, 2)
    yield _eltwise("relu6", n, 32, 112, 112)
    c, h = 32, 112
    for out, stride in MOBILENET_V1_BLOCKS:
        yield _dwconv(n, c, h, stride)
        h //= stride
        yield _eltwise("relu6", n, c, h, h)
        yield _conv(n, c, h, out, 1)
        yield _eltwise("relu6", n, out, h, h)
        c = out
    yield _layer("global_avg_pool2d", n=n, c=c, h=h, w=h)
    yield _dense(n, c, 1000)


def _fire(n, c, h, squeeze, expand) -> Iterator[Layer]:
    """SqueezeNet's fire module: conv+bias+ReLU squeeze, two expands (1x1, 3x3), concatenated."""
    yield _conv(n, c, h, squeeze, 1, relu=True)
    yield _conv(n, squeeze, h, expand, 1, relu=True)
    yield _conv(n, squeeze, h, expand, 3, relu=True)


def squeezenet1_1(n: int) -> Iterator[Layer]:
    """SqueezeNet 1.1 as in torchvision: unpadded stem, ceil-mode pools (55, 27, 13 pixels)."""
    yield _conv(n, 3, 224, 64, 3, 2, pad=0, relu=True)
    yield _layer("max_pool2d", n=n, c=64, h=111, w=111, kernel=3, stride=2, pad=0)
    c, h = 64, 55
    for i, (squeeze, expand) in enumerate(SQUEEZENET_FIRES):
        if i in SQUEEZENET_POOL_BEFORE:
            yield _layer("max_pool2d", n=n, c=c, h=h, w=h, kernel=3, stride=2, pad=0)
            h = (h - 3) // 2 + 1
        yield from _fire(n, c, h, squeeze, expand)
        c = 2 * expand
    yield _conv(n, c, h, 1000, 1, relu=True)  # the classifier is a 1x1 conv
    yield _layer("global_avg_pool2d", n=n, c=1000, h=h, w=h)


def _shuffle_unit(n, c, h, out, stride) -> Iterator[Layer]:
    """ShuffleNet-V2 unit: a strided unit runs both branches on all `c` channels; a plain one
    runs the right branch on half of them (channel split, concat and shuffle not catalogued)."""
    half, ho = out // 2, h // stride
    if stride == 2:
        yield _dwconv(n, c, h, 2)  # left branch: depthwise (BN), then 1x1 conv-BN-ReLU
        yield _conv(n, c, ho, half, 1, relu=True)
    right_in = c if stride == 2 else half
    yield _conv(n, right_in, h, half, 1, relu=True)
    yield _dwconv(n, half, h, stride)
    yield _conv(n, half, ho, half, 1, relu=True)


def shufflenet_v2(n: int) -> Iterator[Layer]:
    """ShuffleNet-V2 x1.0 (stages of 116, 232, 464 channels); conv-BN-ReLU as conv+bias+ReLU."""
    yield _conv(n, 3, 224, 24, 3, 2, relu=True)
    yield _layer("max_pool2d", n=n, c=24, h=112, w=112, kernel=3, stride=2, pad=1)
    c, h = 24, 56
    for out, repeats in SHUFFLENET_V2_STAGES:
        for i in range(repeats):
            stride = 2 if i == 0 else 1
            yield from _shuffle_unit(n, c, h, out, stride)
            c, h = out, h // stride
    yield _conv(n, c, h, 1024, 1, relu=True)
    yield _layer("global_avg_pool2d", n=n, c=1024, h=h, w=h)
    yield _dense(n, 1024, 1000)


def densenet121(n: int) -> Iterator[Layer]:
    """DenseNet-121 (growth 32): each dense layer is a 1x1 conv to 128 channels (BN + ReLU
    after it folded: conv+bias+ReLU) and a 3x3 conv to 32; the input BN-ReLU of each layer, the
    concatenations and the transitions' 2x2 average pools are not catalogued."""
    yield _conv(n, 3, 224, 64, 7, 2, relu=True)
    yield _layer("max_pool2d", n=n, c=64, h=112, w=112, kernel=3, stride=2, pad=1)
    c, h = 64, 56
    for block, layers in enumerate(DENSENET121_BLOCKS):
        for i in range(layers):
            yield _conv(n, c + 32 * i, h, 128, 1, relu=True)
            yield _conv(n, 128, h, 32, 3)
        c += 32 * layers
        if block < 3:  # transition: 1x1 conv halving the channels, then a 2x2 average pool
            yield _conv(n, c, h, c // 2, 1)
            c, h = c // 2, h // 2
    yield _layer("global_avg_pool2d", n=n, c=c, h=h, w=h)
    yield _dense(n, c, 1000)


def _encoder_layer(tokens: int, heads: int, seq: int, fused_qkv: bool) -> Iterator[Layer]:
    """One 768-wide, 12-head transformer layer; `tokens` = batch*seq, `heads` = batch*12."""
    if fused_qkv:  # GPT-2's c_attn, ViT's qkv
        yield _dense(tokens, 768, 2304)
    else:  # BERT's separate query/key/value
        yield from (_dense(tokens, 768, 768) for _ in range(3))
    yield _layer("batch_matmul", b=heads, m=seq, k=64, n=seq)  # Q K^T
    yield _layer("softmax", b=heads, m=seq, n=seq)
    yield _layer("batch_matmul", b=heads, m=seq, k=seq, n=64)  # attn V
    yield _dense(tokens, 768, 768)  # attention output projection
    yield _eltwise("add", tokens, 768)
    yield _layer("layer_norm", m=tokens, n=768)
    yield _dense(tokens, 768, 3072, gelu=True)  # FFN up-projection
    yield _dense(tokens, 3072, 768)
    yield _eltwise("add", tokens, 768)
    yield _layer("layer_norm", m=tokens, n=768)


def bert_base(seq: int) -> Iterator[Layer]:
    yield _eltwise("add", seq, 768)  # word + position + type embeddings
    yield _layer("layer_norm", m=seq, n=768)
    for _ in range(12):
        yield from _encoder_layer(seq, 12, seq, fused_qkv=False)
    yield _dense(1, 768, 768)  # pooler on the [CLS] token


def gpt2(seq: int) -> Iterator[Layer]:
    yield _eltwise("add", seq, 768)  # token + position embeddings
    for _ in range(12):
        yield from _encoder_layer(seq, 12, seq, fused_qkv=True)
    yield _layer("layer_norm", m=seq, n=768)  # ln_f


def vit_b16(n: int) -> Iterator[Layer]:
    tokens = 197  # 14*14 patches + [CLS]
    yield _conv(n, 3, 224, 768, 16, 16, pad=0)  # patch embedding
    yield _eltwise("add", n * tokens, 768)  # position embeddings
    for _ in range(12):
        yield from _encoder_layer(n * tokens, n * 12, tokens, fused_qkv=True)
    yield _layer("layer_norm", m=n * tokens, n=768)
    yield _dense(n, 768, 1000)  # head on the [CLS] token


def _sweep_m(macs: int, k: int, n: int) -> int:
    """The power of two nearest macs / (k n), within [8, 2048]."""
    return min(2048, max(8, 2 ** round(math.log2(macs / (k * n)))))


def linear_sweep() -> Iterator[Layer]:
    for macs in SWEEP_MACS:
        for k in SWEEP_DIMS:
            for n in SWEEP_DIMS:
                yield _layer("matmul_bias", m=_sweep_m(macs, k, n), k=k, n=n)
    for k in ALIGN_K:  # pairs already in the sweep above dedupe in `catalog()`
        for n in ALIGN_N:
            yield _layer("matmul_bias", m=_sweep_m(SWEEP_MACS[0], k, n), k=k, n=n)


def conv_sweep(exclude: frozenset = frozenset()) -> Iterator[Layer]:
    """The convolution sweep, without the layers in `exclude` (the networks' own)."""
    chans, sizes = CONV_SWEEP_CHANNELS, CONV_SWEEP_SIZES
    for hi, h in enumerate(sizes):
        for ci, c in enumerate(chans):
            for ki, k in enumerate(chans):
                n = 4 if (ci + ki) % 2 else 1
                layer = _conv(n, c, h, k, 1)
                if (hi + ci + ki) % 3 == 0 and n * h * h * c * k <= CONV_SWEEP_MACS \
                        and layer not in exclude:
                    yield layer
            for stride in (1, 2):
                n = 4 if (ci + stride) % 2 else 1
                layer = _dwconv(n, c, h, stride)
                if layer not in exclude:
                    yield layer


_NETWORK_LAYERS = {
    "resnet18": (functools.partial(_resnet, 18), CNN_BATCHES),
    "resnet50": (functools.partial(_resnet, 50), CNN_BATCHES),
    "mobilenet_v2": (mobilenet_v2, CNN_BATCHES),
    "bert_base": (bert_base, SEQ_LENGTHS),
    "gpt2": (gpt2, SEQ_LENGTHS),
    "vit_b16": (vit_b16, CNN_BATCHES),
    "mobilenet_v1": (mobilenet_v1, CNN_BATCHES),
    "squeezenet1_1": (squeezenet1_1, CNN_BATCHES),
    "shufflenet_v2": (shufflenet_v2, CNN_BATCHES),
    "densenet121": (densenet121, (1,)),  # 58 distinct 1x1 convs at each batch size
}


# ---- names -------------------------------------------------------------------------------------


def _x(*dims: int) -> str:
    return "x".join(map(str, dims))


def task_name(op: str, params: Params) -> str:
    """The measured-data directory name of one layer."""
    p = dict(params)
    if op in ("conv2d", "conv2d_bias_relu"):
        prefix = "conv" if op == "conv2d" else "convbr"
        # data convention: conv KxK always names the stride, convbr and 1x1 only when strided
        named = op == "conv2d" and p["kernel"] != 1
        stride = f"s{p['stride']}" if named or p["stride"] != 1 else ""
        kernel = _x(p["kernel"], p["kernel"])
        return f"{prefix}{kernel}_{_x(p['n'], p['c'], p['h'], p['w'])}_k{p['k']}{stride}"
    if op == "depthwise_conv2d":
        return f"dwconv3x3_{_x(p['n'], p['c'], p['h'], p['w'])}_s{p['stride']}"
    if op in ("dense", "dense_bias_gelu"):
        return f"{'dense' if op == 'dense' else 'densegelu'}_{_x(p['m'], p['k'], p['n'])}"
    if op == "matmul_bias":
        return f"matmulb_{_x(p['m'], p['k'], p['n'])}"
    if op == "batch_matmul":
        return f"bmm_{_x(p['b'], p['m'], p['k'], p['n'])}"
    if op == "softmax":
        return f"softmax_{_x(p['b'], p['m'], p['n'])}"
    if op == "layer_norm":
        return f"layernorm_{_x(p['m'], p['n'])}"
    if op == "max_pool2d":
        k = p["kernel"]
        return f"maxpool{k}x{k}_{_x(p['n'], p['c'], p['h'], p['w'])}_s{p['stride']}"
    if op == "global_avg_pool2d":
        return f"gap_{_x(p['n'], p['c'], p['h'], p['w'])}"
    prefix = {"add_relu": "addrelu", "add": "add", "relu6": "relu6"}[op]
    return f"{prefix}_{_x(*_shape(p))}"


# ---- the catalog -------------------------------------------------------------------------------


@functools.cache
def catalog() -> tuple[Task, ...]:
    """Every task, in the order networks first reach them (deterministic)."""
    found: dict[Layer, set[str]] = {}
    for network, (layers, sizes) in _NETWORK_LAYERS.items():
        for size in sizes:
            for layer in layers(size):
                found.setdefault(layer, set()).add(network)
    for layer in linear_sweep():
        found.setdefault(layer, set())
    for layer in conv_sweep(frozenset(found)):
        found.setdefault(layer, set())
    tasks = tuple(
        Task(task_name(op, params), op, params, tuple(sorted(nets)))
        for (op, params), nets in found.items()
    )
    assert len({t.name for t in tasks}) == len(tasks), "two shapes share a name"
    return tasks


@functools.cache
def _by_name() -> dict[str, Task]:
    return {t.name: t for t in catalog()}


def _close(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=5, cutoff=0.6)
    return f"; close names: {', '.join(close)}" if close else ""


def get_task(name: str) -> Task:
    try:
        return _by_name()[name]
    except KeyError:
        raise KeyError(f"no task {name!r} in the catalog{_close(name, list(_by_name()))}") from None


SWEEP = "sweep"  # in `select`'s networks: the tasks that belong to no network (the sweeps)


def select(ops: Sequence[str] | None = None, networks: Sequence[str] | None = None) -> list[Task]:
    """Tasks whose name or family is in `ops` and that occur in one of `networks` (None: any;
    `SWEEP` stands for the sweeps' tasks, which belong to no network)."""
    if isinstance(ops, str) or isinstance(networks, str):
        raise TypeError("ops and networks are sequences of names, not a single string")
    for op in ops or ():
        if op not in OPS and op not in _by_name():
            raise ValueError(
                f"unknown op {op!r}: neither an op family nor a task name; families: "
                f"{', '.join(OPS)}{_close(op, list(_by_name()))}"
            )
    for net in networks or ():
        if net not in NETWORKS and net != SWEEP:
            raise ValueError(f"unknown network {net!r}; networks: {', '.join(NETWORKS)} "
                             f"(or {SWEEP}: the tasks of no network)")
    wanted_ops = None if ops is None else set(ops)
    wanted_nets = None if networks is None else set(networks)
    return [
        t
        for t in catalog()
        if (wanted_ops is None or t.op in wanted_ops or t.name in wanted_ops)
        and (wanted_nets is None or wanted_nets.intersection(t.networks or (SWEEP,)))
    ]


# ---- TOPI computes (placeholder names as in the measured data) ---------------------------------


def _te_topi():
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm import te, topi

    return te, topi


def _conv2d(n, c, h, w, k, kernel, stride, pad, fused=False):
    te, topi = _te_topi()
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((k, c, kernel, kernel), name="W")
    out = topi.nn.conv2d_nchw(X, W, stride, pad, 1)
    if not fused:
        return te.create_prim_func([X, W, out])
    B = te.placeholder((1, k, 1, 1), name="B")  # folded batch-norm shift
    return te.create_prim_func([X, W, B, topi.nn.relu(topi.add(out, B))])


def _depthwise_conv2d(n, c, h, w, kernel, stride, pad):
    te, topi = _te_topi()
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((c, 1, kernel, kernel), name="W")
    return te.create_prim_func([X, W, topi.nn.depthwise_conv2d_nchw(X, W, stride, pad, 1)])


def _dense_op(m, k, n, gelu=False):
    te, topi = _te_topi()
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((n, k), name="B")
    out = topi.nn.matmul(A, B, transpose_b=True)
    if not gelu:
        return te.create_prim_func([A, B, out])
    bias = te.placeholder((n,), name="bias")
    x = topi.add(out, bias)

    def gelu_tanh(i, j):  # GPT-2's tanh approximation
        v = x[i, j]
        return v * 0.5 * (1.0 + te.tanh(0.7978845608 * (v + 0.044715 * v * v * v)))

    return te.create_prim_func([A, B, bias, te.compute((m, n), gelu_tanh, name="gelu")])


def _matmul_bias(m, k, n):
    """What Relax runs, untuned, for a Linear layer: `matmul` of A [M, K] and the weight
    stored [K, N], then the bias added (the two blocks of its fused kernel)."""
    te, topi = _te_topi()
    # named as in Relax's kernels: TVM's per-store features order equal-sized buffers by name
    A = te.placeholder((m, k), name="A")
    W = te.placeholder((k, n), name="param_0")
    bias = te.placeholder((n,), name="param_1")
    r = te.reduce_axis((0, k), name="k")
    out = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[r, j], axis=r), name="matmul")
    return te.create_prim_func([A, W, bias, topi.add(out, bias)])


def _batch_matmul(b, m, k, n):
    te, topi = _te_topi()
    X = te.placeholder((b, m, k), name="X")
    Y = te.placeholder((b, n, k), name="Y")
    return te.create_prim_func([X, Y, topi.nn.batch_matmul(X, Y)])


def _softmax(b, m, n):
    te, topi = _te_topi()
    A = te.placeholder((b, m, n), name="A")
    return te.create_prim_func([A, topi.nn.softmax(A, axis=-1)])


def _layer_norm(m, n):
    te, topi = _te_topi()
    X = te.placeholder((m, n), name="X")
    G = te.placeholder((n,), name="G")
    Bt = te.placeholder((n,), name="Bt")
    return te.create_prim_func([X, G, Bt, topi.nn.layer_norm(X, G, Bt, axis=[1], epsilon=1e-5)])


def _max_pool2d(n, c, h, w, kernel, stride, pad):
    te, topi = _te_topi()
    X = te.placeholder((n, c, h, w), name="X")
    out = topi.nn.pool2d(
        X, (kernel, kernel), (stride, stride), (1, 1), (pad,) * 4, "max", layout="NCHW"
    )
    return te.create_prim_func([X, out])


def _global_avg_pool2d(n, c, h, w):
    te, topi = _te_topi()
    X = te.placeholder((n, c, h, w), name="X")
    return te.create_prim_func([X, topi.nn.adaptive_pool(X, (1, 1), "avg", layout="NCHW")])


def _shape(dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(dims[f"d{i}"] for i in range(len(dims)))


def _binary(fuse_relu: bool, **dims):
    te, topi = _te_topi()
    A = te.placeholder(_shape(dims), name="A")
    B = te.placeholder(_shape(dims), name="B")
    out = topi.add(A, B)
    return te.create_prim_func([A, B, topi.nn.relu(out) if fuse_relu else out])


def _relu6(**dims):
    te, topi = _te_topi()
    X = te.placeholder(_shape(dims), name="X")
    return te.create_prim_func([X, topi.clip(X, 0.0, 6.0)])


_BUILDERS = {
    "conv2d": _conv2d,
    "conv2d_bias_relu": functools.partial(_conv2d, fused=True),
    "depthwise_conv2d": _depthwise_conv2d,
    "dense": _dense_op,
    "dense_bias_gelu": functools.partial(_dense_op, gelu=True),
    "batch_matmul": _batch_matmul,
    "matmul_bias": _matmul_bias,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "max_pool2d": _max_pool2d,
    "global_avg_pool2d": _global_avg_pool2d,
    "add_relu": functools.partial(_binary, True),
    "add": functools.partial(_binary, False),
    "relu6": _relu6,
}
assert set(_BUILDERS) == set(OPS)
