"""Weights chosen on tasks held out by fold, each fold's predictions rescaled as a calibration
rescales them."""

from __future__ import annotations

import numpy as np
import pytest

from cdmpp.model.fold_weights import (FoldPredictions, choose_fold_rescale, choose_fold_weights,
                                      held_out_rescaled, task_folds)
from cdmpp.model.scaled import Anchors


def test_task_folds_hold_whole_tasks_every_fold_some_and_follow_the_seed():
    tasks = [f"t{i % 7}" for i in range(40)]
    folds = task_folds(tasks, 3, seed=0)
    assert set(folds) == {0, 1, 2}
    for t in set(tasks):  # a task's programs all in one fold
        assert len({f for f, name in zip(folds, tasks) if name == t}) == 1
    np.testing.assert_array_equal(folds, task_folds(tasks, 3, seed=0))
    assert any(not np.array_equal(folds, task_folds(tasks, 3, seed=s)) for s in range(1, 6))
    with pytest.raises(ValueError, match="3 folds need at least 3 tasks, not 2"):
        task_folds(["a", "b", "a"], 3, seed=0)


def fold(fit_predicted, fit_y, held_predicted, held_y, rng, d=3):
    return FoldPredictions(np.asarray(fit_predicted, float), rng.normal(size=(len(fit_y), d)),
                           np.asarray(fit_y, float), np.asarray(held_predicted, float),
                           rng.normal(size=(len(held_y), d)), np.asarray(held_y, float))


def test_held_out_predictions_are_rescaled_from_the_fitted_programs():
    """One factor: the median measured / predicted of the fitted programs; with neighbors,
    each held-out program's from its nearest, as `ScaledRegressor` does."""
    rng = np.random.default_rng(0)
    f = fold([[1.0, 2.0, 4.0], [4.0, 2.0, 1.0]], [2.0, 2.0, 2.0],
             [[1.0, 3.0], [4.0, 3.0]], [1.0, 1.0], rng)
    w = np.array([0.5, 0.5])
    combined_fit = np.exp(w @ np.log(f.fit_predicted_s))  # [2, 2, 2]: factor 1
    np.testing.assert_allclose(held_out_rescaled(w, f, 0), [2.0, 3.0])
    w = np.array([1.0, 0.0])  # fitted [1, 2, 4] for [2, 2, 2]: median ratio 1
    np.testing.assert_allclose(held_out_rescaled(w, f, 0), [1.0, 3.0])
    anchors = Anchors.of(f.fit_embeddings, np.log(f.fit_latency_s / combined_fit))
    np.testing.assert_allclose(held_out_rescaled([0.5, 0.5], f, 2),
                               [2.0, 3.0] * anchors.factors(f.held_embeddings, 2))


def test_the_member_right_after_the_rescale_wins_even_when_off_by_a_factor():
    """Member 0 is three times too slow everywhere, which the rescale takes away; member 1 is
    right on average but scattered: weights all on member 0. Without the rescale member 1
    would be closer: the choice is made on rescaled predictions."""
    rng = np.random.default_rng(1)
    splits = []
    for _ in range(2):
        folds = []
        for _ in range(3):
            y_fit, y_held = rng.uniform(1e-4, 1e-2, 30), rng.uniform(1e-4, 1e-2, 10)
            scatter = lambda y: y * np.exp(rng.normal(0, 0.5, len(y)))  # noqa: E731
            folds.append(fold([3 * y_fit, scatter(y_fit)], y_fit, [3 * y_held, scatter(y_held)],
                              y_held, rng))
        splits.append(folds)
    for neighbors in (0, 5):
        w, err = choose_fold_weights(splits, neighbors)
        np.testing.assert_allclose(w, [1.0, 0.0])
        assert err == pytest.approx(0.0, abs=1e-12)


def test_members_alike_tie_to_even_weights_and_bad_input_is_refused():
    rng = np.random.default_rng(2)
    y = rng.uniform(1e-4, 1e-2, 12)
    p = y * np.exp(rng.normal(0, 0.3, 12))
    same = fold([p[:8], p[:8]], y[:8], [p[8:], p[8:]], y[8:], rng)
    w, _ = choose_fold_weights([[same]], 0, steps=4)
    np.testing.assert_allclose(w, [0.5, 0.5])
    three = fold([p[:8]] * 3, y[:8], [p[8:]] * 3, y[8:], rng)
    with pytest.raises(ValueError, match="same members"):
        choose_fold_weights([[same, three]], 0)
    with pytest.raises(ValueError, match="at least one split"):
        choose_fold_weights([], 0)


def _clustered_fold(rng, factor_of, noise: float) -> FoldPredictions:
    """Two kinds of kernel, far apart in embedding space; a program's measured latency is its
    prediction times its kind's factor (`factor_of`), times log-normal `noise` on the fitted
    (measured) programs only. Both members predict alike."""
    def side(n):
        kind = np.arange(n) % 2
        emb = np.stack([kind * 10.0 + rng.normal(0, 0.1, n), rng.normal(0, 0.1, n)], axis=1)
        p = rng.uniform(1e-4, 1e-2, n)
        return kind, emb, p
    kind, emb, p = side(40)
    y = p * np.asarray(factor_of)[kind] * np.exp(rng.normal(0, noise, 40))
    hkind, hemb, hp = side(20)
    return FoldPredictions(np.stack([p, p]), emb, y, np.stack([hp, hp]), hemb,
                           hp * np.asarray(factor_of)[hkind])


def test_the_rescale_is_per_program_where_kinds_move_apart_and_one_factor_where_not():
    """Kinds at 2x and 0.5x: each program's factor from its nearest is right and one factor
    is not. One factor for both, measured with scatter: the median over all programs is
    closer than that of 3 neighbours. Equal errors keep the per-program rescale."""
    rng = np.random.default_rng(3)
    apart = [[_clustered_fold(rng, [2.0, 0.5], 0.0) for _ in range(2)]]
    w, neighbors, err = choose_fold_rescale(apart, 3)
    assert neighbors == 3 and err == pytest.approx(0.0, abs=1e-12)
    alike = [[_clustered_fold(rng, [1.5, 1.5], 0.4) for _ in range(3)] for _ in range(2)]
    w, neighbors, err = choose_fold_rescale(alike, 3)
    assert neighbors == 0
    assert err < choose_fold_weights(alike, 3)[1]
    exact = [[_clustered_fold(rng, [1.5, 1.5], 0.0)]]  # both rescales exact: a tie
    assert choose_fold_rescale(exact, 3)[1] == 3
    assert choose_fold_rescale(apart, 0)[1] == 0  # nothing to choose from
