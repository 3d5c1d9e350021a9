"""A multi-device model asked about another device it was trained on (`for_device`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cdmpp.model import registry
from cdmpp.model.retarget import takes_device, with_device_vector

from model_helpers import random_programs


def _programs():
    programs, _ = random_programs(n=12, seed=3)
    # half of them default programs: the default-program expert (XGBoost) answers there too
    return replace(programs, default=np.arange(len(programs)) % 2 == 0)


@pytest.mark.parametrize("name", ["zen3", "zen5"])
def test_for_device_predicts_as_programs_carrying_that_device_vector(name):
    vectors = registry.device_vectors(name)
    fitted = registry.fitted_device_id(name)
    other = next(d for d in vectors if d != fitted)
    programs = _programs()
    plain = registry.load_estimator(name)
    asked = registry.load_estimator(name, for_device=other)
    expected = plain.predict(programs.with_device(vectors[other]))
    np.testing.assert_allclose(asked.predict(programs), expected, rtol=1e-6)
    # the model's own device is what it predicts without for_device, and for_device=fitted
    assert not np.allclose(asked.predict(programs), plain.predict(programs), rtol=1e-3, atol=0)
    np.testing.assert_array_equal(registry.load_estimator(name, for_device=fitted)
                                  .predict(programs), plain.predict(programs))


def test_shipped_vectors_include_the_fitted_devices_own():
    for name in ("zen5", "emeraldrapids", "zen3", "xeon480"):
        vectors = registry.device_vectors(name)
        assert registry.fitted_device_id(name) in vectors
        assert registry.fitted_device_id("default") in vectors  # all trained on Zen 4's data
        model = registry.load_estimator(name)
        own = [p.device_vector_ for p in _parts(model)]
        assert own and all(np.allclose(v, vectors[registry.fitted_device_id(name)], atol=1e-5)
                           for v in own)


def _parts(model):
    from cdmpp.model.retarget import _device_parts

    return list(_device_parts(model))


def test_unknown_device_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="cannot predict for device 0123456789abcdef: it "
                                         "knows 1cdbe2950beba7d1, 7566cfb52e598ab7"):
        registry.load_estimator("zen3", for_device="0123456789abcdef")
    # a one-device model knows only its own
    zen4 = registry.fitted_device_id("default")
    with pytest.raises(ValueError, match=f"it knows {zen4}"):
        registry.load_estimator("default", for_device=registry.fitted_device_id("zen3"))


def test_with_device_vector_copies_and_checks():
    model = registry.load_estimator("zen3")
    before = [p.device_vector_.copy() for p in _parts(model)]
    vector = np.arange(len(before[0]), dtype=np.float64)
    moved = with_device_vector(model, vector)
    assert all(np.array_equal(p.device_vector_, vector) for p in _parts(moved))
    assert all(np.array_equal(p.device_vector_, v) for p, v in zip(_parts(model), before))
    with pytest.raises(ValueError, match="length 3"):
        with_device_vector(model, [1.0, 2.0, 3.0])
    plain = registry.load_estimator("xgb")  # fitted on Zen 4's records, no device input
    assert takes_device(model) and not takes_device(plain)
    with pytest.raises(ValueError, match="trained without device vectors"):
        with_device_vector(plain, vector)


def test_mismatch_note_points_to_for_device_when_the_model_knows_the_device():
    zen4 = registry.fitted_device_id("default")
    note = registry.device_mismatch("zen3", zen4)
    assert f"--for-device {zen4}" in note and "calibrate" not in note
    unknown = registry.device_mismatch("zen3", "0123456789abcdef")
    # a device no model knows: calibrate, or the model of the most devices, zero-shot
    assert "calibrate" in unknown and "--model xeon480 --for-device local" in unknown  # 5 CPUs


def _device(threads: int, peak_gflops: float = 300.0, memory_gbps: float = 40.0):
    """The Zen 4 fixture device.json with `threads` (another device id unless 2), measured
    figures, and the memory size of the VMs the models were trained on (all 2^4.557 GiB)."""
    import json
    from pathlib import Path

    from cdmpp.device import Device, device_id

    d = json.loads((Path(__file__).parents[1] / "fixtures" / "device_epyc_2c.json").read_text())
    zen4 = registry.device_vectors("zen5")[registry.fitted_device_id("default")]
    d.update(threads=threads, peak_gflops=peak_gflops, memory_gbps=memory_gbps,
             memory_bytes=int(round(2 ** zen4[6] * 2**30)))
    d["device_id"] = device_id(d)
    return Device.from_json(d)


def test_a_device_the_model_never_saw_is_predicted_zero_shot_from_its_vector():
    import warnings

    from cdmpp.device import device_vector

    programs = _programs()
    plain = registry.load_estimator("zen5")
    new = _device(threads=1)  # zen5 was trained on two CPUs, both with 2 threads
    assert new.device_id not in registry.device_vectors("zen5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zero_shot = registry.load_estimator("zen5", for_device=new)
    np.testing.assert_allclose(zero_shot.predict(programs),
                               plain.predict(programs.with_device(device_vector(new))),
                               rtol=1e-6)
    assert [str(w.message).split(" in ")[-1].split(":")[0] for w in caught] == ["threads"]
    # a device it knows is asked by its id: the vector it learned, not the one given
    known = _device(threads=2)
    assert known.device_id == registry.fitted_device_id("default")
    np.testing.assert_array_equal(
        registry.load_estimator("zen5", for_device=known).predict(programs),
        registry.load_estimator("zen5", for_device=known.device_id).predict(programs))


def test_zero_shot_needs_the_measured_figures():
    with pytest.raises(ValueError, match="peak FLOP/s and memory bandwidth are not measured"):
        registry.load_estimator("zen3", for_device=_device(threads=1, peak_gflops=0.0))


def test_outside_training_range_names_the_fields():
    from cdmpp.model.retarget import outside_training_range

    model = registry.load_estimator("zen3")
    inside = registry.device_vectors("zen3")[registry.fitted_device_id("default")]
    assert outside_training_range(model, inside) == []
    far = list(inside)
    far[0], far[-1] = 64.0, 0.0  # threads, log2 memory GB/s
    assert outside_training_range(model, far) == ["threads", "log2_memory_gbps"]


def test_a_missing_device_json_is_named_not_taken_for_an_id(tmp_path):
    missing = str(tmp_path / "device.json")
    with pytest.raises(FileNotFoundError, match=f"device {missing}: no such device.json"):
        registry.resolve_for_device(missing, "zen3", lambda: "unused")
    assert registry.resolve_for_device("7566cfb52e598ab7", "zen3", lambda: "x") == "7566cfb52e598ab7"
