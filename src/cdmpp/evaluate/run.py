"""Train cdmpp and the baselines on one split and compare them on its test side."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from cdmpp.dataset.loader import split_data
from cdmpp.evaluate.metrics import summary
from cdmpp.model.config import ModelConfig, TrainConfig

MODELS = ("cdmpp", "xgb", "mlp")
KNOWN_MODELS = ("cdmpp", "cdmpp-seeds", "xgb", "xgb-tvm", "xgb-work", "mlp", "ensemble",
                "ensemble-seeds")
# "xgb-tvm": "xgb" on TVM's 164 per-store columns of each leaf alone (TenSet's XGBoost), without
# the loop view that every other model reads
# "ensemble": the geometric mean of these two (cdmpp.model.ensemble), reusing them when the
# same comparison already fitted them
ENSEMBLE_MEMBERS = ("cdmpp", "xgb-work")
# "cdmpp-seeds": the geometric mean of cdmpp trained with seeds S .. S+SEEDS-1 (what `cdmpp train
# --seeds 3` saves); seed S is the comparison's "cdmpp", reused when it is fitted anyway
SEEDS = 3
# "ensemble-seeds": the geometric mean of "cdmpp-seeds" and "xgb-work" (cdmpp weighted
# `cdmpp.model.ensemble.CDMPP_WEIGHT`, as the shipped `ensemble`), reusing both


@dataclass
class Comparison:
    split: object
    y_true: np.ndarray  # test labels
    noise_rel: np.ndarray  # test label noise per record
    clean_passes: np.ndarray | None = None  # test records' undisturbed passes (NaN: unknown)
    predictions: dict = field(default_factory=dict)  # model -> predicted latency (s)
    results: dict = field(default_factory=dict)  # model -> metrics.summary()
    train_seconds: dict = field(default_factory=dict)
    estimators: dict = field(default_factory=dict, repr=False)

    def noise_floor(self) -> dict:
        """The test labels' noise: median per-record noise, share within 10%, how many have
        it, and how many were timed with no pass on an undisturbed machine (`disturbed`: their
        labels are likely too high, whatever their pass-to-pass noise says)."""
        clean = self.clean_passes if self.clean_passes is not None else np.array([])
        disturbed = int(np.sum(clean == 0))
        noise = self.noise_rel[np.isfinite(self.noise_rel)]
        if not len(noise):
            return {"median_ape": float("nan"), "within_10": float("nan"), "n": 0,
                    "disturbed": disturbed}
        return {"median_ape": float(np.median(noise)), "within_10": float(np.mean(noise <= 0.10)),
                "n": int(len(noise)), "disturbed": disturbed}


def check_models(models) -> None:
    """A clear ValueError, before anything is trained, for a name `compare` does not know."""
    unknown = [m for m in models if m not in KNOWN_MODELS]
    if unknown or not models:
        raise ValueError(f"unknown model name(s) {unknown}: choose from {list(KNOWN_MODELS)}"
                         if unknown else f"no model to compare: choose from {list(KNOWN_MODELS)}")


def make_estimator(name: str, model_config: ModelConfig | None, train_config: TrainConfig | None,
                   progress: bool = False, checkpoint_dir=None):
    if name == "cdmpp":
        from cdmpp.model.estimator import CDMPPRegressor

        return CDMPPRegressor(model_config, train_config, checkpoint_dir=checkpoint_dir,
                              progress=progress)
    from cdmpp.baselines import make_baseline

    seed = train_config.seed if train_config else 0
    if name == "xgb-work":  # XGBoost predicting latency per work, like cdmpp's "per_work"
        return make_baseline("xgb", seed=seed, per_work=True)
    if name == "xgb-tvm":
        from cdmpp.features.matching import N_TVM_FEATURES

        return make_baseline("xgb", seed=seed, leaf_columns=N_TVM_FEATURES)
    return make_baseline(name, seed=seed)


def compare(store, split, models=MODELS, model_config=None, train_config=None,
            progress: bool = False, log=print) -> Comparison:
    """Fit every model on the split's training side; predict its test side."""
    check_models(models)
    train, test = split_data(store, split)
    for side, data in (("training", train), ("test", test)):
        if not len(data.latency_s):
            raise ValueError(f"split {split.name} leaves no {side} samples "
                             f"({len(train.latency_s)} train, {len(test.latency_s)} test): the "
                             "data holds too few tasks or networks for it")
    out = Comparison(split, test.latency_s, test.noise_rel, test.clean_passes)

    base = train_config or TrainConfig()

    def fitted(name: str, seed_offset: int = 0) -> str:
        """The key of `name` trained with seed + seed_offset in out.estimators (fitted once)."""
        key = name if not seed_offset else f"{name}@seed+{seed_offset}"
        if key not in out.estimators:
            log(f"training {key} on {len(train.latency_s)} programs ...")
            start = time.perf_counter()
            config = replace(base, seed=base.seed + seed_offset)
            out.estimators[key] = make_estimator(name, model_config, config,
                                                 progress).fit(train.programs, train.latency_s)
            out.train_seconds[key] = time.perf_counter() - start
        return key

    # each geometric-mean ensemble: the keys of its members, fitted when first asked for
    members = {"ensemble": lambda: [fitted(m) for m in ENSEMBLE_MEMBERS],
               "cdmpp-seeds": lambda: [fitted("cdmpp", i) for i in range(SEEDS)],
               "ensemble-seeds": lambda: [combined("cdmpp-seeds"), fitted("xgb-work")]}

    def combined(name: str) -> str:
        """The key of ensemble `name` in out.estimators, built once from its members."""
        from cdmpp.model.ensemble import SHIPPED_WEIGHTS, EnsembleRegressor

        if name not in out.estimators:
            keys = members[name]()
            weights = SHIPPED_WEIGHTS if name == "ensemble-seeds" else None
            out.estimators[name] = EnsembleRegressor.from_fitted([out.estimators[k]
                                                                  for k in keys], weights)
            out.train_seconds[name] = sum(out.train_seconds[k] for k in keys)
        return name

    for name in models:
        est = out.estimators[combined(name) if name in members else fitted(name)]
        out.predictions[name] = est.predict(test.programs)
        out.results[name] = summary(test.latency_s, out.predictions[name], test.programs.task)
    return out
