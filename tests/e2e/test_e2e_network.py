"""Tiny networks through TVM: the kernels it runs, their dataflow graph, build and timing."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from e2e_helpers import device, lowered  # noqa: F401  (fixtures)

from cdmpp.e2e.graph import from_relax


def test_tiny_mlp_has_two_fused_kernels_in_a_chain(lowered):
    net = lowered("tiny_mlp")
    names = [k.name for k in net.kernels]
    assert len(names) == 2 and all(k.calls == 1 for k in net.kernels)
    assert "matmul" in names[0] and "relu" in names[0]  # Linear + bias + ReLU fused
    assert "matmul" in names[1] and "relu" not in names[1]
    graph = from_relax(net.mod)
    assert [(n.kernel, n.inputs, n.kind) for n in graph.nodes] == [
        (names[0], (), "call_tir"), (names[1], (0,), "call_tir")]
    assert graph.kernel_calls() == {names[0]: 1, names[1]: 1}


def test_tiny_branch_graph_has_two_independent_branches_and_a_join(lowered):
    graph = from_relax(lowered("tiny_branch").mod)
    roots = [n for n in graph.nodes if not n.inputs]
    assert len(roots) == 2  # the two Linear branches read only the input
    assert {"relu", "tanh"} <= {w for n in roots for w in ("relu", "tanh") if w in n.kernel}
    join = graph.nodes[-1]
    assert "matmul" in join.kernel and len(join.inputs) == 2

    def ancestors(i):
        out = set(graph.nodes[i].inputs)
        for j in graph.nodes[i].inputs:
            out |= ancestors(j)
        return out

    assert {r.id for r in roots} <= ancestors(join.id)


def test_built_module_computes_what_torch_computes(lowered):
    import torch

    from cdmpp.e2e.measure import VMProgram
    from cdmpp.e2e.networks import torch_model
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    net = lowered("tiny_branch")
    model, (x,) = torch_model("tiny_branch", 2)  # same seed, same weights
    with torch.no_grad():
        expected = model(x).numpy()
    out = VMProgram(net.build(), [tvm.runtime.tensor(x.numpy(), tvm.cpu())]).run()
    got = (out[0] if not hasattr(out, "numpy") else out).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_measure_network_times_the_network_and_each_kernel(lowered, device, tmp_path,
                                                          monkeypatch):
    from cdmpp.e2e.measure import measure_network
    from cdmpp.measure.reference import REFERENCE_FILE
    from cdmpp.measure.timing import Protocol
    from cdmpp.paths import device_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    net = lowered("tiny_mlp")
    fast = Protocol(repeat=2, passes=2, max_extra_passes=0, min_repeat_ms=1)
    m = measure_network(net, device=device, protocol=fast, kernels=True)
    # the network's label is its minimum over every repeat of every pass (no wall-clock bound)
    assert math.isfinite(m.latency_s) and m.latency_s > 0
    assert m.latency_s == min(m.measurement.run_secs)
    assert len(m.measurement.run_secs) == 4 and len(m.measurement.passes) == 2
    assert set(m.kernel_s()) == {k.name for k in net.kernels} and not m.failed
    assert m.to_json()["network_timing"]["run_secs"] == list(m.measurement.run_secs)
    # the first run on a device is its own reference: no slowdown; the best is kept
    assert m.host_slowdown == 1.0 and m.to_json()["host_slowdown"] == 1.0
    assert (device_dir(device.device_id) / REFERENCE_FILE).exists()
    # the memory probe ran before each pass; placements are told apart only when its times
    # did differ by the split (a loaded host can slow one probe that much)
    from cdmpp.measure.placement import has_two_placements

    assert all(p.memory_probe_s > 0 for p in m.measurement.passes)
    assert m.probe_best_s <= m.probe_worst_s
    assert (m.to_json()["by_placement"] == {}) == \
        (not has_two_placements(m.probe_best_s, m.probe_worst_s))
    # every kernel was also stamped inside the network, once per call of each profiled run
    assert 1 <= m.in_network_runs <= 5
    assert {k: len(v) for k, v in m.in_network.items()} == \
        {k.name: m.in_network_runs for k in net.kernels}  # tiny_mlp calls each kernel once
    inside = m.in_network_s()
    assert set(inside) == set(m.kernel_s()) and all(t > 0 for t in inside.values())
    assert m.to_json()["in_network_s"] == inside
    # when it was timed, in UTC: a total is comparable only with its hour on a shared host
    from datetime import datetime

    start, end = (datetime.fromisoformat(m.to_json()[k]) for k in ("started_utc", "ended_utc"))
    assert start.utcoffset().total_seconds() == 0 and start <= end


def test_unknown_network_names_the_choices():
    from cdmpp.e2e.networks import spec

    with pytest.raises(ValueError, match="resnet18"):
        spec("resnet-18")


def _tuning_database(lowered, device, path):
    """A JSON database at `path` with one record: tiny_mlp's first kernel, its outer loop
    parallel, timed 1 us. Returns (untuned network, that kernel)."""
    from cdmpp.e2e.kernels import workload_module
    from cdmpp.tvm_env import import_tvm, meta_schedule

    tvm, ms = import_tvm(), meta_schedule()
    from tvm import s_tir

    untuned = lowered("tiny_mlp")
    kernel = untuned.kernels[0]
    sch = s_tir.Schedule(workload_module(kernel))
    sch.parallel(sch.get_loops(sch.get_sblock("matmul"))[0])
    db = ms.database.JSONDatabase(work_dir=str(path))
    db.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, db.commit_workload(workload_module(kernel)), [1e-6],
        tvm.target.Target(device.target), ms.arg_info.ArgInfo.from_prim_func(kernel.func)))
    return untuned, kernel


def test_a_tuning_database_replaces_the_kernels_it_holds(lowered, device, tmp_path):
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.features import extract
    from cdmpp.features.compact_ast import FOR_PARALLEL

    untuned, kernel = _tuning_database(lowered, device, tmp_path)
    tuned = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path)
    assert [(k.name, k.tuned) for k in tuned.kernels] == [(kernel.name, True),
                                                          (untuned.kernels[1].name, False)]
    # what runs unscheduled is its task's default program (a default-program expert's input)
    assert [k.default for k in untuned.kernels] == [True, True]
    assert [k.default for k in tuned.kernels] == [False, True]
    from cdmpp.e2e.predict import kernel_programs

    programs, rows = kernel_programs(tuned.kernels, device.target)
    assert [bool(programs.default[rows[k.name]]) for k in tuned.kernels] == [False, True]
    assert FOR_PARALLEL in extract(tuned.kernels[0].func, device.target).node_kind
    assert FOR_PARALLEL not in extract(kernel.func, device.target).node_kind
    tuned.build()  # the tuned module compiles
    # the database times the kernel it holds (its best record, minimum of run_secs) only
    from cdmpp.e2e.kernels import database_latencies

    assert database_latencies(tuned) == {kernel.name: 1e-6}
    # lowering opened the database once; reading its timings does not open the files again
    copy = shutil.copytree(tmp_path, tmp_path.parent / f"{tmp_path.name}-copy")
    from_copy = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=copy)
    shutil.rmtree(copy)
    assert database_latencies(from_copy) == {kernel.name: 1e-6}
    with pytest.raises(ValueError, match="without a tuning database"):
        database_latencies(untuned, tmp_path)
    with pytest.raises(FileNotFoundError, match="not a TVM JSON database"):
        lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path / "x")


def test_a_database_timed_on_another_device_is_anchored_with_that_devices_model(
        lowered, device, tmp_path):
    from cdmpp.device import save_device
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.pipeline import anchor_predictions
    from cdmpp.model.registry import fitted_device, shipped_device_models

    _tuning_database(lowered, device, tmp_path)
    here = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path)
    assert anchor_predictions(here, device) is None  # timed on this device: no anchoring
    name = next(n for n in shipped_device_models()
                if fitted_device(n).device_id != device.device_id)
    save_device(tmp_path, fitted_device(name))  # as if timed on that model's device
    there = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path)
    source, predicted = anchor_predictions(there, device)
    assert source == name  # the shipped model fitted for the database's device
    assert set(predicted) == {k.name for k in there.kernels}
    assert all(v > 0 for v in predicted.values())
    assert anchor_predictions(there, device, anchor_model=None) is None
    # a device.json with the id alone (not a whole device) is found by that id
    (tmp_path / "device.json").write_text(f'{{"device_id": "{fitted_device(name).device_id}"}}')
    bare = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path)
    assert anchor_predictions(bare, device)[0] == name


def test_kernels_from_a_tuning_database_read_their_weights_at_the_tuned_probes_rate(
        lowered, device, tmp_path, monkeypatch):
    from dataclasses import replace

    from e2e_helpers import StubEstimator, overhead_calibration

    from cdmpp.e2e import overhead as oh
    from cdmpp.e2e.cold import ColdProbe, ColdWeights
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.predict import predict_network
    from cdmpp.e2e.replay import CallOverhead

    (tmp_path / "db").mkdir()
    _, kernel = _tuning_database(lowered, device, tmp_path / "db")
    tuned = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path / "db")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cal = replace(overhead_calibration(device.device_id), overhead=CallOverhead())
    plain, fast = ColdProbe(1, 2, (1.0,), (1.0 + 2e-9,)), ColdProbe(1, 2, (1.0,), (1.0 + 5e-9,))
    oh.save_overhead(replace(cal, cold=ColdWeights(1, plain, fast)), device)  # 1-byte cache
    r = predict_network(StubEstimator(default_s=1e-5), tuned, device=device)
    assert r.replay.overhead.tuned_kernels == {kernel.name}
    by_kernel = {}
    for node in r.graph.nodes:
        by_kernel[node.kernel] = by_kernel.get(node.kernel, 0) + node.weight_bytes
    assert by_kernel[kernel.name] > 0 and sum(by_kernel.values()) > by_kernel[kernel.name]
    rest = sum(by_kernel.values()) - by_kernel[kernel.name]
    assert r.weights_s() == pytest.approx(5e-9 * by_kernel[kernel.name] + 2e-9 * rest)
    assert r.predicted_s == pytest.approx(2e-5 + r.weights_s())
    from cdmpp.e2e.report import format_table

    assert "2.000 ns per byte, 5.000 by tuned kernels" in format_table(r)


def test_a_tuning_database_with_unreadable_lines_is_read_without_them(lowered, device, tmp_path):
    # TVM's own reader crashes the process on a blank line: the lines are read by ours first
    from cdmpp.e2e.kernels import database_latencies, lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.measure.database import RECORD_FILE, WORKLOAD_FILE

    _, kernel = _tuning_database(lowered, device, tmp_path)
    records = tmp_path / RECORD_FILE
    good = records.read_text()
    records.write_text("\n" + good + good[: len(good) // 2] + "\n")  # blank, good, truncated
    with (tmp_path / WORKLOAD_FILE).open("a") as f:
        f.write("\n")
    with pytest.warns(UserWarning, match=r"3 lines cannot be read .*database_workload.json:2"):
        tuned = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path)
    assert [k.tuned for k in tuned.kernels] == [True, False]
    assert database_latencies(tuned) == {kernel.name: 1e-6}


def test_importing_a_torch_network_shows_none_of_torchs_own_deprecations():
    """torch 2.13's export warns about its own pytree API on every call: not for our users."""
    import warnings

    from cdmpp.e2e.networks import import_network

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        import_network("tiny_mlp", 1)
    assert not [w for w in seen if "LeafSpec" in str(w.message)]


def test_kernel_nodes_count_the_weights_they_read_in_full(lowered):
    graph = from_relax(lowered("tiny_mlp").mod)
    # Linear(16, 32) then Linear(32, 8), float32 weights and biases
    assert [n.weight_bytes for n in graph.nodes] == [4 * (16 * 32 + 32), 4 * (32 * 8 + 8)]
    assert graph.weight_bytes() == 4 * (16 * 32 + 32 + 32 * 8 + 8)


def test_kernel_nodes_count_the_activations_they_read(lowered):
    graph = from_relax(lowered("tiny_mlp").mod)
    # batch 2: the (2, 16) input, then the (2, 32) hidden layer; the constants are weights
    assert [n.activation_bytes for n in graph.nodes] == [4 * 2 * 16, 4 * 2 * 32]
    assert graph.activation_bytes() == 4 * 2 * (16 + 32)


def test_a_convolutions_weights_are_not_counted_as_matrix_weights():
    """Convolutions lose little to weights from memory in a network (e2e.cold): only matrix
    weights (at most two dimensions) are counted."""
    from tvm import relax, topi
    from tvm.script import relax as R

    from cdmpp.tvm_env import import_tvm

    import_tvm()
    kernel = relax.const(np.zeros((8, 3, 3, 3), "float32"))  # OIHW: not counted
    weight = relax.const(np.zeros((4, 8), "float32"))  # a Linear layer's: counted
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, 3, 6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_te(topi.nn.conv2d, x, kernel, 1, 0, 1, primfunc_name_hint="conv")
            flat = bb.emit_te(topi.reshape, y, (32, 4), primfunc_name_hint="flat")
            out = bb.emit_output(bb.emit_te(topi.matmul, flat, weight,
                                            primfunc_name_hint="matmul"))
        bb.emit_func_output(out)
    graph = from_relax(bb.get())
    assert [(n.kernel, n.weight_bytes) for n in graph.nodes] == [
        ("conv", 0), ("flat", 0), ("matmul", 4 * 8 * 4)]
    # activations: the input, the convolution's (1, 8, 4, 4) output, its (32, 4) view
    assert [n.activation_bytes for n in graph.nodes] == [4 * 3 * 6 * 6, 4 * 8 * 16, 4 * 32 * 4]


def test_a_table_read_at_data_dependent_rows_is_not_counted_as_weights():
    from tvm import relax, topi
    from tvm.script import relax as R

    from cdmpp.tvm_env import import_tvm

    import_tvm()
    table = relax.const(np.zeros((1000, 8), "float32"))  # an embedding table: rows gathered
    weight = relax.const(np.zeros((8, 4), "float32"))  # a weight: read in full
    bb = relax.BlockBuilder()
    ids = relax.Var("ids", R.Tensor((3,), "int32"))
    with bb.function("main", [ids]):
        with bb.dataflow():
            rows = bb.emit_te(topi.take, table, ids, 0, primfunc_name_hint="take")
            out = bb.emit_output(bb.emit_te(topi.matmul, rows, weight,
                                            primfunc_name_hint="matmul"))
        bb.emit_func_output(out)
    graph = from_relax(bb.get())
    assert [(n.kernel, n.weight_bytes) for n in graph.nodes] == [("take", 0), ("matmul", 128)]


def test_an_activation_of_symbolic_shape_is_not_counted():
    """Its size is not known before run time: no bytes are guessed for it."""
    from tvm import relax, te, tirx
    from tvm.script import relax as R

    from cdmpp.tvm_env import import_tvm

    import_tvm()
    n = tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((n, 4), "float32"))
    y = relax.Var("y", R.Tensor((2, 4), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            a = bb.emit_te(lambda t: te.compute(t.shape, lambda i, j: t[i, j] * 2.0), x,
                           primfunc_name_hint="double")
            b = bb.emit_output(bb.emit_te(lambda t: te.compute(t.shape, lambda i, j: t[i, j] + 1.0),
                                          y, primfunc_name_hint="inc"))
        bb.emit_func_output(relax.Tuple([a, b]))
    graph = from_relax(bb.get())
    assert [(node.kernel, node.activation_bytes) for node in graph.nodes] == [
        ("double", 0), ("inc", 4 * 2 * 4)]
