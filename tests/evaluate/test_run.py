"""`compare` (what `cdmpp eval` and benchmarks/accuracy.py run) on real measured records."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cdmpp.cli.main import main
from cdmpp.dataset.loader import labeled
from cdmpp.dataset.splits import make_split
from cdmpp.evaluate.run import compare
from cdmpp.features.build import open_store
from cdmpp.model.config import TrainConfig


def test_ensemble_reuses_its_fitted_members(fixture_dbs, tmp_path):
    store = open_store(fixture_dbs, tmp_path / "store", workers=1)
    split = make_split(store.samples(), "random", seed=0)
    logged = []
    result = compare(store, split, models=("cdmpp", "ensemble"),
                     train_config=replace(TrainConfig(), epochs=2), log=logged.append)
    # cdmpp is trained once, xgb-work once for the ensemble; the ensemble itself never
    assert [m.split()[1] for m in logged] == ["cdmpp", "xgb-work"]
    members = result.estimators["ensemble"].members_
    assert members[0] is result.estimators["cdmpp"]
    _, test_rows = split.rows(store.samples())
    assert len(result.predictions["ensemble"]) == len(test_rows) > 0
    xgb_work = members[1].predict(labeled(store, store.samples(), test_rows).programs)
    np.testing.assert_allclose(result.predictions["ensemble"],
                               np.sqrt(result.predictions["cdmpp"] * xgb_work))
    assert set(result.results) == {"cdmpp", "ensemble"}
    assert result.train_seconds["ensemble"] == (result.train_seconds["cdmpp"]
                                                + result.train_seconds["xgb-work"])


def test_seed_ensemble_is_cdmpp_over_consecutive_seeds(fixture_dbs, tmp_path):
    from cdmpp.evaluate.run import SEEDS

    store = open_store(fixture_dbs, tmp_path / "store", workers=1)
    split = make_split(store.samples(), "random", seed=0)
    logged = []
    result = compare(store, split, models=("cdmpp", "cdmpp-seeds"),
                     train_config=replace(TrainConfig(), epochs=2, seed=5), log=logged.append)
    # seed 5 is the comparison's cdmpp, trained once; the others are trained for the ensemble
    assert [m.split()[1] for m in logged] == ["cdmpp"] + [f"cdmpp@seed+{i}"
                                                          for i in range(1, SEEDS)]
    members = result.estimators["cdmpp-seeds"].members_
    assert members[0] is result.estimators["cdmpp"]
    assert [m.train_config_.seed for m in members] == list(range(5, 5 + SEEDS))
    _, test_rows = split.rows(store.samples())
    programs = labeled(store, store.samples(), test_rows).programs
    logs = np.mean([np.log(m.predict(programs)) for m in members], axis=0)
    np.testing.assert_allclose(result.predictions["cdmpp-seeds"], np.exp(logs), rtol=1e-6)
    assert set(result.results) == {"cdmpp", "cdmpp-seeds"}
    assert result.train_seconds["cdmpp-seeds"] == pytest.approx(
        sum(result.train_seconds[k] for k in ["cdmpp"] + [f"cdmpp@seed+{i}"
                                                          for i in range(1, SEEDS)]))


def test_eval_prints_one_table_and_writes_the_report(fixture_dbs, tmp_path, capsys):
    args = ["eval", "--store", str(tmp_path / "store"), "--split", "random", "--epochs", "2",
            "--workers", "1", "--models", "cdmpp,xgb-work,ensemble",
            "--report-dir", str(tmp_path / "report")]
    for db in fixture_dbs:
        args += ["--data", str(db)]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert {"cdmpp", "xgb-work", "ensemble"} <= set(rows)
    assert "label noise floor" in out and "MAPE" in out
    for name in ("report.md", "predicted_vs_measured.png", "error_cdf.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0


class _SpyEstimator:
    """Records what `fit` is given; predicts 1 ms for every program."""

    fits: list = []

    def __init__(self, name):
        self.name = name

    def fit(self, programs, y, eval_set=None, sample_weight=None):
        _SpyEstimator.fits.append((self.name, programs, np.asarray(y)))
        return self

    def predict(self, programs):
        return np.full(len(programs), 1e-3)


def test_eval_fits_every_model_on_the_training_side_only(fixture_dbs, tmp_path, monkeypatch,
                                                         capsys):
    import cdmpp.evaluate.run as run
    from cdmpp.dataset.splits import Split
    from cdmpp.features.store import FeatureStore

    _SpyEstimator.fits = []
    monkeypatch.setattr(run, "make_estimator", lambda name, *a, **k: _SpyEstimator(name))
    args = ["eval", "--store", str(tmp_path / "store"), "--split", "random", "--workers", "1",
            "--models", "cdmpp,xgb", "--report-dir", str(tmp_path / "report")]
    for db in fixture_dbs:
        args += ["--data", str(db)]
    assert main(args) == 0

    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    split = Split.load(store.path, "random")
    ids = list(zip(samples.column("db").to_pylist(), samples.column("record_index").to_pylist()))
    latency = samples.column("latency_s").to_pylist()
    keys = samples.column("key").to_pylist()
    assert len(set(latency)) == len(latency)  # a label names its record
    record_of = {latency[i]: ids[i] for i in range(len(ids))}
    key_of = {ids[i]: keys[i] for i in range(len(ids))}
    assert [name for name, _, _ in _SpyEstimator.fits] == ["cdmpp", "xgb"]
    for _, programs, y in _SpyEstimator.fits:
        fitted_on = [record_of[v] for v in y.tolist()]
        assert not set(fitted_on) & set(split.test)
        assert sorted(fitted_on) == sorted(split.train)
        for i, record in enumerate(fitted_on):  # each label with its own program
            np.testing.assert_array_equal(programs.leaf_features[i],
                                          store.program(key_of[record])[0])


def _mark_passes(db, ref_ratios: dict) -> None:
    """A cdmpp sidecar giving records of `db` two passes of 3 repeats and these reference
    ratios (a ratio above 1.10: the machine was disturbed during that pass)."""
    import json

    with open(db / "cdmpp_measurements.jsonl", "w") as f:
        for index, ratios in ref_ratios.items():
            f.write(json.dumps({"record_index": index, "repeats_per_pass": 3,
                                "ref_ratios": ratios}) + "\n")


def test_eval_counts_the_disturbed_test_labels(fixture_dbs, tmp_path, monkeypatch, capsys):
    import cdmpp.evaluate.run as run
    from cdmpp.dataset.splits import Split
    from cdmpp.features.store import FeatureStore

    dense, _, addrelu = fixture_dbs
    # add+relu (resnet18, the test side): record 0 and 1 disturbed in every pass, record 2 in
    # one pass only, record 3 without reference timings; a disturbed dense record (training)
    _mark_passes(addrelu, {0: [1.5, 1.3], 1: [1.2, 2.0], 2: [1.5, 1.05]})
    _mark_passes(dense, {0: [1.5, 1.5], 1: [1.0, 1.0]})
    monkeypatch.setattr(run, "make_estimator", lambda name, *a, **k: _SpyEstimator(name))
    args = ["eval", "--store", str(tmp_path / "store"), "--split", "by-network:resnet18",
            "--workers", "1", "--models", "xgb", "--report-dir", str(tmp_path / "report")]
    for db in fixture_dbs:
        args += ["--data", str(db)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 test labels were timed with no pass on an undisturbed machine" in out
    assert "2 test labels were timed" in (tmp_path / "report" / "report.md").read_text()

    store = FeatureStore(tmp_path / "store")
    split = Split.load(store.path, "by-network-resnet18")
    assert {db for db, _ in split.test} == {str(addrelu)}
    result = compare(store, split, models=("xgb",), log=lambda _: None)
    np.testing.assert_array_equal(np.sort(result.clean_passes)[:3], [0, 0, 1])
    assert result.noise_floor()["disturbed"] == 2
    # none disturbed: a count of 0
    clean = replace(result, clean_passes=np.array([1.0, 2.0, np.nan, np.nan]))
    assert clean.noise_floor()["disturbed"] == 0


def test_seeds_ensemble_with_xgb_work_reuses_both(fixture_dbs, tmp_path):
    from cdmpp.evaluate.run import SEEDS
    from cdmpp.model.ensemble import CDMPP_WEIGHT

    store = open_store(fixture_dbs, tmp_path / "store", workers=1)
    split = make_split(store.samples(), "random", seed=0)
    logged = []
    result = compare(store, split, models=("cdmpp-seeds", "xgb-work", "ensemble-seeds"),
                     train_config=replace(TrainConfig(), epochs=2), log=logged.append)
    # every member is trained once, for the first model that needs it
    assert [m.split()[1] for m in logged] == (["cdmpp"] + [f"cdmpp@seed+{i}"
                                                           for i in range(1, SEEDS)]
                                              + ["xgb-work"])
    seeds, xgb_work = result.estimators["ensemble-seeds"].members_
    assert seeds is result.estimators["cdmpp-seeds"]
    assert xgb_work is result.estimators["xgb-work"]
    # the three seeds' geometric mean and XGBoost per work, cdmpp weighted CDMPP_WEIGHT
    w = CDMPP_WEIGHT
    np.testing.assert_allclose(result.predictions["ensemble-seeds"],
                               result.predictions["cdmpp-seeds"] ** w
                               * result.predictions["xgb-work"] ** (1 - w), rtol=1e-6)
    assert result.train_seconds["ensemble-seeds"] == pytest.approx(
        result.train_seconds["cdmpp-seeds"] + result.train_seconds["xgb-work"])
