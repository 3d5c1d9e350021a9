"""Model and training configurations: dataclasses saved in every checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


READOUTS = ("pooled", "work_weighted")


@dataclass(frozen=True)
class ModelConfig:
    n_features: int = 176  # per-leaf feature vector (features.N_LEAF_FEATURES; set by fit)
    device_dim: int = 0  # device vector length; 0: single-device model, no device encoder
    d_model: int = 64  # 64 x 2 layers generalized best of the sizes tried (docs/model.md)
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    dropout: float = 0.05
    max_position: int = 1024  # largest leaf position the sinusoidal encoding is built for
    device_embed: int = 32
    head_hidden: tuple = (128, 64)
    # hidden width of a two-layer MLP that embeds each leaf's features; 0: one linear layer
    # (the MLP was better on one split and worse on the other, docs/model.md)
    embed_hidden: int = 0
    # what the head predicts: "per_work": latency / the program's work (FLOPs + bytes,
    # `ProgramSet.work`), multiplied back at prediction; or "latency". per_work was better on
    # every metric on both splits (docs/model.md)
    target: str = "per_work"
    # append features.derived's columns (each buffer's stride alignment) to every leaf before
    # normalizing: with the sweep's alignment pairs in the data, untuned networks went from 6 to
    # 10 of 10 within 10% end to end; per program, no change on held-out networks and better on
    # a random split (docs/model.md, "Alignment pairs"); False in models saved before it existed
    stride_alignment: bool = True
    # how the leaves are read out: "pooled" (mean, max and the summed raw features), or
    # "work_weighted": also the leaves' mean weighted by each leaf's share of the program's work,
    # so cheap element-wise stores fused after a matmul do not dilute it
    readout: str = "pooled"
    # leaf positions counted from the program's first leaf: a kernel's buffer allocations come
    # before its first loop in the pre-order serialization, so every leaf of a kernel with more
    # intermediate buffers (fused element-wise epilogues) sits further along for no other reason.
    # Both off by default: together they lowered MAPE per program in every seed tried (held-out
    # networks 45.5% -> 43.1%, three seeds; random split 38.8/36.0% -> 34.5/34.5%), but the
    # shipped models retrained with them predicted the untuned transformers' totals on Zen 5
    # 9-10 points further off (docs/model.md, "Fused epilogues"). Models saved before these
    # fields existed load as "pooled" / False
    relative_positions: bool = False

    def __post_init__(self):
        if self.readout not in READOUTS:
            raise ValueError(f"ModelConfig.readout must be one of {READOUTS}, not "
                             f"{self.readout!r}")

    @property
    def input_width(self) -> int:
        """Columns per leaf the network reads: the features, then the derived ones."""
        from cdmpp.features.derived import N_DERIVED

        return self.n_features + (N_DERIVED if self.stride_alignment else 0)

    def to_json(self) -> dict:
        d = asdict(self)
        d["head_hidden"] = list(self.head_hidden)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if "head_hidden" in d:
            d["head_hidden"] = tuple(d["head_hidden"])
        d.setdefault("target", "latency")  # saved before the field existed: latency
        d.setdefault("stride_alignment", False)  # likewise
        d.setdefault("readout", "pooled")  # likewise
        d.setdefault("relative_positions", False)  # likewise
        return cls(**d)


@dataclass(frozen=True)
class TrainConfig:
    # 150 epochs of batches of 64: the model underfitted with 100 of 256 (train RMSE(log) 0.34,
    # test 0.555 on a random split of our data; 150 x 64: 0.24 and 0.539, docs/model.md)
    epochs: int = 150
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup_epochs: int = 2  # linear warm-up, then cosine decay to lr * min_lr_ratio
    min_lr_ratio: float = 0.02
    grad_clip: float = 2.0
    loss: str = "mse"  # "mse" on the standardized Box-Cox target, or "paper": 1000*MSE + MAPE
    mape_weight: float = 0.0  # extra weight of MAPE on latency (differentiable inverse Box-Cox)
    val_fraction: float = 0.1  # validation carved from the training side, by record
    patience: int = 40  # epochs without validation improvement before stopping
    # after the validation set chose the epoch count, train again from the same seed on all the
    # training data (the validation tenth included) for that many epochs: the carved tenth
    # otherwise never teaches the model, and a rare program in it (one untuned kernel of a
    # network) is then mispredicted in sample (docs/model.md, "Refit")
    refit: bool = False
    # weight of a within-task ranking term (losses.pairwise_rank_loss over the pairs of each
    # batch that share a task and device) added to the regression loss; 0: off
    rank_weight: float = 0.0
    adapt: str | None = None  # domain adaptation distance: "cmd" or "mmd" (needs unlabeled data)
    adapt_weight: float = 0.1  # loss = task loss + adapt_weight * distance(source, target)
    seed: int = 0
    threads: int | None = None  # torch threads (None: all cores)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
