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


def test_every_seed_gives_tvm_its_own_random_state(monkeypatch):
    """TVM takes random state 0 as 1: seeds 0 and 1 sampled the very same programs."""
    import warnings

    import pytest

    from cdmpp.tvm_env import meta_schedule

    states = []

    def tune_context(**kw):  # record the state, then stop: no design space, default only
        states.append(kw["rand_state"])
        raise RuntimeError("stop")

    monkeypatch.setattr(meta_schedule(), "TuneContext", tune_context)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (0, 1, 2):
            sample_programs(_mod(MATMUL_64), local_device().target, 2, task="t", seed=seed)
    assert len(set(states)) == 3 and min(states) >= 1  # distinct, none TVM's 0 or -1
    with pytest.raises(ValueError, match="non-negative"):
        sample_programs(_mod(MATMUL_64), local_device().target, 2, task="t", seed=-1)


def test_candidates_are_persisted_not_resampled(tmp_path):
    path = tmp_path / "c.json"
    first = load_or_sample(path, _mod(MATMUL_64), local_device().target, 3, task="t")
    saved = path.read_text()
    second = load_or_sample(path, _mod(MATMUL_64), local_device().target, 3, task="t")
    assert [c.to_json() for c in first] == [c.to_json() for c in second]
    assert path.read_text() == saved
    assert json.loads(saved)["candidates"][0]["key"] == "t/default"


def test_search_sampling_draws_what_its_cost_model_favours():
    """--sampling search: the programs TVM's evolutionary search picks with the cost model,
    persisted like random ones and as faithful, and predicted faster than random samples."""
    import numpy as np

    from cdmpp.tune.cost_model import cost_model

    mod, target = _mod(MATMUL_64), local_device().target
    guide = cost_model(None, online=False)
    searched = sample_programs(mod, target, 4, task="t", cost_model=guide)
    sampled = sample_programs(mod, target, 8, task="t", seed=1)
    assert [c.kind for c in searched] == ["default"] + ["searched"] * 4
    assert [c.key for c in searched[1:]] == ["t/0", "t/1", "t/2", "t/3"]
    assert len({c.mod_shash for c in searched}) == 5
    for c in searched[1:]:
        assert tvm_codec.structural_hash(c.module(mod)) == c.mod_shash

    def predicted(cands):
        return guide.scorer.predict_s([tvm_codec.replay_trace(mod, c.trace_json)
                                       for c in cands if c.replay_ok], target)

    assert np.median(predicted(searched[1:])) < np.median(predicted(sampled[1:]))


def _tiny(op: str, **params):
    from cdmpp.programs.catalog import Task

    return Task(f"tiny_{op}", op, tuple(sorted(params.items())), ())


# one small task of every operator family in the catalog
FAMILIES = [
    _tiny("conv2d", n=1, c=8, h=14, w=14, k=16, kernel=3, stride=1, pad=1),
    _tiny("conv2d_bias_relu", n=1, c=8, h=14, w=14, k=16, kernel=3, stride=2, pad=1),
    _tiny("depthwise_conv2d", n=1, c=16, h=14, w=14, kernel=3, stride=1, pad=1),
    _tiny("max_pool2d", n=1, c=8, h=16, w=16, kernel=3, stride=2, pad=1),
    _tiny("global_avg_pool2d", n=1, c=32, h=7, w=7),
    _tiny("dense", m=16, k=64, n=32),
    _tiny("dense_bias_gelu", m=16, k=64, n=32),
    _tiny("matmul_bias", m=16, k=64, n=32),
    _tiny("batch_matmul", b=2, m=16, k=32, n=16),
    _tiny("softmax", b=2, m=8, n=32),
    _tiny("layer_norm", m=8, n=64),
    _tiny("add_relu", d0=1, d1=8, d2=8, d3=8),
    _tiny("add", d0=1, d1=8, d2=8, d3=8),
    _tiny("relu6", d0=1, d1=8, d2=8, d3=8),
]


def test_every_family_replays_to_what_is_measured():
    """Fresh samples of every operator family: the module rebuilt from the stored record (trace
    JSON round trip, or the kept module) is structurally equal to the sampled module."""
    from cdmpp.programs.catalog import OPS

    assert {t.op for t in FAMILIES} == set(OPS)
    target = local_device().target
    for task in FAMILIES:
        mod = _mod(task)
        for cand in sample_programs(mod, target, 3, task=task.name):
            rebuilt = cand.module(mod)
            assert tvm_codec.structural_hash(rebuilt) == cand.mod_shash, task.name
            if not cand.replay_ok:  # then the measured module itself was kept
                assert cand.measured_module is not None
