"""The default-program expert: where it joins the model, how it is fitted, persistence, errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from model_helpers import Constant as _Constant
from model_helpers import random_programs

from cdmpp.model.default_expert import DefaultExpertRegressor, fit_default_expert
from cdmpp.model.registry import load_estimator, save_estimator


def _programs(n=40, seed=0, defaults=10):
    """`random_programs`, the first `defaults` of them flagged default."""
    programs, y = random_programs(n, seed)
    return replace(programs, default=np.arange(n) < defaults), y


def test_the_expert_joins_on_default_programs_only():
    programs, _ = _programs(6, defaults=2)
    model = DefaultExpertRegressor.from_fitted(_Constant(1e-3), _Constant(4e-3))
    np.testing.assert_allclose(model.predict(programs), [2e-3] * 2 + [1e-3] * 4)
    heavy = DefaultExpertRegressor.from_fitted(_Constant(1e-3), _Constant(8e-3), 2 / 3)
    np.testing.assert_allclose(heavy.predict(programs)[:2], 4e-3)  # 1e-3^(1/3) * 8e-3^(2/3)
    np.testing.assert_allclose(model.predict(replace(programs, default=None)), 1e-3)
    off = DefaultExpertRegressor.from_fitted(_Constant(1e-3), _Constant(4e-3), 0.0)
    np.testing.assert_allclose(off.predict(programs), 1e-3)


def test_fit_default_expert_sees_the_default_rows_and_their_weights(monkeypatch):
    from cdmpp.baselines.xgb import XGBBaseline

    programs, y = _programs()
    seen = {}
    real = XGBBaseline.fit

    def spy(self, progs, labels, eval_set=None, sample_weight=None):
        seen.update(n=len(progs), y=np.asarray(labels), w=sample_weight, per_work=self.per_work)
        return real(self, progs, labels, eval_set, sample_weight)

    monkeypatch.setattr(XGBBaseline, "fit", spy)
    weight = np.arange(1.0, 41.0)
    expert = fit_default_expert(programs, y, sample_weight=weight, n_estimators=5, nthread=1)
    assert seen["n"] == 10 and seen["per_work"]
    np.testing.assert_array_equal(seen["y"], y[:10])
    np.testing.assert_array_equal(seen["w"], weight[:10])
    assert expert.predict(programs).shape == (40,)


def test_fit_fits_a_fresh_model_and_the_expert_and_round_trips(tmp_path):
    from cdmpp.baselines.xgb import XGBBaseline

    programs, y = _programs()
    given = XGBBaseline(n_estimators=10, nthread=1)
    model = DefaultExpertRegressor(given)
    assert model.fit(programs, y) is model
    assert not hasattr(given, "booster_")  # the given model stays unfitted (sklearn's clone)
    alone, expert = model.model_.predict(programs), model.expert_.predict(programs)
    np.testing.assert_allclose(model.predict(programs)[:10],
                               np.sqrt(alone[:10] * expert[:10]))
    np.testing.assert_array_equal(model.predict(programs)[10:], alone[10:])
    out = save_estimator(model, tmp_path / "m", trained_on={"records": len(y)})
    loaded = load_estimator(out)
    assert isinstance(loaded, DefaultExpertRegressor) and loaded.expert_weight_ == 0.5
    np.testing.assert_array_equal(loaded.predict(programs), model.predict(programs))


def test_errors_are_clear(tmp_path):
    programs, y = _programs(5, defaults=1)
    with pytest.raises(ValueError, match="at least 2 of them"):
        fit_default_expert(programs, y)
    with pytest.raises(ValueError, match="no default flags"):
        fit_default_expert(replace(programs, default=None), y)
    with pytest.raises(RuntimeError, match="not fitted"):
        DefaultExpertRegressor(_Constant(1e-3)).predict(programs)
    with pytest.raises(ValueError, match=r"expert_weight must be in \[0, 1\]"):
        DefaultExpertRegressor.from_fitted(_Constant(1e-3), _Constant(1e-3), 1.5)
    with pytest.raises(FileNotFoundError, match="default_expert.json is missing"):
        DefaultExpertRegressor.load(tmp_path)
    with pytest.raises(ValueError, match="one flag per program"):
        replace(programs, default=np.zeros(3, dtype=bool))


def test_program_set_keeps_its_default_flags_through_subset_and_device():
    programs, _ = _programs(6, defaults=2)
    np.testing.assert_array_equal(programs.subset([5, 0, 1]).default, [False, True, True])
    assert programs.with_device(np.ones(3)).default is programs.default
    assert replace(programs, default=None).subset([0]).default is None
