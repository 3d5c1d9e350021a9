"""The training loop on small synthetic programs: early stopping keeps the best validation
epoch, and domain adaptation pulls the target's embeddings towards the source's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cdmpp.model.adaptation import distance
from cdmpp.model.config import ModelConfig, TrainConfig
from cdmpp.model.losses import make_loss
from cdmpp.model.transformer import CDMPPNet
from cdmpp.train.loop import TrainData, predict_network, train_network
from cdmpp.train.loop import _embedding as loop_embedding

N_FEATURES = 6
TINY = ModelConfig(n_features=N_FEATURES, stride_alignment=False, d_model=16, n_heads=2,
                   n_layers=1, d_ff=32, head_hidden=(16,), dropout=0.0)


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _programs(n: int, seed: int, shift: float = 0.0, labeled: bool = True) -> TrainData:
    """n programs of 1-4 leaves; the target is a smooth function of the summed features."""
    rng = np.random.default_rng(seed)
    features, positions, target = [], [], []
    for _ in range(n):
        leaves = int(rng.integers(1, 5))
        f = (rng.normal(size=(leaves, N_FEATURES)) + shift).astype(np.float32)
        features.append(f)
        positions.append(np.arange(leaves, dtype=np.int64))
        target.append(np.tanh(f.sum(0)).mean())
    return TrainData(features, positions, np.array(target) if labeled else None)


def _net(seed: int = 0) -> CDMPPNet:
    torch.manual_seed(seed)
    return CDMPPNet(TINY)


def _embedding(net, data: TrainData) -> torch.Tensor:
    """Every program's embedding, as the loop's domain distance computes it, in eval mode."""
    net.eval()
    with torch.no_grad():
        return loop_embedding(net, data, range(len(data.features)))


def test_early_stopping_stops_after_patience_and_keeps_the_best_validation_epoch():
    train, val = _programs(48, 0), _programs(16, 1)
    # the selection metric of each epoch, by call: best at epoch 3, never better afterwards
    scripted = [5.0, 3.0, 4.0, 2.5, 6.0, 7.0, 8.0, 9.0] + [10.0] * 20
    seen = []

    def val_metrics(pred):
        seen.append(pred.copy())
        return {"scripted": scripted[len(seen) - 1]}

    config = TrainConfig(epochs=20, batch_size=16, lr=3e-3, warmup_epochs=1, patience=2,
                         threads=1)
    net = _net()
    history = train_network(net, train, val, config, make_loss("mse"), val_metrics,
                            progress=False)
    # epochs 4 and 5 do not improve on epoch 3; epoch 6 would be the third: stop before it
    assert history.best_epoch == 3
    assert len(history.val_metric) == len(history.train_loss) == 6 < config.epochs
    assert history.val_metric == scripted[:6]
    # the returned network is the one of the best validation epoch, not the last
    np.testing.assert_array_equal(predict_network(net, val), seen[3])
    assert not np.array_equal(seen[3], seen[-1])


def test_without_a_validation_improvement_training_runs_patience_plus_one_epochs():
    train, val = _programs(32, 0), _programs(8, 1)
    config = TrainConfig(epochs=30, batch_size=16, warmup_epochs=1, patience=1, threads=1)
    history = train_network(_net(), train, val, config, make_loss("mse"),
                            lambda pred: {"constant": 1.0}, progress=False)
    assert history.best_epoch == 0
    assert len(history.val_metric) == 2


@pytest.mark.parametrize("kind", ["cmd", "mmd"])
def test_domain_adaptation_pulls_target_embeddings_towards_the_source(kind):
    """The same seed, data and batches (adapt is on in both runs, so the target batches are
    drawn alike): only the adaptation weight differs. With it, the trained network embeds the
    shifted target programs closer to the source programs."""
    train, val = _programs(64, 0), _programs(16, 1)
    target = _programs(64, 2, shift=1.5, labeled=False)

    def trained(weight):
        config = TrainConfig(epochs=8, batch_size=16, lr=3e-3, warmup_epochs=1, patience=8,
                             threads=1, adapt=kind, adapt_weight=weight)
        net = _net()
        train_network(net, train, None, config, make_loss("mse"), None, progress=False,
                      unlabeled=target, n_epochs=config.epochs)
        return net

    plain, adapted = trained(0.0), trained(1.0)
    for a, b in zip(plain.state_dict().values(), adapted.state_dict().values()):
        if not torch.equal(a, b):
            break
    else:
        raise AssertionError("the adaptation weight changed no parameter")
    gap = distance(kind)  # on the whole sets, not a batch
    gap_plain = float(gap(_embedding(plain, train), _embedding(plain, target)))
    gap_adapted = float(gap(_embedding(adapted, train), _embedding(adapted, target)))
    assert gap_adapted < 0.7 * gap_plain


def test_domain_distance_compares_random_batches_not_the_length_bucketed_training_batch(
        monkeypatch):
    """Training batches hold programs of about one leaf count; the source side of the domain
    distance must be a random sample of the training programs, as the target side is, or the
    two would differ in leaf count alone."""
    import cdmpp.train.loop as loop

    train, target = _programs(64, 0), _programs(32, 2, shift=1.5, labeled=False)
    drawn = {"source": [], "target": []}
    real = loop._embedding

    def recording(net, data, rows):
        drawn["source" if data is train else "target"].append(np.asarray(rows))
        return real(net, data, rows)

    monkeypatch.setattr(loop, "_embedding", recording)
    config = TrainConfig(epochs=2, batch_size=16, warmup_epochs=1, threads=1, adapt="cmd")
    train_network(_net(), train, None, config, make_loss("mse"), None, progress=False,
                  unlabeled=target, n_epochs=config.epochs)
    steps = 2 * len(train.features) // config.batch_size
    assert len(drawn["source"]) == len(drawn["target"]) == steps
    leaves = train.n_leaves
    ordered = np.sort(leaves)  # a length-bucketed batch is a window of the programs by leaf count
    widest_bucket = max(len(set(ordered[i:i + 16])) for i in range(len(ordered) - 15))
    assert max(len(set(leaves[rows])) for rows in drawn["source"]) > widest_bucket
    assert all(len(rows) == 16 and len(set(rows)) == 16 for rows in drawn["target"])
