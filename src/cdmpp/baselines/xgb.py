"""XGBoost on TenSet-style program vectors, fitted on log latency (or log latency per work).

Saved as a directory: `model.json.gz` (XGBoost's own JSON model format, gzipped: a quarter of the
size; `model.json` of format 1 still loads) and `params.json`
(constructor arguments + what `fit` learned about the inputs).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from cdmpp.baselines import BaselineMixin, check_latency, check_weight

_FORMAT = 2  # bump when the saved layout changes; 2: the model gzipped
_MODEL = "model.json.gz"


class XGBBaseline(BaselineMixin):
    """Gradient-boosted trees on `program_vectors`; the target is ln(latency_s).

    Defaults are sized for 10k-100k programs on a 2-core CPU: histogram trees (fast, and
    trees need no feature scaling), 400 rounds of depth 6 at a 0.1 learning rate: ~35 s for
    20k programs of 164 features on one busy core; depth 8 doubled the time and generalized
    worse on synthetic data. Row and column subsampling (0.8) regularize and cut the time
    per round. `make_baseline("xgb")` on latency starts from `cdmpp.baselines.XGB_SETTINGS`
    instead, chosen on validation data. `nthread=None` lets XGBoost use every core. With
    `early_stopping_rounds`, `fit` needs an `eval_set` and prediction uses the best round.
    Fitted on programs with device vectors, `device_vector_` (set after `fit`, saved) makes
    programs without them mean that device, as `CDMPPRegressor.device_vector_` does.
    """

    _fitted_attr = "booster_"
    _dtype = np.float32  # what XGBoost reads: no float64 copy first

    def __init__(self, n_estimators: int = 400, max_depth: int = 6, learning_rate: float = 0.1,
                 min_child_weight: float = 1.0, subsample: float = 0.8,
                 colsample_bytree: float = 0.8, nthread: int | None = None, seed: int = 0,
                 early_stopping_rounds: int | None = None, per_work: bool = False,
                 heaviest_leaf: bool = False, heaviest_per_work: bool = False,
                 leaf_columns: int | None = None):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.nthread = nthread
        self.seed = seed
        self.early_stopping_rounds = early_stopping_rounds
        self.per_work = per_work  # fit ln(latency / work) (`ProgramSet.work`) instead
        # also see the features of the store with the most work (`ProgramSet.heaviest`)
        self.heaviest_leaf = heaviest_leaf
        # and those features relative to the program's work (needs heaviest_leaf)
        self.heaviest_per_work = heaviest_per_work
        # read only each leaf's first columns (N_TVM_FEATURES: TenSet's features); None: all
        self.leaf_columns = leaf_columns

    def _booster_params(self) -> dict:
        params = {"objective": "reg:squarederror", "tree_method": "hist",
                  "max_depth": self.max_depth, "eta": self.learning_rate,
                  "min_child_weight": self.min_child_weight, "subsample": self.subsample,
                  "colsample_bytree": self.colsample_bytree, "seed": self.seed,
                  "eval_metric": "rmse"}
        if self.nthread is not None:
            params["nthread"] = self.nthread
        return params

    def fit(self, programs, y, eval_set=None, sample_weight=None) -> "XGBBaseline":
        """programs: ProgramSet; y: latency in seconds; eval_set: (ProgramSet, y) or None;
        sample_weight: (n,) non-negative weight of each program in the loss, or None."""
        import xgboost as xgb

        y = check_latency(y, len(programs))
        weight = check_weight(sample_weight, len(programs))
        if self.early_stopping_rounds and eval_set is None:
            raise ValueError("early_stopping_rounds needs an eval_set=(programs, y)")
        x = self._remember_inputs(programs)
        train = xgb.DMatrix(x, label=self._log_target(programs, y), weight=weight,
                            nthread=self.nthread or -1)
        evals = []
        if eval_set is not None:
            ex = self._inputs(eval_set[0])
            ey = check_latency(eval_set[1], len(eval_set[0]))
            evals = [(xgb.DMatrix(ex, label=self._log_target(eval_set[0], ey),
                                  nthread=self.nthread or -1), "eval")]
        self.evals_result_ = {}
        self.booster_ = xgb.train(self._booster_params(), train,
                                  num_boost_round=self.n_estimators, evals=evals,
                                  early_stopping_rounds=self.early_stopping_rounds or None,
                                  evals_result=self.evals_result_, verbose_eval=False)
        # Without early stopping every round is kept.
        self.best_iteration_ = int(self.booster_.best_iteration
                                   if self.early_stopping_rounds else self.n_estimators - 1)
        return self

    def _log_scale(self, programs):
        return np.log(programs.work()) if self.per_work else 0.0

    def _log_target(self, programs, y) -> np.ndarray:
        return np.log(y) - self._log_scale(programs)

    def predict(self, programs) -> np.ndarray:
        """Latency in seconds, float64 (n,)."""
        self._check_fitted()
        if not len(programs):  # as the other estimators: no program, no latency
            return np.zeros(0)
        x = self._inputs(programs)
        # in place: the same trees on the same float32 values as through a DMatrix, without
        # building one (a copy of the whole matrix)
        log_s = self.booster_.inplace_predict(x, iteration_range=(0, self.best_iteration_ + 1))
        return np.exp(log_s.astype(np.float64) + self._log_scale(programs))

    def save(self, path) -> Path:
        """Write the directory `path` (model.json.gz + params.json); returns it."""
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        # mtime=0: the same model gives the same bytes
        (path / _MODEL).write_bytes(gzip.compress(bytes(self.booster_.save_raw("json")),
                                                  mtime=0))
        meta = {"kind": "xgb", "format": _FORMAT, "params": self.get_params(),
                "n_features_in_": self.n_features_in_, "has_device_": self.has_device_,
                "best_iteration_": self.best_iteration_}
        vector = getattr(self, "device_vector_", None)
        if vector is not None:  # fitted for one device (`BaselineMixin._inputs`)
            meta["device_vector_"] = np.asarray(vector, dtype=np.float64).tolist()
        (path / "params.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, path) -> "XGBBaseline":
        """A fitted model from a directory written by `save`."""
        import xgboost as xgb

        path = Path(path)
        if not (path / "params.json").is_file():
            from cdmpp.model.registry import written_by_save_estimator

            raise FileNotFoundError(f"{path} is not a saved XGBBaseline: params.json is "
                                    f"missing{written_by_save_estimator(path)}")
        meta = json.loads((path / "params.json").read_text())
        if meta.get("kind") != "xgb" or meta.get("format") not in (1, _FORMAT):
            raise ValueError(f"{path} is not an XGBBaseline directory of format 1 or {_FORMAT}")
        model = cls(**meta["params"])
        model_file = (str(path / "model.json") if meta["format"] == 1
                      else bytearray(gzip.decompress((path / _MODEL).read_bytes())))
        model.booster_ = xgb.Booster(params={"nthread": model.nthread} if model.nthread else None,
                                     model_file=model_file)
        model.n_features_in_ = int(meta["n_features_in_"])
        model.has_device_ = bool(meta["has_device_"])
        model.best_iteration_ = int(meta["best_iteration_"])
        if meta.get("device_vector_") is not None:
            model.device_vector_ = np.asarray(meta["device_vector_"], dtype=np.float64)
        return model

