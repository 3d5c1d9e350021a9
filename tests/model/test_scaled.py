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


def test_each_program_takes_the_median_factor_of_the_measured_programs_nearest_it():
    from cdmpp.model.scaled import Anchors

    # measured programs of two kinds, far apart in the embedding: the first ran 1.2x the
    # base's prediction here, the second 2x (one of them 3x: the median ignores it)
    z = np.array([[0.10], [0.11], [0.12], [0.90], [0.91], [0.92]])
    ratios = np.array([1.2, 1.2, 1.2, 2.0, 2.0, 3.0])
    anchors = Anchors.of(z, np.log(ratios))
    new = np.array([[0.105], [0.95], [0.5001]])  # near the first kind, the second, between
    np.testing.assert_allclose(anchors.factors(new, 3)[:2], [1.2, 2.0])
    # more neighbors than anchors: every one, the median over all
    np.testing.assert_allclose(anchors.factors(new, 50), np.sqrt(1.2 * 2.0))
    again = Anchors.from_json(anchors.to_json())
    np.testing.assert_array_equal(again.factors(new, 3), anchors.factors(new, 3))


def _tiny_cdmpp(programs, y):
    from cdmpp.model.config import ModelConfig, TrainConfig
    from cdmpp.model.estimator import CDMPPRegressor

    return CDMPPRegressor(ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                      head_hidden=(16,)),
                          TrainConfig(epochs=2, batch_size=8, threads=1, seed=0)).fit(programs, y)


def test_one_pass_gives_the_prediction_and_the_embedding_of_two(monkeypatch):
    """A per-program factor reads the embedding from the prediction's own pass through the
    network: the same numbers as predicting, then embedding, for every model kind it scales."""
    from dataclasses import replace

    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor
    from cdmpp.model.members import embedder, predict_and_embed

    programs, y = random_programs(30)
    programs = replace(programs, default=np.arange(30) < 8)
    first, second = _tiny_cdmpp(programs, y), _tiny_cdmpp(programs, y * 1.3)
    ensemble = EnsembleRegressor.from_fitted([first, second])
    for model in (first, ensemble, DefaultExpertRegressor.from_fitted(ensemble, Constant(1e-3))):
        predicted, embeddings = predict_and_embed(model, programs)
        np.testing.assert_allclose(predicted, model.predict(programs), rtol=1e-6)
        np.testing.assert_allclose(embeddings, embedder(model).embed(programs), rtol=1e-5,
                                   atol=1e-6)
    assert predict_and_embed(ensemble, programs.subset(np.arange(0)))[0].shape == (0,)
    # an ensemble that also holds another kind (the shipped `ensemble`'s XGBoost): placed by
    # its CDMPP member, predicted as a whole
    from cdmpp.baselines.xgb import XGBBaseline

    trees = XGBBaseline(n_estimators=5, nthread=1).fit(programs, y)
    mixed = EnsembleRegressor.from_fitted([trees, second], weights=[0.7, 0.3])
    predicted, embeddings = predict_and_embed(mixed, programs)
    np.testing.assert_allclose(predicted, mixed.predict(programs), rtol=1e-6)
    np.testing.assert_allclose(embeddings, second.embed(programs), rtol=1e-5, atol=1e-6)
    assert embedder(mixed) is second
    # ensembles within ensembles (the shipped `ensemble`: the seeds' ensemble and XGBoost):
    # placed by the first transformer in order, however deep
    for nested, placer in (([ensemble, trees], first),
                           ([trees, EnsembleRegressor.from_fitted([second]), first], second)):
        model = EnsembleRegressor.from_fitted(nested)
        predicted, embeddings = predict_and_embed(model, programs)
        np.testing.assert_allclose(predicted, model.predict(programs), rtol=1e-6)
        assert embedder(model) is placer
        np.testing.assert_allclose(embeddings, placer.embed(programs), rtol=1e-5, atol=1e-6)
    # a rescaled model runs the network once per batch: no separate embedding pass
    measured = y * np.where(np.arange(30) % 2, 1.5, 0.8)
    scaled = ScaledRegressor(ensemble, neighbors=5).fit(programs, measured)
    expected = ensemble.predict(programs) * scaled.factors(programs)
    monkeypatch.setattr(CDMPPRegressor, "embed", lambda *a: pytest.fail("a second pass"))
    np.testing.assert_allclose(scaled.predict(programs), expected, rtol=1e-6)


def test_per_program_factors_survive_save_and_load(tmp_path):
    programs, y = random_programs(30)
    base = _tiny_cdmpp(programs, y)
    measured = y * np.where(np.arange(30) % 2, 1.5, 0.8)  # two speeds, not one factor
    model = ScaledRegressor(base, neighbors=5).fit(programs, measured)
    path = save_estimator(model, tmp_path / "scaled", trained_on={"device_id": "aaaa"})
    again = load_estimator(path)
    assert again.neighbors == 5 and len(again.anchors_.log_ratios) == 30
    np.testing.assert_array_equal(again.predict(programs), model.predict(programs))
    assert len(np.unique(np.round(model.factors(programs), 9))) > 1  # not one factor
    assert len(model.predict(programs.subset(np.arange(0)))) == 0
    # neighbors=0 is the one factor; a model without embeddings cannot have per-program ones
    np.testing.assert_allclose(ScaledRegressor(base).fit(programs, measured).factors(programs),
                               model.scale_)
    with pytest.raises(ValueError, match="need the embeddings of CDMPP models.*Constant"):
        ScaledRegressor(Constant(1e-3), neighbors=3).fit(programs, measured)
    # nor an ensemble with no CDMPP member; one with another kind beside one can
    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.model.ensemble import EnsembleRegressor

    with pytest.raises(ValueError, match="need the embeddings of CDMPP models.*Constant"):
        ScaledRegressor(EnsembleRegressor.from_fitted([Constant(1e-3)]), neighbors=3).fit(
            programs, measured)
    trees = XGBBaseline(n_estimators=5, nthread=1).fit(programs, y)
    mixed = EnsembleRegressor.from_fitted([trees, base])
    scaled = ScaledRegressor(mixed, neighbors=5).fit(programs, measured)
    again = load_estimator(save_estimator(scaled, tmp_path / "mixed"))
    np.testing.assert_array_equal(again.predict(programs), scaled.predict(programs))
    np.testing.assert_allclose(scaled.predict(programs),
                               mixed.predict(programs) * scaled.factors(programs), rtol=1e-6)
    with pytest.raises(ValueError, match="neighbors must be >= 0"):
        ScaledRegressor(base, neighbors=-1).fit(programs, measured)
    # a model rescaled before per-program factors (format 1: one factor) still loads as one
    import json

    from cdmpp.model.registry import MODEL_NAME

    file = path / MODEL_NAME / "scaled.json"
    meta = json.loads(file.read_text())
    old = {k: meta[k] for k in ("kind", "scale", "scale_interval_90", "records")}
    file.write_text(json.dumps({**old, "format": 1}))
    one = load_estimator(path)
    assert one.neighbors == 0 and one.anchors_ is None
    np.testing.assert_allclose(one.predict(programs), model.scale_ * base.predict(programs))
    # a format this cdmpp does not know is refused, naming the file and the formats it reads
    file.write_text(json.dumps({**old, "format": 3}))
    with pytest.raises(ValueError, match=r"scaled\.json: not ScaledRegressor format 1 or 2 "
                                         r"\(kind 'scaled', format 3\)"):
        load_estimator(path)


def test_k_nearest_is_the_start_of_a_stable_sort_ties_included():
    from cdmpp.model.scaled import k_nearest

    rng = np.random.default_rng(0)
    dist = rng.integers(0, 6, size=(300, 40)).astype(np.float64)  # many ties
    dist[:5] = 1.0  # whole rows tied
    for k in (1, 3, 5, 39, 40, 60):
        got = np.sort(k_nearest(dist, k), axis=1)
        want = np.sort(np.argsort(dist, axis=1, kind="stable")[:, :k], axis=1)
        np.testing.assert_array_equal(got, want)
