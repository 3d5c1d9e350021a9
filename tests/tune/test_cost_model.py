"""cdmpp as meta_schedule's cost model (`cdmpp.tune`)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import cdmpp
import cdmpp.features
from cdmpp.tune import CandidateScorer, cost_model
from cdmpp.tune.cost_model import SCORE_SCALE_S
from cdmpp.tvm_env import import_tvm, meta_schedule
from conftest import MATMUL_64


class CountingEstimator:
    """The shipped default, counting the programs it is asked to predict."""

    def __init__(self):
        self.model = cdmpp.load_model("default")
        self.programs = 0

    def predict(self, programs):
        self.programs += len(programs)
        return self.model.predict(programs)


@pytest.fixture(scope="module")
def tuning():
    """(target, the evolutionary search's TuneContext on a 64^3 matmul, the cost model, the
    candidates the search returned): the search calls the cost model from TVM's C++ side."""
    tvm = import_tvm()
    ms = meta_schedule()
    from cdmpp.device import local_device

    mod = tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})
    target = tvm.target.Target(local_device().target)
    model = cost_model("default")
    strategy = ms.search_strategy.EvolutionarySearch(
        population_size=32, init_measured_ratio=0, init_min_unmeasured=16, genetic_num_iters=2,
        eps_greedy=0.0)  # no random picks: the search returns its best-scored candidates
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         search_strategy=strategy, task_name="matmul", rand_state=5,
                         num_threads=1)
    ctx.pre_tuning(max_trials=4, num_trials_per_iter=4, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=model)
    candidates = ctx.search_strategy.generate_measure_candidates()
    return target, ctx, model, candidates


def test_import_cdmpp_tune_imports_no_tvm():
    code = ("import sys, cdmpp.tune; heavy = [m for m in ('tvm', 'torch') if m in sys.modules];"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_search_returns_the_candidates_cdmpp_scores_best(tuning):
    target, _, model, candidates = tuning
    assert len(candidates) == 4
    scored = sorted((SCORE_SCALE_S / v[1] for v in model.scorer._cache.values() if v),
                    reverse=True)
    assert len(scored) > 4  # the search scored far more programs than it returned
    got = model.scorer.scores([c.sch for c in candidates], target)
    np.testing.assert_allclose(sorted(got, reverse=True), scored[:4])


def test_scores_are_the_inverse_of_what_predict_programs_predicts(tuning):
    target, _, _, candidates = tuning
    schedules = [c.sch for c in candidates]
    seconds = cdmpp.predict_programs(schedules, model="default", target=target)
    scorer = CandidateScorer(cdmpp.load_model("default"))
    np.testing.assert_allclose(scorer.scores(schedules, target), SCORE_SCALE_S / seconds)
    np.testing.assert_array_equal(scorer.predict_s(schedules, target), seconds)


def test_each_distinct_program_is_featurized_and_predicted_once(tuning):
    target, _, _, candidates = tuning
    schedules = [c.sch for c in candidates]
    estimator = CountingEstimator()
    scorer = CandidateScorer(estimator)
    first = scorer.scores(schedules + schedules[:2], target)
    assert estimator.programs == len(schedules)
    again = scorer.scores(schedules, target)
    assert estimator.programs == len(schedules)
    np.testing.assert_array_equal(first[:len(schedules)], again)
    np.testing.assert_array_equal(first[len(schedules):], again[:2])


def test_a_candidate_that_cannot_be_featurized_scores_zero_and_the_rest_are_scored(
        tuning, monkeypatch):
    target, _, _, candidates = tuning
    schedules = [c.sch for c in candidates]
    expected = CandidateScorer(cdmpp.load_model("default")).scores(schedules, target)
    bad = schedules[1]
    real_extract = cdmpp.features.extract

    def extract(sch, tgt):
        if sch is bad:
            raise RuntimeError("no rows")
        return real_extract(sch, tgt)

    monkeypatch.setattr(cdmpp.features, "extract", extract)
    scorer = CandidateScorer(cdmpp.load_model("default"))
    with pytest.warns(UserWarning, match="cannot featurize a tuning candidate.*no rows"):
        scores = scorer.scores(schedules, target)
    assert scores[1] == 0 and np.all(scores[[0, 2, 3]] > 0) and scorer.failed == 1
    # three programs in the batch instead of four: the same up to float rounding
    np.testing.assert_allclose(scores[[0, 2, 3]], expected[[0, 2, 3]], rtol=1e-5)


def test_offline_scorer_ignores_measurements(tuning):
    target, _, _, candidates = tuning
    schedules = [c.sch for c in candidates]
    scorer = CandidateScorer(cdmpp.load_model("default"), online=False, min_online_samples=1)
    before = scorer.predict_s(schedules, target)
    scorer.observe(schedules, [[1.0]] * 4, target)
    assert scorer.correction_ is None and not scorer.measured_log_ratio
    np.testing.assert_array_equal(scorer.predict_s(schedules, target), before)


def test_online_correction_learns_a_device_twice_as_slow(tuning, tmp_path):
    target, ctx, _, candidates = tuning
    ms = meta_schedule()
    schedules = [c.sch for c in candidates]
    model = cost_model("default", online=True, min_online_samples=4)
    scorer = model.scorer
    base = scorer.predict_s(schedules, target)
    results = [ms.runner.RunnerResult(run_secs=[2 * s, 2.2 * s], error_msg=None) for s in base]
    model.update(ctx, candidates[:3], results[:3])
    assert scorer.correction_ is None  # 3 timed programs: fewer than min_online_samples
    failed = ms.runner.RunnerResult(run_secs=None, error_msg="runtime error")
    model.update(ctx, candidates[3:] + candidates[:1], [results[3], failed])
    assert len(scorer.measured_log_ratio) == 4  # the failed run is not a measurement
    np.testing.assert_allclose(scorer.measured_log_ratio, np.log(2.0), rtol=1e-6)
    corrected = scorer.predict_s(schedules, target)
    np.testing.assert_allclose(corrected / base, 2.0, rtol=0.1)

    path = tmp_path / "online.npz"
    model.save(str(path))
    restored = cost_model("default", online=True, min_online_samples=4)
    restored.load(str(path))
    np.testing.assert_allclose(restored.scorer.predict_s(schedules, target), corrected)


def test_no_warning_for_a_normal_search(tuning):
    target, _, _, candidates = tuning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CandidateScorer(cdmpp.load_model("default")).scores([c.sch for c in candidates], target)
