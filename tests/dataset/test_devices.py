import pyarrow as pa
import pytest

from cdmpp.dataset.devices import device_counts, one_device, training_samples


def _samples(devices, dbs):
    return pa.table({"device_id": devices, "db": dbs, "latency_s": [1e-3] * len(devices)})


def test_one_device_passes_a_single_device_through():
    s = _samples(["a", "a"], ["db1", "db2"])
    assert one_device(s) is s


def test_several_devices_are_refused_with_what_they_are():
    s = _samples(["a", "b", "b"], ["db1", "db2", "db2"])
    with pytest.raises(ValueError) as err:
        one_device(s)
    msg = str(err.value)
    assert "2 devices" in msg and "a (1 records, from db1)" in msg
    assert "b (2 records, from db2)" in msg and "--device" in msg


def test_choosing_a_device_keeps_only_its_records():
    s = _samples(["a", "b", "b", "a"], ["db1", "db2", "db2", "db3"])
    kept = one_device(s, "a")
    assert kept.column("db").to_pylist() == ["db1", "db3"]
    assert device_counts(s)["b"] == {"records": 2, "databases": ["db2"]}


def test_choosing_an_absent_device_names_the_ones_present():
    with pytest.raises(ValueError, match=r"no record of device 'c'.*a \(1 records"):
        one_device(_samples(["a"], ["db1"]), "c")


def test_a_fit_for_one_device_keeps_every_device_and_names_it():
    s = _samples(["a", "b", "b"], ["db1", "db2", "db2"])
    kept, device = training_samples(s, for_device="b")
    assert kept is s and device == "b"
    with pytest.raises(ValueError, match=r"no record of device 'c'"):
        training_samples(s, for_device="c")
    with pytest.raises(ValueError, match="two ways to train"):
        training_samples(s, for_device="b", device="a")


def test_a_fit_without_device_input_keeps_one_device_and_names_it():
    s = _samples(["a", "b", "b"], ["db1", "db2", "db2"])
    kept, device = training_samples(s, device="b")
    assert kept.column("db").to_pylist() == ["db2", "db2"] and device == "b"
    assert training_samples(_samples(["a"], ["db1"]))[1] == "a"
    with pytest.raises(ValueError, match="2 devices"):
        training_samples(s)
    with pytest.raises(ValueError, match="no usable record"):
        training_samples(_samples([], []))
