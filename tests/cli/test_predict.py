"""`cdmpp predict`: one CSV row per record; bad lines reported, untimed records predicted."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cdmpp.cli.main import main
from cdmpp.measure.database import RECORD_FILE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NAMES = ("dense_64x768x768", "softmax_12x64x64", "addrelu_1x64x56x56")
HEADER = ["db", "record_index", "workload_hash", "predicted_latency_s", "measured_latency_s"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An XGBoost baseline trained on the fixture databases, saved with save_estimator, and
    the feature store it was trained from (reused by the tests as predict's cache)."""
    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.dataset.loader import programs_for_rows
    from cdmpp.features.build import build_store
    from cdmpp.features.store import FeatureStore
    from cdmpp.model.registry import save_estimator

    root = tmp_path_factory.mktemp("trained")
    dbs = [shutil.copytree(FIXTURES / name, root / "dbs" / name) for name in NAMES]
    build_store(dbs, root / "store", workers=1, progress=False)
    store = FeatureStore(root / "store")
    samples = store.samples()
    programs = programs_for_rows(store, samples, np.arange(samples.num_rows))
    model = XGBBaseline(n_estimators=20, nthread=1).fit(programs, samples.column("latency_s").to_numpy())
    return save_estimator(model, root / "model", trained_on={"dbs": list(NAMES)}), root / "store"


def _read(path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, [dict(zip(header, row)) for row in reader]


def _predict(model, dbs, out, store, capsys) -> tuple[int, str, str]:
    args = ["predict", "--model", str(model), "--out", str(out), "--store", str(store),
            "--workers", "1", "--no-progress"]
    for db in dbs:
        args += ["--db", db]
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_one_row_per_record_with_db_as_given(trained, fixture_dbs, tmp_path, capsys, monkeypatch):
    model, store = trained
    monkeypatch.chdir(fixture_dbs[0].parent)
    given = [f"./{NAMES[0]}/", NAMES[1], str(fixture_dbs[2])]  # relative, trailing slash, absolute
    code, out, err = _predict(model, given, tmp_path / "preds.csv", store, capsys)
    assert code == 0, err
    header, rows = _read(tmp_path / "preds.csv")
    assert header == HEADER
    assert [(r["db"], int(r["record_index"])) for r in rows] == \
        [(db, i) for db in given for i in range(4)]
    for r in rows:
        assert float(r["predicted_latency_s"]) > 0 and float(r["measured_latency_s"]) > 0
    first = json.loads((fixture_dbs[0] / RECORD_FILE).read_text().splitlines()[0])
    assert float(rows[0]["measured_latency_s"]) == pytest.approx(min(first[1][1]))
    assert rows[0]["workload_hash"] == json.loads(
        (fixture_dbs[0] / "database_workload.json").read_text().splitlines()[0])[0]
    assert "12 records predicted" in out and "0 skipped" in out and "MAPE" in out


def test_without_db_the_shipped_sample_data_is_predicted(trained, tmp_path, capsys):
    from cdmpp.measure.database import load_database
    from cdmpp.predict import sample_databases

    model, _ = trained
    code, out, err = _predict(model, [], tmp_path / "preds.csv", tmp_path / "store", capsys)
    assert code == 0, err
    (sample,) = sample_databases()
    records = load_database(sample).records
    _, rows = _read(tmp_path / "preds.csv")
    assert [(r["db"], int(r["record_index"])) for r in rows] == \
        [(sample, r.record_index) for r in records]
    assert [float(r["measured_latency_s"]) for r in rows] == \
        pytest.approx([r.latency_s for r in records])


def test_bad_lines_are_reported_and_the_rest_predicted(trained, fixture_dbs, tmp_path, capsys):
    model, store = trained
    db = fixture_dbs[0]
    lines = (db / RECORD_FILE).read_text().splitlines()
    good = json.loads(lines[1])
    failed = json.loads(lines[1])
    failed[1][1] = [1e10]  # TVM's failure marker: no timing, but a program to predict
    default = [0, [[[], []], None, good[1][2], good[1][3]]]  # untimed, a program not in the store
    broken = json.loads(lines[0])
    broken[1][0][0][0] = ["GetSBlock", [], ["no_such_block", "main"], ["b0"]]
    broken[1][1] = [1e10]
    with open(db / RECORD_FILE, "a") as f:
        f.write(lines[2][:40] + "\n")  # line 5: truncated
        f.write(json.dumps([3, good[1]]) + "\n")  # line 6: missing workload
        f.write(json.dumps(failed) + "\n")  # line 7
        f.write(json.dumps(default) + "\n")  # line 8
        f.write(json.dumps(broken) + "\n")  # line 9: its trace does not replay
    code, out, err = _predict(model, [str(db), str(fixture_dbs[1])], tmp_path / "p.csv",
                              tmp_path / "store", capsys)
    assert code == 0, err
    _, rows = _read(tmp_path / "p.csv")
    by_index = {int(r["record_index"]): r for r in rows if r["db"] == str(db)}
    assert sorted(by_index) == [0, 1, 2, 3, 6, 7]
    assert by_index[6]["measured_latency_s"] == "" and by_index[7]["measured_latency_s"] == ""
    assert float(by_index[6]["predicted_latency_s"]) == float(by_index[1]["predicted_latency_s"])
    assert float(by_index[7]["predicted_latency_s"]) > 0
    assert len(rows) == 10
    for line, reason in ((5, "not JSON"), (6, "workload"), (9, "does not replay")):
        assert f"{db / RECORD_FILE}:{line}: " in err
        assert reason in [x for x in err.splitlines() if f":{line}: " in x][0]
    assert "10 records predicted (2 without a measured latency), 3 skipped" in out


def test_user_errors_exit_2(trained, fixture_dbs, tmp_path, capsys, monkeypatch):
    from cdmpp.model import registry

    model, store = trained
    code, _, err = _predict(model, [str(tmp_path / "no_db")], tmp_path / "p.csv", store, capsys)
    assert code == 2 and "cdmpp predict: error:" in err and "no_db" in err
    code, _, err = _predict(tmp_path / "no_model", [str(fixture_dbs[0])], tmp_path / "p.csv",
                            store, capsys)
    assert code == 2 and "no_model" in err
    monkeypatch.setattr(registry, "SHIPPED_DIR", tmp_path / "no_models")  # a build without them
    code, _, err = _predict("default", [str(fixture_dbs[0])], tmp_path / "p.csv", store, capsys)
    assert code == 2 and "cdmpp predict: error:" in err and "no 'default' model" in err
    monkeypatch.undo()
    assert not (tmp_path / "p.csv").exists()
    (tmp_path / "a_dir").mkdir()  # --out names a directory: one line, no traceback
    code, _, err = _predict(model, [str(fixture_dbs[0])], tmp_path / "a_dir", store, capsys)
    assert code == 2 and "cdmpp predict: error:" in err and "a_dir" in err


def test_each_database_is_read_once(trained, fixture_dbs, tmp_path, monkeypatch):
    """predict reads a database once for the store and its own rows (parsing the records is
    most of a warm-store prediction), and hashes each program once."""
    import cdmpp.features.build as build
    import cdmpp.features.store as store_mod
    import cdmpp.predict as predict
    from cdmpp.model.registry import load_estimator

    model, _ = trained
    loads, hashes = [], []
    real_load, real_key = predict.load_database, store_mod.program_key

    def counting_load(path, **kw):
        loads.append(str(path))
        return real_load(path, **kw)

    def counting_key(rec, version):
        hashes.append((rec.db, rec.record_index))
        return real_key(rec, version)

    monkeypatch.setattr(predict, "load_database", counting_load)
    monkeypatch.setattr(build, "load_database", counting_load)
    monkeypatch.setattr(build, "program_key", counting_key)
    monkeypatch.setattr(store_mod, "program_key", counting_key)
    dbs = [str(d) for d in fixture_dbs[:2]]
    result = predict.predict_databases(load_estimator(model), dbs, store=tmp_path / "store",
                                       workers=1)
    assert sorted(loads) == sorted(dbs)
    assert len(result.predictions) == len(hashes) == len(set(hashes)) > 0


def test_a_model_of_another_device_is_noted(trained, fixture_dbs, tmp_path, capsys):
    from cdmpp.device import local_device, save_device, short_name
    from cdmpp.model.registry import load_estimator, save_estimator

    model, store = trained
    device = local_device(threads=1)
    for db in fixture_dbs:
        save_device(db, device)
    dbs = [str(db) for db in fixture_dbs]
    other = save_estimator(load_estimator(model), tmp_path / "other",
                           trained_on={"device_id": "0123456789abcdef"})
    code, _, err = _predict(other, dbs, tmp_path / "a.csv", store, capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1  # one per device, not per database
    assert "0123456789abcdef" in notes[0] and device.device_id in notes[0]
    assert short_name(device) in notes[0]
    same = save_estimator(load_estimator(model), tmp_path / "same",
                          trained_on={"device_id": device.device_id})
    code, _, err = _predict(same, dbs, tmp_path / "b.csv", store, capsys)
    assert code == 0 and "note:" not in err


def test_without_model_the_databases_device_chooses_it(fixture_dbs, monkeypatch):
    from cdmpp.cli.predict_cmd import database_devices, model_for
    from cdmpp.device import local_device, save_device
    from cdmpp.model import registry

    asked = []
    monkeypatch.setattr(registry, "for_device", lambda d: asked.append(d) or "zen5")
    dbs = [str(db) for db in fixture_dbs]
    assert model_for(database_devices(dbs)) == "default" and not asked  # no device.json
    one = local_device(threads=1)
    for db in fixture_dbs:
        save_device(db, one)
    assert model_for(database_devices(dbs)) == "zen5" and asked == [one]
    save_device(fixture_dbs[0], local_device(threads=2))  # two devices: no single choice
    assert model_for(database_devices(dbs)) == "default" and len(asked) == 1


def test_predictions_that_are_not_a_latency_are_called_out():
    from cdmpp.predict import Prediction, PredictionResult

    def row(i, predicted):
        return Prediction("db", i, "h", predicted, 1e-3)

    ok = PredictionResult([row(0, 1.1e-3), row(1, 0.9e-3)], databases=1)
    assert "WARNING" not in ok.summary() and "MAPE 10.0%" in ok.summary()
    broken = PredictionResult([row(0, 1.1e-3), row(1, float("nan")), row(2, 0.0)], databases=1)
    assert "WARNING: 2 predictions are not a positive finite latency" in broken.summary()
    assert broken.metrics()["n"] == 1


def test_default_programs_are_flagged_for_the_model(tmp_path):
    """A database's default (empty-trace) records reach the model flagged as such
    (`ProgramSet.default`), for a model with a default-program expert."""
    import cdmpp.predict as predict

    db = shutil.copytree(FIXTURES / "dense_64x768x768", tmp_path / "dense")
    lines = (db / RECORD_FILE).read_text().splitlines()
    default = json.loads(lines[1])
    default[1][0] = [[], []]  # an empty trace: what the collector writes for `kind: default`
    (db / RECORD_FILE).write_text("\n".join(lines + [json.dumps(default)]) + "\n")

    class Recorder:
        def predict(self, programs):
            self.default = programs.default
            return np.full(len(programs), 1e-3)

    model = Recorder()
    result = predict.predict_databases(model, [str(db)], store=tmp_path / "store", workers=1)
    flagged = [p.record_index for p, f in zip(result.predictions, model.default) if f]
    assert flagged == [len(lines)] and len(result.predictions) == len(lines) + 1


def test_for_device_predicts_for_a_device_the_model_was_trained_on(trained, fixture_dbs,
                                                                     tmp_path, capsys):
    from cdmpp.model.registry import device_vectors, fitted_device_id, load_estimator
    from cdmpp.predict import predict_databases

    _, store = trained
    zen4 = fitted_device_id("default")
    assert zen4 in device_vectors("zen3")  # zen3 was trained on four CPUs' records
    dbs = [str(db) for db in fixture_dbs]
    args = ["predict", "--model", "zen3", "--store", str(store), "--workers", "1",
            "--no-progress"] + [a for db in dbs for a in ("--db", db)]
    assert main(args + ["--out", str(tmp_path / "z4.csv"), "--for-device", zen4]) == 0
    assert main(args + ["--out", str(tmp_path / "z3.csv")]) == 0
    capsys.readouterr()
    as_zen4 = [float(r["predicted_latency_s"]) for r in _read(tmp_path / "z4.csv")[1]]
    as_zen3 = [float(r["predicted_latency_s"]) for r in _read(tmp_path / "z3.csv")[1]]
    expected = predict_databases(load_estimator("zen3", for_device=zen4), dbs, store=store,
                                 workers=1, progress=False)
    np.testing.assert_allclose(as_zen4, [p.predicted_latency_s for p in expected.predictions],
                               rtol=1e-6)
    assert not np.allclose(as_zen4, as_zen3, rtol=1e-2, atol=0)

    code = main(args + ["--out", str(tmp_path / "x.csv"), "--for-device", "0123456789abcdef"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot predict for device 0123456789abcdef" in err and zen4 in err
    assert not (tmp_path / "x.csv").exists()

    # a device it never saw, by its device.json (the collector's, with measured figures):
    # zero-shot from its vector
    from cdmpp.device import Device, device_id

    d = json.loads((FIXTURES / "device_epyc_2c.json").read_text())
    d.update(threads=1, peak_gflops=300.0, memory_gbps=40.0)
    d["device_id"] = device_id(d)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "device.json").write_text(json.dumps(d))
    assert main(args + ["--out", str(tmp_path / "new.csv"), "--for-device",
                        str(tmp_path / "new")]) == 0
    new = [float(r["predicted_latency_s"]) for r in _read(tmp_path / "new.csv")[1]]
    expected = predict_databases(load_estimator("zen3", for_device=Device.from_json(d)), dbs,
                                 store=store, workers=1, progress=False)
    np.testing.assert_allclose(new, [p.predicted_latency_s for p in expected.predictions],
                               rtol=1e-6)
    assert main(args + ["--out", str(tmp_path / "y.csv"), "--for-device", str(FIXTURES)]) == 2
    assert "a directory without device.json" in capsys.readouterr().err
