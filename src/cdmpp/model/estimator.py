"""`CDMPPRegressor`: the CDMPP cost model with sklearn conventions.

    model = CDMPPRegressor(train_config=TrainConfig(epochs=40)).fit(programs, latency_s)
    latency_s = model.predict(other_programs)
    model.save("my-model"); CDMPPRegressor.load("my-model").predict(other_programs)

`fit` carves its validation set from the training data it is given, fits the normalizers on the
rest of that training data only, and keeps the weights of the best validation epoch.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from cdmpp.baselines import check_latency, check_weight
from cdmpp.dataset.normalize import Normalizer
from cdmpp.dataset.programs import ProgramSet, check_programs
from cdmpp.model.config import ModelConfig, TrainConfig
from cdmpp.model.params import ParamsMixin

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.pt"
NORMALIZER_FILE = "normalizer.npz"


def _val_metrics(y_true, y_pred, weight=None) -> dict:
    """Validation figures; the first is the one model selection minimizes. With `weight`,
    weighted by the samples' training weights (what the weights say matters, counts)."""
    from cdmpp.evaluate.metrics import mape, rmse_log

    y_pred = np.clip(np.nan_to_num(y_pred, nan=1e9, posinf=1e9), 1e-12, None)
    if weight is not None and not np.sum(weight) > 0:  # no weighted sample in validation:
        weight = None  # judge all alike
    return {"rmse_log": rmse_log(y_true, y_pred, weight), "mape": mape(y_true, y_pred, weight)}


def _groups(programs: ProgramSet, device) -> np.ndarray | None:
    """An int per program, equal for programs of one task on one device (for the ranking
    term, TrainConfig.rank_weight), or None when the programs carry no task names."""
    if programs.task is None:
        return None
    rows = programs.task if device is None else zip(programs.task, map(bytes, device))
    ids: dict = {}
    return np.array([ids.setdefault(key, len(ids)) for key in rows], dtype=np.int64)


def fine_tune_config(base: TrainConfig, **changes) -> TrainConfig:
    """Settings for fine-tuning on a few records: small batches (a batch of 256 would make one
    step per epoch), no warm-up, the base learning rate, early stopping, no refit unless asked
    (whatever the base's own training did)."""
    return replace(base, **{"epochs": 100, "batch_size": 16, "warmup_epochs": 0,
                            "patience": 20, "refit": False, **changes})


class CDMPPRegressor(ParamsMixin):
    def __init__(self, model_config: ModelConfig | None = None,
                 train_config: TrainConfig | None = None, checkpoint_dir: str | None = None,
                 progress: bool = False):
        self.model_config = model_config
        self.train_config = train_config
        self.checkpoint_dir = checkpoint_dir
        self.progress = progress

    # -- helpers -------------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "net_"):
            raise RuntimeError("this CDMPPRegressor is not fitted yet: call fit() or load() first")

    def _device_matrix(self, programs: ProgramSet) -> np.ndarray | None:
        own = getattr(self, "device_vector_", None)  # the device a model was calibrated for
        if programs.device is None and own is not None:
            d = np.tile(own, (len(programs), 1))
        elif (programs.device is not None) != bool(self.model_config_.device_dim):
            need = "with" if self.model_config_.device_dim else "without"
            raise ValueError(f"this model was fitted on programs {need} device vectors")
        elif programs.device is None:
            return None
        else:
            d = np.asarray(programs.device, dtype=np.float64)
        span = np.where(self.device_max_ > self.device_min_, self.device_max_ - self.device_min_, 1)
        return ((d - self.device_min_) / span).astype(np.float32)

    def _data(self, programs: ProgramSet, latency_s=None, weight=None, normalize: bool = True):
        """The network's inputs; `normalize=False`: leaf rows and device vectors left raw
        (`predict_together` normalizes them batch by batch, for each model its own way)."""
        from cdmpp.train.loop import TrainData

        if programs.n_features != self.model_config_.n_features:
            raise ValueError(f"programs have {programs.n_features} leaf features, the model "
                             f"takes {self.model_config_.n_features}")
        # all programs' leaves in one array: per-program numpy calls cost more than the work
        counts = [len(f) for f in programs.leaf_features]
        feats, positions = [], []
        if counts:
            bounds = np.concatenate([[0], np.cumsum(counts)])
            rows = self._leaf_inputs(np.concatenate(programs.leaf_features))
            rows = (self.normalizer_.transform_features(rows) if normalize
                    else np.asarray(rows, dtype=np.float32))
            pos = np.concatenate(programs.leaf_pos)
            feats = [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            positions = [pos[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            if self.model_config_.relative_positions:
                positions = [p - p.min() if len(p) else p for p in positions]
        target = (None if latency_s is None else
                  self.normalizer_.transform_target(np.asarray(latency_s) / self._scale(programs)))
        device = self._device_matrix(programs) if normalize else None
        groups = None if latency_s is None else _groups(programs, device)  # training only
        return TrainData(feats, positions, target, device, weight, groups)

    def _leaf_inputs(self, leaf_features: np.ndarray) -> np.ndarray:
        """Leaf rows (of one program or many) as the network reads them
        (ModelConfig.stride_alignment)."""
        if self.model_config_.stride_alignment:
            from cdmpp.features.derived import with_derived

            return with_derived(leaf_features)
        return leaf_features

    def _scale(self, programs: ProgramSet):
        """What the head's prediction is multiplied by to give latency (ModelConfig.target)."""
        target = self.model_config_.target
        if target == "per_work":
            return programs.work()
        if target != "latency":
            raise ValueError(f"unknown ModelConfig.target {target!r}: 'latency' or 'per_work'")
        return 1.0

    # -- estimator API -------------------------------------------------------------------------
    @staticmethod
    def _carve(programs: ProgramSet, y, eval_set, tc: TrainConfig, by_task: bool = False,
               weight=None):
        """(fit set, fit labels, validation set, validation labels, fit weights, validation
        weights); weights are None when `weight` is. `by_task`: validation holds whole tasks
        (what fine-tuning on a few tasks must generalize to: other tasks)."""
        from cdmpp.dataset.splits import carve_rows

        y = check_latency(y, len(programs))
        weight = check_weight(weight, len(programs))
        if eval_set is not None:
            return (programs, y, eval_set[0], check_latency(eval_set[1], len(eval_set[0])),
                    weight, None)
        if len(programs) < 2:
            raise ValueError(f"fit needs at least 2 programs (some are set aside to choose the "
                             f"epoch), got {len(programs)}; or pass eval_set")
        fit_rows, val_rows = carve_rows(len(programs), tc.val_fraction, tc.seed,
                                        programs.task if by_task else None)
        return (programs.subset(fit_rows), y[fit_rows], programs.subset(val_rows), y[val_rows],
                *((None, None) if weight is None else (weight[fit_rows], weight[val_rows])))

    def _loss(self, tc: TrainConfig):
        from cdmpp.model.losses import make_loss

        n = self.normalizer_
        return make_loss(tc.loss, tc.mape_weight, (n.boxcox_lambda_, n.target_mean_,
                                                   n.target_std_))

    def _train(self, fit_set, y_fit, val_set, y_val, tc: TrainConfig, unlabeled,
               keep_initial: bool = False, w_fit=None, w_val=None) -> None:
        from cdmpp.train.loop import train_network

        val_scale = self._scale(val_set)
        self.history_ = train_network(
            self.net_, self._data(fit_set, y_fit, w_fit), self._data(val_set, y_val), tc,
            self._loss(tc),
            lambda z: _val_metrics(y_val, self.normalizer_.inverse_target(z) * val_scale, w_val),
            checkpoint_dir=self.checkpoint_dir, progress=self.progress,
            unlabeled=None if unlabeled is None else self._data(unlabeled),
            keep_initial=keep_initial)
        self.train_config_ = tc

    def _fit_scalers(self, programs: ProgramSet, y) -> None:
        """Feature normalizer, target transform and device scaling, from `programs` only."""
        self.normalizer_ = Normalizer().fit(
            self._leaf_inputs(np.concatenate(programs.leaf_features)), y / self._scale(programs))
        if self.model_config_.device_dim:
            dev = np.asarray(programs.device, dtype=np.float64)
            self.device_min_, self.device_max_ = dev.min(0), dev.max(0)

    def _new_network(self, seed: int):
        """A freshly initialized network (seeded), told the fitted normalizer's affine (the
        work-weighted readout undoes it)."""
        import torch

        from cdmpp.model.transformer import CDMPPNet

        torch.manual_seed(seed)
        net = CDMPPNet(self.model_config_)
        net.set_work_affine(*self.normalizer_.feature_affine())
        return net

    def _refit(self, programs: ProgramSet, y, weight, tc: TrainConfig, unlabeled) -> None:
        """Train `net_` as it is (a new network for `fit`, the starting weights for
        `fine_tune`) on all of `programs` for the epoch count the validation set chose."""
        from cdmpp.train.loop import train_network

        self.refit_epochs_ = self.history_.best_epoch + 1
        ckpt = None if self.checkpoint_dir is None else Path(self.checkpoint_dir) / "refit"
        refit = train_network(
            self.net_, self._data(programs, y, weight), None, tc, self._loss(tc), None,
            checkpoint_dir=ckpt, progress=self.progress,
            unlabeled=None if unlabeled is None else self._data(unlabeled),
            n_epochs=self.refit_epochs_)
        self.history_.refit_train_loss = refit.train_loss
        self.net_.eval()

    def fit(self, programs: ProgramSet, y, eval_set=None,
            unlabeled: ProgramSet | None = None, sample_weight=None) -> "CDMPPRegressor":
        """Train on `programs` with latencies `y` (seconds). `eval_set=(programs, y)` replaces
        the validation set carved from the training data (it must not be test data).
        `unlabeled`: programs of the target device, for domain adaptation (`TrainConfig.adapt`).
        `sample_weight`: (n,) non-negative weight of each program in the training loss and in
        the validation metric that selects the epoch (the carved validation keeps its weights).
        """
        import torch

        check_programs(programs)
        tc = self.train_config or TrainConfig()
        if tc.threads:
            torch.set_num_threads(tc.threads)
        fit_set, y_fit, val_set, y_val, w_fit, w_val = self._carve(programs, y, eval_set, tc,
                                                                   weight=sample_weight)

        device_dim = 0 if programs.device is None else int(np.asarray(programs.device).shape[1])
        self.model_config_ = replace(self.model_config or ModelConfig(),
                                     n_features=programs.n_features, device_dim=device_dim)
        self._fit_scalers(fit_set, y_fit)
        self.net_ = self._new_network(tc.seed)
        self._train(fit_set, y_fit, val_set, y_val, tc, unlabeled, w_fit=w_fit, w_val=w_val)
        self.refit_epochs_ = 0
        if tc.refit and eval_set is None:
            y = check_latency(y, len(programs))
            self._fit_scalers(programs, y)
            self.net_ = self._new_network(tc.seed)
            self._refit(programs, y, check_weight(sample_weight, len(programs)), tc, unlabeled)
        return self

    def fine_tune(self, programs: ProgramSet, y, train_config: TrainConfig | None = None,
                  eval_set=None, unlabeled: ProgramSet | None = None,
                  layers: str = "head", sample_weight=None) -> "CDMPPRegressor":
        """Continue training a fitted model on new data (e.g. a few tasks measured on a new
        device), starting from its weights and keeping its normalizers and device scaling, so
        what it learned elsewhere is the starting point. Early stopping on a validation set
        carved from `programs` by task (or `eval_set`) keeps the epoch that generalizes best
        to tasks it was not fine-tuned on. Default: `fine_tune_config(self.train_config_)`.

        `layers`: "head" trains only the device encoder and the regression head (the program
        encoder keeps what many tasks taught it; a few tasks cannot retrain it without
        forgetting), "all" trains everything. `sample_weight`: as in `fit`. With
        `train_config.refit` (and no `eval_set`), once the validation chose the epoch count the
        fine-tuning starts again from the same weights on all of `programs` for that many epochs,
        so the tasks carved out for validation teach the model too."""
        import torch

        self._check_fitted()
        if layers not in ("head", "all"):
            raise ValueError(f"layers must be 'head' or 'all', not {layers!r}")
        trainable = ("head.", "device_encoder.") if layers == "head" else ("",)
        for name, param in self.net_.named_parameters():
            param.requires_grad_(name.startswith(trainable))
        tc = train_config or fine_tune_config(self.train_config_)
        if tc.threads:
            torch.set_num_threads(tc.threads)
        fit_set, y_fit, val_set, y_val, w_fit, w_val = self._carve(
            programs, y, eval_set, tc, by_task=True, weight=sample_weight)
        refit = tc.refit and eval_set is None
        initial = ({k: v.detach().clone() for k, v in self.net_.state_dict().items()}
                   if refit else None)
        self.net_.train()
        try:
            self._train(fit_set, y_fit, val_set, y_val, tc, unlabeled, keep_initial=True,
                        w_fit=w_fit, w_val=w_val)
            self.refit_epochs_ = 0
            if refit and self.history_.best_epoch >= 0:  # -1: the starting weights won
                self.net_.load_state_dict(initial)
                self._refit(programs, check_latency(y, len(programs)),
                            check_weight(sample_weight, len(programs)), tc, unlabeled)
        finally:
            for param in self.net_.parameters():
                param.requires_grad_(True)
        self.net_.eval()
        return self

    def predict(self, programs: ProgramSet) -> np.ndarray:
        """Latency in seconds for every program."""
        return predict_together([self], programs)[0]

    def input_key(self) -> tuple:
        """Equal for fitted models that read the same raw leaf rows and positions (e.g. seeds
        of one configuration; their normalizers may differ): `predict_together` prepares them
        once."""
        self._check_fitted()
        c = self.model_config_
        return c.n_features, c.stride_alignment, c.relative_positions

    def score(self, programs: ProgramSet, y) -> float:
        """-MAPE (higher is better, sklearn's convention)."""
        from cdmpp.evaluate.metrics import mape

        return -mape(y, self.predict(programs))

    def embed(self, programs: ProgramSet) -> np.ndarray:
        """Program embeddings (the pooled transformer output), e.g. to cluster tasks."""
        import torch

        from cdmpp.train.batches import collate, in_order

        self._check_fitted()
        data = self._data(programs)
        self.net_.eval()
        out = None
        with torch.no_grad():
            for rows in in_order(data.n_leaves, 1024):
                z = self.net_.embed_programs(*collate(data.features, data.positions, rows,
                                                      data.device)).numpy()
                out = np.zeros((len(programs), z.shape[1])) if out is None else out
                out[rows] = z
        return out

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        import torch

        from cdmpp.features import FEATURE_VERSION

        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = {"model_config": self.model_config_.to_json(),
                  "train_config": self.train_config_.to_json(),
                  "feature_version": FEATURE_VERSION,
                  "history": {"val_metric": self.history_.val_metric,
                              "train_loss": self.history_.train_loss,
                              "best_epoch": self.history_.best_epoch,
                              "refit_epochs": getattr(self, "refit_epochs_", 0),
                              "refit_train_loss": self.history_.refit_train_loss}}
        if self.model_config_.device_dim:
            config["device_min"] = self.device_min_.tolist()
            config["device_max"] = self.device_max_.tolist()
            if getattr(self, "device_vector_", None) is not None:
                config["device_vector"] = np.asarray(self.device_vector_).tolist()
        tmp = path / (WEIGHTS_FILE + ".tmp")
        torch.save(self.net_.state_dict(), tmp)
        os.replace(tmp, path / WEIGHTS_FILE)
        self.normalizer_.save(path / NORMALIZER_FILE)
        (path / CONFIG_FILE).write_text(json.dumps(config, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CDMPPRegressor":
        import torch

        from cdmpp.features import FEATURE_VERSION
        from cdmpp.model.transformer import CDMPPNet
        from cdmpp.train.loop import History

        path = Path(path)
        for name in (CONFIG_FILE, WEIGHTS_FILE, NORMALIZER_FILE):
            if not (path / name).exists():
                from cdmpp.model.registry import written_by_save_estimator

                raise FileNotFoundError(f"{path} is not a saved CDMPPRegressor: {name} is "
                                        f"missing{written_by_save_estimator(path)}")
        config = json.loads((path / CONFIG_FILE).read_text())
        if config.get("feature_version") != FEATURE_VERSION:
            raise ValueError(f"{path} was trained on features version "
                             f"{config.get('feature_version')}, this cdmpp extracts version "
                             f"{FEATURE_VERSION}: retrain it")
        model = cls(ModelConfig.from_json(config["model_config"]),
                    TrainConfig.from_json(config["train_config"]))
        model.model_config_, model.train_config_ = model.model_config, model.train_config
        model.net_ = CDMPPNet(model.model_config_)
        model.net_.load_state_dict(torch.load(path / WEIGHTS_FILE, weights_only=True))
        model.net_.eval()
        model.normalizer_ = Normalizer.load(path / NORMALIZER_FILE)
        h = config.get("history", {})
        model.history_ = History(train_loss=h.get("train_loss", []),
                                 val_metric=h.get("val_metric", []),
                                 best_epoch=h.get("best_epoch", -1),
                                 refit_train_loss=h.get("refit_train_loss", []))
        model.refit_epochs_ = h.get("refit_epochs", 0)
        if model.model_config_.device_dim:
            model.device_min_ = np.asarray(config["device_min"])
            model.device_max_ = np.asarray(config["device_max"])
            if "device_vector" in config:
                model.device_vector_ = np.asarray(config["device_vector"])
        return model


def predict_together(models, programs: ProgramSet, embed: int | None = None):
    """Each fitted CDMPPRegressor's latencies (seconds) for `programs`. Models with the same
    `input_key` share one preparation of the raw inputs and one padding of each batch, which
    each normalizes its own way: three seeds predict in well under three times one model's
    time, and each exactly as it would alone. `embed`: the index of a model whose embeddings
    (`CDMPPRegressor.embed`) are wanted too, from the same pass through its network; then
    returns (latencies, embeddings)."""
    from cdmpp.train.loop import predict_networks

    check_programs(programs)
    out: list = [None] * len(models)
    embeddings = None
    groups: dict = {}
    for i, model in enumerate(models):
        groups.setdefault(model.input_key(), []).append(i)
    for members in groups.values():
        first = models[members[0]]
        if not len(programs):
            for i in members:
                out[i] = np.zeros(0)
            continue
        inputs = [(*models[i].normalizer_.feature_affine(), models[i]._device_matrix(programs))
                  for i in members]
        nets = [models[i].net_ for i in members]
        data = first._data(programs, normalize=False)
        if embed in members:
            z, embeddings = predict_networks(nets, data, inputs=inputs,
                                             embed_net=members.index(embed))
        else:
            z = predict_networks(nets, data, inputs=inputs)
        scales: dict = {}  # programs.work() of per-work models, once
        for row, i in enumerate(members):
            target = models[i].model_config_.target
            if target not in scales:
                scales[target] = models[i]._scale(programs)
            out[i] = models[i].normalizer_.inverse_target(z[row]) * scales[target]
    if embed is None:
        return out
    return out, np.zeros((0, 0)) if embeddings is None else embeddings  # None: no programs
