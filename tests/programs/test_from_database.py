"""`collect --records-from`: a real tuner's programs timed by the collector, faithfully."""

from __future__ import annotations

import json
import shutil

import pytest

from cdmpp.features.programs import measured_program
from cdmpp.measure import tvm_codec
from cdmpp.measure.collect import CollectConfig, collect
from cdmpp.measure.database import RECORD_FILE, WORKLOAD_FILE, load_database
from cdmpp.measure.timing import Protocol
from conftest import MATMUL_64, SOFTMAX_SMALL, strip_capture_handlers_from_meta_schedule_logger

FAST = Protocol(repeat=2, min_repeat_ms=2, passes=2, max_extra_passes=1, quiet_wait_s=2.0)


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory):
    """A database written by meta_schedule's own evolutionary search: 6 trials of a matmul."""
    import cdmpp.tune
    from cdmpp.device import local_device
    from cdmpp.tvm_env import import_tvm, meta_schedule

    tvm, ms = import_tvm(), meta_schedule()
    out = tmp_path_factory.mktemp("tuned")
    workload = tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})
    strategy = ms.search_strategy.EvolutionarySearch(
        population_size=16, init_measured_ratio=0, init_min_unmeasured=8, genetic_num_iters=1)
    strip_capture_handlers_from_meta_schedule_logger()
    ms.tune_tir(workload, tvm.target.Target(local_device().target), str(out),
                max_trials_global=6, num_trials_per_iter=6, cost_model="random",
                builder=cdmpp.tune.builder(), strategy=strategy, seed=5)
    return out


@pytest.fixture(autouse=True)
def no_microbench(monkeypatch):
    """The device's microbenchmarks are tested with the collector; skipped here for speed."""
    from dataclasses import replace

    import cdmpp.measure.collect as collect_module

    monkeypatch.setattr(collect_module, "measure_device",
                        lambda d: replace(d, peak_gflops=1.0, memory_gbps=1.0))


def _config(out, *dbs, **kw) -> CollectConfig:
    return CollectConfig(out=str(out), programs_per_task=0, batch_size=4, protocol=FAST,
                         records_from=tuple(str(d) for d in dbs), **kw)


def test_a_tuners_programs_are_timed_as_the_tasks_programs(tuned_db, tmp_path):
    tuned = load_database(tuned_db)
    summary = collect(_config(tmp_path, tuned_db), [MATMUL_64], progress=False)
    report = summary.imported
    assert report.records == len(tuned.records) >= 2
    assert report.new + report.duplicates == report.records and report.new >= 2
    assert report.unmatched == 0 and not report.not_replayed and report.args_changed == 0
    db = load_database(tmp_path)
    imported = [r for r in db.records if r.meta["kind"] == "imported"]
    assert summary.ok + summary.failed == report.new + 1  # and the task's default program
    assert len(db.records) == summary.ok and len(imported) >= 2
    assert {r.meta["kind"] for r in db.records} == {"default", "imported"}
    workload = db.workloads[0].mod()
    source = {r.record_index: r for r in tuned.records}
    for r in imported:
        # the program timed here is the tuner's program: same module from its own record
        origin = source[r.meta["source"]["record_index"]]
        assert r.meta["source"]["db"] == str(tuned_db)
        assert r.meta["source"]["run_secs"] == list(origin.measurement.run_secs)
        theirs = tvm_codec.replay_trace(origin.workload.mod(), origin.trace_json).mod
        assert tvm_codec.structural_hash(theirs) == r.meta["mod_shash"]
        assert r.meta["key"] == f"{MATMUL_64.name}/db-{r.meta['mod_shash']}"
        # and it is what the feature extractor rebuilds from this database's record
        program = measured_program(r, workload)
        assert tvm_codec.structural_hash(getattr(program, "mod", program)) == r.meta["mod_shash"]
        assert len(r.measurement.passes) >= 2
    assert "programs new" in str(summary)


def test_a_rerun_takes_nothing_twice(tuned_db, tmp_path):
    first = collect(_config(tmp_path, tuned_db), [MATMUL_64], progress=False)
    again = collect(_config(tmp_path, tuned_db), [MATMUL_64], progress=False)
    assert again.imported.new == 0
    assert again.imported.duplicates == first.imported.records
    assert again.ok == 0 and again.already_done == first.ok + first.failed
    keys = [r.meta["key"] for r in load_database(tmp_path).records]
    assert len(keys) == len(set(keys))


def test_records_of_other_workloads_are_reported_and_nothing_is_collected(tuned_db, tmp_path):
    summary = collect(_config(tmp_path, tuned_db), [SOFTMAX_SMALL], progress=False)
    n = summary.imported.records
    assert summary.imported.unmatched == n and summary.imported.unmatched_workloads == 1
    assert summary.imported.new == 0 and summary.ok == summary.failed == 0
    assert "match none of the tasks" in str(summary)


def test_failed_and_broken_records_are_reported_and_the_rest_imported(tuned_db, tmp_path):
    db_dir = tmp_path / "db"
    shutil.copytree(tuned_db, db_dir)
    lines = (db_dir / RECORD_FILE).read_text().splitlines()
    failed = json.loads(lines[0])
    failed[1][1] = [1e10]  # TVM's marker of a program that failed to build or run
    (db_dir / RECORD_FILE).write_text("\n".join(lines + [json.dumps(failed), "[0, [tor"]) + "\n")
    with open(db_dir / WORKLOAD_FILE, "a") as f:  # a workload line TVM cannot decode
        f.write(json.dumps(["123", "bm90IGEgbW9kdWxl"]) + "\n")
    with open(db_dir / RECORD_FILE, "a") as f:  # and a record of it
        f.write(json.dumps([1, json.loads(lines[0])[1]]) + "\n")
    summary = collect(_config(tmp_path / "out", db_dir), [MATMUL_64], progress=False)
    report = summary.imported
    assert report.records == len(lines) + 3 and len(report.unusable) == 3
    assert report.unmatched == 1 and "undecodable" in report.unusable[-1]
    assert report.new + report.duplicates == len(lines)
    assert "3 database line(s) not usable" in str(report)
    assert f"{RECORD_FILE}:{len(lines) + 1}" in str(report)  # the failed record's line


def test_records_from_does_not_combine_with_retiming(tmp_path, capsys):
    from cdmpp.cli.main import main

    assert main(["collect", "--out", str(tmp_path), "--ops", "dense", "--records-from",
                 str(tmp_path), "--retest", "3"]) == 2
    assert "--records-from adds programs" in capsys.readouterr().err


def test_imported_records_can_be_timed_again(tuned_db, tmp_path):
    from cdmpp.measure.remeasure import retest

    config = _config(tmp_path, tuned_db)
    first = collect(config, [MATMUL_64], progress=False)
    again = retest(config, [MATMUL_64], "all", progress=False)
    assert again.missing == 0 and again.remeasured + again.failed == first.ok
    imported = [r for r in load_database(tmp_path).records if r.meta["kind"] == "imported"]
    assert imported and all(r.meta.get("remeasured") for r in imported)
