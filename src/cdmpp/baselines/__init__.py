"""TenSet-style baselines (XGBoost, MLP) with the estimator interface of cdmpp's regressor.

Both see one vector per program: `ProgramSet.summed()` (per-store features summed over the
leaves, plus the leaf count), followed by the device vector when the set has one. The
per-store features are the leaves' whole vectors, the loop-view columns included
(FEATURE_VERSION 3), so the baselines see what cdmpp sees; XGBoost with
`leaf_columns=N_TVM_FEATURES` reads TVM's 164 alone, as TenSet's XGBoost does. XGBoost
with `heaviest_leaf=True` (not a TenSet baseline: the ensemble's member) also sees the
features of the program's store with the most work. Both fit log latency and predict latency
in seconds. `score` is -MAPE (higher is better, sklearn's convention), so `fit/predict/score`
treat every estimator alike in evaluation.

    from cdmpp.baselines import make_baseline
    model = make_baseline("xgb", nthread=2).fit(train, y_train_s)
    latency_s = model.predict(test)
"""

from __future__ import annotations

import numpy as np

from cdmpp.model.params import ParamsMixin

__all__ = ["XGBBaseline", "MLPBaseline", "XGB_SETTINGS", "XGB_PER_WORK_SETTINGS",
           "make_baseline", "program_vectors"]


def program_vectors(programs, heaviest: bool = False, heaviest_per_work: bool = False,
                    dtype=np.float64) -> np.ndarray:
    """(n, F + 1 [+ F [+ F]] [+ D]) `dtype`: summed store features, leaf count [, the features
    of the store with the most work (`ProgramSet.heaviest`) [, and those features relative to
    the program's work (`heaviest_per_work`)]] [, device vector]. XGBoost reads float32:
    asking for it here saves a copy of the whole matrix."""
    from cdmpp.dataset.programs import check_programs

    check_programs(programs)
    if heaviest_per_work and not heaviest:
        raise ValueError("heaviest_per_work adds to the heaviest store's features: it needs "
                         "heaviest=True (in XGBBaseline: heaviest_leaf=True)")
    f = programs.n_features
    heavy = (2 if heaviest_per_work else 1) * f if heaviest else 0
    device = 0 if programs.device is None else np.shape(programs.device)[1]
    x = np.empty((len(programs), f + 1 + heavy + device), dtype=dtype)
    programs.summed(out=x[:, :f + 1])  # each part written in place: no copy
    if heaviest:
        programs.heaviest(per_work=heaviest_per_work, out=x[:, f + 1:f + 1 + heavy])
    if device:
        x[:, f + 1 + heavy:] = programs.device
    return x


def check_latency(y, n: int) -> np.ndarray:
    """Training labels as float64 seconds; one per program, positive and finite."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"y must hold one latency per program ({n}), got shape {y.shape}")
    if not n:
        raise ValueError("fit needs at least one program")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("latencies must be positive and finite (seconds)")
    return y


def check_weight(weight, n: int) -> np.ndarray | None:
    """Per-sample loss weights as float64 (n,), or None; a clear error for bad ones."""
    if weight is None:
        return None
    weight = np.asarray(weight, dtype=np.float64)
    if weight.shape != (n,):
        raise ValueError(f"sample_weight must have one value per program ({n}), "
                         f"not shape {weight.shape}")
    if not np.all(np.isfinite(weight)) or np.any(weight < 0) or not np.any(weight > 0):
        raise ValueError("sample_weight must be finite, non-negative and not all zero")
    return weight


class BaselineMixin(ParamsMixin):
    """Shared plumbing: input checks that match what `fit` saw, `score`, sklearn's
    `get_params` / `set_params` (the keyword arguments of `__init__`, saved with the model)."""

    _fitted_attr = "n_features_in_"  # set by subclasses to the attribute `fit` sets last
    _dtype = np.float64  # of the program vectors the estimator reads

    def _check_fitted(self) -> None:
        if not hasattr(self, self._fitted_attr):
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet: call fit() "
                               "or load() first")

    def _vectors(self, programs) -> np.ndarray:
        columns = getattr(self, "leaf_columns", None)
        if columns is not None:
            programs = programs.first_columns(columns)
        return program_vectors(programs, heaviest=getattr(self, "heaviest_leaf", False),
                               heaviest_per_work=getattr(self, "heaviest_per_work", False),
                               dtype=self._dtype)

    def _remember_inputs(self, programs) -> np.ndarray:
        x = self._vectors(programs)
        self.n_features_in_ = int(x.shape[1])
        self.has_device_ = programs.device is not None
        self.__dict__.pop("device_vector_", None)  # a new fit is for no device until told
        return x

    def _inputs(self, programs) -> np.ndarray:
        """Program vectors, checked against what `fit` saw."""
        from cdmpp.dataset.programs import check_programs

        check_programs(programs)  # first: a numpy array has a `device` attribute too
        vector = getattr(self, "device_vector_", None)
        if programs.device is None and self.has_device_ and vector is not None:
            programs = programs.with_device(vector)  # fitted for one device: that one
        if (programs.device is not None) != self.has_device_:
            need = "with" if self.has_device_ else "without"
            raise ValueError(f"this model was fitted on programs {need} device vectors")
        x = self._vectors(programs)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"programs give {x.shape[1]} features, the model was fitted "
                             f"on {self.n_features_in_}")
        return x

    def score(self, programs, y) -> float:
        """-MAPE on absolute latency (higher is better, sklearn's convention)."""
        from cdmpp.evaluate.metrics import mape

        return -mape(y, self.predict(programs))


# The settings `make_baseline("xgb")` gives XGBoost on latency (the baseline) over
# XGBBaseline's defaults: deeper trees at a slower learning rate over more rounds, half the
# columns per tree. Chosen from the candidates of benchmarks/chosen_on_validation.py (TVM's
# XGBModel settings among them) by MAPE on a validation carve of the training side alone
# (`cdmpp.dataset.splits.carve_rows`): the best on the by-network carve (62.6% against the
# defaults' 75.0%) and on the random one (42.2% against 45.4%). On latency per work (the
# ensemble's member, `XGB_PER_WORK_SETTINGS`), with the features of each program's heaviest
# store beside the sums, the best alone and in the ensemble with cdmpp's seeds on both carves,
# with the cdmpp weight both carves chose (`cdmpp.model.ensemble.CDMPP_WEIGHT`):
# docs/model.md, "The heaviest store's features". Those features relative to the program's
# work (`heaviest_per_work`) then took 1.5-2.2 points more off the by-network carve's MAPE
# (two seeds) and 1.0 off the random one's: "The heaviest store per unit of work".
XGB_SETTINGS = {"max_depth": 8, "learning_rate": 0.03, "n_estimators": 1500,
                "colsample_bytree": 0.5}
XGB_PER_WORK_SETTINGS = {"max_depth": 10, "learning_rate": 0.03, "n_estimators": 1000,
                         "colsample_bytree": 0.5, "heaviest_leaf": True,
                         "heaviest_per_work": True}


def make_baseline(name_or_model="xgb", **kwargs):
    """A baseline by name ("xgb", "mlp") with keyword arguments, or the object itself.

    "xgb" starts from `XGB_SETTINGS` (`XGB_PER_WORK_SETTINGS` with `per_work=True`); keyword
    arguments override them. (`XGBBaseline()` itself keeps its plain defaults.)"""
    if not isinstance(name_or_model, str):
        return name_or_model
    kinds = {"xgb": "XGBBaseline", "mlp": "MLPBaseline"}
    if name_or_model not in kinds:
        raise ValueError(f"unknown baseline {name_or_model!r}; choose from {sorted(kinds)}")
    if name_or_model == "xgb":
        chosen = XGB_PER_WORK_SETTINGS if kwargs.get("per_work") else XGB_SETTINGS
        kwargs = {**chosen, **kwargs}
    return __getattr__(kinds[name_or_model])(**kwargs)


def __getattr__(name):
    # Lazy exports: the submodules import this module's helpers, and importing
    # cdmpp.baselines should stay cheap.
    if name == "XGBBaseline":
        from cdmpp.baselines.xgb import XGBBaseline

        return XGBBaseline
    if name == "MLPBaseline":
        from cdmpp.baselines.mlp import MLPBaseline

        return MLPBaseline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
