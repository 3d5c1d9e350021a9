"""A fitted model times a factor: a new device's speed learned from a few of its programs.

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

A device does not speed up or slow down every kind of kernel alike (a fresh Zen 3 VM ran the
untuned CNNs 7-19% slower than the one `zen3` learnt from, BERT-base and GPT-2 about 19%), so
with `neighbors=k` each program gets its own factor: the median measured / predicted of the k
measured programs nearest to it in the base model's embedding space (`anchors_`; that of its
first CDMPP model: an ensemble may hold other kinds beside, such as the shipped default's
XGBoost, which are scaled with the rest): on that VM, 9 of 9 untuned networks within 10%
against 7 of 9 with one factor (docs/cross_device.md, "A factor per kind of kernel").
`scale_` stays the one factor over all of them, which the summary reports.

Saved as a directory: `scaled.json` (format, scale, its interval, records, and the anchors
with `neighbors`) and `model/` (`save_estimator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdmpp.baselines import BaselineMixin
from cdmpp.model.members import embedder, predict_and_embed

_FORMAT = 2  # 2: anchors for per-program factors (format 1, one factor, still loads)
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


_ROWS = 4096  # programs whose distances to the anchors are held at once


def k_nearest(dist, k: int) -> np.ndarray:
    """(n, k) column indices of the k smallest of each row of `dist` (in no set order), ties
    at the k-th broken towards the lower index: the first k of a stable argsort, without
    sorting whole rows (742 anchors: 2.5 s of a calibrated model's 6.2 s per 50,000 programs
    went to that sort)."""
    n, m = dist.shape
    if k >= m:
        return np.broadcast_to(np.arange(m), (n, m))
    kth = np.partition(dist, k - 1, axis=1)[:, k - 1:k]
    below, tied = dist < kth, dist == kth
    need = k - below.sum(axis=1, keepdims=True)
    take = below | (tied & (np.cumsum(tied, axis=1) <= need))
    return np.nonzero(take)[1].reshape(n, k)


@dataclass(frozen=True)
class Anchors:
    """The measured programs a per-program factor is read from: their embeddings standardized
    by their own mean and spread (each dimension counts alike), and log(measured / predicted)."""
    embeddings: np.ndarray  # (n, d), standardized
    mean: np.ndarray  # (d,)
    std: np.ndarray  # (d,)
    log_ratios: np.ndarray  # (n,)

    @classmethod
    def of(cls, embeddings, log_ratios) -> "Anchors":
        z = np.asarray(embeddings, dtype=np.float64)
        mean, std = z.mean(axis=0), z.std(axis=0) + 1e-6
        return cls((z - mean) / std, mean, std, np.asarray(log_ratios, dtype=np.float64))

    def factors(self, embeddings, neighbors: int) -> np.ndarray:
        """exp(median log ratio of the `neighbors` anchors nearest each embedding)."""
        z = (np.asarray(embeddings, dtype=np.float64) - self.mean) / self.std
        k = min(neighbors, len(self.log_ratios))
        a = self.embeddings
        a_sq = (a * a).sum(axis=1)[None, :]
        out = np.empty(len(z))
        for start in range(0, len(z), _ROWS):  # bounded memory: (rows, anchors) at a time
            part = z[start:start + _ROWS]
            # squared distances as |z|^2 - 2 z.a + |a|^2: an (n, anchors) matrix, not the
            # (n, anchors, d) differences (3.9 s for 50,000 programs, against 0.4 s)
            dist = (part * part).sum(axis=1)[:, None] - 2.0 * (part @ a.T) + a_sq
            nearest = k_nearest(dist, k)
            out[start:start + len(part)] = np.exp(np.median(self.log_ratios[nearest], axis=1))
        return out

    def to_json(self) -> dict:
        return {"embeddings": self.embeddings.tolist(), "mean": self.mean.tolist(),
                "std": self.std.tolist(), "log_ratios": self.log_ratios.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> "Anchors":
        return cls(*(np.asarray(d[k], dtype=np.float64)
                     for k in ("embeddings", "mean", "std", "log_ratios")))


class ScaledRegressor(BaselineMixin):  # the mixin's get_params, _check_fitted, score
    _fitted_attr = "scale_"

    def __init__(self, model=None, neighbors: int = 0):
        self.model = model  # a fitted estimator, predicting for the device the scale is for
        self.neighbors = neighbors  # 0: one factor; k: each program's from its k nearest

    def fit(self, programs, y) -> "ScaledRegressor":
        """Learn the factor(s) from programs measured on the device (`model` is not refitted)."""
        if self.model is None:
            raise ValueError("a ScaledRegressor scales a fitted model: ScaledRegressor(model)")
        if self.neighbors < 0:
            raise ValueError(f"neighbors must be >= 0, not {self.neighbors}")
        if self.neighbors:
            predicted, embeddings = predict_and_embed(self.model, programs)
        else:
            predicted, embeddings = self.model.predict(programs), None
        self.scale_ = median_ratio(y, predicted)
        self.scale_interval_ = median_ratio_interval(y, predicted)  # 90%, bootstrap
        self.anchors_ = None if embeddings is None else Anchors.of(
            embeddings, np.log(np.asarray(y, dtype=np.float64) / predicted))
        self.model_, self.n_records_ = self.model, int(len(y))
        return self

    @classmethod
    def from_fitted(cls, model, scale: float, n_records: int = 0, interval=None,
                    neighbors: int = 0, anchors: Anchors | None = None) -> "ScaledRegressor":
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be finite and positive, not {scale}")
        if bool(neighbors) != (anchors is not None):
            raise ValueError("per-program factors need both neighbors and anchors")
        out = cls(model, neighbors)
        out.model_, out.scale_, out.n_records_ = model, float(scale), int(n_records)
        out.scale_interval_ = None if interval is None else tuple(float(x) for x in interval)
        out.anchors_ = anchors
        return out

    def factors(self, programs) -> np.ndarray:
        """(n,) the factor each program's base prediction is multiplied by."""
        self._check_fitted()
        if self.anchors_ is None or not len(programs):
            return np.full(len(programs), self.scale_)
        return self.anchors_.factors(embedder(self.model_).embed(programs), self.neighbors)

    def predict(self, programs) -> np.ndarray:
        self._check_fitted()
        if self.anchors_ is None or not len(programs):
            return np.asarray(self.model_.predict(programs), dtype=np.float64) * self.scale_
        # the embeddings from the prediction's own pass (a second pass cost a third of the
        # throughput: 14,845 programs/s from the store on Zen 3, against 21,318 unscaled;
        # docs/cross_device.md, "Its cost")
        predicted, embeddings = predict_and_embed(self.model_, programs)
        return predicted * self.anchors_.factors(embeddings, self.neighbors)

    def save(self, path) -> Path:
        from cdmpp.model.registry import save_composite

        self._check_fitted()
        return save_composite(path, {"model": self.model_}, _META,
                              {"kind": "scaled", "format": _FORMAT, "scale": self.scale_,
                               "scale_interval_90": self.scale_interval_,
                               "records": self.n_records_, "neighbors": self.neighbors,
                               "anchors": None if self.anchors_ is None
                               else self.anchors_.to_json()})

    @classmethod
    def load(cls, path) -> "ScaledRegressor":
        from cdmpp.model.registry import load_estimator, read_composite_meta

        path = Path(path)
        # format 1: one factor, as written before per-program factors
        meta = read_composite_meta(path, _META, "scaled", (1, _FORMAT), "ScaledRegressor")
        anchors = meta.get("anchors")
        return cls.from_fitted(load_estimator(path / "model"), meta["scale"], meta["records"],
                               meta.get("scale_interval_90"), meta.get("neighbors", 0),
                               None if anchors is None else Anchors.from_json(anchors))


def unscaled(model):
    """The model under any `ScaledRegressor` (what a calibration starts from again)."""
    while isinstance(model, ScaledRegressor):
        model = model.model_
    return model
