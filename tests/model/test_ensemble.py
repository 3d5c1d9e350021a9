"""The geometric-mean ensemble: its prediction, fitting, persistence and errors."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import Constant as _Constant
from model_helpers import random_programs as _programs

from cdmpp.baselines.xgb import XGBBaseline
from cdmpp.model.ensemble import EnsembleRegressor
from cdmpp.model.registry import load_estimator, save_estimator


def test_prediction_is_the_weighted_geometric_mean():
    programs, _ = _programs(5)
    ens = EnsembleRegressor.from_fitted([_Constant(1e-3), _Constant(4e-3)])
    np.testing.assert_allclose(ens.predict(programs), 2e-3)
    weighted = EnsembleRegressor.from_fitted([_Constant(1e-3), _Constant(8e-3)], weights=[2, 1])
    np.testing.assert_allclose(weighted.predict(programs), 2e-3)  # (1e-3^2 * 8e-3)^(1/3)
    assert weighted.weights_.sum() == pytest.approx(1.0)


def test_fit_fits_every_member_and_round_trips(tmp_path):
    programs, y = _programs()
    ens = EnsembleRegressor([XGBBaseline(n_estimators=10, nthread=1),
                             XGBBaseline(n_estimators=10, nthread=1, per_work=True)])
    assert ens.fit(programs, y) is ens
    assert not any(hasattr(m, "booster_") or hasattr(m, "n_features_in_") for m in ens.members)
    members = [m.predict(programs) for m in ens.members_]
    assert not np.allclose(members[0], members[1])  # two different models
    np.testing.assert_allclose(ens.predict(programs), np.sqrt(members[0] * members[1]))
    out = save_estimator(ens, tmp_path / "ens", trained_on={"records": len(y)})
    loaded = load_estimator(out)
    assert isinstance(loaded, EnsembleRegressor) and len(loaded.members_) == 2
    np.testing.assert_array_equal(loaded.predict(programs), ens.predict(programs))


def test_a_member_without_device_input_is_asked_without_the_programs_device_vectors():
    # the shipped default: seeds trained on several devices beside an XGBoost fitted on one
    # device's records; a calibration asks it about programs carrying the new device's vector
    programs, y = _programs()
    on_devices = programs.with_device([1.0, 2.0, 3.0])
    multi = XGBBaseline(n_estimators=10, nthread=1).fit(on_devices, y)
    single = XGBBaseline(n_estimators=10, nthread=1, per_work=True).fit(programs, y)
    ens = EnsembleRegressor.from_fitted([multi, single])
    asked = on_devices.with_device([1.0, 2.0, 4.0])
    parts = ens.member_predictions(asked)
    np.testing.assert_array_equal(parts[0], multi.predict(asked))
    np.testing.assert_array_equal(parts[1], single.predict(programs))
    with pytest.raises(ValueError, match="fitted on programs with device vectors"):
        multi.predict(programs)  # a member that reads vectors still needs them


def test_errors_are_clear(tmp_path):
    programs, y = _programs(5)
    with pytest.raises(RuntimeError, match="not fitted"):
        EnsembleRegressor([XGBBaseline()]).predict(programs)
    with pytest.raises(ValueError, match="at least one member"):
        EnsembleRegressor.from_fitted([])
    with pytest.raises(ValueError, match="weights"):
        EnsembleRegressor.from_fitted([_Constant(1.0)], weights=[1, 2])
    with pytest.raises(ValueError, match="non-positive"):
        EnsembleRegressor.from_fitted([_Constant(0.0)]).predict(programs)
    (tmp_path / "x").mkdir()
    with pytest.raises(FileNotFoundError, match="ensemble.json"):
        EnsembleRegressor.load(tmp_path / "x")


def test_every_estimator_follows_sklearns_parameter_protocol():
    # sklearn.base.clone (what grid searches use) copies an unfitted estimator by its params
    from sklearn.base import clone

    from cdmpp.baselines.mlp import MLPBaseline
    from cdmpp.model.config import TrainConfig
    from cdmpp.model.estimator import CDMPPRegressor

    for est in (CDMPPRegressor(train_config=TrainConfig(epochs=3)), XGBBaseline(max_depth=3),
                MLPBaseline(epochs=2), EnsembleRegressor([XGBBaseline(max_depth=3)], [1.0])):
        copy = clone(est)
        assert type(copy) is type(est) and copy is not est
        assert copy.get_params(deep=True).keys() == est.get_params().keys()
    xgb = XGBBaseline().set_params(max_depth=2, per_work=True)
    assert (xgb.max_depth, xgb.per_work) == (2, True)
    with pytest.raises(ValueError, match="no parameter"):
        XGBBaseline().set_params(depth=2)


def test_estimators_say_what_they_take_and_predict_nothing_for_nothing():
    from cdmpp.baselines.mlp import MLPBaseline
    from cdmpp.model.config import TrainConfig
    from cdmpp.model.estimator import CDMPPRegressor

    programs, y = _programs(12)
    fitted = [XGBBaseline(n_estimators=5, nthread=1).fit(programs, y),
              MLPBaseline(epochs=2, nthread=1).fit(programs, y),
              CDMPPRegressor(train_config=TrainConfig(epochs=1)).fit(programs, y)]
    for model in fitted:
        with pytest.raises(TypeError, match="take a ProgramSet .* not a ndarray"):
            model.predict(np.zeros((3, 164)))
        assert model.predict(programs.subset(np.arange(0))).shape == (0,)
    with pytest.raises(TypeError, match="not a ndarray"):
        CDMPPRegressor().fit(np.zeros((3, 164)), y[:3])


def test_choose_weights_finds_the_weights_that_fit_held_out_data():
    from cdmpp.model.ensemble import choose_weights

    rng = np.random.default_rng(0)
    y = np.exp(rng.normal(-7, 1, 200))
    good, bad = y * np.exp(rng.normal(0, 0.05, 200)), y * np.exp(rng.normal(0, 0.8, 200))
    w = choose_weights([bad, good], y)
    assert w.sum() == pytest.approx(1.0) and w[1] > 0.8  # the accurate member weighs most
    # a member too high and one too low by the same factor: half each cancels them
    np.testing.assert_allclose(choose_weights([2 * y, y / 2], y), [0.5, 0.5])
    three = choose_weights([2 * y, y / 2, y * 3], y, steps=10)
    assert len(three) == 3 and three.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="one array per member"):
        choose_weights([y[:5], y], y)
    with pytest.raises(ValueError, match="positive"):
        choose_weights([y, -y], y)
