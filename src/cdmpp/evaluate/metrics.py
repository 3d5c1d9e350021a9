"""Accuracy and ranking metrics on absolute latencies (seconds).

Conventions (see RESEARCH.md, "Metric conventions"):
- error metrics are fractions, not percent: `mape` 0.1 means 10%;
- `top_k_score` follows TenSet/TVM: per task, best true latency / best true latency among
  the k programs predicted fastest, averaged over tasks (1.0 is perfect);
- `pairwise_accuracy` is averaged over tasks, each task weighted equally, like `top_k_score`.
`groups` is one label per program (task name); None means all programs form one group.
"""

from __future__ import annotations

import numpy as np


def _latencies(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    if t.ndim != 1 or p.ndim != 1:
        raise ValueError(f"latencies must be 1-D, got shapes {t.shape} and {p.shape}")
    if len(t) != len(p):
        raise ValueError(f"y_true has {len(t)} values but y_pred has {len(p)}")
    if not len(t):
        raise ValueError("metrics need at least one latency")
    for name, a in (("y_true", t), ("y_pred", p)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} has non-finite values")
        if np.any(a <= 0):
            raise ValueError(f"{name} has non-positive values: latencies are in seconds, > 0")
    return t, p


def _group_rows(groups, n: int) -> list[np.ndarray]:
    """Row indices of each group, in sorted group order (so sampling is reproducible)."""
    if groups is None:
        return [np.arange(n)]
    g = np.asarray(groups)
    if g.ndim != 1 or len(g) != n:
        raise ValueError(f"groups must have one label per program ({n}), got shape {g.shape}")
    _, inverse = np.unique(g, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    return np.split(order, bounds)


def relative_errors(y_true, y_pred) -> np.ndarray:
    """|pred - true| / true per program."""
    t, p = _latencies(y_true, y_pred)
    return np.abs(p - t) / t


def _mean(values: np.ndarray, weight=None) -> float:
    """Mean, or weighted mean with `weight` (one non-negative value per program)."""
    if weight is None:
        return float(values.mean())
    w = np.asarray(weight, dtype=np.float64)
    if w.shape != values.shape:
        raise ValueError(f"weight must have one value per program ({len(values)}), "
                         f"got shape {w.shape}")
    return float(np.sum(w * values) / np.sum(w))


def mape(y_true, y_pred, weight=None) -> float:
    """Mean absolute percentage error, as a fraction (weighted by `weight` if given)."""
    return _mean(relative_errors(y_true, y_pred), weight)


def median_ape(y_true, y_pred) -> float:
    return float(np.median(relative_errors(y_true, y_pred)))


def within(y_true, y_pred, tol: float = 0.10) -> float:
    """Share of programs whose relative error is at most `tol` (the "±10% accuracy")."""
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    # Slack so that exactly 10% off (1.1 vs 1.0, 0.1000...09 in floats) counts as within.
    return float(np.mean(relative_errors(y_true, y_pred) <= tol + 1e-12))


def rmse_log(y_true, y_pred, weight=None) -> float:
    """RMSE of natural-log latency (scale-free, symmetric in over/under-prediction; weighted
    by `weight` if given)."""
    t, p = _latencies(y_true, y_pred)
    return float(np.sqrt(_mean((np.log(p) - np.log(t)) ** 2, weight)))


def top_k_score(y_true, y_pred, groups, k: int) -> float:
    """Mean over groups of min(true) / min(true among the k lowest predictions).

    A group with fewer than k programs uses all of them (score 1.0). Ties in the prediction
    are broken by row order (stable sort), so the score is deterministic.
    """
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    t, p = _latencies(y_true, y_pred)
    scores = []
    for rows in _group_rows(groups, len(t)):
        chosen = rows[np.argsort(p[rows], kind="stable")[: int(k)]]
        scores.append(t[rows].min() / t[chosen].min())
    return float(np.mean(scores))


def _pairs(n: int, max_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if n * (n - 1) // 2 <= max_pairs:
        return np.triu_indices(n, k=1)
    # Too many pairs to enumerate: sample (with replacement) among i != j.
    i = rng.integers(0, n, size=max_pairs)
    j = (i + rng.integers(1, n, size=max_pairs)) % n
    return i, j


def pairwise_accuracy(y_true, y_pred, groups, max_pairs_per_group: int = 10000,
                      seed: int = 0) -> float:
    """Share of same-group pairs with distinct true latencies that the prediction orders the
    same way (a tie in the prediction counts as wrong, as in TenSet). Mean over groups that
    have at least one such pair; NaN when no group has one. Groups with more than
    `max_pairs_per_group` pairs are sampled, deterministically for a `seed`."""
    if max_pairs_per_group < 1:
        raise ValueError("max_pairs_per_group must be >= 1")
    t, p = _latencies(y_true, y_pred)
    rng = np.random.default_rng(seed)
    scores = []
    for rows in _group_rows(groups, len(t)):
        if len(rows) < 2:
            continue
        i, j = _pairs(len(rows), int(max_pairs_per_group), rng)
        dt = t[rows[i]] - t[rows[j]]
        dp = p[rows[i]] - p[rows[j]]
        keep = dt != 0
        if keep.any():
            scores.append(np.mean(np.sign(dt[keep]) == np.sign(dp[keep])))
    return float(np.mean(scores)) if scores else float("nan")


def noise_floor_ape(noise_rel) -> float:
    """Median per-record label noise (e.g. the relative gap of the two best timing passes),
    ignoring NaN (records with one pass). NaN when no record has a value. A model's median
    APE cannot be meaningfully below this."""
    a = np.asarray(noise_rel, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    return float(np.median(a)) if len(a) else float("nan")


def summary(y_true, y_pred, groups=None) -> dict:
    """All metrics in one flat dict of floats (plus the count `n`)."""
    return {
        "n": int(len(_latencies(y_true, y_pred)[0])),
        "mape": mape(y_true, y_pred),
        "median_ape": median_ape(y_true, y_pred),
        "within_10": within(y_true, y_pred, 0.10),
        "rmse_log": rmse_log(y_true, y_pred),
        "top1": top_k_score(y_true, y_pred, groups, 1),
        "top5": top_k_score(y_true, y_pred, groups, 5),
        "pairwise_acc": pairwise_accuracy(y_true, y_pred, groups),
    }
