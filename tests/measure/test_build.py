"""Builds guarded by a killable child: success, compiler errors, and the hard time limit."""

from __future__ import annotations

import numpy as np

from cdmpp.device import local_device
from cdmpp.measure.build import build_guarded, build_many, compiles_in_time
from cdmpp.measure.timing import random_args
from cdmpp.tvm_env import import_tvm
from conftest import MATMUL_64


def _workload():
    tvm = import_tvm()
    return tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})


def test_build_gives_a_runnable_module():
    tvm = import_tvm()
    result = build_guarded(_workload(), local_device().target, timeout_s=60)
    assert result.ok and result.error is None and result.build_secs > 0
    args = random_args([["TENSOR", "float32", [64, 64]]] * 3, tvm.cpu())
    result.module["main"](*args)
    a, b, c = (x.numpy() for x in args)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)  # dense: B is [N, K]


def test_timeout_kills_the_guard_and_builds_nothing():
    result = build_guarded(_workload(), local_device().target, timeout_s=0.001)
    assert not result.ok and result.error.startswith("timeout") and result.module is None


def test_compiler_error_is_reported():
    bad_target = {"kind": "llvm", "mcpu": "not-a-cpu-at-all", "num-cores": 1}
    result = compiles_in_time("not a module", bad_target, timeout_s=60)
    assert not result.ok and result.error and not result.error.startswith("timeout")


def test_build_many_keeps_order_and_goes_on_past_a_failure():
    tvm = import_tvm()
    good = _workload()
    results = build_many([good, "not a module", good], local_device().target, timeout_s=60)
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error and results[1].module is None
    args = random_args([["TENSOR", "float32", [64, 64]]] * 3, tvm.cpu())
    for r in (results[0], results[2]):
        r.module["main"](*args)
        a, b, c = (x.numpy() for x in args)
        np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)


def test_build_many_times_out_each_program_and_leaves_no_child():
    import psutil

    before = {p.pid for p in psutil.Process().children()}
    results = build_many([_workload()] * 3, local_device().target, timeout_s=0.001)
    assert all(not r.ok and r.error.startswith("timeout") for r in results)
    # every guard child was killed and reaped (other tests' children may exist)
    assert {p.pid for p in psutil.Process().children()} <= before


def test_build_many_of_nothing():
    assert build_many([], local_device().target, timeout_s=1) == []


def test_built_module_is_the_program_compiled_in_process():
    """The parent times the module its child compiled (shipped as LLVM IR): same machine code
    and same outputs as compiling the program in-process, and no IR file is left behind."""
    import glob
    import tempfile

    from cdmpp.measure.build import compile_module
    from cdmpp.programs.sampling import sample_programs

    tvm = import_tvm()
    target = local_device().target
    workload = _workload()
    work_dirs = set(glob.glob(f"{tempfile.gettempdir()}/cdmpp-build-*"))
    candidates = sample_programs(workload, target, 2, task=MATMUL_64.name)
    mods = [workload] + [c.module(workload) for c in candidates]
    infos = [[["TENSOR", "float32", [64, 64]]] * 3] + [c.args_info_json for c in candidates]
    for mod, info, built in zip(mods, infos, build_many(mods, target, timeout_s=60)):
        assert built.ok, built.error
        direct = compile_module(mod, target).jit()
        assert built.module.inspect_source("s") == direct.inspect_source("s")
        ours, theirs = random_args(info, tvm.cpu()), random_args(info, tvm.cpu())
        built.module["main"](*ours)
        direct["main"](*theirs)
        for x, y in zip(ours, theirs):
            assert np.array_equal(x.numpy(), y.numpy())
    assert set(glob.glob(f"{tempfile.gettempdir()}/cdmpp-build-*")) <= work_dirs


def test_work_dirs_of_killed_builds_are_removed(tmp_path, monkeypatch):
    import subprocess
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    stale = tmp_path / f"cdmpp-build-{dead.pid}-abc"
    stale.mkdir()
    (stale / "0.ll").write_text("; IR of a build whose process was killed")
    ours = tmp_path / "cdmpp-build-1-abc"  # pid 1 is alive
    ours.mkdir()
    assert build_many([], local_device().target, timeout_s=1) == []
    assert not stale.exists() and ours.exists()


def _with_bad_programs(monkeypatch):
    """compile_module that hangs on "slow" and kills its process on "crash" (in the child)."""
    import os
    import signal
    import time

    from cdmpp.measure import build

    real = build.compile_module

    def compile_module(mod, target):
        if isinstance(mod, str) and mod == "slow":
            time.sleep(60)
        if isinstance(mod, str) and mod == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        return real(mod, target)

    monkeypatch.setattr(build, "compile_module", compile_module)


def test_a_hung_or_crashed_build_fails_alone(monkeypatch):
    import psutil

    _with_bad_programs(monkeypatch)
    good = _workload()
    before = {p.pid for p in psutil.Process().children()}
    results = build_many([good, "slow", good, "crash", good], local_device().target,
                         timeout_s=3)
    assert [r.ok for r in results] == [True, False, True, False, True]
    # the hung build is killed at its limit, which the outcome reports (not a clock reading)
    assert results[1].error == "timeout: build took over 3 s"
    assert results[3].error == "build process killed by signal 9"
    assert all(r.module is not None for r in results if r.ok)
    assert {p.pid for p in psutil.Process().children()} <= before


def test_a_child_sent_a_few_ahead_reports_every_module_in_order(monkeypatch):
    from cdmpp.measure import build

    _with_bad_programs(monkeypatch)
    monkeypatch.setattr(build, "_RUN_AHEAD", 2)  # fewer than the modules: sent as it goes
    good = _workload()
    mods = [good, good, "crash", good, "not a module", good]
    reports = list(build.compile_reports(mods, local_device().target, 60, None))
    assert [i for i, _ in reports] == list(range(6))
    assert ["error" in r for _, r in reports] == [False, False, True, False, True, False]
    assert reports[2][1]["error"] == "build process killed by signal 9"
    # after the crash a new child takes the rest: each report names its own module
    assert all(r["i"] == i for i, r in reports if i != 2)


def test_children_on_one_queue_replace_a_crashed_or_hung_one(monkeypatch):
    import psutil

    from cdmpp.measure import build

    _with_bad_programs(monkeypatch)
    good = _workload()
    mods = [good, "crash", good, "slow", good, good]
    before = {p.pid for p in psutil.Process().children()}
    reports = build.compile_from_queue(mods, local_device().target, 3, None, workers=2)
    assert [r.get("i") for r in reports] == [0, None, 2, None, 4, 5]
    assert reports[1]["error"] == "build process killed by signal 9"
    assert reports[3]["error"] == "timeout: build took over 3 s"
    assert {p.pid for p in psutil.Process().children()} <= before
