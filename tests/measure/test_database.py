"""Reading and writing TVM JSON databases: real records, bad lines, TVM's own reader."""

from __future__ import annotations

import json
import math

import pytest

from cdmpp.measure.database import (RECORD_FILE, WORKLOAD_FILE, DatabaseError, find_databases,
                                    load_database, write_database)


def _append(db, line: str) -> None:
    with open(db / RECORD_FILE, "a") as f:
        f.write(line + "\n")


def _record_line(db, index: int = 0) -> list:
    return json.loads((db / RECORD_FILE).read_text().splitlines()[index])


def test_load_real_records_in_file_order(dense_db):
    db = load_database(dense_db)
    assert [r.record_index for r in db.records] == [0, 1, 2, 3]
    first = _record_line(dense_db, 0)
    assert db.records[0].measurement.run_secs == tuple(first[1][1])
    assert db.records[0].target["kind"] == "llvm"
    assert all(r.latency_s > 0 for r in db.records)
    assert db.skipped == ()


def test_without_pass_structure_each_repeat_is_a_pass(dense_db):
    rec = _record_line(dense_db, 0)
    rec[1][1] = [3.0, 1.0, 2.0, 0.9, 5.0, 0.8]
    _append(dense_db, json.dumps(rec))
    m = load_database(dense_db).records[-1].measurement
    assert len(m.passes) == 6 and m.latency_s == pytest.approx(0.8)


@pytest.mark.parametrize("line, reason", [
    ('[0, [[], [0.001', "not JSON"),
    ('{"a": 1}', "bad record"),
    ("[7, [[[], []], [0.001], {}, []]]", "workload"),
    ("[0, [[[], []], [NaN], {}, []]]", "bad timing"),
    ("[0, [[[], []], [-0.5], {}, []]]", "non-positive"),
    ("[0, [[[], []], [10000000000.0], {}, []]]", "failure marker"),
    ("[0, [[[], []], [], {}, []]]", "empty"),
])
def test_bad_line_strict_names_file_line_reason(dense_db, line, reason):
    _append(dense_db, line)
    with pytest.raises(DatabaseError) as err:
        load_database(dense_db)
    assert err.value.line == 5
    assert str(dense_db / RECORD_FILE) in str(err.value)
    assert reason in str(err.value)


def test_lenient_skips_bad_lines_and_keeps_every_valid_one(dense_db):
    good = json.dumps(_record_line(dense_db, 1))
    for line in ('[0, [[], [0.001', "[0, [[[], []], [NaN], {}, []]]", good,
                 "[9, [[[], []], [0.1], {}, []]]"):
        _append(dense_db, line)
    db = load_database(dense_db, strict=False)
    assert [r.record_index for r in db.records] == [0, 1, 2, 3, 6]
    assert [s.line for s in db.skipped] == [5, 6, 8]
    assert "3 lines skipped" in db.skip_summary()


def test_bad_workload_line_keeps_later_indices(dense_db):
    wl = (dense_db / WORKLOAD_FILE).read_text()
    (dense_db / WORKLOAD_FILE).write_text("not json\n" + wl)
    rec = _record_line(dense_db, 0)
    rec[0] = 1
    (dense_db / RECORD_FILE).write_text(json.dumps(rec) + "\n")
    with pytest.raises(DatabaseError, match=r"database_workload.json:1"):
        load_database(dense_db)
    db = load_database(dense_db, strict=False)
    assert len(db.records) == 1 and db.records[0].workload_index == 1


def test_missing_files_are_named(tmp_path):
    with pytest.raises(DatabaseError, match="database_workload.json"):
        load_database(tmp_path)
    with pytest.raises(DatabaseError, match="no database_tuning_record.json"):
        find_databases(tmp_path)


def test_written_database_loads_in_tvm(dense_db, tmp_path):
    from cdmpp.tvm_env import meta_schedule

    db = load_database(dense_db)
    out = tmp_path / "copy"
    write_database(out, [w.to_json() for w in db.workloads], [r.to_json_line() for r in db.records])
    tvm_db = meta_schedule().database.JSONDatabase(work_dir=str(out))
    tvm_records = tvm_db.get_all_tuning_records()
    assert len(tvm_records) == len(db.records)
    ours = sorted(r.measurement.run_secs for r in db.records)
    theirs = sorted(tuple(float(x) for x in r.run_secs) for r in tvm_records)
    for a, b in zip(ours, theirs):
        assert all(math.isclose(x, y, rel_tol=1e-6) for x, y in zip(a, b))
    assert load_database(out).records[0].trace_json == db.records[0].trace_json


def test_workload_decodes_to_the_stored_module(dense_db):
    from cdmpp.measure import tvm_codec

    workload = load_database(dense_db).workloads[0]
    mod = workload.mod()
    assert tvm_codec.structural_hash(mod) == workload.shash
    assert tvm_codec.encode_workload(mod) == workload.to_json()


def test_shared_data_loads_with_names_and_passes(shared_data):
    db = load_database(shared_data / "softmax_12x64x64")
    assert db.workloads[0].name == "softmax_12x64x64"
    m = db.records[0].measurement
    passes = json.loads((shared_data / "softmax_12x64x64" / "passes.json").read_text())[0]
    assert m.pass_medians_s == pytest.approx(passes, rel=1e-9)


def test_database_written_by_tvm_tune_tir_loads(tmp_path):
    """TVM's own tuner (real builder and runner processes) writes a database cdmpp reads."""
    from cdmpp.device import local_device
    from cdmpp.tvm_env import import_tvm, meta_schedule
    from conftest import MATMUL_64

    tvm, ms = import_tvm(), meta_schedule()
    mod = tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})
    # the initializer gives the worker processes our fast TVM import (no 28 s per worker)
    builder = ms.builder.LocalBuilder(max_workers=1, initializer=import_tvm)
    runner = ms.runner.LocalRunner(ms.runner.EvaluatorConfig(number=1, repeat=2, min_repeat_ms=1),
                                   initializer=import_tvm)
    ms.tir_integration.tune_tir(mod, tvm.target.Target(local_device().target), str(tmp_path),
                                max_trials_global=4, num_trials_per_iter=4, builder=builder,
                                runner=runner, cost_model="random", strategy="replay-trace",
                                num_tuning_cores=1)
    db = load_database(tmp_path)
    tvm_records = ms.database.JSONDatabase(work_dir=str(tmp_path)).get_all_tuning_records()
    assert len(db.records) == len(tvm_records) == 4
    assert sorted(r.latency_s for r in db.records) == pytest.approx(
        sorted(min(float(x) for x in r.run_secs) for r in tvm_records), rel=1e-6)
    from cdmpp.measure import tvm_codec

    assert db.workloads[0].shash == tvm_codec.structural_hash(mod)
    from cdmpp.measure.trace_replay import replay_direct

    for rec in db.records:  # TVM's traces replay here to TVM's own modules
        assert tvm_codec.structural_equal(
            replay_direct(mod, rec.trace_json).mod,
            tvm_codec.replay_trace(mod, rec.trace_json, direct=False).mod)
