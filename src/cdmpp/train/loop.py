"""The training loop: AdamW, warm-up + cosine LR, gradient clipping, early stopping on a
validation set carved from the training side, resumable checkpoints.

Inputs are already normalized (features) and transformed (targets); `val_metrics` maps the
network's predictions on the validation set to named numbers; the first one is minimized for
model selection (RMSE of log latency: MAPE as a selection criterion rewards models that
under-predict everything, since an under-prediction costs at most 100%). Model selection never
sees test data.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from cdmpp.model.config import TrainConfig
from cdmpp.model.losses import pairwise_rank_loss
from cdmpp.train.batches import collate, in_order, length_bucketed

CHECKPOINT = "checkpoint.pt"


@dataclass
class TrainData:
    features: list  # per program (n_i, F) float32, normalized
    positions: list  # per program (n_i,) int
    target: np.ndarray | None  # (n,) transformed target
    device: np.ndarray | None = None  # (n, D) normalized device vectors
    weight: np.ndarray | None = None  # (n,) loss weight of each program (None: all 1)
    group: np.ndarray | None = None  # (n,) int: programs of one task on one device share it

    @property
    def n_leaves(self) -> np.ndarray:
        return np.array([len(f) for f in self.features])


@dataclass
class History:
    train_loss: list = field(default_factory=list)
    val_metric: list = field(default_factory=list)  # the selection metric per epoch
    val_named: list = field(default_factory=list)  # every validation metric per epoch
    lr: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    best_epoch: int = -1
    refit_train_loss: list = field(default_factory=list)  # per epoch of a refit (TrainConfig.refit)


def predict_network(net, data: TrainData, batch_size: int = 1024) -> np.ndarray:
    """Network outputs (transformed target) for every program, in order."""
    return predict_networks([net], data, batch_size)[0]


def predict_networks(nets, data: TrainData, batch_size: int = 1024, inputs=None,
                     embed_net: int | None = None):
    """(len(nets), n) outputs of several networks on the same programs; each batch is padded
    once for all of them. `inputs`: None when `data` holds normalized features and device
    vectors; else, per network, (offset, scale, device matrix or None): `data` holds the raw
    leaf rows, normalized in each batch as `Normalizer.transform_features` would.
    `embed_net`: the index of a network whose embeddings (what its head reads) are wanted
    too, from the same pass; then returns (outputs, (n, d) embeddings)."""
    for net in nets:
        net.eval()
    affine = None if inputs is None else [(torch.from_numpy(lo), torch.from_numpy(scale))
                                          for lo, scale, _ in inputs]
    out = np.empty((len(nets), len(data.features)), dtype=np.float64)
    embeddings = None
    with torch.inference_mode():
        for rows in in_order(data.n_leaves, batch_size):
            x, p, m, d = collate(data.features, data.positions, rows, data.device)
            for i, net in enumerate(nets):
                if inputs is not None:
                    lo, scale = affine[i]
                    device = inputs[i][2]
                    xi = torch.where(m.unsqueeze(-1), (x - lo) * scale, 0.0)  # padding stays 0
                    di = None if device is None else torch.from_numpy(device[rows])
                else:
                    xi, di = x, d
                if i != embed_net:
                    out[i, rows] = net(xi, p, m, di)[0].numpy()
                    continue
                z = net.embed_programs(xi, p, m, di)  # forward's own steps, z kept
                out[i, rows] = net.readout(z).numpy()
                if embeddings is None:
                    embeddings = np.zeros((len(data.features), z.shape[1]))
                embeddings[rows] = z.numpy()
    return out if embed_net is None else (out, embeddings)


def _lr_factor(epoch_float: float, config: TrainConfig) -> float:
    if epoch_float < config.warmup_epochs:
        return (epoch_float + 1e-3) / config.warmup_epochs
    span = max(config.epochs - config.warmup_epochs, 1)
    progress = min((epoch_float - config.warmup_epochs) / span, 1.0)
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _random_rows(data: TrainData, size: int, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(len(data.features), size=min(size, len(data.features)), replace=False)


def _embedding(net, data: TrainData, rows) -> torch.Tensor:
    """Program embeddings of `rows`, for the domain distance. Not the training batch's own:
    training batches are `length_bucketed`, so theirs would differ from a random target batch
    in leaf count alone, and the distance would push the embedding to forget it."""
    x, p, m, _ = collate(data.features, data.positions, rows)
    return net.program_embedding(x, p, m)


def train_network(net, train: TrainData, val: TrainData | None, config: TrainConfig,
                  loss_fn: Callable, val_metrics: Callable[[np.ndarray], dict] | None,
                  checkpoint_dir: str | Path | None = None, progress: bool = True,
                  log=None, unlabeled: TrainData | None = None,
                  keep_initial: bool = False, n_epochs: int | None = None) -> History:
    """Train `net` in place; on return it holds the weights of the best validation epoch.

    Without `val` (a refit, `TrainConfig.refit`), it trains for `n_epochs` epochs of the same
    learning-rate schedule, with no validation and no early stop, and keeps the last weights.

    With `config.adapt` ("cmd" or "mmd"), at every step the distance between the program
    embeddings of a random batch of training programs and a random batch of `unlabeled`
    programs (of the target device) is added to the loss, weighted by `config.adapt_weight`
    (CDMPP's cross-device domain adaptation). With `keep_initial` (fine-tuning), the starting
    weights compete in model selection too: fine-tuning never returns a model worse on
    validation.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if config.rank_weight and train.group is None:
        raise ValueError(f"rank_weight={config.rank_weight} needs the programs' tasks "
                         "(ProgramSet.task) to pair programs of one task")
    distance = None
    if config.adapt:
        from cdmpp.model.adaptation import distance as distance_by_name

        distance = distance_by_name(config.adapt)
        if unlabeled is None or not len(unlabeled.features):
            raise ValueError(f"adapt={config.adapt!r} needs unlabeled programs of the target")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history, best_state, best, start_epoch = History(), None, float("inf"), 0
    ckpt = Path(checkpoint_dir) / CHECKPOINT if checkpoint_dir else None
    if ckpt is not None and ckpt.exists():  # resume
        state = torch.load(ckpt, weights_only=False)
        if state["train_config"] == config.to_json():
            net.load_state_dict(state["net"])
            optimizer.load_state_dict(state["optimizer"])
            history, best_state, best = state["history"], state["best_state"], state["best"]
            start_epoch = state["epoch"] + 1
            rng.bit_generator.state = state["rng"]
            torch.set_rng_state(state["torch_rng"])
            log(f"resuming from {ckpt} at epoch {start_epoch}")
    if keep_initial and start_epoch == 0:
        best = next(iter(val_metrics(predict_network(net, val)).values()))
        best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    n_leaves = train.n_leaves
    last_epoch = config.epochs if n_epochs is None else min(n_epochs, config.epochs)
    for epoch in range(start_epoch, last_epoch):
        if val is not None and epoch - max(history.best_epoch, 0) > config.patience:
            log(f"early stop: no validation improvement for {config.patience} epochs")
            break
        start = time.perf_counter()
        net.train()
        batches = length_bucketed(n_leaves, config.batch_size, rng)
        losses = []
        for b, rows in enumerate(batches):
            factor = _lr_factor(epoch + b / len(batches), config)
            for group in optimizer.param_groups:
                group["lr"] = config.lr * factor
            x, p, m, d = collate(train.features, train.positions, rows, train.device)
            y = torch.from_numpy(train.target[rows].astype(np.float32))
            pred, _ = net(x, p, m, d)
            w = (None if train.weight is None else
                 torch.from_numpy(train.weight[rows].astype(np.float32)))
            loss = loss_fn(pred, y, w)
            if config.rank_weight:
                g = torch.from_numpy(train.group[rows])
                loss = loss + config.rank_weight * pairwise_rank_loss(pred, y, g)
            if distance is not None:
                loss = loss + config.adapt_weight * distance(
                    _embedding(net, train, _random_rows(train, len(rows), rng)),
                    _embedding(net, unlabeled, _random_rows(unlabeled, len(rows), rng)))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
            optimizer.step()
            losses.append(loss.item())
        history.train_loss.append(float(np.mean(losses)))
        history.lr.append(config.lr * factor)
        if val is None:  # a refit: no selection, the last epoch is the model
            history.seconds.append(time.perf_counter() - start)
            if progress:
                log(f"refit epoch {epoch + 1:3d}/{last_epoch}  loss {history.train_loss[-1]:.4f}"
                    f"  {history.seconds[-1]:.1f}s")
        else:
            named = val_metrics(predict_network(net, val))
            metric = next(iter(named.values()))
            history.val_metric.append(metric)
            history.val_named.append(named)
            history.seconds.append(time.perf_counter() - start)
            if metric < best:
                best, history.best_epoch = metric, epoch
                best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            if progress:
                shown = "  ".join(f"val {k} {v:.4f}" for k, v in named.items())
                log(f"epoch {epoch + 1:3d}/{config.epochs}  loss {history.train_loss[-1]:.4f}"
                    f"  {shown}  best epoch {history.best_epoch + 1}  {history.seconds[-1]:.1f}s")
        if ckpt is not None:
            _save_checkpoint(ckpt, {"train_config": config.to_json(), "net": net.state_dict(),
                                    "optimizer": optimizer.state_dict(), "history": history,
                                    "best_state": best_state, "best": best, "epoch": epoch,
                                    "rng": rng.bit_generator.state,
                                    "torch_rng": torch.get_rng_state()})
    if best_state is not None:
        net.load_state_dict(best_state)
    return history
