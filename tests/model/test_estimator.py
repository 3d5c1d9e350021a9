"""The CDMPP estimator on a small real slice: it learns, persists, and refuses misuse."""

from __future__ import annotations

import numpy as np
import pytest

from cdmpp.dataset.loader import labeled
from cdmpp.dataset.splits import make_split
from cdmpp.evaluate.metrics import rmse_log
from cdmpp.features.build import build_store
from cdmpp.features.store import FeatureStore
from cdmpp.model.config import ModelConfig, TrainConfig
from cdmpp.model.estimator import CDMPPRegressor

TINY = ModelConfig(d_model=32, n_heads=2, n_layers=1, d_ff=64, head_hidden=(64,))
FAST = TrainConfig(epochs=25, batch_size=16, lr=3e-3, warmup_epochs=1, patience=25, threads=1)


@pytest.fixture(scope="module")
def slice_data(tmp_path_factory):
    """~100 real records of three operators, split at random within tasks."""
    from conftest import SHARED_DATA, require_shared

    require_shared()
    dbs = [SHARED_DATA / n for n in ("dense_64x768x768", "softmax_12x64x64",
                                     "conv1x1_1x256x56x56_k64")]
    path = tmp_path_factory.mktemp("store")
    build_store(dbs, path, workers=1, progress=False)
    store = FeatureStore(path)
    samples = store.samples()
    train_rows, test_rows = make_split(samples, "random", seed=0).rows(samples)
    return labeled(store, samples, train_rows), labeled(store, samples, test_rows)


@pytest.fixture(scope="module")
def fitted(slice_data):
    train, _ = slice_data
    return CDMPPRegressor(TINY, FAST).fit(train.programs, train.latency_s)


def test_training_lowers_the_loss_and_beats_the_mean(fitted, slice_data):
    train, test = slice_data
    assert fitted.history_.train_loss[-1] < 0.5 * fitted.history_.train_loss[0]
    mean_guess = np.full(len(test.latency_s), np.exp(np.mean(np.log(train.latency_s))))
    assert rmse_log(test.latency_s, fitted.predict(test.programs)) < \
        rmse_log(test.latency_s, mean_guess)


def test_save_load_gives_identical_predictions(fitted, slice_data, tmp_path):
    _, test = slice_data
    fitted.save(tmp_path / "m")
    again = CDMPPRegressor.load(tmp_path / "m")
    np.testing.assert_array_equal(again.predict(test.programs), fitted.predict(test.programs))
    assert again.model_config_ == fitted.model_config_


def test_any_leaf_count_in_one_model(fitted, slice_data):
    _, test = slice_data
    counts = {len(f) for f in test.programs.leaf_features}
    assert len(counts) > 1  # the slice mixes programs with different numbers of stores
    together = fitted.predict(test.programs)  # one batch, padded to the most leaves
    assert np.all(np.isfinite(together))
    # padding does not leak: each program alone (no padding) is predicted as in the batch
    n_leaves = np.array([len(f) for f in test.programs.leaf_features])
    fewer = np.flatnonzero(n_leaves < n_leaves.max())
    assert len(fewer)
    alone = np.array([fitted.predict(test.programs.subset([i]))[0] for i in fewer])
    np.testing.assert_allclose(together[fewer], alone, rtol=1e-5)


def test_predict_before_fit_is_a_clear_error(slice_data):
    with pytest.raises(RuntimeError, match="not fitted"):
        CDMPPRegressor().predict(slice_data[1].programs)


def test_checkpoint_resume_reaches_the_same_model(slice_data, tmp_path):
    train, test = slice_data
    short = TrainConfig(**{**FAST.to_json(), "epochs": 4})
    whole = CDMPPRegressor(TINY, short, checkpoint_dir=str(tmp_path / "a")).fit(
        train.programs, train.latency_s)
    # an interrupted run: stop after 2 epochs, then resume the same config from the checkpoint
    import cdmpp.train.loop as loop

    calls = {"n": 0}
    real = loop.predict_network

    def interrupt(net, data, batch_size=1024):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(net, data, batch_size)

    loop.predict_network = interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            CDMPPRegressor(TINY, short, checkpoint_dir=str(tmp_path / "b")).fit(
                train.programs, train.latency_s)
    finally:
        loop.predict_network = real
    resumed = CDMPPRegressor(TINY, short, checkpoint_dir=str(tmp_path / "b")).fit(
        train.programs, train.latency_s)
    np.testing.assert_allclose(resumed.predict(test.programs), whole.predict(test.programs),
                               rtol=1e-5)


def test_domain_adaptation_trains_with_unlabeled_target_programs(slice_data):
    train, test = slice_data
    config = TrainConfig(epochs=3, batch_size=16, threads=1, adapt="cmd", adapt_weight=0.5)
    model = CDMPPRegressor(TINY, config).fit(train.programs, train.latency_s,
                                             unlabeled=test.programs)
    assert np.all(np.isfinite(model.predict(test.programs)))
    # the same seed and target batches with a zero weight: the adaptation term is what differs
    unweighted = TrainConfig(**{**config.to_json(), "adapt_weight": 0.0})
    plain = CDMPPRegressor(TINY, unweighted).fit(train.programs, train.latency_s,
                                                 unlabeled=test.programs)
    assert not np.array_equal(plain.embed(test.programs), model.embed(test.programs))
    with pytest.raises(ValueError, match="unlabeled"):
        CDMPPRegressor(TINY, config).fit(train.programs, train.latency_s)


def test_fine_tune_starts_from_the_fitted_model_and_never_gets_worse_on_validation(
        fitted, slice_data):
    import copy

    train, test = slice_data
    model = copy.deepcopy(fitted)
    val = (test.programs, test.latency_s)
    before = rmse_log(test.latency_s, model.predict(test.programs))
    model.fine_tune(train.programs, train.latency_s, eval_set=val,
                    train_config=TrainConfig(epochs=3, batch_size=16, lr=1e-1, threads=1))
    # a far too high learning rate: selection must fall back to the starting weights
    assert rmse_log(test.latency_s, model.predict(test.programs)) <= before + 1e-9
    assert model.normalizer_.boxcox_lambda_ == fitted.normalizer_.boxcox_lambda_  # kept


def test_calibrated_device_vector_is_the_default_and_persists(slice_data, tmp_path):
    from cdmpp.dataset.programs import ProgramSet

    train, test = slice_data
    rng = np.random.default_rng(0)
    dev = rng.random((2, 3)).astype(np.float32)
    halves = np.arange(len(train.latency_s)) % 2
    programs = ProgramSet(train.programs.leaf_features, train.programs.leaf_pos,
                          dev[halves], train.programs.task)
    model = CDMPPRegressor(TINY, TrainConfig(epochs=2, batch_size=16, threads=1))
    model.fit(programs, train.latency_s)
    with pytest.raises(ValueError, match="device vectors"):
        model.predict(test.programs)
    model.device_vector_ = dev[1].astype(np.float64)
    expected = model.predict(test.programs.with_device(dev[1]))
    np.testing.assert_allclose(model.predict(test.programs), expected)
    model.save(tmp_path / "m")
    np.testing.assert_allclose(CDMPPRegressor.load(tmp_path / "m").predict(test.programs),
                               expected)


def test_fine_tune_follows_the_programs_weighted_most(fitted, slice_data):
    import copy

    train, _ = slice_data
    # half the programs (every other one, so every task has both halves) told to run 3x
    # slower: a fine-tuning that weights that half predicts it slower than one weighting the rest
    slow = np.arange(len(train.latency_s)) % 2 == 1
    y = np.where(slow, 3.0 * train.latency_s, train.latency_s)
    tc = TrainConfig(epochs=10, batch_size=16, lr=1e-2, patience=10, threads=1)
    predicted = {}
    for name, heavy in (("slow", slow), ("rest", ~slow)):
        model = copy.deepcopy(fitted)
        model.fine_tune(train.programs, y, train_config=tc,
                        sample_weight=np.where(heavy, 1.0, 0.01))
        predicted[name] = np.log(model.predict(train.programs.subset(np.flatnonzero(slow))))
    assert np.mean(predicted["slow"]) > np.mean(predicted["rest"]) + np.log(1.5)
    with pytest.raises(ValueError, match="sample_weight"):
        copy.deepcopy(fitted).fine_tune(train.programs, y, train_config=tc,
                                        sample_weight=np.ones(3))


def test_fine_tune_refit_starts_again_from_the_base_on_every_program(fitted, slice_data,
                                                                      monkeypatch):
    import copy

    import torch

    import cdmpp.train.loop as loop

    train, _ = slice_data
    n = len(train.latency_s)
    tc = TrainConfig(epochs=4, batch_size=16, lr=1e-2, patience=4, threads=1, refit=True)
    calls, real = [], loop.train_network

    def spy(net, data, val, *a, **k):
        # the weights each training starts from, and what it trains on
        calls.append((len(data.features), val is None, k.get("n_epochs"),
                      {key: v.clone() for key, v in net.state_dict().items()}))
        return real(net, data, val, *a, **k)

    monkeypatch.setattr(loop, "train_network", spy)
    model = copy.deepcopy(fitted)
    y = 2.0 * train.latency_s  # every program slower: some fine-tuning epoch beats the base
    model.fine_tune(train.programs, y, train_config=tc)
    assert model.history_.best_epoch >= 0
    (carved, has_val, _, start), (whole, no_val, epochs, restart) = calls
    assert carved < n and not has_val  # first the carve: validation tasks apart
    assert (whole, no_val, epochs) == (n, True, model.history_.best_epoch + 1)
    assert all(torch.equal(start[k], restart[k]) for k in start)  # again from the base
    assert model.refit_epochs_ == epochs and len(model.history_.refit_train_loss) == epochs
    assert all(p.requires_grad for p in model.net_.parameters())
    # the base's own refit does not carry into a fine-tuning unless asked
    from cdmpp.model.estimator import fine_tune_config
    assert not fine_tune_config(TrainConfig(refit=True)).refit


def test_fine_tune_head_only_keeps_the_program_encoder(fitted, slice_data):
    import copy

    import torch

    train, test = slice_data
    for layers, encoder_moves in (("head", False), ("all", True)):
        model = copy.deepcopy(fitted)
        before = {k: v.clone() for k, v in model.net_.state_dict().items()}
        # validation on the training data itself: some epoch improves on it, so weights move
        model.fine_tune(train.programs, train.latency_s, eval_set=(train.programs,
                                                                   train.latency_s),
                        train_config=TrainConfig(epochs=3, batch_size=16, threads=1),
                        layers=layers)
        after = model.net_.state_dict()
        moved = {k for k in before if not torch.equal(before[k], after[k])}
        assert any(k.startswith("head.") for k in moved)
        assert any(k.startswith("encoder.") for k in moved) == encoder_moves
        assert all(p.requires_grad for p in model.net_.parameters())
    with pytest.raises(ValueError, match="layers"):
        fitted.fine_tune(train.programs, train.latency_s, layers="encoder")


@pytest.mark.parametrize("target", ["per_work", "latency"])
def test_each_target_learns_and_persists(slice_data, tmp_path, target):
    from dataclasses import replace

    train, test = slice_data
    model = CDMPPRegressor(replace(TINY, target=target), FAST).fit(train.programs,
                                                                   train.latency_s)
    mean_guess = np.full(len(test.latency_s), np.exp(np.mean(np.log(train.latency_s))))
    assert rmse_log(test.latency_s, model.predict(test.programs)) < \
        rmse_log(test.latency_s, mean_guess)
    model.save(tmp_path / "m")
    again = CDMPPRegressor.load(tmp_path / "m")
    assert again.model_config_.target == target
    np.testing.assert_array_equal(again.predict(test.programs), model.predict(test.programs))


def test_mlp_leaf_embedding_learns_and_persists(slice_data, tmp_path):
    from dataclasses import replace

    train, test = slice_data
    model = CDMPPRegressor(replace(TINY, embed_hidden=48), FAST).fit(train.programs,
                                                                     train.latency_s)
    assert model.net_.embed[0].out_features == 48
    mean_guess = np.full(len(test.latency_s), np.exp(np.mean(np.log(train.latency_s))))
    assert rmse_log(test.latency_s, model.predict(test.programs)) < \
        rmse_log(test.latency_s, mean_guess)
    model.save(tmp_path / "m")
    again = CDMPPRegressor.load(tmp_path / "m")
    assert again.model_config_.embed_hidden == 48
    np.testing.assert_array_equal(again.predict(test.programs), model.predict(test.programs))


def test_stride_alignment_columns_learn_and_persist(slice_data, tmp_path):
    from dataclasses import replace

    from cdmpp.features.derived import N_DERIVED

    train, test = slice_data
    model = CDMPPRegressor(replace(TINY, stride_alignment=True), FAST).fit(train.programs,
                                                                           train.latency_s)
    width = train.programs.n_features + N_DERIVED
    assert model.net_.embed.in_features == width == len(model.normalizer_.feature_min_)
    mean_guess = np.full(len(test.latency_s), np.exp(np.mean(np.log(train.latency_s))))
    assert rmse_log(test.latency_s, model.predict(test.programs)) < \
        rmse_log(test.latency_s, mean_guess)
    model.save(tmp_path / "m")
    again = CDMPPRegressor.load(tmp_path / "m")
    assert again.model_config_.stride_alignment
    np.testing.assert_array_equal(again.predict(test.programs), model.predict(test.programs))


@pytest.fixture(scope="module")
def work_relative(slice_data):
    """The work-weighted readout with relative positions (ModelConfig options, off by default)."""
    from dataclasses import replace

    train, _ = slice_data
    config = replace(TINY, readout="work_weighted", relative_positions=True)
    return CDMPPRegressor(config, FAST).fit(train.programs, train.latency_s)


def test_work_weighted_readout_learns_persists_and_reads_true_work_shares(
        work_relative, fitted, slice_data, tmp_path):
    """The network undoes the feature normalization itself: its leaf weights are each leaf's
    share of the program's work as `ProgramSet.work` counts it, on data it was not fitted on."""
    import torch

    from cdmpp.dataset.programs import work_columns
    from cdmpp.train.batches import collate

    train, test = slice_data
    assert work_relative.net_.head[0].in_features == 4 * TINY.d_model
    assert fitted.net_.head[0].in_features == 3 * TINY.d_model  # the default readout
    mean_guess = np.full(len(test.latency_s), np.exp(np.mean(np.log(train.latency_s))))
    assert rmse_log(test.latency_s, work_relative.predict(test.programs)) < \
        rmse_log(test.latency_s, mean_guess)

    data = work_relative._data(test.programs)
    rows = np.arange(len(test.programs))
    x, _, mask, _ = collate(data.features, data.positions, rows)
    with torch.no_grad():
        shares = work_relative.net_._work_shares(x, mask).numpy()
    assert any(len(f) > 1 for f in test.programs.leaf_features), "needs multi-leaf programs"
    for i in rows:
        raw = test.programs.leaf_features[i][:, work_columns()].astype(np.float64)
        work = (np.exp2(np.clip(raw, 0, 100)) - 1).sum(axis=1) + 1
        n = len(work)
        np.testing.assert_allclose(shares[i, :n], work / work.sum(), rtol=1e-3, atol=1e-6)
        assert not shares[i, n:].any()

    work_relative.save(tmp_path / "m")
    again = CDMPPRegressor.load(tmp_path / "m")
    assert (again.model_config_.readout, again.model_config_.relative_positions) == (
        "work_weighted", True)
    np.testing.assert_array_equal(again.predict(test.programs),
                                  work_relative.predict(test.programs))


def test_relative_positions_ignore_a_shift_of_every_leaf(work_relative, fitted, slice_data):
    """A kernel with more buffer allocations before its first loop has every leaf further along
    the pre-order serialization; with relative positions that shift changes nothing."""
    from cdmpp.dataset.programs import ProgramSet

    _, test = slice_data
    shifted = ProgramSet(test.programs.leaf_features,
                         tuple(p + 5 for p in test.programs.leaf_pos),
                         test.programs.device, test.programs.task)
    np.testing.assert_array_equal(work_relative.predict(shifted),
                                  work_relative.predict(test.programs))
    assert not fitted.model_config_.relative_positions  # the default: absolute positions
    assert not np.array_equal(fitted.predict(shifted), fitted.predict(test.programs))
    assert fitted.input_key() != work_relative.input_key()  # never prepared together


def test_unknown_readout_is_refused_and_old_models_pool():
    from dataclasses import replace

    with pytest.raises(ValueError, match="readout"):
        replace(TINY, readout="sum")
    old = {k: v for k, v in ModelConfig().to_json().items()
           if k not in ("readout", "relative_positions")}
    assert ModelConfig.from_json(old).readout == "pooled"
    assert ModelConfig.from_json(old).relative_positions is False


def test_models_saved_before_stride_alignment_load_without_it():
    old = {k: v for k, v in ModelConfig().to_json().items() if k != "stride_alignment"}
    assert ModelConfig.from_json(old).stride_alignment is False


def test_unknown_target_is_refused(slice_data):
    from dataclasses import replace

    train, _ = slice_data
    with pytest.raises(ValueError, match="unknown ModelConfig.target"):
        CDMPPRegressor(replace(TINY, target="speed"), FAST).fit(train.programs, train.latency_s)


def test_weighted_loss_is_a_weighted_mean():
    import torch

    from cdmpp.model.losses import make_loss

    loss = make_loss("mse", mape_weight=0.5, target=(0.1, 0.0, 1.0))
    pred, z = torch.tensor([0.1, 0.5, -0.3]), torch.tensor([0.0, 0.2, 0.4])
    assert torch.allclose(loss(pred, z), loss(pred, z, torch.ones(3)))
    # a zero weight removes a sample; weights 2:1 count the first one twice
    assert torch.allclose(loss(pred, z, torch.tensor([1.0, 1.0, 0.0])), loss(pred[:2], z[:2]))
    doubled = loss(torch.cat([pred[:1], pred]), torch.cat([z[:1], z]))
    assert torch.allclose(loss(pred, z, torch.tensor([2.0, 1.0, 1.0])), doubled)


def test_sample_weights_decide_which_labels_the_model_fits(slice_data):
    from cdmpp.dataset.programs import ProgramSet

    train, _ = slice_data
    p = train.programs
    twice = ProgramSet(p.leaf_features * 2, p.leaf_pos * 2, None, p.task * 2)
    y = np.concatenate([train.latency_s, 3.0 * train.latency_s])  # the copies: 3x slower
    n = len(train.latency_s)
    first = CDMPPRegressor(TINY, FAST).fit(twice, y, sample_weight=np.r_[np.ones(n), np.zeros(n)])
    second = CDMPPRegressor(TINY, FAST).fit(twice, y, sample_weight=np.r_[np.zeros(n), np.ones(n)])
    ratio = np.median(second.predict(p) / first.predict(p))
    assert 2.0 < ratio < 4.5


@pytest.fixture(scope="module")
def refitted(slice_data):
    train, _ = slice_data
    return CDMPPRegressor(TINY, TrainConfig(**{**FAST.to_json(), "refit": True})).fit(
        train.programs, train.latency_s)


def test_refit_trains_on_the_validation_records_for_the_chosen_epochs(fitted, refitted,
                                                                      slice_data, monkeypatch):
    import cdmpp.train.loop as loop
    from cdmpp.dataset.normalize import Normalizer

    train, _ = slice_data
    assert refitted.refit_epochs_ == refitted.history_.best_epoch + 1 > 0
    assert len(refitted.history_.refit_train_loss) == refitted.refit_epochs_
    assert fitted.refit_epochs_ == 0 and not fitted.history_.refit_train_loss
    # the refit trains on every training record, the validation tenth included, with no
    # validation set, for the epoch count the first fit chose
    calls, real = [], loop.train_network
    monkeypatch.setattr(loop, "train_network", lambda net, data, val, *a, **k: (
        calls.append((len(data.features), val is None, k.get("n_epochs"))),
        real(net, data, val, *a, **k))[1])
    again = CDMPPRegressor(TINY, TrainConfig(**{**FAST.to_json(), "refit": True})).fit(
        train.programs, train.latency_s)
    n = len(train.latency_s)
    assert calls[0][0] < n and not calls[0][1]  # first fit: the carved validation set apart
    assert calls[1] == (n, True, again.history_.best_epoch + 1)
    # ... and its normalizer comes from all the training records
    whole = Normalizer().fit(np.concatenate(train.programs.leaf_features),
                             train.latency_s / refitted._scale(train.programs))
    np.testing.assert_allclose(refitted.normalizer_.target_mean_, whole.target_mean_)


def test_refit_persists(refitted, slice_data, tmp_path):
    _, test = slice_data
    refitted.save(tmp_path / "m")
    again = CDMPPRegressor.load(tmp_path / "m")
    assert again.refit_epochs_ == refitted.refit_epochs_
    assert again.train_config_.refit
    np.testing.assert_array_equal(again.predict(test.programs), refitted.predict(test.programs))


def test_no_refit_with_a_given_validation_set(slice_data):
    train, test = slice_data
    model = CDMPPRegressor(TINY, TrainConfig(**{**FAST.to_json(), "epochs": 3, "refit": True}))
    model.fit(train.programs, train.latency_s, eval_set=(train.programs, train.latency_s))
    assert model.refit_epochs_ == 0  # everything given was trained on already


def test_an_interrupted_refit_resumes_to_the_same_model(slice_data, tmp_path):
    import cdmpp.train.loop as loop

    train, test = slice_data
    short = TrainConfig(**{**FAST.to_json(), "epochs": 4, "refit": True})
    whole = CDMPPRegressor(TINY, short, checkpoint_dir=str(tmp_path / "a")).fit(
        train.programs, train.latency_s)
    calls = {"n": 0}
    real = loop.length_bucketed

    def interrupt(*args, **kwargs):  # called once per epoch: 4 to select, then the refit's
        calls["n"] += 1
        if calls["n"] == 4 + 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    loop.length_bucketed = interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            CDMPPRegressor(TINY, short, checkpoint_dir=str(tmp_path / "b")).fit(
                train.programs, train.latency_s)
    finally:
        loop.length_bucketed = real
    assert (tmp_path / "b" / "refit").is_dir()  # the refit had started and saved an epoch
    resumed = CDMPPRegressor(TINY, short, checkpoint_dir=str(tmp_path / "b")).fit(
        train.programs, train.latency_s)
    assert resumed.refit_epochs_ == whole.refit_epochs_
    np.testing.assert_allclose(resumed.predict(test.programs), whole.predict(test.programs),
                               rtol=1e-5)


def test_the_ranking_term_pairs_programs_of_one_task(slice_data, monkeypatch):
    import cdmpp.train.loop as loop

    train, _ = slice_data
    seen = []
    real = loop.pairwise_rank_loss

    def spy(pred, z, group):
        seen.append(group.numpy().copy())
        return real(pred, z, group)

    monkeypatch.setattr(loop, "pairwise_rank_loss", spy)
    config = TrainConfig(**{**FAST.to_json(), "epochs": 1, "rank_weight": 0.5})
    est = CDMPPRegressor(TINY, config).fit(train.programs, train.latency_s)
    assert seen and np.all(np.isfinite(est.predict(train.programs)))
    # every fit program (what the validation carve leaves) is in one batch of the epoch
    assert len(np.concatenate(seen)) == len(train.latency_s) - round(0.1 * len(train.latency_s))
    # and two programs share a group exactly when they share a task (and device)
    from cdmpp.model.estimator import _groups

    groups, tasks = _groups(train.programs, None), np.array(train.programs.task)
    assert np.array_equal(groups[:, None] == groups[None, :], tasks[:, None] == tasks[None, :])
    device = np.zeros((len(tasks), 2), dtype=np.float32)
    device[::2] = 1.0  # the same tasks on two devices: twice the groups
    assert len(set(_groups(train.programs, device))) == 2 * len(set(tasks))


def test_the_ranking_term_needs_tasks(slice_data):
    from dataclasses import replace

    train, _ = slice_data
    no_tasks = replace(train.programs, task=None)
    config = TrainConfig(**{**FAST.to_json(), "epochs": 1, "rank_weight": 0.5})
    with pytest.raises(ValueError, match="rank_weight"):
        CDMPPRegressor(TINY, config).fit(no_tasks, train.latency_s)


def test_models_with_the_same_inputs_are_predicted_together(fitted, refitted, slice_data,
                                                            monkeypatch):
    from dataclasses import replace

    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import predict_together
    from cdmpp.train.loop import predict_network

    train, test = slice_data
    other_seed = CDMPPRegressor(TINY, TrainConfig(**{**FAST.to_json(), "epochs": 3,
                                                     "seed": 1})).fit(
        train.programs, train.latency_s)
    no_alignment = CDMPPRegressor(replace(TINY, stride_alignment=False),
                                  TrainConfig(**{**FAST.to_json(), "epochs": 3})).fit(
        train.programs, train.latency_s)
    models = [fitted, refitted, other_seed, no_alignment]
    # seeds read the same raw rows, though each normalizes them its own way
    assert fitted.input_key() == refitted.input_key() == other_seed.input_key() \
        != no_alignment.input_key()
    assert not np.array_equal(fitted.normalizer_.feature_min_, refitted.normalizer_.feature_min_)
    # exactly what the training side's preparation (normalized, then padded) gives
    alone = [m.normalizer_.inverse_target(predict_network(m.net_, m._data(test.programs)))
             * m._scale(test.programs) for m in models]
    prepared = []
    real = CDMPPRegressor._leaf_inputs
    monkeypatch.setattr(CDMPPRegressor, "_leaf_inputs",
                        lambda self, x: (prepared.append(self), real(self, x))[1])
    together = predict_together(models, test.programs)
    assert len(prepared) == 2  # one preparation per distinct input key
    for got, want in zip(together, alone):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(other_seed.predict(test.programs), alone[2])
    xgb = XGBBaseline(n_estimators=10, nthread=1).fit(train.programs, train.latency_s)
    prepared.clear()
    ens = EnsembleRegressor.from_fitted([fitted, xgb, other_seed])
    np.testing.assert_allclose(ens.predict(test.programs), np.cbrt(
        alone[0] * xgb.predict(test.programs) * alone[2]))
    assert len(prepared) == 1
    assert [len(p) for p in predict_together([fitted, other_seed],
                                             test.programs.subset([]))] == [0, 0]


@pytest.mark.parametrize("by_task", [False, True])
def test_validation_is_the_shared_carve(slice_data, by_task):
    """The epochs are chosen on `carve_rows`' validation set, the one the benchmarks choose
    their settings on."""
    from cdmpp.dataset.splits import carve_rows

    train, _ = slice_data
    fit_set, y_fit, val_set, y_val, _, _ = CDMPPRegressor._carve(
        train.programs, train.latency_s, None, FAST, by_task=by_task)
    fit_rows, val_rows = carve_rows(len(train.latency_s), FAST.val_fraction, FAST.seed,
                                    train.programs.task if by_task else None)
    np.testing.assert_array_equal(y_fit, train.latency_s[fit_rows])
    np.testing.assert_array_equal(y_val, train.latency_s[val_rows])
    assert list(val_set.task) == [train.programs.task[i] for i in val_rows]
    if by_task:
        assert not set(val_set.task) & set(fit_set.task)
