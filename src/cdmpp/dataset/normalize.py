"""Feature and target normalization, fitted on the training side of a split only.

- leaf features: min-max to [0, 1] per column (columns constant on the training side map to 0);
- latency: Box-Cox with the lambda that fits the training latencies (the log, lambda 0, when
  that lambda runs past LAMBDA_BOUND), then standardized.
Test data never enter `fit`; the fitted values are saved beside the split they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Labels that span a few percent (one program timed many times) leave Box-Cox's lambda
# undetermined: the fit runs off (-17 on 32 timings of one add+relu) and every prediction
# overflows; the log (lambda 0) is then used. Fits on real data give about -0.1 (the shipped
# models).
LAMBDA_BOUND = 2.0


def boxcox(y: np.ndarray, lam: float) -> np.ndarray:
    """scipy.special.boxcox in numpy: predicting needs no scipy import (~0.3 s)."""
    if lam == 0:
        return np.log(y)
    return np.expm1(lam * np.log(y)) / lam


def inv_boxcox(t: np.ndarray, lam: float) -> np.ndarray:
    """scipy.special.inv_boxcox in numpy (NaN where lam * t < -1, as scipy)."""
    if lam == 0:
        return np.exp(t)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.exp(np.log1p(lam * t) / lam)


@dataclass
class Normalizer:
    """sklearn-style: `fit` learns the attributes ending in `_` and returns self."""

    def fit(self, leaf_features: np.ndarray, latency_s: np.ndarray) -> "Normalizer":
        """leaf_features: (n_leaves, F) of the training programs; latency_s: training labels."""
        from scipy import stats

        x = np.asarray(leaf_features, dtype=np.float64)
        y = np.asarray(latency_s, dtype=np.float64)
        if x.ndim != 2 or not len(x):
            raise ValueError("fit needs a non-empty (n_leaves, n_features) array")
        if not len(y) or np.any(~np.isfinite(y)) or np.any(y <= 0):
            raise ValueError("fit needs positive, finite training latencies")
        self.feature_min_ = x.min(axis=0)
        self.feature_max_ = x.max(axis=0)
        _, lam = stats.boxcox(y)
        self.boxcox_lambda_ = float(lam) if abs(lam) <= LAMBDA_BOUND else 0.0
        transformed = boxcox(y, self.boxcox_lambda_)
        self.target_mean_ = float(transformed.mean())
        self.target_std_ = float(transformed.std()) or 1.0
        return self

    def _check(self) -> None:
        if not hasattr(self, "boxcox_lambda_"):
            raise RuntimeError("this Normalizer is not fitted yet: call fit() first")

    def feature_affine(self) -> tuple[np.ndarray, np.ndarray]:
        """(offset, scale), float32: a normalized feature is (x - offset) * scale."""
        self._check()
        span = self.feature_max_ - self.feature_min_
        scale = (1.0 / np.where(span > 0, span, 1.0)).astype(np.float32)
        return self.feature_min_.astype(np.float32), scale

    def transform_features(self, x: np.ndarray) -> np.ndarray:
        # float32 throughout: the network reads float32, and predicting from the store is bound
        # by this pass over every leaf
        offset, scale = self.feature_affine()
        out = np.asarray(x, dtype=np.float32) - offset
        out *= scale
        return out

    def transform_target(self, latency_s: np.ndarray) -> np.ndarray:
        self._check()
        z = boxcox(np.asarray(latency_s, dtype=np.float64), self.boxcox_lambda_)
        return (z - self.target_mean_) / self.target_std_

    def inverse_target(self, z: np.ndarray) -> np.ndarray:
        self._check()
        t = np.asarray(z, dtype=np.float64) * self.target_std_ + self.target_mean_
        return inv_boxcox(t, self.boxcox_lambda_)

    def to_arrays(self) -> dict:
        self._check()
        return {"feature_min": self.feature_min_, "feature_max": self.feature_max_,
                "target": np.array([self.boxcox_lambda_, self.target_mean_, self.target_std_])}

    @classmethod
    def from_arrays(cls, d) -> "Normalizer":
        n = cls()
        n.feature_min_, n.feature_max_ = np.asarray(d["feature_min"]), np.asarray(d["feature_max"])
        n.boxcox_lambda_, n.target_mean_, n.target_std_ = (float(v) for v in d["target"])
        return n

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **self.to_arrays())
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "Normalizer":
        with np.load(path) as d:
            return cls.from_arrays(d)


def fit_on_split(store, split) -> Normalizer:
    """Fit on the training side of `split` (samples and their programs' leaves) only."""
    samples = store.samples()
    train_rows, _ = split.rows(samples)
    keys = samples.column("key").to_pylist()
    latency = np.asarray(samples.column("latency_s").to_numpy())[train_rows]
    train_keys = sorted({keys[i] for i in train_rows})
    leaves = np.concatenate([store.program(k)[0] for k in train_keys])
    normalizer = Normalizer().fit(leaves, latency)
    normalizer.save(Path(store.path) / "splits" / f"{split.name}.norm.npz")
    return normalizer
