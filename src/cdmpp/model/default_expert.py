"""A model joined, on default programs, by an expert fitted on default programs alone.

A task's default program is the PrimFunc TVM's default pipeline builds without tuning (no
schedule applied): what an untuned network runs, kernel by kernel. They are few in the training
data (2,223 of the 26,402 records of the Intel model) and their cost is a sharp function of
shape (an untuned matmul's time per multiply-add moves 0.9-3.5 ns with the alignment of its
sizes, docs/model.md "Refit"), which the transformer, sharing its capacity with the sampled
schedules, underfits by the seed: the three seeds of the Intel model put BERT-base's 768 ->
3072 matmul 6-25% under its own training label (docs/model.md, "An expert for default
programs"). XGBoost on latency per work, fitted on the default programs alone, fits them
closely. Where a program is flagged default (`ProgramSet.default`), the prediction is the
weighted geometric mean of the model's and the expert's; everywhere else (sampled schedules,
or flags unknown) it is the model's alone.

    model = DefaultExpertRegressor.from_fitted(transformer, fit_default_expert(programs, y))
    model.predict(programs)            # programs.default picks the rows the expert joins

Saved as a directory: `default_expert.json` (format, expert weight), `model/` and `expert/`,
each written by `save_estimator`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cdmpp.baselines import BaselineMixin

_FORMAT = 1
_META = "default_expert.json"


def default_rows(programs) -> np.ndarray:
    """Indices of the programs flagged default (none when the flags are unknown)."""
    if programs.default is None:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.asarray(programs.default, dtype=bool))


def fit_default_expert(programs, y, sample_weight=None, **params):
    """XGBoost on latency per work (`XGBBaseline(per_work=True, **params)`), fitted on the
    programs flagged default only. Raises ValueError when fewer than 2 are."""
    from cdmpp.baselines import check_latency, check_weight
    from cdmpp.baselines.xgb import XGBBaseline

    y = check_latency(y, len(programs))
    weight = check_weight(sample_weight, len(programs))
    rows = default_rows(programs)
    if len(rows) < 2:
        known = "no default flags" if programs.default is None else f"{len(rows)} flagged"
        raise ValueError(f"an expert for default programs needs at least 2 of them among the "
                         f"training programs ({known}); the collector times each task's "
                         "default program (`kind: default` records)")
    expert = XGBBaseline(**{"per_work": True, **params})
    return expert.fit(programs.subset(rows), y[rows],
                      sample_weight=None if weight is None else weight[rows])


class DefaultExpertRegressor(BaselineMixin):  # the mixin's get_params, _check_fitted, score
    _fitted_attr = "expert_"

    def __init__(self, model=None, expert=None, expert_weight: float = 0.5):
        self.model = model  # an estimator: what every program gets
        self.expert = expert  # a fitted expert (`from_fitted`, `load`); `fit` makes its own
        self.expert_weight = expert_weight  # its share of the log prediction on default rows

    def _set(self, model, expert) -> None:
        w = float(self.expert_weight)
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"expert_weight must be in [0, 1], not {self.expert_weight}")
        if model is None or expert is None:
            raise ValueError("a DefaultExpertRegressor needs a model and an expert")
        self.model_, self.expert_, self.expert_weight_ = model, expert, w

    @classmethod
    def from_fitted(cls, model, expert, expert_weight: float = 0.5):
        """Both already fitted (nothing is retrained)."""
        out = cls(model, expert, expert_weight)
        out._set(model, expert)
        return out

    def fit(self, programs, y, sample_weight=None) -> "DefaultExpertRegressor":
        """Fit a fresh copy of `model` (same parameters) on every program and an expert
        (`fit_default_expert`) on those flagged default, with the same weights."""
        if self.model is None:
            raise ValueError("fit needs the model to fit beside the expert (model=...)")
        expert = fit_default_expert(programs, y, sample_weight)  # first: fails fast
        model = type(self.model)(**self.model.get_params())
        model.fit(programs, y, **({} if sample_weight is None
                                  else {"sample_weight": sample_weight}))
        self._set(model, expert)
        return self

    def predict(self, programs) -> np.ndarray:
        """Latency in seconds: the model's, blended with the expert's on default programs."""
        self._check_fitted()
        return self.blend(programs, self.model_.predict(programs))

    def blend(self, programs, predicted) -> np.ndarray:
        """`predicted` (the model's latencies) blended with the expert's on default programs."""
        out = np.asarray(predicted, dtype=np.float64).copy()
        rows = default_rows(programs)
        if len(rows) and self.expert_weight_ > 0:
            expert = np.asarray(self.expert_.predict(programs.subset(rows)), dtype=np.float64)
            w = self.expert_weight_
            out[rows] = np.exp((1.0 - w) * np.log(out[rows]) + w * np.log(expert))
        return out

    def save(self, path) -> Path:
        from cdmpp.model.registry import save_composite

        self._check_fitted()
        return save_composite(path, {"model": self.model_, "expert": self.expert_}, _META,
                              {"kind": "default_expert", "format": _FORMAT,
                               "expert_weight": self.expert_weight_})

    @classmethod
    def load(cls, path) -> "DefaultExpertRegressor":
        from cdmpp.model.registry import load_estimator, read_composite_meta

        path = Path(path)
        meta = read_composite_meta(path, _META, "default_expert", _FORMAT,
                                   "DefaultExpertRegressor")
        return cls.from_fitted(load_estimator(path / "model"), load_estimator(path / "expert"),
                               meta["expert_weight"])
