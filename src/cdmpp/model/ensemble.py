"""A geometric-mean ensemble of fitted estimators (e.g. cdmpp's transformer and XGBoost).

Its prediction is exp(sum_i w_i ln p_i) with weights summing to 1: equal weights by default,
so two members' errors in log space average out where they disagree. Measured on our data
(docs/model.md): cdmpp with XGBoost on latency per work beat both members on both splits.

    ens = EnsembleRegressor([CDMPPRegressor(), make_baseline("xgb", per_work=True)])
    ens.fit(programs, latency_s)                  # fits every member on the same data
    ens = EnsembleRegressor.from_fitted([cdmpp_model, xgb_model])  # members already fitted
    # weights chosen on held-out data (never the test side): the members' predictions there
    w = choose_weights([cdmpp_on_val, xgb_on_val], y_val)

Saved as a directory: `ensemble.json` (format, weights) and `members/<i>/`, each a directory
written by `save_estimator`, so any estimator kind can be a member.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cdmpp.baselines import BaselineMixin

_FORMAT = 1
# cdmpp's weight beside XGBoost per work in the shipped `ensemble` (and `cdmpp eval`'s
# ensemble-seeds): chosen with that member's settings on validation carves of the training
# side (`choose_weights`): 0.3 on the by-network and the random carve; with the member's
# features per work as well, 0.2 and 0.3, 0.1 point of MAPE apart (docs/model.md, "The
# heaviest store's features", "The heaviest store per unit of work").
CDMPP_WEIGHT = 0.3
SHIPPED_WEIGHTS = (CDMPP_WEIGHT, 1 - CDMPP_WEIGHT)  # (cdmpp, XGBoost per work)
_META = "ensemble.json"


def choose_weights(predictions, y, steps: int = 20) -> np.ndarray:
    """The weights (summing to 1, multiples of 1/steps) of the geometric-mean ensemble with the
    lowest MAPE of `y` from its members' `predictions` (one array per member, in seconds).

    Pass predictions of held-out data the members were not fitted on, such as a validation
    carve of the training side: weights chosen on the members' training data favour the member
    that fits it closest. Every grid point is tried (steps + 1 for two members); ties go to the
    most even weights."""
    from cdmpp.evaluate.metrics import mape

    y = np.asarray(y, dtype=np.float64)
    shapes = [np.shape(p) for p in predictions]
    if not shapes or any(shape != y.shape for shape in shapes) or not len(y):
        raise ValueError(f"predictions must be one array per member, each as long as y "
                         f"({y.shape}); got shapes {shapes}")
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(np.asarray(predictions, dtype=np.float64))
    if not np.all(np.isfinite(logs)) or np.any(y <= 0):
        raise ValueError("predictions and y must be positive and finite (seconds)")
    return best_on_grid(len(logs), steps, lambda w: mape(y, np.exp(w @ logs)))[0]


def best_on_grid(n: int, steps: int, error) -> tuple[np.ndarray, float]:
    """(weights, error(weights)): of `weight_grid(n, steps)`, the weights with the lowest
    `error`; ties (to 12 digits) go to the most even weights, then to the first found."""
    best, best_key = None, None
    for w in weight_grid(n, steps):
        key = (round(float(error(w)), 12), float(np.ptp(w)))
        if best_key is None or key < best_key:
            best, best_key = w, key
    return best, best_key[0]


def weight_grid(n: int, steps: int):
    """Every weight vector of `n` members summing to 1 in multiples of 1/steps (steps + 1 of
    them for two members)."""
    from itertools import combinations

    # each composition of `steps` into n parts, as bars between stars
    for bars in combinations(range(steps + n - 1), n - 1):
        yield (np.diff([-1, *bars, steps + n - 1]) - 1) / steps


class EnsembleRegressor(BaselineMixin):  # the mixin's get_params, _check_fitted and score
    _fitted_attr = "members_"

    def __init__(self, members=(), weights=None):
        self.members = members  # kept as given (sklearn's convention: clone compares them)
        self.weights = weights

    def _set_members(self, fitted) -> None:
        n = len(fitted)
        if not n:
            raise ValueError("an ensemble needs at least one member")
        w = np.ones(n) if self.weights is None else np.asarray(self.weights, float)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights must be {n} non-negative numbers, not all zero; got "
                             f"{self.weights}")
        self.members_ = list(fitted)
        self.weights_ = w / w.sum()

    def fit(self, programs, y, eval_set=None) -> "EnsembleRegressor":
        """Fit a fresh copy of every member (same parameters; the given ones stay unfitted) on
        `programs`, `y` (seconds); `eval_set` is passed to members."""
        fitted = [type(m)(**m.get_params()) for m in self.members]
        for member in fitted:
            member.fit(programs, y, eval_set=eval_set)
        self._set_members(fitted)
        return self

    @classmethod
    def from_fitted(cls, members, weights=None) -> "EnsembleRegressor":
        """An ensemble of members that are already fitted (nothing is retrained)."""
        ens = cls(list(members), weights)
        ens._set_members(ens.members)
        return ens

    def predict(self, programs) -> np.ndarray:
        """Latency in seconds: the weighted geometric mean of the members' predictions."""
        self._check_fitted()
        if not len(programs):
            return np.zeros(0)
        return self.combine(self.member_predictions(programs))

    def combine(self, predictions) -> np.ndarray:
        """The weighted geometric mean of the members' predictions (one array per member)."""
        log_sum = np.zeros(len(predictions[0]))
        for w, member, p in zip(self.weights_, self.members_, predictions):
            p = np.asarray(p, dtype=np.float64)
            if np.any(~np.isfinite(p)) or np.any(p <= 0):
                raise ValueError(f"ensemble member {type(member).__name__} predicted a "
                                 "non-positive or non-finite latency")
            log_sum += w * np.log(p)
        return np.exp(log_sum)

    def member_predictions(self, programs, embed: bool = False):
        """Every member's prediction; transformer members prepare their inputs together.
        `embed`: (predictions, the embeddings of the first transformer among the members,
        ensembles within opened (`cdmpp.model.members.flat_members`), from the same pass)."""
        from cdmpp.model.estimator import CDMPPRegressor, predict_together
        from cdmpp.model.members import flat_members
        from cdmpp.model.retarget import takes_device

        members = self.members_
        out = [None] * len(members)
        placer = None  # the member holding the first transformer, when embeddings are wanted
        if embed:
            placer = next((i for i, m in enumerate(members) if any(
                isinstance(x, CDMPPRegressor) for x in flat_members(m))), None)
            if placer is None:
                raise ValueError("embeddings need a CDMPP member; this ensemble has none")
        shared = [i for i, m in enumerate(members) if isinstance(m, CDMPPRegressor)]
        at = shared.index(placer) if placer in shared else None
        together = predict_together([members[i] for i in shared], programs, embed=at)
        predictions, embeddings = together if at is not None else (together, None)
        for i, p in zip(shared, predictions):
            out[i] = p
        for i, member in enumerate(members):
            if out[i] is not None:
                continue
            if i == placer:  # an ensemble within, holding the transformer that places
                inner, embeddings = member.member_predictions(programs, embed=True)
                out[i] = member.combine(inner)
            elif programs.device is not None and not takes_device(member):
                # fitted on one device's records with no device input (the shipped default's
                # XGBoost beside multi-device seeds): it predicts that device, whatever the
                # programs' vectors say; a calibration rescales the whole to the device
                out[i] = member.predict(programs.with_device(None))
            else:
                out[i] = member.predict(programs)
        return (out, embeddings) if embed else out

    def save(self, path) -> Path:
        from cdmpp.model.registry import save_composite

        self._check_fitted()
        parts = {f"members/{i}": member for i, member in enumerate(self.members_)}
        return save_composite(path, parts, _META, {"kind": "ensemble", "format": _FORMAT,
                                                   "weights": self.weights_.tolist()})

    @classmethod
    def load(cls, path) -> "EnsembleRegressor":
        from cdmpp.model.registry import load_estimator, read_composite_meta

        path = Path(path)
        weights = read_composite_meta(path, _META, "ensemble", _FORMAT,
                                      "EnsembleRegressor")["weights"]
        members = [load_estimator(path / "members" / str(i)) for i in range(len(weights))]
        return cls.from_fitted(members, weights)
