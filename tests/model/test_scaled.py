"""A fitted model times one factor (`cdmpp calibrate --rescale`): the factor, persistence, errors."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import Constant, random_programs

from cdmpp.model.registry import load_estimator, read_meta, save_estimator
from cdmpp.model.scaled import ScaledRegressor, median_ratio, median_ratio_interval, unscaled


def test_the_factor_is_the_median_ratio_so_one_far_miss_does_not_move_it():
    programs, _ = random_programs(5)
    # the base predicts 1 ms; four programs ran 0.5 ms, one 20 ms (a 20x miss)
    y = np.array([5e-4, 5e-4, 5e-4, 5e-4, 2e-2])
    model = ScaledRegressor(Constant(1e-3))
    assert model.fit(programs, y) is model
    assert model.scale_ == pytest.approx(0.5) and model.n_records_ == 5
    np.testing.assert_allclose(model.predict(programs), 5e-4)
    assert median_ratio([2.0, 8.0], [1.0, 1.0]) == pytest.approx(4.0)  # geometric midpoint


def test_the_interval_holds_the_factor_narrows_with_agreement_and_is_reproducible():
    rng = np.random.default_rng(0)
    predicted = np.full(20, 1e-3)
    spread = 1e-3 * np.exp(rng.normal(0.0, 0.5, 20))  # programs the model gets 1.6x either way
    close = 1e-3 * np.exp(rng.normal(0.0, 0.05, 20))
    low, high = median_ratio_interval(spread, predicted)
    assert low < median_ratio(spread, predicted) < high
    narrow_low, narrow_high = median_ratio_interval(close, predicted)
    assert narrow_high / narrow_low < (high / low) ** 0.5
    assert median_ratio_interval(spread, predicted) == (low, high)  # a fixed seed
    programs, _ = random_programs(20)
    model = ScaledRegressor(Constant(1e-3)).fit(programs, spread)
    assert model.scale_interval_ == (low, high)


def test_bad_input_is_refused_clearly():
    programs, _ = random_programs(3)
    with pytest.raises(RuntimeError, match="not fitted yet"):
        ScaledRegressor(Constant(1e-3)).predict(programs)
    with pytest.raises(ValueError, match="scales a fitted model"):
        ScaledRegressor().fit(programs, np.ones(3))
    with pytest.raises(ValueError, match="finite and positive"):
        median_ratio([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="as many"):
        median_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite and positive"):
        ScaledRegressor.from_fitted(Constant(1e-3), float("nan"))


def test_save_load_round_trips_and_a_scaled_model_predicts_for_its_device_only(tmp_path):
    from cdmpp.baselines.xgb import XGBBaseline

    programs, y = random_programs(40)
    base = XGBBaseline(n_estimators=10, nthread=1).fit(programs, y)
    model = ScaledRegressor(base).fit(programs, y * 1.7)
    assert model.scale_ == pytest.approx(1.7, rel=0.2)
    path = save_estimator(model, tmp_path / "scaled",
                          trained_on={"device_id": "aaaa", "base_model": "zen3"})
    assert read_meta(path)["kind"] == "scaled"
    again = load_estimator(path)
    np.testing.assert_array_equal(again.predict(programs), model.predict(programs))
    assert again.scale_interval_ == model.scale_interval_
    np.testing.assert_allclose(again.predict(programs), 1.7 * base.predict(programs), rtol=0.2)
    assert unscaled(again) is again.model_ and unscaled(base) is base
    assert load_estimator(path, for_device="aaaa").scale_ == again.scale_  # its own device
    with pytest.raises(ValueError, match="rescaled for device aaaa.*not bbbb.*zen3"):
        load_estimator(path, for_device="bbbb")
