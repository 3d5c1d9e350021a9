"""Sampling as TVM's tuner does, persisted once, and faithful to what is measured."""

from __future__ import annotations

import json

from cdmpp.device import local_device
from cdmpp.measure import tvm_codec
from cdmpp.programs.sampling import load_or_sample, sample_programs
from cdmpp.tvm_env import import_tvm
from conftest import MATMUL_64, SOFTMAX_SMALL


def _mod(task):
    tvm = import_tvm()
    return tvm.IRModule({"main": task.prim_func().with_attr("global_symbol", "main")})


def test_samples_are_distinct_and_replay_to_the_measured_module():
    for task in (MATMUL_64, SOFTMAX_SMALL):
        mod = _mod(task)
        cands = sample_programs(mod, local_device().target, 4, task=task.name)
        assert cands[0].kind == "default" and cands[0].mod_shash == tvm_codec.structural_hash(mod)
        assert len({c.mod_shash for c in cands}) == len(cands) >= 3
        for c in cands[1:]:
            rebuilt = c.module(mod)  # replayed trace, or the kept module
            assert tvm_codec.structural_hash(rebuilt) == c.mod_shash
            if c.replay_ok:
                replayed = tvm_codec.replay_trace(mod, c.trace_json).mod
                assert tvm_codec.structural_equal(replayed, rebuilt)


def test_candidates_are_persisted_not_resampled(tmp_path):
    path = tmp_path / "c.json"
    first = load_or_sample(path, _mod(MATMUL_64), local_device().target, 3, task="t")
    saved = path.read_text()
    second = load_or_sample(path, _mod(MATMUL_64), local_device().target, 3, task="t")
    assert [c.to_json() for c in first] == [c.to_json() for c in second]
    assert path.read_text() == saved
    assert json.loads(saved)["candidates"][0]["key"] == "t/default"
