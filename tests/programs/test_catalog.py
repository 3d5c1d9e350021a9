"""The operator catalog: coverage, network membership, selection, and TIR equal to measured data."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from cdmpp.programs import catalog as C
from conftest import require_shared

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "epyc-2c"


def _smallest_per_family() -> list[C.Task]:
    """One task per op family, the cheapest to build (keeps the TIR tests fast)."""
    best: dict[str, C.Task] = {}
    for task in C.catalog():
        size = math.prod(v for _, v in task.params)
        if task.op not in best or size < math.prod(v for _, v in best[task.op].params):
            best[task.op] = task
    return [best[op] for op in C.OPS]


def test_catalog_covers_all_networks_and_families():
    tasks = C.catalog()
    # what README states for catalog version 5; a catalog change must bump the version (it
    # keys collected programs), and then README's counts and these
    assert C.CATALOG_VERSION == "5"
    network = [t for t in tasks if t.networks]
    sweep = [t for t in tasks if not t.networks]
    assert len(network) == 448
    assert sum(t.op == "matmul_bias" for t in sweep) == 126 and len(sweep) == 126 + 250
    assert {n for t in tasks for n in t.networks} == set(C.NETWORKS)
    assert {t.op for t in tasks} == set(C.OPS)
    assert len({t.name for t in tasks}) == len(tasks)
    assert C.catalog() == tasks  # deterministic


def test_tasks_are_well_formed():
    for t in C.catalog():
        sweep_op = t.op in ("matmul_bias", "conv2d", "depthwise_conv2d")
        assert t.networks or sweep_op  # only the sweeps' tasks belong to no network
        assert list(t.networks) == sorted(set(t.networks))
        assert set(t.networks) <= set(C.NETWORKS)
        assert list(t.params) == sorted(t.params)
        assert all(isinstance(v, int) and v > 0 for k, v in t.params if k != "pad")
        assert C.task_name(t.op, t.params) == t.name


@pytest.mark.parametrize(
    "name, networks",
    [
        ("conv7x7_1x3x224x224_k64s2", ("resnet18", "resnet50")),  # shared stem
        ("maxpool3x3_1x64x112x112_s2", ("densenet121", "resnet18", "resnet50")),
        ("conv3x3_1x64x56x56_k128s2", ("resnet18",)),  # resnet50 strides 128->128 instead
        ("conv3x3_1x128x56x56_k128s2", ("resnet50",)),
        ("conv1x1_1x64x56x56_k128s2", ("resnet18",)),  # downsample shortcut
        ("addrelu_1x64x56x56", ("resnet18",)),
        ("addrelu_1x256x56x56", ("resnet50",)),
        ("gap_1x512x7x7", ("resnet18",)),
        ("dense_1x512x1000", ("resnet18",)),
        ("dense_4x2048x1000", ("resnet50",)),
        ("dense_1x1280x1000", ("mobilenet_v2",)),
        ("dense_1x768x1000", ("vit_b16",)),
        ("conv3x3_1x3x224x224_k32s2", ("mobilenet_v1", "mobilenet_v2")),  # same stem
        ("dwconv3x3_1x144x56x56_s2", ("mobilenet_v2",)),
        ("add_1x24x56x56", ("mobilenet_v2",)),
        ("relu6_1x32x112x112", ("mobilenet_v1", "mobilenet_v2")),
        ("relu6_1x1024x7x7", ("mobilenet_v1",)),
        ("dwconv3x3_1x512x14x14_s1", ("mobilenet_v1",)),
        ("conv1x1_4x512x7x7_k1024", ("mobilenet_v1",)),
        ("convbr3x3_1x3x224x224_k64s2", ("squeezenet1_1",)),  # unpadded stem: 111 pixels
        ("maxpool3x3_1x64x111x111_s2", ("squeezenet1_1",)),
        ("convbr3x3_1x48x13x13_k192", ("squeezenet1_1",)),  # fire 5's 3x3 expand
        ("convbr1x1_4x512x13x13_k1000", ("squeezenet1_1",)),  # classifier
        ("dwconv3x3_1x24x56x56_s2", ("shufflenet_v2",)),  # first unit's left branch
        ("convbr1x1_1x116x28x28_k116", ("shufflenet_v2",)),
        ("dwconv3x3_4x116x14x14_s1", ("shufflenet_v2",)),  # stage 3 on half of 232
        ("dwconv3x3_4x232x14x14_s2", ("shufflenet_v2",)),  # stage 4, both branches
        ("convbr1x1_1x992x7x7_k128", ("densenet121",)),  # last dense layer: 512 + 15 x 32
        ("conv3x3_1x128x14x14_k32s1", ("densenet121",)),
        ("conv1x1_1x1024x14x14_k512", ("densenet121", "resnet50")),  # transition 3
        ("conv16x16_4x3x224x224_k768s16", ("vit_b16",)),
        ("dense_64x768x768", ("bert_base", "gpt2")),
        ("dense_64x768x2304", ("gpt2",)),  # fused c_attn; BERT has separate Q/K/V
        ("dense_197x768x2304", ("vit_b16",)),
        ("densegelu_128x768x3072", ("bert_base", "gpt2")),
        ("densegelu_788x768x3072", ("vit_b16",)),
        ("bmm_12x128x64x128", ("bert_base", "gpt2")),  # Q K^T
        ("bmm_48x197x197x64", ("vit_b16",)),  # attn V at batch 4
        ("softmax_12x256x256", ("bert_base", "gpt2")),
        ("layernorm_197x768", ("vit_b16",)),
        ("add_128x768", ("bert_base", "gpt2")),
    ],
)
def test_network_membership(name, networks):
    assert C.get_task(name).networks == networks


def test_get_task_suggests_close_names():
    with pytest.raises(KeyError, match="dense_64x768x768"):
        C.get_task("dense_64x768x767")


def test_select_by_family_name_and_network():
    assert C.select() == list(C.catalog())
    dense = C.select(ops=["dense"])
    assert dense and all(t.op == "dense" for t in dense)
    both = C.select(ops=["softmax", "dense_64x768x768"])
    assert {t.op for t in both} == {"softmax", "dense"}
    assert [t.name for t in both if t.op == "dense"] == ["dense_64x768x768"]
    vit = C.select(networks=["vit_b16"])
    assert vit and all("vit_b16" in t.networks for t in vit)
    gpt_ln = C.select(ops=["layer_norm"], networks=["gpt2"])
    assert {t.name for t in gpt_ln} == {f"layernorm_{s}x768" for s in (64, 128, 256)}


@pytest.mark.parametrize(
    "kwargs, bad", [({"ops": ["conv9x9"]}, "conv9x9"), ({"networks": ["resnet101"]}, "resnet101")]
)
def test_select_rejects_unknown_names(kwargs, bad):
    with pytest.raises(ValueError, match=bad) as info:
        C.select(**kwargs)
    assert "resnet18" in str(info.value) or "conv2d" in str(info.value)  # lists the choices


def test_import_does_not_import_tvm():
    code = "import sys, cdmpp.programs.catalog as c; c.catalog(); assert 'tvm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("task", _smallest_per_family(), ids=lambda t: t.name)
def test_prim_func_builds(task):
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    func = task.prim_func()
    assert isinstance(func, tvm.tirx.PrimFunc)
    assert func.params and all(p.dtype == "float32" for p in func.params)


def _one_measured_task_per_kind() -> list[str]:
    """One measured task per name prefix (conv1x1, conv3x3, convbr3x3, dense, ...)."""
    if not SHARED_DATA.is_dir():
        return []
    names: dict[str, str] = {}
    for task in C.catalog():
        if (SHARED_DATA / task.name / "database_workload.json").is_file():
            names.setdefault(task.name.split("_")[0], task.name)
    return sorted(names.values())


@pytest.mark.parametrize("name", _one_measured_task_per_kind() or ["<no shared data>"])
def test_prim_func_equals_measured_workload(name):
    require_shared()
    import tvm_ffi

    from cdmpp.tvm_env import meta_schedule

    ms = meta_schedule()
    parse = tvm_ffi.get_global_func("ffi.json.Parse")
    line = (SHARED_DATA / name / "database_workload.json").read_text().splitlines()[0]
    measured = ms.database.Workload.from_json(parse(line)).mod["main"]
    assert tvm_ffi.structural_equal(C.get_task(name).prim_func(), measured)


def test_matmul_bias_sweep_covers_every_k_n_pair_and_no_network():
    sweep = C.select(ops=["matmul_bias"])
    pairs = [(dict(t.params)["k"], dict(t.params)["n"]) for t in sweep]
    grid = {(k, n) for k in C.SWEEP_DIMS for n in C.SWEEP_DIMS}
    aligned = {(k, n) for k in C.ALIGN_K for n in C.ALIGN_N}
    assert set(pairs) == grid | aligned
    # one task per M on the grid, one M for the alignment pairs (shared ones are not repeated)
    assert all(pairs.count(p) == (len(C.SWEEP_MACS) if p in grid else 1) for p in pairs)
    assert len(pairs) == len(set(t.name for t in sweep))
    assert all(not t.networks for t in sweep)
    assert all(8 <= dict(t.params)["m"] <= 2048 for t in sweep)
    assert not set(C.select(networks=list(C.NETWORKS))) & set(sweep)


def test_conv_sweep_holds_no_network_layer_and_is_selected_as_sweep():
    sweep = C.select(ops=["conv2d", "depthwise_conv2d"], networks=[C.SWEEP])
    assert len(sweep) >= 200
    assert {t.op for t in sweep} == {"conv2d", "depthwise_conv2d"}
    assert all(not t.networks for t in sweep)
    assert all(dict(t.params)["kernel"] in (1, 3) for t in sweep)
    # no sweep task has the shape of a network's layer: a by-network split keeps them all on
    # the training side, and the held-out side stays what it was without the sweep
    network_shapes = {(t.op, t.params) for t in C.select(networks=list(C.NETWORKS))}
    assert not network_shapes & {(t.op, t.params) for t in sweep}
    conv1x1 = [dict(t.params) for t in sweep if t.op == "conv2d"]
    assert all(p["n"] * p["h"] * p["w"] * p["c"] * p["k"] <= C.CONV_SWEEP_MACS for p in conv1x1)
    # `sweep` as a network selects both sweeps and nothing else
    everything = C.select(networks=[C.SWEEP])
    assert {t.op for t in everything} == {"matmul_bias", "conv2d", "depthwise_conv2d"}
    assert set(sweep) | set(C.select(ops=["matmul_bias"])) == set(everything)


def test_unknown_network_names_the_sweep_choice():
    with pytest.raises(ValueError, match="sweep"):
        C.select(networks=["resnet17"])


def test_matmul_bias_has_the_features_of_relax_s_untuned_linear_kernel():
    """The sweep stands for the Linear layers of imported networks: same per-store features
    as the fused matmul + bias kernel TVM builds for tiny_mlp's last layer."""
    import numpy as np

    from cdmpp.device import local_device
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.features import extract
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    target = local_device().target
    net = lower_network(import_network("tiny_mlp", 2), target)
    linear = [k for k in net.kernels if k.name.startswith("fused_matmul") and "relu" not in k.name]
    assert len(linear) == 1, [k.name for k in net.kernels]
    kernel = extract(linear[0].func, target)
    task = C.Task("x", "matmul_bias", (("k", 32), ("m", 2), ("n", 8)), ())
    ours = extract(tvm.IRModule({"main": task.prim_func().with_attr("global_symbol", "main")}),
                   target)
    np.testing.assert_array_equal(ours.node_kind, kernel.node_kind)
    np.testing.assert_array_equal(ours.node_extent, kernel.node_extent)
    np.testing.assert_array_equal(ours.leaf_features, kernel.leaf_features)
