"""An ensemble's weights for a new device, chosen on that device's programs held out by task.

A calibration fine-tunes the CDMPP models of a base but cannot fine-tune its other members (the
shipped default's XGBoost); the rescale that follows carries those to the device, each program
by the factor of its nearest measured programs. How much each member should then count differs
by device: over the five real calibrations kept in data/, the test MAPE was lowest with the
CDMPP part at 0.3 on Zen 5 and at 0.6-1.0 on Zen 3 (KMeans: 40.9% at the shipped 0.3, 26-31% at
0.6-1.0; docs/cross_device.md, "The weights chosen per device").

The weights are chosen as `choose_weights` chooses them, but on predictions of tasks the
members were not fine-tuned on, each rescaled as the calibrated model would rescale it:

    folds = [FoldPredictions(...) for each split of the measured tasks]  # `task_folds`
    w, err = choose_fold_weights([folds_of_split_1, folds_of_split_2], neighbors=5)
    w, neighbors, err = choose_fold_rescale(splits, neighbors=5)  # 5, or 0: one factor

How finely to rescale is chosen on the same folds (`choose_fold_rescale`): a factor per
program, from its nearest measured programs, pays where the device's factor varies between
kinds of kernel and the embeddings group those kinds (Zen 3: MAPE 43.1% against 47.1% with
one factor, KMeans k = 20, rescale alone), and costs where it does not, as the few neighbours
add noise (Zen 5: 25.2% against 24.3%; docs/cross_device.md, "KMeans against random in three
metrics").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cdmpp.model.ensemble import best_on_grid
from cdmpp.model.scaled import Anchors, median_ratio


@dataclass(frozen=True)
class FoldPredictions:
    """One fold: the top-level members' predictions (seconds, one row per member) and the
    placing embeddings of the programs fine-tuned on (`fit_*`) and of those held out."""

    fit_predicted_s: np.ndarray  # (members, n_fit)
    fit_embeddings: np.ndarray  # (n_fit, d)
    fit_latency_s: np.ndarray  # (n_fit,)
    held_predicted_s: np.ndarray  # (members, n_held)
    held_embeddings: np.ndarray  # (n_held, d)
    held_latency_s: np.ndarray  # (n_held,)


def task_folds(tasks, folds: int, seed: int) -> np.ndarray:
    """(n,) the fold of each program: its task's, tasks dealt to `folds` folds in a shuffled
    order (whole tasks held out, as a new device's unmeasured tasks are)."""
    names = np.array(sorted(set(tasks)))
    if len(names) < folds:
        raise ValueError(f"{folds} folds need at least {folds} tasks, not {len(names)}")
    np.random.default_rng(seed).shuffle(names)
    fold_of = {t: i % folds for i, t in enumerate(names)}
    return np.array([fold_of[t] for t in tasks])


def held_out_rescaled(w, fold: FoldPredictions, neighbors: int) -> np.ndarray:
    """The held-out programs' predictions of the ensemble with weights `w`, rescaled from the
    programs fine-tuned on as `ScaledRegressor` rescales (one median factor, or with
    `neighbors` each program's from its nearest)."""
    w = np.asarray(w, dtype=np.float64)
    fit = np.exp(w @ np.log(fold.fit_predicted_s))
    held = np.exp(w @ np.log(fold.held_predicted_s))
    if not neighbors:
        return held * median_ratio(fold.fit_latency_s, fit)
    anchors = Anchors.of(fold.fit_embeddings, np.log(fold.fit_latency_s / fit))
    return held * anchors.factors(fold.held_embeddings, neighbors)


def choose_fold_weights(splits, neighbors: int, steps: int = 10) -> tuple[np.ndarray, float]:
    """(weights, their error): of the grid of weights in multiples of 1/steps, those with the
    lowest held-out MAPE, averaged over `splits` (each a list of `FoldPredictions` that hold
    out every program once); ties go to the most even weights, as in `choose_weights`."""
    from cdmpp.evaluate.metrics import mape

    if not splits or not all(splits):
        raise ValueError("need at least one split of at least one fold")
    n = {len(f.fit_predicted_s) for folds in splits for f in folds}
    if len(n) != 1:
        raise ValueError(f"every fold must hold the same members' predictions, got {sorted(n)}")
    held = [np.concatenate([f.held_latency_s for f in folds]) for folds in splits]

    def error(w):  # the held-out MAPE, averaged over the splits
        return np.mean([mape(y, np.concatenate([held_out_rescaled(w, f, neighbors)
                                                for f in folds]))
                        for y, folds in zip(held, splits)])

    return best_on_grid(n.pop(), steps, error)


def choose_fold_rescale(splits, neighbors: int, steps: int = 10) -> tuple[np.ndarray, int, float]:
    """(weights, neighbors, error): `choose_fold_weights` with each program's factor from its
    `neighbors` nearest and with one factor (0); the lower held-out MAPE wins, a tie keeps
    `neighbors`."""
    best = None
    for k in dict.fromkeys((neighbors, 0)):  # `neighbors` first: it keeps a tie
        w, err = choose_fold_weights(splits, k, steps)
        if best is None or round(err, 12) < round(best[2], 12):
            best = (w, k, err)
    return best
