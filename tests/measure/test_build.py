"""Builds in a killable child: success, compiler errors, and the hard time limit."""

from __future__ import annotations

from cdmpp.device import local_device
from cdmpp.measure.build import build_in_child
from cdmpp.tvm_env import import_tvm
from conftest import MATMUL_64


def _workload():
    tvm = import_tvm()
    return tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})


def test_build_exports_a_loadable_library(tmp_path):
    tvm = import_tvm()
    result = build_in_child(_workload(), local_device().target, tmp_path / "a.so", timeout_s=60)
    assert result.ok and result.error is None and result.build_secs > 0
    assert tvm.runtime.load_module(result.path) is not None


def test_timeout_kills_the_build(tmp_path):
    result = build_in_child(_workload(), local_device().target, tmp_path / "a.so",
                            timeout_s=0.001)
    assert not result.ok and result.error.startswith("timeout")
    assert not (tmp_path / "a.so").exists()


def test_compiler_error_is_reported(tmp_path):
    bad_target = {"kind": "llvm", "mcpu": "not-a-cpu-at-all", "num-cores": 1}
    result = build_in_child("not a module", bad_target, tmp_path / "a.so", timeout_s=60)
    assert not result.ok and result.error and not result.error.startswith("timeout")
