"""Network kernels as collector tasks: what TVM runs is what gets measured, and the measured
database then tunes that network."""

from __future__ import annotations

import json

from cdmpp.programs.network_kernels import kernel_family, kernel_tasks


def _target():
    from cdmpp.device import local_device

    return local_device().target


def test_kernel_tasks_are_the_distinct_fused_kernels_with_their_networks():
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network

    target = _target()
    tasks = kernel_tasks(["tiny_mlp", "tiny_branch"], batches=(2,), target=target)
    assert len({t.name for t in tasks}) == len(tasks)
    mlp = lower_network(import_network("tiny_mlp", 2), target)
    branch = lower_network(import_network("tiny_branch", 2), target)
    assert len(tasks) <= len(mlp.kernels) + len(branch.kernels)
    assert {t.op for t in tasks} >= {kernel_family(k.name) for k in mlp.kernels}
    assert all(set(t.networks) <= {"tiny_mlp", "tiny_branch"} and t.networks for t in tasks)
    # the same kernels again, in another process-independent order of names
    assert [t.name for t in kernel_tasks(["tiny_mlp", "tiny_branch"], (2,), target)] == \
        [t.name for t in tasks]


def test_kernel_family_drops_tvm_numbering():
    assert kernel_family("fused_conv2d_add_relu3") == "fused_conv2d_add_relu"
    assert kernel_family("matmul") == "matmul"


def test_collected_kernels_form_a_tuning_database_for_their_network(tmp_path):
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.measure.collect import CollectConfig, collect

    target = _target()
    tasks = kernel_tasks(["tiny_mlp"], batches=(2,), target=target)
    summary = collect(CollectConfig(out=str(tmp_path), programs_per_task=2), tasks,
                      progress=False)
    assert summary.ok >= len(tasks)  # at least every default program
    names = {v["name"] for v in json.loads((tmp_path / "tasks.json").read_text()).values()}
    assert names == {t.name for t in tasks}
    tuned = lower_network(import_network("tiny_mlp", 2), target, tuning_db=tmp_path)
    assert all(k.tuned for k in tuned.kernels)
    _assert_kernels_are_the_measured_programs(tuned, tmp_path)


def _assert_kernels_are_the_measured_programs(tuned, db_path):
    """Each kernel the tuned network runs has the features of the database record TVM
    applied (its best one), rebuilt as the store rebuilds a record: the model predicts, for a
    tuned network, exactly the programs that were timed."""
    from cdmpp.e2e.kernels import workload_module
    from cdmpp.features import extract
    from cdmpp.features.programs import measured_program
    from cdmpp.measure import tvm_codec
    from cdmpp.measure.database import load_database
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    records = load_database(db_path).records
    for k in tuned.kernels:
        best = tuned.database.query_tuning_record(workload_module(k, untuned=True),
                                                  tvm.target.Target(tuned.target), "main")
        trace, shash = tvm_codec.trace_to_json(best.trace), tvm_codec.structural_hash(
            best.workload.mod)
        [record] = [r for r in records if r.trace_json == trace and r.workload.shash == shash]
        assert extract(measured_program(record), record.target) == extract(k.func,
                                                                             tuned.target)


def test_an_onnx_file_gives_its_kernels_at_each_batch(tmp_path, capsys, tiny_onnx):
    from cdmpp.cli.main import main

    path = tmp_path / "mlp.onnx"
    tiny_onnx(path, batch="N")
    target = _target()
    tasks = kernel_tasks([str(path)], batches=(2, 4), target=target)
    assert {t.networks for t in tasks} == {("mlp",)}  # named by the file's stem
    assert len(tasks) == 4  # two kernels at each batch: other shapes, other tasks
    assert kernel_tasks([str(path)], (None,), target)[0].func.params  # the file as it is
    assert main(["collect", "--kernels-of", str(path), "--batches", "2", "--list"]) == 0
    assert "2 kernels of" in capsys.readouterr().out
    assert main(["collect", "--kernels-of", str(tmp_path / "none.onnx"), "--list"]) == 2
    assert "none.onnx does not exist" in capsys.readouterr().err
