"""Metrics on hand-computed examples."""

import math

import numpy as np
import pytest

from cdmpp.evaluate import metrics as M


def test_error_metrics_by_hand():
    t, p = [1.0, 2.0, 4.0], [1.1, 1.8, 5.0]  # relative errors 0.1, 0.1, 0.25
    assert M.mape(t, p) == pytest.approx(0.15)
    assert M.median_ape(t, p) == pytest.approx(0.10)
    assert M.within(t, p) == pytest.approx(2 / 3)  # exactly 10% off counts as within
    assert M.within(t, p, tol=0.05) == 0.0
    assert M.within(t, p, tol=0.25) == 1.0
    assert M.rmse_log([1.0, 2.0], [math.e, 2.0 / math.e]) == pytest.approx(1.0)


def test_top1_perfect_when_best_predicted_is_true_best():
    t = [3.0, 1.0, 2.0, 5.0]
    p = [30.0, 0.5, 20.0, 1.0]  # wrong order elsewhere, but the fastest is predicted fastest
    assert M.top_k_score(t, p, None, 1) == 1.0


def test_top_k_exact_ratio_and_group_average():
    groups = ["a", "a", "a", "b", "b", "b"]
    t = [1.0, 2.0, 3.0, 1.0, 2.0, 4.0]
    p = [1.0, 2.0, 3.0, 3.0, 1.0, 2.0]  # group b: predicted fastest has true 2, best is 1
    assert M.top_k_score(t, p, groups, 1) == pytest.approx((1.0 + 0.5) / 2)
    assert M.top_k_score(t, p, groups, 2) == pytest.approx((1.0 + 0.5) / 2)  # 2 and 4
    assert M.top_k_score(t, p, groups, 3) == 1.0
    assert M.top_k_score(t, p, groups, 10) == 1.0  # fewer than k programs: all of them


def test_pairwise_perfect_reversed_and_true_ties():
    t = np.array([1.0, 2.0, 3.0, 4.0])
    assert M.pairwise_accuracy(t, t * 7, None) == 1.0
    assert M.pairwise_accuracy(t, 1 / t, None) == 0.0
    # One swapped pair out of three; the tied true pair (2.0, 2.0) is ignored.
    assert M.pairwise_accuracy([1.0, 2.0, 3.0, 2.0], [1.0, 3.0, 2.0, 9.0],
                               [0, 0, 0, 1]) == pytest.approx(2 / 3)
    assert math.isnan(M.pairwise_accuracy([1.0, 1.0], [1.0, 2.0], None))


def test_pairwise_sampling_is_deterministic_and_close():
    rng = np.random.default_rng(0)
    t = rng.random(400) + 0.1
    p = t * np.exp(rng.normal(0, 0.3, 400))
    exact = M.pairwise_accuracy(t, p, None, max_pairs_per_group=10**6)
    sampled = M.pairwise_accuracy(t, p, None, max_pairs_per_group=5000, seed=3)
    assert sampled == M.pairwise_accuracy(t, p, None, max_pairs_per_group=5000, seed=3)
    assert sampled == pytest.approx(exact, abs=0.03)


def test_noise_floor_and_summary():
    assert M.noise_floor_ape([np.nan, 0.01, 0.03, 0.02]) == pytest.approx(0.02)
    assert math.isnan(M.noise_floor_ape([np.nan, np.nan]))
    s = M.summary([1.0, 2.0, 4.0], [1.1, 1.8, 5.0], ["a", "a", "b"])
    assert set(s) == {"n", "mape", "median_ape", "within_10", "rmse_log", "top1", "top5",
                      "pairwise_acc"}
    assert s["n"] == 3 and s["top1"] == 1.0 and s["pairwise_acc"] == 1.0


@pytest.mark.parametrize("t, p, msg", [
    ([1.0, 2.0], [1.0], "y_pred has 1"),
    ([1.0, 0.0], [1.0, 1.0], "non-positive"),
    ([1.0, 2.0], [1.0, -1.0], "non-positive"),
    ([1.0, np.nan], [1.0, 1.0], "non-finite"),
    ([1.0, 2.0], [np.inf, 1.0], "non-finite"),
    ([], [], "at least one"),
])
def test_bad_inputs_raise(t, p, msg):
    with pytest.raises(ValueError, match=msg):
        M.mape(t, p)


def test_groups_length_mismatch_raises():
    with pytest.raises(ValueError, match="one label per program"):
        M.top_k_score([1.0, 2.0], [1.0, 2.0], ["a"], 1)
    with pytest.raises(ValueError, match="positive integer"):
        M.top_k_score([1.0, 2.0], [1.0, 2.0], None, 0)


def test_weighted_mape_and_rmse_log_are_weighted_means():
    from cdmpp.evaluate.metrics import mape, rmse_log

    t, p = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 2.0])
    assert mape(t, p, np.ones(3)) == pytest.approx(mape(t, p))
    assert rmse_log(t, p, np.ones(3)) == pytest.approx(rmse_log(t, p))
    assert mape(t, p, [1.0, 1.0, 0.0]) == pytest.approx(mape(t[:2], p[:2]))
    assert rmse_log(t, p, [2.0, 0.0, 1.0]) == pytest.approx(
        rmse_log(t[[0, 0, 2]], p[[0, 0, 2]]))
    with pytest.raises(ValueError, match="one value per program"):
        mape(t, p, [1.0, 1.0])
