"""A torch MLP on TenSet-style program vectors, fitted on log latency.

Saved as one file (`torch.save`): {"kind", "format", "config" (constructor arguments),
"state_dict", the input/target standardization, what `fit` learned about the inputs}.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from cdmpp.baselines import BaselineMixin, check_latency

_FORMAT = 1  # bump when the saved layout changes
_PREDICT_BATCH = 8192


@contextlib.contextmanager
def _threads(n: int | None):
    """Use n torch threads inside the block and restore the caller's setting after."""
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _build_net(n_in: int, hidden):
    import torch.nn as nn

    layers, width = [], n_in
    for h in hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class MLPBaseline(BaselineMixin):
    """ReLU MLP; inputs standardized with training mean/std, target = standardized ln(s).

    Loss: MSE on (standardized) log latency; Adam with a cosine learning-rate decay to 0 and
    decoupled weight decay (AdamW). Deterministic for a `seed` (initialization and shuffling
    use their own generators; the global torch RNG is left untouched). Defaults: 50 epochs
    of batch 256 take ~14 s for 20k programs on one busy thread (~10k steps; more epochs
    gave little on synthetic data). With `eval_set`, the weights
    of the epoch with the lowest eval loss are kept. `nthread` sets torch's threads for
    fit/predict only (None: leave torch's setting).
    """

    _fitted_attr = "net_"

    def __init__(self, hidden=(256, 256), epochs: int = 50, lr: float = 1e-3,
                 batch_size: int = 256, seed: int = 0, weight_decay: float = 1e-4,
                 nthread: int | None = None):
        self.hidden = hidden
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.seed = seed
        self.weight_decay = weight_decay
        self.nthread = nthread

    def _standardize(self, x: np.ndarray):
        import torch

        return torch.from_numpy(((x - self.x_mean_) / self.x_std_).astype(np.float32))

    def fit(self, programs, y, eval_set=None) -> "MLPBaseline":
        """programs: ProgramSet; y: latency in seconds; eval_set: (ProgramSet, y) or None."""
        import torch

        y = check_latency(y, len(programs))
        x = self._remember_inputs(programs)
        self.x_mean_ = x.mean(axis=0)
        std = x.std(axis=0)
        self.x_std_ = np.where(std > 0, std, 1.0)  # constant columns map to 0
        log_y = np.log(y)
        self.y_mean_ = float(log_y.mean())
        self.y_std_ = float(log_y.std()) or 1.0
        xt = self._standardize(x)  # (n, F_in)
        yt = torch.from_numpy(((log_y - self.y_mean_) / self.y_std_).astype(np.float32))
        if eval_set is not None:
            ex = self._standardize(self._inputs(eval_set[0]))
            ey = np.log(check_latency(eval_set[1], len(eval_set[0])))
            ey = torch.from_numpy(((ey - self.y_mean_) / self.y_std_).astype(np.float32))

        with _threads(self.nthread), torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = _build_net(x.shape[1], self.hidden)
            shuffle = torch.Generator().manual_seed(self.seed)
            steps_per_epoch = -(-len(xt) // self.batch_size)
            opt = torch.optim.AdamW(net.parameters(), lr=self.lr,
                                    weight_decay=self.weight_decay)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=max(1, self.epochs * steps_per_epoch))
            self.history_ = {"train_loss": [], "eval_loss": []}
            best = (float("inf"), None)
            for _ in range(self.epochs):
                net.train()
                total = 0.0
                for rows in torch.randperm(len(xt), generator=shuffle).split(self.batch_size):
                    loss = torch.mean((net(xt[rows]).squeeze(1) - yt[rows]) ** 2)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sched.step()
                    total += float(loss.detach()) * len(rows)
                self.history_["train_loss"].append(total / len(xt))
                if eval_set is not None:
                    net.eval()
                    with torch.no_grad():
                        ev = float(torch.mean((net(ex).squeeze(1) - ey) ** 2))
                    self.history_["eval_loss"].append(ev)
                    if ev < best[0]:
                        best = (ev, {k: v.clone() for k, v in net.state_dict().items()})
            if best[1] is not None:
                net.load_state_dict(best[1])
        self.net_ = net.eval()
        return self

    def predict(self, programs) -> np.ndarray:
        """Latency in seconds, float64 (n,)."""
        import torch

        self._check_fitted()
        if not len(programs):  # as the other estimators: no program, no latency
            return np.zeros(0)
        xt = self._standardize(self._inputs(programs))
        out = []
        with _threads(self.nthread), torch.no_grad():
            for chunk in xt.split(_PREDICT_BATCH):
                out.append(self.net_(chunk).squeeze(1).double().numpy())
        z = np.concatenate(out) if out else np.zeros(0)
        return np.exp(z * self.y_std_ + self.y_mean_)

    def save(self, path) -> Path:
        """Write one file at `path` (parent directories are created); returns it."""
        import torch

        self._check_fitted()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        params = dict(self.get_params(), hidden=[int(h) for h in self.hidden])
        torch.save({"kind": "mlp", "format": _FORMAT, "config": params,
                    "state_dict": self.net_.state_dict(),
                    "x_mean_": torch.from_numpy(self.x_mean_),
                    "x_std_": torch.from_numpy(self.x_std_),
                    "y_mean_": self.y_mean_, "y_std_": self.y_std_,
                    "n_features_in_": self.n_features_in_, "has_device_": self.has_device_},
                   path)
        return path

    @classmethod
    def load(cls, path) -> "MLPBaseline":
        """A fitted model from a file written by `save`."""
        import torch

        blob = torch.load(path, map_location="cpu", weights_only=True)
        if blob.get("kind") != "mlp" or blob.get("format") != _FORMAT:
            raise ValueError(f"{path} is not an MLPBaseline file of format {_FORMAT}")
        model = cls(**dict(blob["config"], hidden=tuple(blob["config"]["hidden"])))
        model.n_features_in_ = int(blob["n_features_in_"])
        model.has_device_ = bool(blob["has_device_"])
        model.x_mean_ = blob["x_mean_"].numpy()
        model.x_std_ = blob["x_std_"].numpy()
        model.y_mean_ = float(blob["y_mean_"])
        model.y_std_ = float(blob["y_std_"])
        net = _build_net(model.n_features_in_, model.hidden)
        net.load_state_dict(blob["state_dict"])
        model.net_ = net.eval()
        return model
