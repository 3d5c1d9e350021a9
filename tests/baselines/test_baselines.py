"""XGBoost and MLP baselines on synthetic programs whose latency is a known function of the
summed features: fitting must beat predicting the mean by far."""

import numpy as np
import pytest

from cdmpp.baselines import (MLPBaseline, XGBBaseline, check_weight, make_baseline,
                              program_vectors)
from cdmpp.dataset.programs import ProgramSet
from cdmpp.evaluate.metrics import mape

N_FEATURES = 164
# Small settings for 500 programs; shallow trees suit the additive synthetic target.
FAST = {"xgb": dict(n_estimators=300, max_depth=2, learning_rate=0.2, nthread=1),
        "mlp": dict(hidden=(64, 64), epochs=60, batch_size=64, nthread=1)}


def synthetic(n, device_dim=0, seed=0):
    """ln(latency_s) = w . summed features + 0.2 * leaves (+ a device offset) + noise."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(99).normal(0, 1, N_FEATURES) / np.sqrt(N_FEATURES)
    active = np.random.default_rng(98).random(N_FEATURES) < 0.1  # sparse, like real features
    feats = []
    for _ in range(n):
        k = int(rng.integers(1, 5))
        feats.append((rng.random((k, N_FEATURES)) * 4 * active).astype(np.float32))
    pos = tuple(np.arange(len(f), dtype=np.int32) for f in feats)
    summed = ProgramSet(tuple(feats), pos).summed()
    log_y = -9.0 + summed[:, :-1] @ w + 0.2 * summed[:, -1] + rng.normal(0, 0.03, n)
    device = None
    if device_dim:
        which = rng.integers(0, 3, n)
        device = np.eye(3, device_dim, dtype=np.float32)[which]
        log_y += 0.7 * which
    tasks = tuple(f"t{i}" for i in rng.integers(0, 5, n))
    return ProgramSet(tuple(feats), pos, device, tasks), np.exp(log_y)


@pytest.fixture(scope="module", params=[0, 4], ids=["no-device", "device"])
def data(request):
    train, y_train = synthetic(500, request.param, seed=1)
    test, y_test = synthetic(150, request.param, seed=2)
    return train, y_train, test, y_test


@pytest.fixture(scope="module", params=["xgb", "mlp"])
def fitted(request, data):
    import torch

    torch.set_num_threads(1)
    train, y_train, _, _ = data
    return request.param, make_baseline(request.param, **FAST[request.param]).fit(train, y_train)


def test_fit_beats_predicting_the_mean(fitted, data):
    kind, model = fitted
    _, y_train, test, y_test = data
    mean_mape = mape(y_test, np.full(len(y_test), np.exp(np.log(y_train).mean())))
    model_mape = mape(y_test, model.predict(test))
    # Observed: mean ~1.3, xgb ~0.27, mlp ~0.05.
    assert model_mape < mean_mape / 3, (kind, model_mape, mean_mape)
    assert model.score(test, y_test) == pytest.approx(-model_mape)


def test_save_load_gives_identical_predictions(fitted, data, tmp_path):
    kind, model = fitted
    test = data[2]
    path = model.save(tmp_path / kind)
    loaded = type(model).load(path)
    np.testing.assert_array_equal(loaded.predict(test), model.predict(test))
    assert loaded.get_params() == model.get_params()


def test_inputs_must_match_what_fit_saw(fitted, data):
    _, model = fitted
    test = data[2]
    flipped = (ProgramSet(test.leaf_features, test.leaf_pos)
               if test.device is not None else
               ProgramSet(test.leaf_features, test.leaf_pos, np.ones((len(test), 4), np.float32)))
    with pytest.raises(ValueError, match="device vectors"):
        model.predict(flipped)


@pytest.mark.parametrize("cls", [XGBBaseline, MLPBaseline])
def test_predict_before_fit_raises(cls, data):
    with pytest.raises(RuntimeError, match="not fitted"):
        cls().predict(data[2])
    with pytest.raises(RuntimeError, match="not fitted"):
        cls().save("/nonexistent/never-written")


def test_program_vectors_append_device(data):
    train = data[0]
    x = program_vectors(train)
    extra = 0 if train.device is None else train.device.shape[1]
    assert x.shape == (len(train), N_FEATURES + 1 + extra)


def test_program_vectors_in_float32_are_the_float64_ones_rounded(data):
    train = data[0]
    wide = program_vectors(train, heaviest=True, heaviest_per_work=True)
    narrow = program_vectors(train, heaviest=True, heaviest_per_work=True, dtype=np.float32)
    assert narrow.dtype == np.float32 and wide.dtype == np.float64
    np.testing.assert_array_equal(narrow, wide.astype(np.float32))
    extra = 0 if train.device is None else train.device.shape[1]
    assert wide.shape == (len(train), 3 * N_FEATURES + 1 + extra)


def test_xgb_predicts_what_its_trees_give_through_a_dmatrix(data):
    import xgboost as xgb

    train, y_train, test, _ = data
    model = make_baseline("xgb", **FAST["xgb"], per_work=True, heaviest_leaf=True,
                          heaviest_per_work=True).fit(train, y_train)
    x = program_vectors(test, heaviest=True, heaviest_per_work=True)
    log_s = model.booster_.predict(xgb.DMatrix(x), iteration_range=(0, model.best_iteration_ + 1))
    expected = np.exp(log_s.astype(np.float64) + np.log(test.work()))
    np.testing.assert_array_equal(model.predict(test), expected)


def test_mlp_is_deterministic_for_a_seed(data):
    train, y_train, test, _ = data
    kw = dict(hidden=(16,), epochs=3, nthread=1, seed=5)
    a = MLPBaseline(**kw).fit(train, y_train).predict(test)
    b = MLPBaseline(**kw).fit(train, y_train).predict(test)
    np.testing.assert_array_equal(a, b)


def test_eval_set_and_early_stopping(data):
    train, y_train, test, y_test = data
    with pytest.raises(ValueError, match="eval_set"):
        XGBBaseline(early_stopping_rounds=5, nthread=1).fit(train, y_train)
    xgb = XGBBaseline(n_estimators=300, early_stopping_rounds=5, learning_rate=0.3,
                      nthread=1).fit(train, y_train, eval_set=(test, y_test))
    assert xgb.best_iteration_ < 299
    mlp = MLPBaseline(hidden=(16,), epochs=4, nthread=1).fit(train, y_train,
                                                             eval_set=(test, y_test))
    assert len(mlp.history_["eval_loss"]) == 4


def test_bad_labels_and_unknown_name(data):
    train, y_train = data[0], data[1]
    with pytest.raises(ValueError, match="positive"):
        XGBBaseline(nthread=1).fit(train, -y_train)
    with pytest.raises(ValueError, match="one latency per program"):
        MLPBaseline().fit(train, y_train[:-1])
    with pytest.raises(ValueError, match="unknown baseline"):
        make_baseline("svm")


def test_xgb_sample_weight_changes_the_fit_and_is_checked():
    train, y = synthetic(200, seed=3)
    plain = XGBBaseline(**FAST["xgb"]).fit(train, y)
    heavy = np.where(np.arange(200) < 20, 50.0, 1.0)
    weighted = XGBBaseline(**FAST["xgb"]).fit(train, y, sample_weight=heavy)
    first = train.subset(np.arange(20))
    # weighting the first 20 programs 50x fits them closer than the unweighted fit does
    assert mape(y[:20], weighted.predict(first)) < mape(y[:20], plain.predict(first))
    with pytest.raises(ValueError, match="one value per program"):
        XGBBaseline(**FAST["xgb"]).fit(train, y, sample_weight=np.ones(3))


def test_xgb_fitted_for_one_device_predicts_it_without_device_vectors(tmp_path):
    train, y = synthetic(300, device_dim=4, seed=4)
    model = XGBBaseline(**FAST["xgb"]).fit(train, y)
    plain = ProgramSet(train.leaf_features, train.leaf_pos)
    with pytest.raises(ValueError, match="device vectors"):
        model.predict(plain)  # no device known yet
    model.device_vector_ = train.device[0].astype(np.float64)
    on_it = train.with_device(train.device[0])
    np.testing.assert_array_equal(model.predict(plain), model.predict(on_it))
    model.save(tmp_path / "m")
    loaded = XGBBaseline.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.device_vector_, model.device_vector_)
    np.testing.assert_array_equal(loaded.predict(plain), model.predict(plain))
    assert not hasattr(loaded.fit(train, y), "device_vector_")  # a new fit: no device yet


def test_bad_sample_weights_are_refused():
    assert check_weight(None, 3) is None
    with pytest.raises(ValueError, match="one value per program"):
        check_weight([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="non-negative"):
        check_weight([1.0, -1.0, 1.0], 3)
    with pytest.raises(ValueError, match="not all zero"):
        check_weight([0.0, 0.0, 0.0], 3)


def test_make_baseline_starts_xgboost_from_the_settings_chosen_for_its_target():
    from cdmpp.baselines import XGB_PER_WORK_SETTINGS, XGB_SETTINGS

    latency, per_work = make_baseline("xgb", seed=3), make_baseline("xgb", per_work=True)
    for model, settings in ((latency, XGB_SETTINGS), (per_work, XGB_PER_WORK_SETTINGS)):
        assert {k: model.get_params()[k] for k in settings} == settings
    assert latency.seed == 3 and not latency.per_work and per_work.per_work
    assert make_baseline("xgb", n_estimators=7).n_estimators == 7  # arguments win
    assert XGBBaseline().get_params() != latency.get_params()  # the class keeps its defaults


def test_xgb_saves_gzipped_json_and_still_loads_the_plain_json_of_format_1(tmp_path):
    import gzip
    import json

    train, y = synthetic(100, seed=4)
    model = XGBBaseline(**FAST["xgb"]).fit(train, y)
    first, again = model.save(tmp_path / "a"), model.save(tmp_path / "b")
    assert (first / "model.json.gz").read_bytes() == (again / "model.json.gz").read_bytes()
    # format 1, as the models shipped before it were saved: model.json, plain
    old = tmp_path / "old"
    old.mkdir()
    (old / "model.json").write_bytes(gzip.decompress((first / "model.json.gz").read_bytes()))
    meta = json.loads((first / "params.json").read_text())
    (old / "params.json").write_text(json.dumps(dict(meta, format=1)))
    np.testing.assert_array_equal(XGBBaseline.load(old).predict(train), model.predict(train))
    (old / "params.json").write_text(json.dumps(dict(meta, format=9)))
    with pytest.raises(ValueError, match="format 1 or 2"):
        XGBBaseline.load(old)


def test_xgb_with_the_heaviest_leaf_sees_what_a_sum_blurs(tmp_path):
    """A latency set by the store with the most work (its column 50), beside smaller stores
    whose column 50 a sum mixes in: the heaviest store's features recover it."""
    import json

    rng = np.random.default_rng(5)

    def programs(n):
        feats = []
        for _ in range(n):
            f = np.zeros((int(rng.integers(2, 5)), N_FEATURES), dtype=np.float32)
            f[:, 0] = rng.uniform(0, 10, len(f))  # float ops (slog): which store is heaviest
            f[:, 50] = rng.uniform(0, 3, len(f))
            feats.append(f)
        ps = ProgramSet(tuple(feats), tuple(np.arange(len(f)) for f in feats))
        return ps, np.exp(-9.0 + ps.heaviest()[:, 50])

    train, y_train = programs(600)
    test, y_test = programs(200)
    x = program_vectors(test, heaviest=True)
    assert x.shape == (200, 2 * N_FEATURES + 1)
    np.testing.assert_array_equal(x[:, N_FEATURES + 1:], test.heaviest())
    summed = XGBBaseline(**FAST["xgb"]).fit(train, y_train)
    heaviest = XGBBaseline(**FAST["xgb"], heaviest_leaf=True).fit(train, y_train)
    assert mape(y_test, heaviest.predict(test)) < mape(y_test, summed.predict(test)) / 3
    loaded = XGBBaseline.load(heaviest.save(tmp_path / "h"))
    assert loaded.heaviest_leaf
    np.testing.assert_array_equal(loaded.predict(test), heaviest.predict(test))
    # a model saved before the option existed has no such parameter: summed vectors alone
    meta_path = summed.save(tmp_path / "s") / "params.json"
    meta = json.loads(meta_path.read_text())
    del meta["params"]["heaviest_leaf"]
    meta_path.write_text(json.dumps(meta))
    np.testing.assert_array_equal(XGBBaseline.load(tmp_path / "s").predict(test),
                                  summed.predict(test))


def test_xgb_with_the_heaviest_store_per_work_carries_to_larger_shapes(tmp_path):
    """Latency per work set by the heaviest store's column 50 relative to the program's work:
    on stores of 2^10-2^14 operations when training saw 2^2-2^8, the absolute features are out
    of the range the trees split on, the features relative to work are not."""
    rng = np.random.default_rng(7)

    def programs(n, lo, hi):
        feats, rate = [], rng.uniform(-3, 0, n)
        for r in rate:
            f = np.zeros((int(rng.integers(2, 5)), N_FEATURES), dtype=np.float32)
            f[:, 0] = rng.uniform(lo, hi, len(f))  # float ops (slog): the work
            f[:, 50] = f[:, 0] + r  # e.g. bytes: the heaviest store's per work sets the rate
            feats.append(f)
        ps = ProgramSet(tuple(feats), tuple(np.arange(len(f)) for f in feats))
        relative = ps.heaviest(per_work=True)[:, N_FEATURES + 50]
        return ps, ps.work() * np.exp2(relative) * 1e-9

    train, y_train = programs(800, 2, 8)
    test, y_test = programs(200, 10, 14)
    x = program_vectors(test, heaviest=True, heaviest_per_work=True)
    assert x.shape == (200, 3 * N_FEATURES + 1)
    np.testing.assert_array_equal(x[:, N_FEATURES + 1:], test.heaviest(per_work=True))
    common = dict(FAST["xgb"], per_work=True, heaviest_leaf=True)
    absolute = XGBBaseline(**common).fit(train, y_train)
    relative = XGBBaseline(**common, heaviest_per_work=True).fit(train, y_train)
    assert mape(y_test, relative.predict(test)) < mape(y_test, absolute.predict(test)) / 3
    loaded = XGBBaseline.load(relative.save(tmp_path / "r"))
    assert loaded.heaviest_per_work
    np.testing.assert_array_equal(loaded.predict(test), relative.predict(test))
    with pytest.raises(ValueError, match="needs heaviest=True"):
        program_vectors(test, heaviest_per_work=True)


def test_xgb_on_the_first_leaf_columns_is_xgb_on_the_leaves_cut_to_them(tmp_path):
    # leaf_columns=N_TVM_FEATURES: TenSet's XGBoost, TVM's columns without the loop view
    train, y = synthetic(300, seed=6)
    wide = ProgramSet(tuple(np.hstack([f, np.ones((len(f), 3), np.float32)])
                            for f in train.leaf_features), train.leaf_pos)
    cut = XGBBaseline(**FAST["xgb"], leaf_columns=N_FEATURES).fit(wide, y)
    plain = XGBBaseline(**FAST["xgb"]).fit(wide.first_columns(N_FEATURES), y)
    assert cut.n_features_in_ == N_FEATURES + 1
    np.testing.assert_array_equal(cut.predict(wide), plain.predict(train))
    loaded = XGBBaseline.load(cut.save(tmp_path / "m"))
    assert loaded.leaf_columns == N_FEATURES
    np.testing.assert_array_equal(loaded.predict(wide), cut.predict(wide))
    with pytest.raises(ValueError, match="columns"):
        train.first_columns(N_FEATURES + 1)
