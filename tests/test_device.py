import dataclasses
import json

import numpy as np
import pytest

from cdmpp.device import (DEVICE_FILE, Device, DeviceMismatchError, claim_directory, describe,
                          device_id, load_device, local_device, save_device)


@pytest.fixture(scope="module")
def dev1() -> Device:
    return local_device(threads=1)


@pytest.fixture(scope="module")
def dev2() -> Device:
    return local_device(threads=2)


def test_local_device_fields_filled(dev1):
    dev = local_device()
    assert dev.cpu_model and dev.cpu_vendor and dev.os and dev.python and dev.tvm_version
    assert dev.threads >= 1 and dev.logical_cores >= 1 and dev.physical_cores >= 1
    assert dev.target["kind"] == "llvm" and dev.target["num-cores"] == dev.threads
    assert dev.target["mcpu"]
    assert dev.l1d_bytes > 0 and dev.l2_bytes > 0 and dev.l3_bytes > 0
    assert dev.memory_bytes > 0 and dev.vector_width_bits in (128, 256, 512)
    assert list(dev.isa_features) == sorted(dev.isa_features)
    assert dev1.threads == 1 and dev1.target["num-cores"] == 1
    assert "device" in describe(dev)
    json.dumps(dev.to_json())  # JSON-friendly, including the TVM target


def test_device_id_stable_and_threads_sensitive(dev1, dev2):
    assert local_device(threads=1).device_id == dev1.device_id
    assert dev1.device_id == device_id(dev1.to_json())
    assert dev1.device_id != dev2.device_id


def test_device_id_ignores_volatile_fields(dev1):
    d = dict(dev1.to_json(), frequency_mhz=1.0, os="x", python="y", tvm_version="z")
    assert device_id(d) == dev1.device_id


def test_hashable(dev1):
    assert hash(dev1) == hash(Device.from_json(dev1.to_json()))


def test_json_round_trip(dev1):
    assert Device.from_json(json.loads(json.dumps(dev1.to_json()))) == dev1


def test_from_json_missing_field(dev1):
    d = dev1.to_json()
    del d["l2_bytes"]
    with pytest.raises(ValueError, match="l2_bytes") as err:
        Device.from_json(d, source="some.json")
    assert "some.json" in str(err.value)


def test_from_json_bad_type_and_edited_id(dev1):
    with pytest.raises(ValueError, match="threads"):
        Device.from_json(dict(dev1.to_json(), threads="4"))
    with pytest.raises(ValueError, match="device_id"):
        Device.from_json(dict(dev1.to_json(), threads=7))


def test_save_load_round_trip(tmp_path, dev1):
    assert load_device(tmp_path) is None
    path = save_device(tmp_path, dev1)
    assert path == tmp_path / DEVICE_FILE
    assert load_device(tmp_path) == dev1
    assert [p.name for p in tmp_path.iterdir()] == [DEVICE_FILE]  # no temp file left


def test_load_corrupt(tmp_path):
    (tmp_path / DEVICE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=DEVICE_FILE):
        load_device(tmp_path)


def test_claim_directory(tmp_path, dev1, dev2):
    out = tmp_path / "out"
    assert claim_directory(out, dev1) == dev1
    assert (out / DEVICE_FILE).exists()
    assert claim_directory(out, dataclasses.replace(dev1)) == dev1
    with pytest.raises(DeviceMismatchError) as err:
        claim_directory(out, dev2)
    msg = str(err.value)
    assert str(out) in msg and dev1.device_id in msg and dev2.device_id in msg
    assert "threads" in msg
    assert load_device(out) == dev1  # the stored device is untouched


def test_claim_directory_refuses_records_of_an_unknown_device(tmp_path, dev1):
    # a TVM database written elsewhere (no device.json): its records' device is unknown
    out = tmp_path / "tvm-db"
    out.mkdir()
    (out / "database_tuning_record.json").write_text('[0, [[], [1e-3], {}, []]]\n')
    with pytest.raises(DeviceMismatchError, match="already holds records but no device.json"):
        claim_directory(out, dev1)
    assert not (out / DEVICE_FILE).exists()
    (out / "database_tuning_record.json").write_text("")  # an empty one is claimed
    assert claim_directory(out, dev1) == dev1


def test_device_vector_from_a_fixture_device_json():
    import json
    from pathlib import Path

    from cdmpp.device import DEVICE_VECTOR_FIELDS, Device, device_vector

    path = Path(__file__).parent / "fixtures" / "device_epyc_2c.json"
    device = Device.from_json(json.loads(path.read_text()), source=str(path))
    v = device_vector(device)
    assert v.shape == (len(DEVICE_VECTOR_FIELDS),) and np.all(np.isfinite(v))
    assert v[0] == device.threads == 2
    assert v[2] == 4.0  # AVX-512: 512 / 128
    assert v[3] == 5.0  # 32 KiB L1d


def test_device_json_without_measured_figures_loads_with_defaults():
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "device_epyc_2c.json"
    data = json.loads(path.read_text())
    assert "peak_gflops" not in data and "memory_gbps" not in data  # written before they existed
    device = Device.from_json(data, source=str(path))
    assert device.peak_gflops == 0.0 and device.memory_gbps == 0.0
    assert device.device_id == data["device_id"]
    assert "not yet" in describe(device)


def test_measured_figures_round_trip_and_keep_the_id(dev1):
    measured = dataclasses.replace(dev1, peak_gflops=123.4, memory_gbps=25)
    assert device_id(measured.to_json()) == dev1.device_id  # not identity fields
    loaded = Device.from_json(json.loads(json.dumps(measured.to_json())))
    assert loaded == measured and isinstance(loaded.memory_gbps, float)
    assert "123.4 GFLOP/s" in describe(measured) and "25.0 GB/s" in describe(measured)
    with pytest.raises(ValueError, match="peak_gflops"):
        Device.from_json(dict(measured.to_json(), peak_gflops="fast"))


@pytest.mark.parametrize("mcpu, bits", [("x86-64-v2", 128), ("haswell", 256), ("znver4", 512)])
def test_vector_width_is_the_targets_not_the_hosts(mcpu, bits):
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 CPU names")
    device = local_device(threads=1, mcpu=mcpu)
    assert device.target["mcpu"] == mcpu and device.vector_width_bits == bits


def test_unknown_mcpu_is_refused():
    with pytest.raises(ValueError, match="unknown LLVM CPU name 'no-such-cpu'"):
        local_device(threads=1, mcpu="no-such-cpu")


def test_device_vector_length_and_measured_entries(dev1):
    from cdmpp.device import DEVICE_VECTOR_FIELDS, device_vector

    assert DEVICE_VECTOR_FIELDS[:7] == ("threads", "log2_frequency_mhz", "vector_width_128",
                                        "log2_l1d_kib", "log2_l2_kib", "log2_l3_kib",
                                        "log2_memory_gib")
    v = device_vector(dev1)
    assert v.shape == (len(DEVICE_VECTOR_FIELDS),)
    assert v[-2] == v[-1] == 0.0  # not measured
    v = device_vector(dataclasses.replace(dev1, peak_gflops=128.0, memory_gbps=0.5))
    assert v[-2] == 7.0 and v[-1] == 0.0  # log2(max(x, 1))


def _changed(device: Device, **fields) -> Device:
    """`device` with some fields changed and its id recomputed, as another machine writes it."""
    d = {**device.to_json(), **fields}
    d["device_id"] = device_id(d)
    return Device.from_json(d)


def test_same_processor_ignores_hidden_flags_and_memory_only():
    from pathlib import Path

    from cdmpp.device import same_processor

    path = Path(__file__).parent / "fixtures" / "device_epyc_2c.json"
    zen4 = Device.from_json(json.loads(path.read_text()), source=str(path))
    # another VM of it: a hypervisor hides AVX-512 BF16, and it has 1 GiB more RAM
    other_vm = _changed(zen4, isa_features=[f for f in zen4.isa_features if f != "avx512_bf16"],
                        memory_bytes=zen4.memory_bytes + 2**30)
    assert "avx512_bf16" in zen4.isa_features
    assert other_vm.device_id != zen4.device_id and same_processor(zen4, other_vm)
    # what changes the code or the speed is another processor
    assert not same_processor(zen4, _changed(zen4, threads=1))
    assert not same_processor(zen4, _changed(zen4, l3_bytes=zen4.l3_bytes * 2))
    assert not same_processor(zen4, _changed(zen4, target={**zen4.target, "mcpu": "znver3"}))
    # without an mcpu the target names no microarchitecture: the same CPU name is not enough
    generic = {k: v for k, v in zen4.target.items() if k != "mcpu"}
    assert not same_processor(_changed(zen4, target=generic), _changed(zen4, target=generic))
