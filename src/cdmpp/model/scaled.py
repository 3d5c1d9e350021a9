"""A fitted model times one factor: a new device's speed learned from a few of its programs.

Asked about a CPU it never saw, a multi-device model predicts from the device vector alone
(zero-shot), and with three or four training CPUs that vector says little: left out in turn,
three of four CPUs got whole networks 21-41% off on average, each almost uniformly too slow or
too fast (docs/cross_device.md, "Every CPU left out in turn"). One factor learned from the
default programs of a few tasks timed on the device (`cdmpp calibrate --rescale`, about a
minute) took that to 5-10%; it cannot fix the order of programs, which only fine-tuning changes.

    model = ScaledRegressor(base).fit(programs, latency_s)   # base: fitted, for this device
    model.scale_                                             # median of measured / predicted
    model.scale_interval_                                    # its 90% bootstrap interval
    model.predict(programs)                                  # base.predict(programs) * scale_

Saved as a directory: `scaled.json` (format, scale, its interval, records) and `model/`
(`save_estimator`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cdmpp.baselines import BaselineMixin

_FORMAT = 1
_META = "scaled.json"


def median_ratio(measured_s, predicted_s) -> float:
    """exp(median(log(measured / predicted))): robust to a few programs the model gets far
    off, which a mean is not (ratios 0.5, 0.5, 0.5, 0.5 and one 20x miss: median 0.5, mean
    4.4)."""
    y = np.asarray(measured_s, dtype=np.float64)
    p = np.asarray(predicted_s, dtype=np.float64)
    if y.shape != p.shape or y.ndim != 1 or len(y) == 0:
        raise ValueError(f"need as many measured as predicted latencies, at least one "
                         f"(got {y.shape} and {p.shape})")
    if not (np.all(np.isfinite(y)) and np.all(y > 0) and np.all(np.isfinite(p))
            and np.all(p > 0)):
        raise ValueError("latencies must be finite and positive")
    return float(np.exp(np.median(np.log(y / p))))


def median_ratio_interval(measured_s, predicted_s, level: float = 0.9, draws: int = 1000,
                          seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval of `median_ratio` (the programs resampled with replacement; a fixed
    seed, so the same measurements give the same interval): how far the factor, and every
    total it scales, could move with another choice of programs as typical as these."""
    y = np.asarray(measured_s, dtype=np.float64)
    median_ratio(y, predicted_s)  # the same checks
    logs = np.log(y / np.asarray(predicted_s, dtype=np.float64))
    picks = np.random.default_rng(seed).integers(0, len(logs), size=(draws, len(logs)))
    medians = np.median(logs[picks], axis=1)
    low, high = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return float(np.exp(low)), float(np.exp(high))


class ScaledRegressor(BaselineMixin):  # the mixin's get_params, _check_fitted, score
    _fitted_attr = "scale_"

    def __init__(self, model=None):
        self.model = model  # a fitted estimator, predicting for the device the scale is for

    def fit(self, programs, y) -> "ScaledRegressor":
        """Learn the factor from programs measured on the device (`model` is not refitted)."""
        if self.model is None:
            raise ValueError("a ScaledRegressor scales a fitted model: ScaledRegressor(model)")
        predicted = self.model.predict(programs)
        self.scale_ = median_ratio(y, predicted)
        self.scale_interval_ = median_ratio_interval(y, predicted)  # 90%, bootstrap
        self.model_, self.n_records_ = self.model, int(len(y))
        return self

    @classmethod
    def from_fitted(cls, model, scale: float, n_records: int = 0,
                    interval=None) -> "ScaledRegressor":
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be finite and positive, not {scale}")
        out = cls(model)
        out.model_, out.scale_, out.n_records_ = model, float(scale), int(n_records)
        out.scale_interval_ = None if interval is None else tuple(float(x) for x in interval)
        return out

    def predict(self, programs) -> np.ndarray:
        self._check_fitted()
        return np.asarray(self.model_.predict(programs), dtype=np.float64) * self.scale_

    def save(self, path) -> Path:
        from cdmpp.model.registry import save_composite

        self._check_fitted()
        return save_composite(path, {"model": self.model_}, _META,
                              {"kind": "scaled", "format": _FORMAT, "scale": self.scale_,
                               "scale_interval_90": self.scale_interval_,
                               "records": self.n_records_})

    @classmethod
    def load(cls, path) -> "ScaledRegressor":
        from cdmpp.model.registry import load_estimator, read_composite_meta

        path = Path(path)
        meta = read_composite_meta(path, _META, "scaled", _FORMAT, "ScaledRegressor")
        return cls.from_fitted(load_estimator(path / "model"), meta["scale"], meta["records"],
                               meta.get("scale_interval_90"))


def unscaled(model):
    """The model under any `ScaledRegressor` (what a calibration starts from again)."""
    while isinstance(model, ScaledRegressor):
        model = model.model_
    return model
