"""`cdmpp train` on databases of two devices: refused unless one is chosen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cdmpp.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_train_refuses_two_devices_and_trains_on_the_chosen_one(tmp_path, capsys):
    # the same real records, once as ../shared/data has them (no device.json: "znver4/2") and
    # once claimed by our own collector's device
    plain = tmp_path / "plain" / "dense_64x768x768"
    ours = tmp_path / "ours" / "dense_64x768x768"
    shutil.copytree(FIXTURES / "dense_64x768x768", plain)
    shutil.copytree(FIXTURES / "dense_64x768x768", ours)
    shutil.copy(FIXTURES / "device_epyc_2c.json", ours / "device.json")
    ours_id = json.loads((ours / "device.json").read_text())["device_id"]
    common = ["train", "--data", str(plain), "--data", str(ours), "--store",
              str(tmp_path / "store"), "--epochs", "1", "--workers", "1"]

    assert main(common + ["--out", str(tmp_path / "mixed")]) == 2
    err = capsys.readouterr().err
    assert "2 devices" in err and ours_id in err and "znver4/2" in err
    assert not (tmp_path / "mixed").exists()

    assert main(common + ["--out", str(tmp_path / "model"), "--device", ours_id,
                          "--default-weight", "5"]) == 0
    meta = json.loads((tmp_path / "model" / "estimator.json").read_text())
    assert meta["trained_on"]["device_id"] == ours_id
    assert meta["trained_on"]["records"] == 4
    assert meta["trained_on"]["default_weight"] == 5.0


def test_seeds_trains_one_member_per_seed_and_saves_their_ensemble(tmp_path, capsys):
    import numpy as np

    from cdmpp.dataset.loader import programs_for_rows
    from cdmpp.features.store import FeatureStore
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor
    from cdmpp.model.registry import load_estimator

    db = shutil.copytree(FIXTURES / "dense_64x768x768", tmp_path / "dense_64x768x768")
    out = tmp_path / "model"
    args = ["train", "--data", str(db), "--store", str(tmp_path / "store"), "--epochs", "2",
            "--workers", "1", "--out", str(out), "--seed", "3", "--seeds", "2"]
    assert main(args) == 0
    model = load_estimator(out)
    assert isinstance(model, EnsembleRegressor)
    assert [m.train_config_.seed for m in model.members_] == [3, 4]
    assert all(isinstance(m, CDMPPRegressor) for m in model.members_)
    assert json.loads((out / "estimator.json").read_text())["trained_on"]["seeds"] == [3, 4]
    assert not (tmp_path / "model.partial").exists()

    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    programs = programs_for_rows(store, samples, np.arange(samples.num_rows))
    a, b = (m.predict(programs) for m in model.members_)
    assert not np.allclose(a, b)  # two seeds, two models
    np.testing.assert_allclose(model.predict(programs), np.sqrt(a * b), rtol=1e-6)

    with pytest.raises(SystemExit):
        main(args[:-1] + ["0"])
    assert "argument --seeds: must be at least 1, got 0" in capsys.readouterr().err


def test_refit_trains_again_for_the_chosen_epochs(tmp_path):
    from cdmpp.model.registry import load_estimator

    db = shutil.copytree(FIXTURES / "dense_64x768x768", tmp_path / "dense_64x768x768")
    out = tmp_path / "model"
    assert main(["train", "--data", str(db), "--store", str(tmp_path / "store"), "--epochs", "3",
                 "--workers", "1", "--out", str(out), "--refit"]) == 0
    model = load_estimator(out)
    assert model.train_config_.refit
    assert model.refit_epochs_ == model.history_.best_epoch + 1 >= 1
    assert len(model.history_.refit_train_loss) == model.refit_epochs_


def test_rank_weight_reaches_the_saved_config(tmp_path, capsys):
    from cdmpp.model.registry import load_estimator

    db = shutil.copytree(FIXTURES / "dense_64x768x768", tmp_path / "dense_64x768x768")
    args = ["train", "--data", str(db), "--store", str(tmp_path / "store"), "--epochs", "2",
            "--workers", "1", "--out", str(tmp_path / "model"), "--rank-weight"]
    assert main(args + ["0.5"]) == 0
    assert load_estimator(tmp_path / "model").train_config_.rank_weight == 0.5
    assert main(args + ["-1"]) == 2
    assert "--rank-weight must be >= 0" in capsys.readouterr().err


def _copy_as_device(tmp_path, name: str, threads: int) -> tuple[Path, str]:
    """The dense fixture as measured by the fixture's device with `threads` threads."""
    from cdmpp.device import device_id

    db = tmp_path / name / "dense_64x768x768"
    shutil.copytree(FIXTURES / "dense_64x768x768", db)
    d = json.loads((FIXTURES / "device_epyc_2c.json").read_text())
    d["threads"] = threads
    d["device_id"] = device_id(d)
    (db / "device.json").write_text(json.dumps(d))
    return db, d["device_id"]


def test_for_device_trains_on_every_device_and_predicts_for_the_one_asked(tmp_path, capsys):
    import numpy as np

    from cdmpp.dataset.loader import labeled
    from cdmpp.features.store import FeatureStore
    from cdmpp.model.registry import load_estimator

    one, one_id = _copy_as_device(tmp_path, "one", threads=1)
    two, two_id = _copy_as_device(tmp_path, "two", threads=2)
    store_dir = tmp_path / "store"
    common = ["train", "--data", str(one), "--data", str(two), "--store", str(store_dir),
              "--epochs", "2", "--workers", "1"]
    assert main(common + ["--out", str(tmp_path / "m"), "--for-device", two_id]) == 0
    meta = json.loads((tmp_path / "m" / "estimator.json").read_text())
    assert meta["trained_on"]["device_id"] == two_id
    assert meta["trained_on"]["devices"] == {one_id: 4, two_id: 4}

    model = load_estimator(tmp_path / "m")
    store = FeatureStore(store_dir)
    samples = store.samples()
    ids = samples.column("device_id").to_pylist()
    rows = [i for i, d in enumerate(ids) if d == two_id]
    on_two = labeled(store, samples, rows, with_device=True).programs
    plain = labeled(store, samples, rows).programs  # no device vectors: "the model's device"
    np.testing.assert_array_equal(model.predict(plain), model.predict(on_two))
    one_vector = labeled(store, samples, [ids.index(one_id)], with_device=True).programs.device[0]
    on_one = on_two.with_device(one_vector)
    assert not np.array_equal(model.predict(on_one), model.predict(on_two))

    # every training device's vector is kept, and --for-device asks the same weights about it
    vectors = meta["trained_on"]["device_vectors"]
    assert sorted(vectors) == sorted([one_id, two_id])
    np.testing.assert_allclose(vectors[one_id], one_vector, rtol=1e-6)
    as_one = load_estimator(tmp_path / "m", for_device=one_id)
    np.testing.assert_allclose(as_one.predict(plain), model.predict(on_one), rtol=1e-6)
    np.testing.assert_array_equal(load_estimator(tmp_path / "m", for_device=two_id)
                                  .predict(plain), model.predict(plain))
    with pytest.raises(ValueError, match=f"knows {min(one_id, two_id)}, {max(one_id, two_id)}"):
        load_estimator(tmp_path / "m", for_device="0000000000000000")


def test_for_device_refuses_an_absent_device_and_device_beside_it(tmp_path, capsys):
    one, one_id = _copy_as_device(tmp_path, "one", threads=1)
    common = ["train", "--data", str(one), "--store", str(tmp_path / "store"), "--epochs", "1",
              "--workers", "1", "--out", str(tmp_path / "m")]
    assert main(common + ["--for-device", "0000000000000000"]) == 2
    err = capsys.readouterr().err
    assert "no record of device '0000000000000000'" in err and one_id in err
    assert main(common + ["--for-device", one_id, "--device", one_id]) == 2
    assert "give one" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_bad_split_or_model_names_fail_before_any_extraction(tmp_path, capsys, monkeypatch):
    import cdmpp.features.build as build

    monkeypatch.setattr(build, "open_store", lambda *a, **k: pytest.fail("extracted"))
    data = ["--data", str(tmp_path / "db"), "--store", str(tmp_path / "store")]
    assert main(["eval", *data, "--split", "random:0.5"]) == 2
    assert "unknown split 'random:0.5'" in capsys.readouterr().err
    assert main(["eval", *data, "--split", "random", "--models", "cdmpp,foo"]) == 2
    err = capsys.readouterr().err
    assert "unknown model name(s) ['foo']" in err and "'xgb-work'" in err
    assert main(["train", *data, "--out", str(tmp_path / "m"), "--split", "by-task:x"]) == 2
    assert "unknown split" in capsys.readouterr().err


@pytest.fixture
def fit_calls(monkeypatch):
    """Every CDMPPRegressor.fit call's (programs, y, sample_weight); the real fit still runs."""
    import numpy as np

    from cdmpp.model.estimator import CDMPPRegressor

    calls, real = [], CDMPPRegressor.fit

    def spy(self, programs, y, *args, sample_weight=None, **kwargs):
        calls.append((programs, np.asarray(y),
                      None if sample_weight is None else np.asarray(sample_weight)))
        return real(self, programs, y, *args, sample_weight=sample_weight, **kwargs)

    monkeypatch.setattr(CDMPPRegressor, "fit", spy)
    return calls


def _records_by_label(store):
    """{label: (db, record_index)} of a store's samples (the fixtures' labels are distinct)."""
    samples = store.samples()
    latency = samples.column("latency_s").to_pylist()
    ids = zip(samples.column("db").to_pylist(), samples.column("record_index").to_pylist())
    by_label = dict(zip(latency, ids))
    assert len(by_label) == len(latency)
    return by_label


def test_split_trains_on_the_training_side_and_reports_the_test_side(fixture_dbs, tmp_path,
                                                                      fit_calls, capsys):
    from cdmpp.dataset.splits import Split
    from cdmpp.features.store import FeatureStore

    out = tmp_path / "model"
    args = ["train", "--store", str(tmp_path / "store"), "--epochs", "1", "--workers", "1",
            "--out", str(out), "--split", "random"]
    for db in fixture_dbs:
        args += ["--data", str(db)]
    assert main(args) == 0

    store = FeatureStore(tmp_path / "store")
    split = Split.load(store.path, "random")
    assert split.train and split.test
    record_of = _records_by_label(store)
    assert len(fit_calls) == 1
    _, y, _ = fit_calls[0]
    fitted_on = [record_of[v] for v in y.tolist()]
    assert not set(fitted_on) & set(split.test)
    assert sorted(fitted_on) == sorted(split.train)
    trained_on = json.loads((out / "estimator.json").read_text())["trained_on"]
    assert trained_on["records"] == len(split.train) and trained_on["split"] == "random"
    printed = capsys.readouterr().out
    assert f"trained on {len(split.train)} records" in printed
    assert f"test side of random ({len(split.test)} records): MAPE" in printed


def test_default_weight_reaches_training(tmp_path, fit_calls):
    import numpy as np

    from cdmpp.features.store import FeatureStore

    db = shutil.copytree(FIXTURES / "dense_64x768x768", tmp_path / "dense_64x768x768")
    record_file = db / "database_tuning_record.json"
    lines = record_file.read_text().splitlines()
    default = json.loads(lines[0])
    default[1][0] = [[], []]  # an empty trace: the task's default (untuned) program
    default[1][1] = [2 * t for t in default[1][1]]  # a label of its own
    record_file.write_text("\n".join(lines + [json.dumps(default)]) + "\n")
    common = ["train", "--data", str(db), "--store", str(tmp_path / "store"), "--epochs", "1",
              "--workers", "1"]

    assert main(common + ["--out", str(tmp_path / "weighted"), "--default-weight", "5"]) == 0
    record_of = _records_by_label(FeatureStore(tmp_path / "store"))
    _, y, weight = fit_calls[-1]
    assert len(y) == 5 and weight is not None
    want = [5.0 if record_of[v] == (str(db), len(lines)) else 1.0 for v in y.tolist()]
    assert sorted(want) == [1.0, 1.0, 1.0, 1.0, 5.0]
    np.testing.assert_array_equal(weight, want)

    assert main(common + ["--out", str(tmp_path / "plain")]) == 0
    _, y, weight = fit_calls[-1]
    assert len(y) == 5 and (weight is None or np.all(weight == 1))


def test_device_weight_weights_the_for_device_records_only(tmp_path, fit_calls, capsys):
    import numpy as np

    one, one_id = _copy_as_device(tmp_path, "one", threads=1)
    two, two_id = _copy_as_device(tmp_path, "two", threads=2)
    common = ["train", "--data", str(one), "--data", str(two), "--store",
              str(tmp_path / "store"), "--epochs", "1", "--workers", "1"]
    assert main(common + ["--out", str(tmp_path / "m"), "--for-device", two_id,
                          "--device-weight", "3"]) == 0
    programs, _, weight = fit_calls[-1]
    threads = programs.device[:, 0]  # the device vector starts with the thread count
    assert sorted(set(threads.tolist())) == [1.0, 2.0]
    np.testing.assert_array_equal(weight, np.where(threads == 2.0, 3.0, 1.0))
    meta = json.loads((tmp_path / "m" / "estimator.json").read_text())
    assert meta["trained_on"]["device_weight"] == 3.0

    assert main(common + ["--out", str(tmp_path / "bad"), "--device-weight", "3"]) == 2
    assert "needs --for-device" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    for bad in ("0", "-1", "inf", "nan"):  # refused before any training, not by the fit
        assert main(common + ["--out", str(tmp_path / "bad"), "--for-device", two_id,
                              "--device-weight", bad]) == 2
        assert "finite weight > 0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def _with_default_program(src: Path, dst: Path, copies: int = 1) -> Path:
    """A copy of a fixture database plus its task's default program: the first record again,
    with an empty trace (what the collector writes for `kind: default`) and a label of its own
    (`copies` of it, each timed differently)."""
    db = shutil.copytree(src, dst)
    record_file = db / "database_tuning_record.json"
    lines = record_file.read_text().splitlines()
    defaults = []
    for i in range(copies):
        default = json.loads(lines[0])
        default[1][0] = [[], []]
        default[1][1] = [(3 + i) * t for t in default[1][1]]
        defaults.append(json.dumps(default))
    record_file.write_text("\n".join(lines + defaults) + "\n")
    return db


def test_default_expert_is_fitted_on_default_programs_and_joins_only_there(tmp_path, capsys):
    import numpy as np

    from cdmpp.dataset.loader import default_program_mask, labeled
    from cdmpp.features.store import FeatureStore
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.registry import load_estimator

    dbs = [_with_default_program(FIXTURES / name, tmp_path / name)
           for name in ("dense_64x768x768", "softmax_12x64x64")]
    common = ["train", "--data", str(dbs[0]), "--data", str(dbs[1]), "--store",
              str(tmp_path / "store"), "--epochs", "1", "--workers", "1"]
    assert main(common + ["--out", str(tmp_path / "m"), "--default-expert"]) == 0
    meta = json.loads((tmp_path / "m" / "estimator.json").read_text())
    assert meta["kind"] == "default_expert"
    assert meta["trained_on"]["default_expert"] == {"records": 2, "expert_weight": 0.5}

    model = load_estimator(tmp_path / "m")
    assert isinstance(model, DefaultExpertRegressor)
    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    rows = np.arange(samples.num_rows)
    flags = default_program_mask(samples, rows)
    assert flags.sum() == 2
    from dataclasses import replace

    programs = replace(labeled(store, samples, rows).programs, default=flags)
    alone = model.model_.predict(programs)
    expert = model.expert_.predict(programs)
    got = model.predict(programs)
    np.testing.assert_array_equal(got[~flags], alone[~flags])  # sampled programs: the model
    np.testing.assert_allclose(got[flags], np.sqrt(alone[flags] * expert[flags]))
    assert not np.allclose(got[flags], alone[flags])
    # flags unknown: the model alone
    np.testing.assert_array_equal(model.predict(replace(programs, default=None)), alone)

    # with a split, the test side's default programs meet the expert too
    capsys.readouterr()
    more = [_with_default_program(FIXTURES / name, tmp_path / "more" / name, copies=3)
            for name in ("dense_64x768x768", "softmax_12x64x64")]
    assert main(["train", "--data", str(more[0]), "--data", str(more[1]), "--store",
                 str(tmp_path / "store2"), "--epochs", "1", "--workers", "1", "--out",
                 str(tmp_path / "split"), "--default-expert", "--split", "random"]) == 0
    assert "test side of random" in capsys.readouterr().out


def test_default_expert_refuses_data_without_default_programs_before_training(
        tmp_path, capsys, fit_calls):
    db = shutil.copytree(FIXTURES / "dense_64x768x768", tmp_path / "dense_64x768x768")
    assert main(["train", "--data", str(db), "--store", str(tmp_path / "store"), "--epochs", "1",
                 "--workers", "1", "--out", str(tmp_path / "m"), "--default-expert"]) == 2
    assert "default program(s), it needs at least 2" in capsys.readouterr().err
    assert not fit_calls and not (tmp_path / "m").exists()
