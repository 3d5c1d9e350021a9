"""Saving and loading estimators by directory; the shipped-model names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cdmpp.baselines.xgb import XGBBaseline
from cdmpp.dataset.programs import ProgramSet
from cdmpp.features import N_LEAF_FEATURES
from cdmpp.model import registry
from cdmpp.model.registry import load_estimator, save_estimator


def _programs(n=40, seed=0):
    rng = np.random.default_rng(seed)
    feats = tuple(rng.random((int(k), N_LEAF_FEATURES), dtype=np.float32)
                  for k in rng.integers(1, 6, n))
    pos = tuple(np.arange(len(f), dtype=np.int32) for f in feats)
    programs = ProgramSet(feats, pos)
    y = np.exp(programs.summed()[:, 0] / 10) * 1e-4
    return programs, y


@pytest.fixture
def xgb_model():
    programs, y = _programs()
    return XGBBaseline(n_estimators=10, nthread=1).fit(programs, y), programs


def test_round_trip_gives_identical_predictions(xgb_model, tmp_path):
    model, programs = xgb_model
    out = save_estimator(model, tmp_path / "m", trained_on={"store": "s", "split": "random"})
    meta = json.loads((out / "estimator.json").read_text())
    assert meta["kind"] == "xgb" and meta["trained_on"] == {"store": "s", "split": "random"}
    assert {"cdmpp_version", "feature_version", "created"} <= set(meta)
    loaded = load_estimator(out)
    assert isinstance(loaded, XGBBaseline)
    np.testing.assert_array_equal(loaded.predict(programs), model.predict(programs))
    # saving over an estimator directory replaces it and leaves no temp directory behind
    save_estimator(model, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_unknown_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_estimator(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty.*estimator\.json"):
        load_estimator(tmp_path / "empty")


def test_incomplete_or_foreign_directories(xgb_model, tmp_path):
    model, _ = xgb_model
    out = save_estimator(model, tmp_path / "m")
    import shutil

    shutil.rmtree(out / "model")
    with pytest.raises(FileNotFoundError, match="no model"):
        load_estimator(out)
    (out / "estimator.json").write_text(json.dumps({"kind": "lightgbm"}))
    with pytest.raises(ValueError, match="lightgbm"):
        load_estimator(out)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="refusing"):
        save_estimator(model, tmp_path / "data")
    assert (tmp_path / "data" / "keep.txt").exists()


def test_damaged_model_files_name_the_model(xgb_model, tmp_path):
    model, _ = xgb_model
    out = save_estimator(model, tmp_path / "m")
    (out / "model" / "params.json").write_text("")  # truncated by a full disk, say
    with pytest.raises(ValueError, match=r"m: its model files cannot be read .*damaged"):
        load_estimator(out)


def test_the_two_save_formats_point_at_each_other(xgb_model, tmp_path):
    model, _ = xgb_model
    model.save(tmp_path / "own")  # the estimator's own files: no estimator.json
    with pytest.raises(FileNotFoundError, match=r"own holds no estimator\.json.*save_estimator"):
        load_estimator(tmp_path / "own")
    out = save_estimator(model, tmp_path / "registry")
    with pytest.raises(FileNotFoundError, match=r"written by save_estimator.*load_model"):
        XGBBaseline.load(out)


def test_other_feature_version_is_refused(xgb_model, tmp_path):
    model, _ = xgb_model
    out = save_estimator(model, tmp_path / "m")
    meta = json.loads((out / "estimator.json").read_text())
    (out / "estimator.json").write_text(json.dumps(dict(meta, feature_version="0")))
    with pytest.raises(ValueError, match="version"):
        load_estimator(out)
    assert isinstance(load_estimator(out, check_features=False), XGBBaseline)


def test_shipped_names(xgb_model, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "SHIPPED_DIR", tmp_path / "shipped")
    with pytest.raises(FileNotFoundError, match="no 'default' model is shipped"):
        load_estimator("default")
    model, programs = xgb_model
    save_estimator(model, tmp_path / "shipped" / "xgb")
    np.testing.assert_array_equal(load_estimator("xgb").predict(programs),
                                  model.predict(programs))


def test_device_mismatch_names_both_devices(xgb_model, tmp_path):
    model, _ = xgb_model
    fitted = save_estimator(model, tmp_path / "one", trained_on={"device_id": "aaaa"})
    assert registry.fitted_device_id(fitted) == "aaaa"
    assert registry.device_mismatch(fitted, "aaaa") is None
    note = registry.device_mismatch(fitted, "bbbb", "AMD EPYC, znver5, 2 threads")
    assert "aaaa" in note and "bbbb (AMD EPYC, znver5, 2 threads)" in note
    assert "cdmpp calibrate" in note
    # a model of several devices (or of unknown ones) has nothing to compare
    several = save_estimator(model, tmp_path / "several", trained_on={"data": ["x", "y"]})
    assert registry.fitted_device_id(several) is None
    assert registry.device_mismatch(several, "bbbb") is None


def test_shipped_models_know_their_device():
    zen4, zen5 = registry.fitted_device_id("default"), registry.fitted_device_id("zen5")
    intel, zen3 = registry.fitted_device_id("emeraldrapids"), registry.fitted_device_id("zen3")
    assert zen4 and zen5 and intel and zen3 and len({zen4, zen5, intel, zen3}) == 4
    assert registry.device_mismatch("default", zen4) is None
    assert "fitted for device" in registry.device_mismatch("default", zen5)
    # without --model, predict and e2e take the shipped model of the device, else default
    assert registry.for_device(zen4) == "default" and registry.for_device(zen5) == "zen5"
    assert registry.for_device(intel) == "emeraldrapids" and registry.for_device(zen3) == "zen3"
    assert registry.for_device("0123456789abcdef") == "default"
    # which `calibrate` tells apart: Zen 4's own model, and none for a CPU no model knows
    assert registry.fitted_for(zen4) == "default"
    assert registry.fitted_for("0123456789abcdef") is None


def test_default_is_the_ensemble_of_the_seeds_and_xgboost_of_the_zen4_vm():
    """`default` names the shipped ensemble (also `ensemble`), chosen for the Zen 4 VM and for
    another VM of its processor by its device.json; `seeds` the three seeds within it."""
    import torch

    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.device import same_processor
    from cdmpp.model.ensemble import EnsembleRegressor

    assert registry.resolve("default") == registry.resolve("ensemble")
    assert registry.read_meta("default")["kind"] == "ensemble"
    assert registry.fitted_device_id("seeds") == registry.fitted_device_id("default")
    zen4 = registry.fitted_device("default")
    assert zen4 is not None and same_processor(zen4, registry.fitted_device("seeds"))
    model, seeds = registry.load_estimator("default"), registry.load_estimator("seeds")
    assert isinstance(model, EnsembleRegressor) and isinstance(model.members_[1], XGBBaseline)
    inner = model.members_[0]
    assert len(inner.members_) == len(seeds.members_) == 3
    for a, b in zip(inner.members_, seeds.members_):  # the same seeds, not another training
        ours, theirs = a.net_.state_dict(), b.net_.state_dict()
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_the_shipped_models_fit_in_the_50_mb_the_repository_allows():
    size = sum(f.stat().st_size for f in registry.SHIPPED_DIR.rglob("*") if f.is_file())
    assert 0 < size <= 50 * 10**6, f"{size / 10**6:.1f} MB of shipped models"


def test_the_device_id_a_for_device_value_names():
    from pathlib import Path

    from cdmpp.device import Device

    assert registry.for_device_id(None) is None
    assert registry.for_device_id("8d19a00b08391ba3") == "8d19a00b08391ba3"
    fixture = Path(__file__).parents[1] / "fixtures" / "device_epyc_2c.json"
    device = Device.from_json(json.loads(fixture.read_text()))
    assert registry.for_device_id(device) == "beb308d09a4ac277"


def _other_vm(device, hidden=("avx512_bf16", "avx512_fp16", "avx_vnni")):
    """`device` as another VM of its processor shows it: a few CPU flags hidden, a new id."""
    from cdmpp.device import Device, device_id

    d = device.to_json()
    d["isa_features"] = [f for f in d["isa_features"] if f not in hidden]
    d["device_id"] = device_id(d)
    return Device.from_json(d)


def test_another_vm_of_a_shipped_models_processor_gets_that_model():
    from cdmpp.device import Device, device_id

    intel = registry.fitted_device("emeraldrapids")
    assert intel.device_id == registry.fitted_device_id("emeraldrapids")
    other = _other_vm(intel)  # seen here: an Emerald Rapids VM without those three flags
    assert other.device_id != intel.device_id
    assert registry.for_device(other) == "emeraldrapids"
    assert registry.for_device(other.device_id) == "default"  # an id alone says nothing more
    note = registry.device_mismatch("emeraldrapids", other)
    assert "same processor" in note and other.device_id in note
    assert "avx512_bf16, avx512_fp16, avx_vnni hidden here" in note
    # another Intel generation under the same CPU name (caches, mcpu) gets the default model,
    # and the note says to calibrate
    d = {**other.to_json(), "l3_bytes": 24 * 2**20, "target": {**other.target, "mcpu": "rocketlake"}}
    d["device_id"] = device_id(d)
    rocketlake = Device.from_json(d)
    assert rocketlake.cpu_model == intel.cpu_model
    assert registry.for_device(rocketlake) == "default"
    assert "cdmpp calibrate" in registry.device_mismatch("emeraldrapids", rocketlake)


def test_save_estimator_keeps_the_device_it_was_fitted_for(xgb_model, tmp_path):
    from cdmpp.device import local_device

    model, _ = xgb_model
    here = local_device()
    saved = save_estimator(model, tmp_path / "m", trained_on={"device_id": here.device_id},
                           device=here)
    assert registry.fitted_device(saved) == here
    assert registry.fitted_device(save_estimator(model, tmp_path / "n")) is None


def test_for_device_local_on_another_vm_of_a_known_processor_is_that_device():
    intel = registry.fitted_device("emeraldrapids")
    other = _other_vm(intel)
    # zen3 was trained on the Intel VM's records: "local" here is that device, not zero-shot
    assert registry.same_processor_known("zen3", other) == intel.device_id
    assert registry.resolve_for_device("local", "zen3", lambda: other) == intel.device_id
    # emeraldrapids is the one chosen here; zen3 and xeon480 were trained on its records too
    assert registry.also_knowing(other) == ["zen3", "xeon480"]
    assert registry.same_processor_known("default", other) is None  # Zen 4 only


def test_for_device_note_names_another_vm_of_the_processor():
    from cdmpp.cli import for_device_note

    intel = registry.fitted_device("emeraldrapids")
    other = _other_vm(intel)
    note = for_device_note("zen3", intel.device_id, other)
    assert "another VM of this machine's processor" in note and other.device_id in note
    assert "--for-device" in for_device_note("zen3", registry.fitted_device_id("zen5"), other)
