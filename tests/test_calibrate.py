"""`cdmpp calibrate` end to end on two tiny real operators: choose, measure, fine-tune, save."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from cdmpp.calibrate import FINE_TUNES, CalibrateConfig, calibrate, tasks_for_budget
from cdmpp.model.ensemble import EnsembleRegressor


@pytest.fixture(params=["one model", "two seeds"])
def base_model(request, fixture_dbs, tmp_path):
    """A tiny CDMPP model, or an ensemble of two seeds of it (as the shipped default is)."""
    from cdmpp.model.registry import save_estimator

    data = fixture_data(fixture_dbs, tmp_path)
    models = [tiny_cdmpp(data, seed) for seed in range(1 if request.param == "one model" else 2)]
    model = models[0] if len(models) == 1 else EnsembleRegressor.from_fitted(models)
    return save_estimator(model, tmp_path / "base")


def fixture_data(fixture_dbs, tmp_path):
    """The fixture databases' real programs and labels, through a feature store."""
    from cdmpp.dataset.loader import labeled
    from cdmpp.features.build import build_store
    from cdmpp.features.store import FeatureStore

    build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    return labeled(store, samples, np.arange(samples.num_rows))


def tiny_cdmpp(data, seed: int, latency_s=None, **train):
    """A tiny CDMPP model fitted on `data`'s programs and labels (or `latency_s`)."""
    from cdmpp.model.config import ModelConfig, TrainConfig
    from cdmpp.model.estimator import CDMPPRegressor

    train = {"epochs": 2, "batch_size": 8, **train}
    return CDMPPRegressor(ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                      head_hidden=(16,)),
                          TrainConfig(threads=1, seed=seed, **train)).fit(
        data.programs, data.latency_s if latency_s is None else latency_s)


def test_calibrate_measures_the_chosen_tasks_and_saves_a_usable_model(base_model, tmp_path):
    from conftest import MATMUL_64, SOFTMAX_SMALL

    from cdmpp.model.registry import load_estimator, read_meta

    out = tmp_path / "calibrated"
    config = CalibrateConfig(out=str(out), model=str(base_model), tasks=1, programs_per_task=3,
                             epochs=2, adapt="mmd", seed=0)
    info = calibrate(config, tasks=[MATMUL_64, SOFTMAX_SMALL], log=lambda m: None,
                     progress=False)
    assert len(info["tasks"]) == 1 and info["tasks"][0] in {MATMUL_64.name, SOFTMAX_SMALL.name}
    # only the chosen task was measured, into OUT.data, with its device.json
    measured = json.loads((config.data_dir / "tasks.json").read_text())
    assert [v["name"] for v in measured.values()] == info["tasks"]
    assert (config.data_dir / "device.json").exists()
    assert info["records"] == 4  # the default program + 3 sampled ones
    assert read_meta(out)["trained_on"]["tasks"] == info["tasks"]
    model = load_estimator(out)
    from cdmpp.calibrate import measured_programs

    data = measured_programs(config.data_dir, info["tasks"])
    assert np.all(np.isfinite(model.predict(data.programs)))
    # every member of the base was fine-tuned FINE_TUNES times (the fine-tuning settings, a
    # seed each), and all are kept, averaged
    base = load_estimator(base_model)
    n_base = len(base.members_) if isinstance(base, EnsembleRegressor) else 1
    assert info["fine_tunes"] == FINE_TUNES == 3
    assert isinstance(model, EnsembleRegressor) and len(model.members_) == 3 * n_base
    assert [(m.train_config_.batch_size, m.train_config_.seed) for m in model.members_] == \
        [(16, i) for i in range(3 * n_base)]
    assert np.allclose(model.weights_, 1 / (3 * n_base))

    # one fine-tuning each gives the base's own shape back; none is refused
    one = CalibrateConfig(out=str(tmp_path / "one"), model=str(base_model), tasks=0, epochs=1,
                          data=(str(config.data_dir),), fine_tunes=1)
    calibrate(one, tasks=[MATMUL_64, SOFTMAX_SMALL], log=lambda m: None, progress=False)
    once = load_estimator(tmp_path / "one")
    assert type(once) is type(base)
    assert len(once.members_ if isinstance(once, EnsembleRegressor) else [once]) == n_base
    with pytest.raises(ValueError, match="fine_tunes must be at least 1, not 0"):
        CalibrateConfig(out=str(tmp_path / "none"), fine_tunes=0)


def test_tasks_0_fine_tunes_on_data_of_this_device_and_refuses_another_device(
        base_model, fixture_dbs, tmp_path):
    """--data: collections measured here (e.g. a network's kernels) join the fine-tuning set;
    with --tasks 0 nothing new is measured; a collection of another device is refused."""
    from conftest import SOFTMAX_SMALL

    from cdmpp.model.registry import load_estimator, read_meta

    first = CalibrateConfig(out=str(tmp_path / "first"), model=str(base_model), tasks=1,
                            programs_per_task=1, epochs=1)
    measured = calibrate(first, tasks=[SOFTMAX_SMALL], log=lambda m: None, progress=False)
    assert measured["records"] == 2 and measured["extra_records"] == 0

    out = tmp_path / "from-data"
    config = CalibrateConfig(out=str(out), model=str(base_model), tasks=0, epochs=1,
                             data=(str(first.data_dir),))
    info = calibrate(config, tasks=[SOFTMAX_SMALL], log=lambda m: None, progress=False)
    assert info["tasks"] == [] and info["records"] == info["extra_records"] == 2
    assert info["extra_tasks"] == [SOFTMAX_SMALL.name]
    assert read_meta(out)["trained_on"]["extra_data"] == [str(first.data_dir)]
    # nothing was measured for it: its own data directory holds only the device
    assert not (config.data_dir / "database_tuning_record.json").exists()

    # it is fine-tuned on them: checked on fixed real labels (the live ones above vary from run
    # to run, and a fine-tuning whose epoch does not beat the base keeps the base's weights)
    for db in fixture_dbs:  # real measurements of three operators, claimed for this device
        shutil.copy(first.data_dir / "device.json", db / "device.json")
    calibrate(CalibrateConfig(out=str(tmp_path / "from-fixed"), model=str(base_model), tasks=0,
                              epochs=1, data=tuple(str(db) for db in fixture_dbs)),
              tasks=[SOFTMAX_SMALL], log=lambda m: None, progress=False)
    programs = measured_programs_of(fixture_dbs[1]).programs
    before = load_estimator(base_model).predict(programs)
    after = load_estimator(tmp_path / "from-fixed").predict(programs)
    assert not np.allclose(before, after)

    # --balance: each source weighs the same, whatever its program count (with --refit:
    # fine-tuned again on every program once the validation chose the epochs)
    logs = []
    info = calibrate(CalibrateConfig(out=str(tmp_path / "balanced"), model=str(base_model),
                                     tasks=0, epochs=1, balance=True, refit=True,
                                     data=tuple(str(db) for db in fixture_dbs)),
                     tasks=[SOFTMAX_SMALL], log=logs.append, progress=False)
    trained_on = read_meta(tmp_path / "balanced")["trained_on"]
    assert info["balanced"] and trained_on["balanced"] and trained_on["refit"]
    said = next(m for m in logs if m.startswith("each source weighs the same"))
    assert all(str(db) in said for db in fixture_dbs)

    # a database without device.json (as TVM's tuner writes them) is taken when its records'
    # target is this machine's
    tuner_db = tmp_path / "tuner-db"
    shutil.copytree(first.data_dir, tuner_db, ignore=shutil.ignore_patterns("features"))
    (tuner_db / "device.json").unlink()
    info = calibrate(CalibrateConfig(out=str(tmp_path / "from-tuner"), model=str(base_model),
                                     tasks=0, epochs=1, data=(str(tuner_db),)),
                     tasks=[SOFTMAX_SMALL], log=lambda m: None, progress=False)
    assert info["extra_records"] == 2

    other = fixture_dbs[0]  # real measurements, said to be of another device
    (other / "device.json").write_text(json.dumps({"device_id": "another-cpu"}))
    with pytest.raises(ValueError, match=f"{other} was measured on device another-cpu, not "
                                         "on this one"):
        calibrate(CalibrateConfig(out=str(tmp_path / "bad"), model=str(base_model), tasks=0,
                                  data=(str(other),)), tasks=[SOFTMAX_SMALL], log=lambda m: None,
                  progress=False)
    with pytest.raises(ValueError, match="--tasks 0 measures nothing"):
        calibrate(CalibrateConfig(out=str(tmp_path / "none"), model=str(base_model), tasks=0))


def measured_programs_of(data_dir):
    from cdmpp.calibrate import measured_programs

    tasks = [v["name"] for v in json.loads((data_dir / "tasks.json").read_text()).values()]
    return measured_programs(data_dir, tasks)


def test_rescale_measures_default_programs_and_saves_the_base_times_one_factor(base_model,
                                                                              tmp_path):
    from conftest import MATMUL_64, SOFTMAX_SMALL

    from cdmpp.model.registry import load_estimator, read_meta
    from cdmpp.model.scaled import ScaledRegressor, median_ratio

    out = tmp_path / "rescaled"
    config = CalibrateConfig(out=str(out), model=str(base_model), tasks=2, programs_per_task=0,
                             rescale=True)
    info = calibrate(config, tasks=[MATMUL_64, SOFTMAX_SMALL], log=lambda m: None,
                     progress=False)
    assert info["records"] == 2 and info["fine_tunes"] == 0  # the two default programs
    model, base = load_estimator(out), load_estimator(base_model)
    assert isinstance(model, ScaledRegressor) and read_meta(out)["kind"] == "scaled"
    data = measured_programs_of(config.data_dir)
    assert list(data.programs.default) == [True, True]  # flagged, as at prediction time
    # the factor is the median measured / predicted of the base on what was measured here,
    # and nothing else changed: the base's own predictions times it
    assert info["rescale"] == pytest.approx(model.scale_)
    low, high = info["rescale_interval_90"]
    assert low <= model.scale_ <= high and tuple(model.scale_interval_) == (low, high)
    assert model.scale_ == pytest.approx(median_ratio(data.latency_s,
                                                      base.predict(data.programs)))
    # each program's factor from its 5 nearest measured programs: with two measured, both,
    # which is the one factor
    assert info["rescale_neighbors"] == model.neighbors == 5
    assert len(model.anchors_.log_ratios) == 2
    np.testing.assert_allclose(model.predict(data.programs),
                               model.scale_ * base.predict(data.programs))
    with pytest.raises(ValueError, match="nothing to adapt"):
        CalibrateConfig(out=str(tmp_path / "x"), rescale=True, adapt="cmd")


def test_budget_sizes_the_task_count_and_bad_input_is_clear(base_model, tmp_path):
    assert tasks_for_budget(10, 8) > tasks_for_budget(2, 8) >= 1
    with pytest.raises(ValueError, match="--tasks"):
        calibrate(CalibrateConfig(out=str(tmp_path / "m"), model=str(base_model)))
    with pytest.raises(ValueError, match="nowhere"):  # DatabaseError, before anything is written
        calibrate(CalibrateConfig(out=str(tmp_path / "m"), model=str(base_model), tasks=0,
                                  data=(str(tmp_path / "nowhere"),)))
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.data").exists()


def test_a_rerun_choosing_other_tasks_keeps_what_earlier_runs_measured(base_model, tmp_path):
    from conftest import MATMUL_64, SOFTMAX_SMALL

    out = str(tmp_path / "calibrated")
    quiet = {"log": lambda m: None, "progress": False}
    first = calibrate(CalibrateConfig(out=out, model=str(base_model), tasks=1,
                                      programs_per_task=3, epochs=1, fine_tunes=1),
                      tasks=[MATMUL_64], **quiet)
    again = calibrate(CalibrateConfig(out=out, model=str(base_model), tasks=1,
                                      programs_per_task=3, epochs=1, fine_tunes=1),
                      tasks=[SOFTMAX_SMALL], **quiet)
    assert first["tasks"] == [MATMUL_64.name] and again["tasks"] == [SOFTMAX_SMALL.name]
    assert again["earlier_tasks"] == [MATMUL_64.name]
    assert again["records"] == first["records"] + 4  # the softmax's default + 3 sampled


def test_wrong_output_ops_or_data_fail_before_anything_is_measured(base_model, tmp_path,
                                                                     fixture_dbs):
    import json as json_module

    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    (not_a_model / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no estimator.json"):
        calibrate(CalibrateConfig(out=str(not_a_model), model=str(base_model), tasks=1),
                  log=lambda m: None, progress=False)
    with pytest.raises(ValueError, match="no_such_op"):
        calibrate(CalibrateConfig(out=str(tmp_path / "m"), model=str(base_model), tasks=1,
                                  ops=("no_such_op",)), log=lambda m: None, progress=False)
    other = fixture_dbs[0]  # timed on this kind of machine; say it was another device
    (other / "device.json").write_text(json_module.dumps({"device_id": "0123456789abcdef"}))
    with pytest.raises(ValueError, match="0123456789abcdef"):
        calibrate(CalibrateConfig(out=str(tmp_path / "m"), model=str(base_model), tasks=0,
                                  data=(str(other),)), log=lambda m: None, progress=False)
    assert not (tmp_path / "notes.data").exists() and not (tmp_path / "m.data").exists()


def test_kmeans_order_in_rounds_starts_with_a_representative_set():
    from cdmpp.calibrate import choose_tasks
    from cdmpp.dataset.programs import ProgramSet
    from cdmpp.train.selection import kmeans_select

    rng = np.random.default_rng(0)
    names = [f"t{i:02d}" for i in range(12)]
    points = rng.normal(size=(12, 3))

    class Embedder:  # one program per task; its embedding is the task's point
        def embed(self, programs):
            return points[[names.index(t) for t in programs.task]]

    programs = ProgramSet(tuple(np.zeros((1, 2), np.float32) for _ in names),
                          tuple(np.zeros(1, np.int32) for _ in names), None, tuple(names))
    order = choose_tasks(Embedder(), programs, 9, "kmeans", seed=0, round_size=4)
    assert len(order) == 9 and len(set(order)) == 9
    assert order[:4] == kmeans_select(points, names, 4, seed=0)  # the first round alone
    assert choose_tasks(Embedder(), programs, 9, "kmeans", seed=0, round_size=4) == order


def test_the_cdmpp_members_of_any_model_and_a_model_without_any_refused_by_name():
    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.calibrate import cdmpp_members
    from cdmpp.model.estimator import CDMPPRegressor

    with pytest.raises(ValueError, match=r"calibrate needs a model that holds a CDMPP model; "
                                         r"'xgb' holds none, only XGBBaseline$"):
        cdmpp_members(XGBBaseline(), "xgb")
    member, other = CDMPPRegressor(), CDMPPRegressor()
    # other kinds are left out, ensembles within opened, in order
    assert cdmpp_members(EnsembleRegressor.from_fitted([member, XGBBaseline()]), "e") == [member]
    nested = EnsembleRegressor.from_fitted([EnsembleRegressor.from_fitted([member]),
                                            XGBBaseline(), other])  # as the shipped `ensemble`
    assert cdmpp_members(nested, "ensemble") == [member, other]


def test_fine_tuning_a_mixed_ensemble_keeps_its_shape_and_rescales_the_other_kinds(
        fixture_dbs, tmp_path):
    """The shipped `ensemble` (three seeds' ensemble beside XGBoost, weights 0.3 and 0.7):
    each CDMPP model is replaced by its fine-tuned copies, the XGBoost is kept as it is, and
    the whole is rescaled on the fine-tuning programs, which takes the XGBoost to this
    device; saved and loaded, it predicts the same."""
    import cdmpp.calibrate as cal
    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.model.registry import load_estimator, save_estimator
    from cdmpp.model.scaled import ScaledRegressor, median_ratio

    data = fixture_data(fixture_dbs, tmp_path)
    programs, y = data.programs, data.latency_s
    seeds = [tiny_cdmpp(data, seed) for seed in range(2)]
    xgb = XGBBaseline(n_estimators=5, nthread=1).fit(programs, y * 2.0)  # another device
    base = EnsembleRegressor.from_fitted([EnsembleRegressor.from_fitted(seeds), xgb],
                                         [0.3, 0.7])
    before = base.predict(programs)
    config = CalibrateConfig(out="unused", fine_tunes=2, epochs=1, neighbors=3)
    logs = []
    model = cal.fine_tuned_model(base, cal.cdmpp_members(base, "base"), programs, y, config,
                                 vector=None, log=logs.append, progress=False)
    np.testing.assert_array_equal(base.predict(programs), before)  # the base is untouched

    assert isinstance(model, ScaledRegressor) and model.neighbors == 3
    inner = model.model_
    assert isinstance(inner, EnsembleRegressor) and inner.members_[1] is xgb
    np.testing.assert_allclose(inner.weights_, [0.3, 0.7])
    copies = inner.members_[0]
    assert len(copies.members_) == 4 and not set(map(id, copies.members_)) & set(map(id, seeds))
    assert [m.train_config_.seed for m in copies.members_] == [0, 1, 2, 3]
    assert model.scale_ == pytest.approx(median_ratio(y, inner.predict(programs)))
    assert model.scale_ < 0.9  # the XGBoost's labels were twice these
    assert "x" + f"{model.scale_:.3f}" in logs[-1]
    save_estimator(model, tmp_path / "calibrated")
    np.testing.assert_allclose(load_estimator(tmp_path / "calibrated").predict(programs),
                               model.predict(programs), rtol=1e-6)

    # nested ensembles of CDMPP models alone: rebuilt the same way, nothing to rescale; a
    # model held twice is fine-tuned once, its copy in both places
    pure = EnsembleRegressor.from_fitted([EnsembleRegressor.from_fitted(seeds), seeds[0]],
                                         [0.5, 0.5])
    tuned = cal.fine_tuned_model(pure, cal.cdmpp_members(pure, "pure"), programs, y,
                                 replace(config, fine_tunes=1), vector=None, progress=False)
    assert isinstance(tuned, EnsembleRegressor) and len(tuned.members_) == 2
    assert len(tuned.members_[0].members_) == 2 and tuned.members_[1] not in seeds
    assert tuned.members_[1] is tuned.members_[0].members_[0]


def test_a_mixed_base_has_its_weights_chosen_on_tasks_each_fold_never_saw(fixture_dbs,
                                                                         tmp_path, monkeypatch):
    """With enough tasks, the fine-tuned mixed ensemble's top-level weights are chosen again:
    every fold fine-tunes copies on the other folds' tasks only, and the weights, on the grid
    of tenths, go into the model; with `weight_folds=0`, or too few tasks, the base's stay."""
    import cdmpp.calibrate as cal
    from cdmpp.baselines.xgb import XGBBaseline

    data = fixture_data(fixture_dbs, tmp_path)
    # each program its own task: 12 tasks, enough for two folds of two or more
    programs = replace(data.programs, task=tuple(f"t{i}" for i in range(len(data.latency_s))))
    y = data.latency_s
    seeds = [tiny_cdmpp(data, seed) for seed in range(2)]
    xgb = XGBBaseline(n_estimators=5, nthread=1).fit(programs, y * 2.0)
    base = EnsembleRegressor.from_fitted([EnsembleRegressor.from_fitted(seeds), xgb],
                                         [0.3, 0.7])
    fine_tuned_on = []
    real = cal.fine_tune_members

    def recording(members, programs, latency_s, *args, **kwargs):
        fine_tuned_on.append(set(programs.task))
        return real(members, programs, latency_s, *args, **kwargs)

    monkeypatch.setattr(cal, "fine_tune_members", recording)
    config = CalibrateConfig(out="unused", epochs=1, neighbors=2, weight_folds=2)
    logs = []
    model = cal.fine_tuned_model(base, cal.cdmpp_members(base, "base"), programs, y, config,
                                 vector=None, log=logs.append, progress=False)
    every = set(programs.task)
    folds = fine_tuned_on[:-1]  # then the fine-tuning on everything
    assert len(folds) == 2 * cal.WEIGHT_SPLITS and fine_tuned_on[-1] == every
    for split in range(cal.WEIGHT_SPLITS):  # each split's folds hold every task out once
        fits = folds[2 * split:2 * split + 2]
        assert all(fit < every for fit in fits)
        held = [every - fit for fit in fits]
        assert held[0].isdisjoint(held[1]) and held[0] | held[1] == every
    weights = model.model_.weights_
    assert weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(weights * 10, np.round(weights * 10), atol=1e-9)
    chosen = [line for line in logs if line.startswith("weights for this device")]
    assert chosen and f"{weights[0]:.1f}, {weights[1]:.1f}" in chosen[0]
    # the rescale chosen on the same folds: per program (config.neighbors) or one factor
    per_program = "from its 2 nearest" in chosen[0]
    assert per_program != ("with one factor" in chosen[0])
    assert model.neighbors == (2 if per_program else 0)

    for kept in (replace(config, weight_folds=0), replace(config, weight_folds=7)):
        logs.clear()
        model = cal.fine_tuned_model(base, cal.cdmpp_members(base, "base"), programs, y,
                                     kept, vector=None, log=logs.append, progress=False)
        np.testing.assert_allclose(model.model_.weights_, [0.3, 0.7])
    assert any("12 tasks measured, 7 folds need 14" in line for line in logs)
    with pytest.raises(ValueError, match="weight_folds must be 0"):
        replace(config, weight_folds=1)


def test_a_base_holding_other_kinds_is_fine_tuned_once_unless_told():
    """Three fine-tunings of each CDMPP model of a base made of them alone, one beside other
    kinds (which damp a fine-tuning's seed), as many as asked when asked."""
    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.calibrate import FINE_TUNES_BESIDE_OTHERS, fine_tunes_for
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.estimator import CDMPPRegressor

    pure = EnsembleRegressor.from_fitted([CDMPPRegressor(), CDMPPRegressor()])
    mixed = EnsembleRegressor.from_fitted([pure, XGBBaseline()], [0.3, 0.7])
    config = CalibrateConfig(out="unused")
    assert fine_tunes_for(pure, config) == FINE_TUNES == 3
    assert fine_tunes_for(mixed, config) == FINE_TUNES_BESIDE_OTHERS == 1
    assert fine_tunes_for(DefaultExpertRegressor.from_fitted(mixed, object()), config) == 1
    assert fine_tunes_for(mixed, replace(config, fine_tunes=2)) == 2


def test_balanced_weights_give_every_source_the_same_total_and_a_mean_of_one():
    from cdmpp.calibrate import balanced_weights

    sources = ["kernels", "catalog", "catalog", "catalog", "kernels", "catalog"]
    weight = balanced_weights(sources)
    assert np.isclose(weight.mean(), 1.0)
    by_source = {s: weight[[i for i, x in enumerate(sources) if x == s]] for s in set(sources)}
    assert np.isclose(by_source["kernels"].sum(), by_source["catalog"].sum())
    assert all(np.all(w == w[0]) for w in by_source.values())  # alike within a source
    np.testing.assert_array_equal(balanced_weights(["a", "a"]), [1.0, 1.0])
    with pytest.raises(ValueError, match="nothing to balance"):
        CalibrateConfig(out="unused", rescale=True, balance=True)


def test_a_rescale_has_nothing_to_refit():
    with pytest.raises(ValueError, match="nothing to refit"):
        CalibrateConfig(out="unused", rescale=True, refit=True)


def test_the_weights_reach_every_fine_tuning_the_folds_included(monkeypatch):
    """fine_tuned_model hands each fine-tuning the weights of the programs it is given: all of
    them for the model kept, each fold's own for the folds that choose a mixed base's weights."""
    from types import SimpleNamespace

    import cdmpp.calibrate as cal

    given = []
    monkeypatch.setattr(cal, "fine_tune_members",
                        lambda members, programs, y, *a, weight=None, **k: given.append(
                            (list(programs.task), None if weight is None else list(weight))))
    monkeypatch.setattr(cal, "holds_other_kinds", lambda model: False)
    monkeypatch.setattr(cal, "_with_copies", lambda base, copies: base)
    programs = SimpleNamespace(task=("a", "b", "c"))
    weight = np.array([0.5, 2.0, 0.5])
    cal.fine_tuned_model(object(), [], programs, np.ones(3), CalibrateConfig(out="unused"),
                         vector=None, weight=weight, progress=False)
    assert given == [(["a", "b", "c"], [0.5, 2.0, 0.5])]

    given.clear()

    class Subsettable(SimpleNamespace):
        def subset(self, rows):
            return Subsettable(task=tuple(self.task[i] for i in rows))

    monkeypatch.setattr(cal, "_member_outputs", lambda model, programs: ([], []))
    monkeypatch.setattr(cal, "FoldPredictions", lambda *a: None, raising=False)
    import cdmpp.model.fold_weights as fw

    monkeypatch.setattr(fw, "choose_fold_rescale", lambda splits, n: ([1.0], 0, 0.1))
    four = Subsettable(task=("a", "b", "c", "d"))
    cal.fold_chosen_weights(SimpleNamespace(weights_=[1.0]), [], four, np.ones(4),
                            CalibrateConfig(out="unused", weight_folds=2), vector=None,
                            weight=np.array([1.0, 2.0, 3.0, 4.0]))
    assert len(given) == 2 * cal.WEIGHT_SPLITS
    for tasks, w in given:  # each fold fine-tuned on its own programs with their own weights
        assert w == [{"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}[t] for t in tasks]


def test_a_default_program_expert_is_kept_for_its_own_device_only(monkeypatch):
    """The expert is not fine-tuned: calibrating for the device it was fitted for keeps it,
    for another device (or one the model cannot tell) the calibrated model does without."""
    from types import SimpleNamespace

    import cdmpp.calibrate as cal
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.estimator import CDMPPRegressor

    member = CDMPPRegressor()
    expert = SimpleNamespace(device_vector_=np.array([2.0, 1.0]))
    base = DefaultExpertRegressor.from_fitted(member, expert)
    assert cal.cdmpp_members(base, "base") == [member]

    monkeypatch.setattr(cal, "fine_tune_members", lambda *a, **k: None)  # the plumbing only
    config = CalibrateConfig(out="unused", fine_tunes=1)
    same = cal.fine_tuned_model(base, [member], None, None, config, vector=[2.0, 1.0])
    assert isinstance(same, DefaultExpertRegressor) and same.expert_ is expert
    assert isinstance(same.model_, CDMPPRegressor) and same.model_ is not member  # a copy
    logs = []
    for vector in ([4.0, 1.0], None):
        other = cal.fine_tuned_model(base, [member], None, None, config, vector=vector,
                                     log=logs.append)
        assert isinstance(other, CDMPPRegressor)
    assert len(logs) == 2 and "fitted for another device" in logs[0]


def test_without_a_model_it_starts_from_the_one_predict_uses_on_this_device(
        base_model, tmp_path, monkeypatch):
    from conftest import MATMUL_64, SOFTMAX_SMALL

    import cdmpp.model.registry as registry
    from cdmpp.device import local_device

    asked = []

    def fitted_for(device):  # stands in for the shipped model of this CPU
        asked.append(device)
        return str(base_model)

    monkeypatch.setattr(registry, "fitted_for", fitted_for)
    config = CalibrateConfig(out=str(tmp_path / "here"), tasks=2, programs_per_task=0,
                             rescale=True)
    info = calibrate(config, tasks=[MATMUL_64, SOFTMAX_SMALL], log=lambda m: None,
                     progress=False)
    assert asked == [local_device()] and info["base_model"] == str(base_model)


def test_the_base_reads_this_devices_vector_of_its_own_length_only():
    """A model without a device encoder reads none; one taking vectors of another length than
    this cdmpp makes is refused by name (calibrate and the offline benchmark alike)."""
    from types import SimpleNamespace

    from cdmpp.calibrate import base_device_vector
    from cdmpp.device import device_vector
    from cdmpp.model.registry import fitted_device

    device = fitted_device("zen5")

    def first(dim):
        return SimpleNamespace(model_config_=SimpleNamespace(device_dim=dim))

    assert base_device_vector(first(0), device, "plain") is None
    n = len(device_vector(device))
    np.testing.assert_array_equal(base_device_vector(first(n), device, "zen5"),
                                  device_vector(device))
    with pytest.raises(ValueError, match=f"old-model takes device vectors of length {n + 1}, "
                                         f"this cdmpp makes {n}"):
        base_device_vector(first(n + 1), device, "old-model")


def _saved_tiny(data, latency_s, path):
    from cdmpp.model.registry import save_estimator

    model = tiny_cdmpp(data, 0, latency_s, epochs=60, batch_size=4, lr=1e-2)
    return str(save_estimator(model, path))


@pytest.fixture
def two_bases(fixture_dbs, tmp_path):
    """The fixture's real programs, and two models of them: one trained on their labels, one on
    the labels shuffled, which one factor cannot map onto the measurements."""
    data = fixture_data(fixture_dbs, tmp_path)
    shuffled = np.random.default_rng(0).permutation(data.latency_s)
    return (data, _saved_tiny(data, data.latency_s, tmp_path / "fits"),
            _saved_tiny(data, shuffled, tmp_path / "shuffled"))


def test_choose_base_takes_the_model_one_factor_maps_best_onto_the_measurements(two_bases):
    from cdmpp.calibrate import choose_base
    from cdmpp.device import local_device
    from cdmpp.model.registry import load_estimator
    from cdmpp.model.scaled import median_ratio

    data, fits, shuffled = two_bases
    for names in ([shuffled, fits], [fits, shuffled]):
        name, spreads = choose_base(names, local_device(), data.programs, data.latency_s)
        assert name == fits and list(spreads) == names
        assert spreads[fits] < spreads[shuffled]
    # the spread: mean |log measured / predicted| once rescaled by the median ratio
    predicted = load_estimator(fits).predict(data.programs)
    predicted = predicted * median_ratio(data.latency_s, predicted)
    assert spreads[fits] == pytest.approx(np.mean(np.abs(np.log(data.latency_s / predicted))))


def test_with_no_base_named_and_none_fitted_here_calibrate_chooses_it_by_measurement(
        two_bases, fixture_dbs, tmp_path, monkeypatch):
    from conftest import SOFTMAX_SMALL

    import cdmpp.calibrate as cal
    import cdmpp.model.registry as registry
    from cdmpp.device import local_device
    from cdmpp.model.registry import read_meta

    data, fits, shuffled = two_bases
    here = local_device()
    for db in fixture_dbs:  # real measurements of three operators, claimed for this device
        (db / "device.json").write_text(json.dumps({"device_id": here.device_id}))
    monkeypatch.setattr(registry, "shipped_device_models", lambda: [shuffled, fits])
    monkeypatch.setattr(registry, "fitted_for", lambda device: None)  # a CPU none knows
    logs = []

    def run(out, **kw):
        config = CalibrateConfig(out=str(tmp_path / out), tasks=0,
                                 data=tuple(str(db) for db in fixture_dbs), **kw)
        return calibrate(config, tasks=[SOFTMAX_SMALL], log=logs.append, progress=False)

    info = run("chosen", rescale=True)
    assert info["base_model"] == fits and set(info["base_spreads"]) == {fits, shuffled}
    assert read_meta(tmp_path / "chosen")["trained_on"]["base_model"] == fits
    assert any(m.startswith(f"base chosen by the {len(data.latency_s)} programs measured "
                            f"here: {fits}") for m in logs)
    # a fine-tuning (here with adaptation towards the tasks' default programs) starts from it
    info = run("fine-tuned", epochs=1, adapt="mmd")
    assert info["base_model"] == fits and info["fine_tunes"] == FINE_TUNES
    # a base named is kept; with too few programs to choose by, so is `default`
    assert run("named", model=shuffled, rescale=True)["base_spreads"] == {}
    monkeypatch.setattr(cal, "MIN_PROGRAMS_TO_CHOOSE", len(data.latency_s) + 1)
    info = run("few", rescale=True)
    assert info["base_model"] == "default" and info["base_spreads"] == {}
