"""The forked meta_schedule builder (`cdmpp.tune.builder`), alone and in a real tuning run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cdmpp.tune
from cdmpp.device import local_device
from cdmpp.tune.builder import build_batch
from cdmpp.tvm_env import import_tvm, meta_schedule
from conftest import MATMUL_64, strip_capture_handlers_from_meta_schedule_logger


def _workload():
    tvm = import_tvm()
    return tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})


def test_each_artifact_runs_and_a_failure_is_reported_in_its_place(tmp_path):
    tvm = import_tvm()
    target = tvm.target.Target(local_device().target)
    built = build_batch([_workload(), "not a module", _workload()], [target] * 3, 60, tmp_path)
    assert built[1][0] is None and built[1][1]
    paths = [built[0][0], built[2][0]]
    assert all(error is None for _, error in (built[0], built[2]))
    # one directory per artifact: TVM's RemoveBuildArtifact deletes it after the run
    assert len({p.rsplit("/", 1)[0] for p in paths}) == 2
    a = np.random.default_rng(0).uniform(size=(64, 64)).astype("float32")
    b = np.random.default_rng(1).uniform(size=(64, 64)).astype("float32")
    module = tvm.runtime.load_module(paths[0])
    args = [tvm.runtime.tensor(x) for x in (a, b, np.zeros((64, 64), "float32"))]
    module["main"](*args)
    np.testing.assert_allclose(args[2].numpy(), a @ b.T, rtol=1e-4)  # TOPI dense: A B^T


def test_a_batch_comes_back_in_order_with_the_bad_module_in_its_place(tmp_path):
    tvm = import_tvm()
    target = tvm.target.Target(local_device().target)
    mods = [_workload(), "not a module", _workload(), _workload(), _workload()]
    built = build_batch(mods, [target] * 5, 60, tmp_path, workers=2)
    assert built[1][0] is None and built[1][1]
    for i in (0, 2, 3, 4):
        path, error = built[i]
        assert error is None and path.endswith(f"/{i}/main.ll") and Path(path).is_file()
        tvm.runtime.load_module(path).get_function("main")


def test_a_slow_build_holds_up_one_child_while_the_other_takes_the_rest(tmp_path,
                                                                      monkeypatch):
    import os
    import time

    import cdmpp.measure.build as build

    tvm = import_tvm()
    target = tvm.target.Target(local_device().target)
    log = tmp_path / "compiled.log"
    real_compile = build.compile_module

    def compile_module(mod, target):  # runs in the forked children
        if mod == "slow":  # finishes only once the four others are compiled
            deadline = time.monotonic() + 60
            while log.read_text().count("fast") < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
        compiled = real_compile(_workload(), target)
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {mod}\n")
        return compiled

    log.write_text("")
    monkeypatch.setattr(build, "compile_module", compile_module)
    work = tmp_path / "work"
    work.mkdir()
    built = build_batch(["slow", "fast", "fast", "fast", "fast"], [target] * 5, 120, work,
                        workers=2)
    assert all(error is None for _, error in built)
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [mod for _, mod in lines] == ["fast"] * 4 + ["slow"]
    # with the batch dealt in fixed shares, the slow module's child would have had to
    # compile two of the others first
    slow_pid = lines[-1][0]
    assert {pid for pid, _ in lines[:4]} == {lines[0][0]} != {slow_pid}


def test_workers_must_be_at_least_one():
    with pytest.raises(ValueError, match="workers must be at least 1"):
        cdmpp.tune.builder(30, workers=0)


def test_a_build_over_its_time_limit_fails_alone(tmp_path):
    tvm = import_tvm()
    target = tvm.target.Target(local_device().target)
    built = build_batch([_workload()] * 2, [target] * 2, 0.001, tmp_path)
    assert all(path is None and error.startswith("timeout") for path, error in built)


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        cdmpp.tune.builder(0)


def test_tune_tir_with_cdmpp_cost_model_and_builder_times_every_trial(tmp_path):
    tvm = import_tvm()
    ms = meta_schedule()
    target = tvm.target.Target(local_device().target)
    strategy = ms.search_strategy.EvolutionarySearch(
        population_size=16, init_measured_ratio=0, init_min_unmeasured=8, genetic_num_iters=1)
    strip_capture_handlers_from_meta_schedule_logger()
    database = ms.tune_tir(_workload(), target, str(tmp_path), max_trials_global=4,
                           num_trials_per_iter=4, cost_model=cdmpp.tune.cost_model("default"),
                           builder=cdmpp.tune.builder(), strategy=strategy, seed=3)
    records = database.get_all_tuning_records()
    assert len(records) == 4
    assert all(r.run_secs and 0 < float(r.run_secs[0]) < 1 for r in records)
    best = database.query_schedule(_workload(), target, workload_name="main")
    assert best is not None


def test_the_builder_keeps_each_artifact_for_the_runner_and_reports_timeouts():
    import os

    tvm = import_tvm()
    ms = meta_schedule()
    target = tvm.target.Target(local_device().target)
    inputs = [ms.builder.BuilderInput(_workload(), target) for _ in range(2)]
    builder = cdmpp.tune.builder(60)  # its artifacts go when it does
    results = builder.build(inputs)
    paths = [r.artifact_path for r in results]
    assert all(r.error_msg is None for r in results) and len(set(map(os.path.dirname, paths))) == 2
    assert all(os.path.isfile(p) for p in paths)  # the runner loads them after the build
    # under a work directory named as the collector's: a later build removes it if this
    # process is killed
    roots = {Path(p).parents[2].name for p in paths}  # root / batch / program / main.ll
    assert len(roots) == 1 and roots.pop().startswith(f"cdmpp-build-{os.getpid()}-")
    tvm.runtime.load_module(paths[1]).get_function("main")
    del builder, results
    assert not any(os.path.exists(p) for p in paths)
    slow = cdmpp.tune.builder(0.001).build(inputs)
    assert all(r.artifact_path is None and r.error_msg.startswith("timeout") for r in slow)
