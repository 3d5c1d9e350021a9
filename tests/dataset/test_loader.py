"""Device vectors come back from the feature store, without the databases or TVM."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cdmpp.dataset.loader import labeled
from cdmpp.device import Device, device_id, device_vector
from cdmpp.features.build import build_store
from cdmpp.features.store import FeatureStore


def _give_device(db, threads: int) -> Device:
    """Write a device.json (the fixture's own device, with `threads`) into a database."""
    from conftest import FIXTURES

    d = json.loads((FIXTURES / "device_epyc_2c.json").read_text())
    d["threads"] = threads
    d["device_id"] = device_id(d)
    (db / "device.json").write_text(json.dumps(d))
    return Device.from_json(d)


def test_labeled_programs_carry_their_device_vectors(fixture_dbs, tmp_path):
    one = _give_device(fixture_dbs[0], threads=1)
    two = _give_device(fixture_dbs[1], threads=2)
    build_store(fixture_dbs[:2], tmp_path / "store", workers=1, progress=False)
    store = FeatureStore(tmp_path / "store")
    assert set(store.devices()) == {one.device_id, two.device_id}
    samples = store.samples()
    rows = np.arange(samples.num_rows)
    data = labeled(store, samples, rows, with_device=True)
    ids = samples.column("device_id").to_pylist()
    for i, row in enumerate(rows):
        want = device_vector(one if ids[row] == one.device_id else two)
        np.testing.assert_array_equal(data.programs.device[i], want)
    assert labeled(store, samples, rows).programs.device is None


def test_a_device_without_device_json_is_a_clear_error(fixture_dbs, tmp_path):
    for db in fixture_dbs[:1]:
        (db / "device.json").unlink(missing_ok=True)
    build_store(fixture_dbs[:1], tmp_path / "store", workers=1, progress=False)
    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    with pytest.raises(ValueError, match="no device.json"):
        labeled(store, samples, np.arange(samples.num_rows), with_device=True)


def test_work_sums_flops_and_bytes_back_from_slog():
    from cdmpp.dataset.programs import ProgramSet
    from cdmpp.features.matching import COL_ACCESS, N_TVM_FEATURES

    leaf = np.zeros((2, N_TVM_FEATURES), dtype=np.float32)
    leaf[0, 0] = np.log2(1 + 1000)  # 1000 float multiply-adds
    leaf[1, 1] = np.log2(1 + 24)  # 24 float adds
    leaf[1, COL_ACCESS + 3] = np.log2(1 + 4096)  # buffer 0 of leaf 1: 4096 bytes
    leaf[1, COL_ACCESS + 18 + 3] = np.log2(1 + 512)  # buffer 1: 512 bytes
    leaf[1, COL_ACCESS + 4] = 30.0  # unique bytes: not counted
    programs = ProgramSet((leaf,), (np.array([0, 1]),))
    np.testing.assert_allclose(programs.work(), [1 + 1000 + 24 + 4096 + 512], rtol=1e-5)


def test_work_of_several_programs_matches_one_at_a_time():
    from cdmpp.dataset.programs import ProgramSet

    rng = np.random.default_rng(0)
    leaves = [rng.uniform(0, 12, size=(n, 164)).astype(np.float32) for n in (3, 1, 0, 5, 2, 0)]
    programs = ProgramSet(tuple(leaves), tuple(np.arange(len(f)) for f in leaves))
    together = programs.work()
    alone = [ProgramSet((f,), (np.arange(len(f)),)).work()[0] for f in leaves]
    np.testing.assert_allclose(together, alone)
    assert ProgramSet((), ()).work().shape == (0,)


def test_heaviest_is_the_store_with_the_most_work():
    from cdmpp.dataset.programs import ProgramSet, work_columns

    rng = np.random.default_rng(1)
    leaves = [rng.uniform(0, 12, size=(n, 164)).astype(np.float32) for n in (3, 1, 0, 5)]
    leaves.append(np.repeat(leaves[0][:1], 2, axis=0))  # two equal stores: the first
    programs = ProgramSet(tuple(leaves), tuple(np.arange(len(f)) for f in leaves))
    heaviest = programs.heaviest()
    assert heaviest.shape == (5, 164)
    for f, h in zip(leaves, heaviest):
        if not len(f):
            assert not h.any()
            continue
        work = (np.exp2(f[:, work_columns()].astype(np.float64)) - 1).sum(axis=1)
        np.testing.assert_array_equal(h, f[np.argmax(work)])
    assert ProgramSet((), ()).heaviest().shape == (0, 0)
    both = programs.heaviest(per_work=True)
    np.testing.assert_array_equal(both[:, :164], heaviest)
    np.testing.assert_allclose(both[:, 164:], heaviest - np.log2(programs.work())[:, None])
    assert not both[2].any()  # no leaves: no features, work 1


def test_work_is_computed_once_per_set_and_kept_read_only():
    from cdmpp.dataset.programs import ProgramSet

    rng = np.random.default_rng(2)
    leaves = tuple(rng.uniform(0, 12, size=(n, 164)).astype(np.float32) for n in (2, 0, 4))
    pos = tuple(np.arange(len(f)) for f in leaves)
    programs = ProgramSet(leaves, pos)
    programs.heaviest(per_work=True)  # computes work on the way: kept for the next caller
    kept = programs.work()
    assert programs.work() is kept
    np.testing.assert_array_equal(kept, ProgramSet(leaves, pos).work())  # as a fresh set's
    with pytest.raises(ValueError):
        kept[0] = 1.0  # shared by every caller: nobody may change it


def test_summed_and_heaviest_fill_a_given_array_in_place():
    from cdmpp.dataset.programs import ProgramSet

    rng = np.random.default_rng(3)
    leaves = tuple(rng.uniform(0, 12, size=(n, 164)).astype(np.float32) for n in (2, 0, 4))
    programs = ProgramSet(leaves, tuple(np.arange(len(f)) for f in leaves))
    wide = np.full((3, 1 + 165 + 328), np.nan, dtype=np.float32)
    assert programs.summed(out=wide[:, 1:166]).base is wide
    programs.heaviest(per_work=True, out=wide[:, 166:])
    np.testing.assert_array_equal(wide[:, 1:166], programs.summed().astype(np.float32))
    np.testing.assert_array_equal(wide[:, 166:],
                                  programs.heaviest(per_work=True).astype(np.float32))
    assert not wide[1, 166:].any()  # no leaves: zeros written over what was there
    with pytest.raises(ValueError, match="shape"):
        programs.heaviest(out=np.empty((3, 10)))


def test_default_program_mask_finds_the_untuned_program(fixture_dbs, tmp_path):
    from cdmpp.dataset.loader import default_program_mask

    db = fixture_dbs[0]
    record_file = db / "database_tuning_record.json"
    lines = record_file.read_text().splitlines()
    first = json.loads(lines[0])
    first[1][0] = [[], []]  # an empty trace: the workload as TVM builds it untuned
    record_file.write_text("\n".join(lines + [json.dumps(first)]) + "\n")
    build_store([db], tmp_path / "store", workers=1, progress=False)
    samples = FeatureStore(tmp_path / "store").samples()
    mask = default_program_mask(samples)
    index = samples.column("record_index").to_pylist()
    assert mask.tolist() == [i == len(lines) for i in index]
    assert default_program_mask(samples, rows=[0]).shape == (1,)


def test_split_data_trains_on_the_training_side_only(fixture_dbs, tmp_path):
    from cdmpp.dataset.loader import split_data
    from cdmpp.dataset.splits import make_split

    build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    ids = list(zip(samples.column("db").to_pylist(), samples.column("record_index").to_pylist()))
    latency = samples.column("latency_s").to_pylist()
    keys = samples.column("key").to_pylist()
    for spec in ("random", "by-task"):
        split = make_split(samples, spec, seed=0)
        train, test = split_data(store, split)
        assert {ids[i] for i in train.rows} == set(split.train)
        assert {ids[i] for i in test.rows} == set(split.test)
        assert not {ids[i] for i in train.rows} & set(split.test)
        assert len(train.latency_s) == len(train.programs) == len(split.train)
        assert len(test.latency_s) == len(test.programs) == len(split.test)
        # labels and programs follow the rows
        np.testing.assert_array_equal(train.latency_s, [latency[i] for i in train.rows])
        np.testing.assert_array_equal(test.latency_s, [latency[i] for i in test.rows])
        for i, row in enumerate(train.rows):
            np.testing.assert_array_equal(train.programs.leaf_features[i],
                                          store.program(keys[row])[0])
