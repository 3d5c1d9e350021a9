"""A tuned kernel predicted as the fastest of the programs its search timed (cdmpp.e2e.search)."""

from __future__ import annotations

import numpy as np
import pytest

from e2e_helpers import device, lowered  # noqa: F401  (fixtures)


def test_the_fastest_of_one_program_is_its_prediction():
    from cdmpp.e2e.search import median_fastest_s

    assert median_fastest_s([2e-3], 0.3) == pytest.approx(2e-3, rel=1e-12)
    assert median_fastest_s([2e-3, 5e-3], 0.0) == pytest.approx(2e-3, rel=1e-12)


def test_the_fastest_of_many_is_the_median_of_their_minimum():
    from cdmpp.e2e.search import median_fastest_s

    rng = np.random.default_rng(0)
    predicted = np.exp(rng.normal(np.log(1e-3), 0.3, size=40))
    draws = np.exp(np.log(predicted) + 0.25 * rng.standard_normal((40_000, 40))).min(axis=1)
    got = median_fastest_s(predicted, 0.25)
    assert got == pytest.approx(np.median(draws), rel=0.01)
    assert got < predicted.min()
    # equal programs: the more of them, the faster the fastest
    two, ten = median_fastest_s([1e-3] * 2, 0.25), median_fastest_s([1e-3] * 10, 0.25)
    assert ten < two < 1e-3
    # a program predicted far slower than the rest cannot be the fastest: it changes nothing
    assert median_fastest_s([*predicted, 1.0], 0.25) == pytest.approx(got, rel=1e-9)


@pytest.mark.parametrize("bad", [[], [0.0], [-1e-3], [float("nan")]])
def test_the_fastest_needs_positive_predictions(bad):
    from cdmpp.e2e.search import median_fastest_s

    with pytest.raises(ValueError, match="positive"):
        median_fastest_s(bad, 0.25)


def test_the_fastest_needs_a_spread_of_zero_or_more():
    from cdmpp.e2e.search import median_fastest_s

    with pytest.raises(ValueError, match="sigma"):
        median_fastest_s([1e-3, 2e-3], -0.1)


def _searched_database(lowered, device, path):
    """A JSON database at `path` holding three distinct timed programs of tiny_mlp's first
    kernel (as a search leaves them; one of them timed twice) and one of its second kernel.
    Returns (untuned network, kernels)."""
    from cdmpp.e2e.kernels import workload_module
    from cdmpp.tvm_env import import_tvm, meta_schedule

    tvm, ms = import_tvm(), meta_schedule()
    from tvm import s_tir

    untuned = lowered("tiny_mlp")
    path.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(path))
    target = tvm.target.Target(device.target)

    def commit(kernel, schedule, secs):
        sch = s_tir.Schedule(workload_module(kernel))
        schedule(sch, sch.get_loops(sch.get_sblock("matmul")))
        db.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, db.commit_workload(workload_module(kernel)), [secs], target,
            ms.arg_info.ArgInfo.from_prim_func(kernel.func)))

    first, second = untuned.kernels
    commit(first, lambda sch, loops: sch.parallel(loops[0]), 1e-6)  # the one TVM applies
    commit(first, lambda sch, loops: sch.split(loops[1], [None, 2]), 3e-6)
    commit(first, lambda sch, loops: sch.unroll(loops[-1]), 2e-6)
    commit(first, lambda sch, loops: sch.parallel(loops[0]), 4e-6)  # the first one again
    commit(second, lambda sch, loops: sch.parallel(loops[0]), 1e-6)
    return untuned, (first, second)


def test_a_tuned_kernel_is_predicted_as_the_fastest_of_its_search(lowered, device, tmp_path,
                                                                 monkeypatch):
    from e2e_helpers import StubEstimator

    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.predict import predict_network
    from cdmpp.e2e.search import candidate_predictions, median_fastest_s

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the feature store
    _, (first, second) = _searched_database(lowered, device, tmp_path / "db")
    tuned = lower_network(import_network("tiny_mlp", 2), device.target, tuning_db=tmp_path / "db")
    from cdmpp.measure.database import load_database

    assert len(load_database(tmp_path / "db").records) == 5  # 4 of the first kernel
    stub = StubEstimator(default_s=1e-4)
    candidates = candidate_predictions(stub, tuned, tmp_path / "db")
    # the second kernel has one timed program: no choice was made, so it is not a candidate set;
    # the first kernel's program timed twice is one candidate (the model sees it once)
    assert set(candidates) == {first.name}
    np.testing.assert_allclose(candidates[first.name], [1e-4] * 3)

    plain = predict_network(stub, tuned, device=device, overhead=None)
    searched = predict_network(stub, tuned, device=device, overhead=None,
                               search_db=tmp_path / "db", search_sigma=0.3)
    row = {k.name: k for k in searched.kernels}
    assert row[first.name].predicted_s == pytest.approx(median_fastest_s([1e-4] * 3, 0.3))
    assert row[first.name].predicted_s < 1e-4
    assert (row[first.name].chosen_program_s, row[first.name].candidates) == (1e-4, 3)
    assert (row[second.name].predicted_s, row[second.name].candidates) == (1e-4, None)
    assert searched.search_sigma == 0.3
    assert searched.chosen_programs_replay_s == pytest.approx(plain.predicted_s)
    assert searched.predicted_s == pytest.approx(
        plain.predicted_s - row[first.name].calls * (1e-4 - row[first.name].predicted_s))
    assert plain.search_sigma is None and plain.chosen_programs_replay_s is None
    from cdmpp.e2e.report import format_table

    table = format_table(searched)
    assert "1 tuned kernel predicted as the fastest of the 3 programs" in table
    assert searched.to_json()["kernels"][0]["candidates"] in (3, None)


def test_only_a_database_timed_on_this_device_is_searched(lowered, device, tmp_path,
                                                          monkeypatch):
    from e2e_helpers import StubEstimator, overhead_calibration

    from cdmpp.device import save_device
    from cdmpp.e2e import overhead as oh
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.pipeline import run_network
    from cdmpp.model.registry import fitted_device, shipped_device_models

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    oh.save_overhead(overhead_calibration(device.device_id), device)
    _searched_database(lowered, device, tmp_path / "db")
    mod = import_network("tiny_mlp", 2)
    stub = StubEstimator(default_s=1e-4)
    here = run_network(mod, stub, device, name="tiny_mlp", tuning_db=tmp_path / "db")
    assert here.search_sigma is not None and here.predicted_s < here.chosen_programs_replay_s
    off = run_network(mod, stub, device, name="tiny_mlp", tuning_db=tmp_path / "db",
                      search_sigma=None)
    assert off.search_sigma is None
    assert off.predicted_s == pytest.approx(here.chosen_programs_replay_s)
    # timed on another device, the search chose for that device: no such prediction here
    other = next(n for n in shipped_device_models()
                 if fitted_device(n).device_id != device.device_id)
    save_device(tmp_path / "db", fitted_device(other))
    with pytest.warns(UserWarning, match="was timed on device"):
        there = run_network(mod, stub, device, name="tiny_mlp", tuning_db=tmp_path / "db",
                            anchor_model=None)
    assert there.search_sigma is None
    assert there.predicted_s == pytest.approx(off.predicted_s)


def test_e2e_takes_a_spread_auto_or_off_and_refuses_a_negative_one(capsys):
    from cdmpp.cli.e2e_cmd import _sigma
    from cdmpp.cli.main import main

    assert (_sigma("auto"), _sigma("off"), _sigma("0.3")) == ("auto", None, 0.3)
    with pytest.raises(SystemExit):
        main(["e2e", "--network", "tiny_mlp", "--search-sigma", "-0.1"])
    assert "expected 'auto', 'off' or a number >= 0" in capsys.readouterr().err
