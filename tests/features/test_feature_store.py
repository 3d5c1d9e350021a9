"""The feature store: real records in, ragged trees out; incremental; failures reported."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cdmpp.features import N_LEAF_FEATURES
from cdmpp.features.build import build_store
from cdmpp.features.store import FeatureStore


def test_build_store_from_real_databases(fixture_dbs, tmp_path):
    report = build_store(fixture_dbs, tmp_path / "store", workers=2, progress=False)
    # the 4 add+relu records are one program measured 4 times (its design space has one point)
    assert report.records == 12 and report.failures == [] and report.extracted == 9
    assert report.same_program == 3 and "3 the same program as another record" in str(report)
    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    assert samples.num_rows == 12
    assert set(samples.column("task").to_pylist()) == {
        "dense_64x768x768", "softmax_12x64x64", "addrelu_1x64x56x56"}
    for key in samples.column("key").to_pylist():
        features, pos = store.program(key)
        assert features.shape[1] == N_LEAF_FEATURES and len(features) == len(pos) >= 1
        assert np.all(np.diff(pos) > 0)  # leaves come in pre-order
    assert np.all(np.asarray(samples.column("latency_s")) > 0)


def test_incremental_build_extracts_only_what_is_new(fixture_dbs, tmp_path):
    build_store(fixture_dbs[:2], tmp_path / "store", workers=1, progress=False)
    again = build_store(fixture_dbs[:2], tmp_path / "store", workers=1, progress=False)
    assert again.extracted == 0 and again.reused == 8
    more = build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    assert more.extracted == 1 and more.reused == 8
    assert FeatureStore(tmp_path / "store").samples().num_rows == 12  # no duplicated samples


def test_an_interrupted_build_keeps_what_it_extracted(fixture_dbs, tmp_path, monkeypatch):
    import cdmpp.features.build as build

    monkeypatch.setattr(build, "FLUSH_PROGRAMS", 2)  # a shard every 2 new programs
    real, calls = build._extract_chunk, []

    def interrupted(chunk):  # Ctrl-C while the third job runs
        calls.append(len(chunk))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(chunk)

    monkeypatch.setattr(build, "_extract_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    kept = len(FeatureStore(tmp_path / "store").keys)
    assert kept == calls[0] + calls[1] >= 2  # the first two jobs' programs, in shards
    monkeypatch.setattr(build, "_extract_chunk", real)
    again = build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    assert again.extracted == 9 - kept and again.failures == []
    assert len(FeatureStore(tmp_path / "store").keys) == 9


def test_a_damaged_shard_is_named(fixture_dbs, tmp_path):
    build_store(fixture_dbs[:1], tmp_path / "store", workers=1, progress=False)
    shard = next((tmp_path / "store" / "shards").iterdir())
    (shard / "keys.json").write_text("")
    with pytest.raises(ValueError, match=f"{shard.name}: a damaged feature-store shard"):
        FeatureStore(tmp_path / "store")


def _append_unreplayable(db) -> list[str]:
    """Append to `db` a copy of its first record whose trace names a block the workload does
    not have (it cannot replay); return the record lines as they were."""
    path = db / "database_tuning_record.json"
    lines = path.read_text().splitlines()
    broken = json.loads(lines[0])
    broken[1][0][0][0] = ["GetSBlock", [], ["no_such_block", "main"], ["b0"]]
    path.write_text("\n".join(lines + [json.dumps(broken)]) + "\n")
    return lines


def test_broken_records_are_reported_and_the_rest_extracted(fixture_dbs, tmp_path):
    db = fixture_dbs[0]
    _append_unreplayable(db)
    with open(db / "database_tuning_record.json", "a") as f:
        f.write("[0, [[[], []], [NaN], {}, []]]\n")
    report = build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    assert len(report.failures) == 2
    by_line = {f["line"]: f for f in report.failures}
    assert "does not replay" in by_line[5]["reason"] and by_line[5]["db"] == str(db)
    assert "bad timing" in by_line[6]["reason"] and "nan" in by_line[6]["reason"]
    assert FeatureStore(tmp_path / "store").samples().num_rows == 12
    assert "2 failed" in str(report)


def test_reading_the_store_needs_no_tvm(fixture_dbs, tmp_path):
    build_store(fixture_dbs[:1], tmp_path / "store", workers=1, progress=False)
    code = ("import sys; from cdmpp.features.store import FeatureStore;"
            f"s = FeatureStore({str(tmp_path / 'store')!r});"
            "k = s.samples().column('key')[0].as_py(); f, p = s.program(k);"
            f"assert f.shape[1] == {N_LEAF_FEATURES};"
            "assert 'tvm' not in sys.modules, 'tvm imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_samples_of_given_databases_only(fixture_dbs, tmp_path):
    """A store is shared between commands: `--data A` must not train on B's records."""
    build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    store = FeatureStore(tmp_path / "store")
    everything = store.samples()
    only = store.samples(databases=[fixture_dbs[0]])
    assert 0 < only.num_rows < everything.num_rows
    assert set(only.column("db").to_pylist()) == {str(fixture_dbs[0])}
    assert store.samples(databases=[fixture_dbs[0].parent]).num_rows == everything.num_rows


def test_failures_are_written_to_the_store(fixture_dbs, tmp_path):
    from cdmpp.features.store import FAILURES_FILE

    db = fixture_dbs[0]
    lines = _append_unreplayable(db)
    report = build_store([db], tmp_path / "store", workers=1, progress=False)
    path = tmp_path / "store" / FAILURES_FILE
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert written == report.failures and len(written) == 1
    assert written[0]["db"] == str(db) and written[0]["record_index"] == len(lines)
    assert written[0]["line"] == len(lines) + 1 and "does not replay" in written[0]["reason"]


def test_program_key_depends_on_the_extractor_and_tvm_versions(fixture_dbs, monkeypatch):
    import cdmpp.features.store as store_module
    from cdmpp.features import FEATURE_VERSION
    from cdmpp.features.store import program_key
    from cdmpp.measure.database import load_database

    rec = load_database(fixture_dbs[0]).records[0]
    key = program_key(rec, FEATURE_VERSION)
    assert program_key(rec, FEATURE_VERSION) == key  # a content key: the same every time
    assert program_key(rec, FEATURE_VERSION + ".1") != key
    monkeypatch.setattr(store_module, "_tvm_version", lambda: "0.0.0-not-this-tvm")
    assert program_key(rec, FEATURE_VERSION) != key


def test_a_store_of_other_versions_is_extracted_again(fixture_dbs, tmp_path, monkeypatch):
    import cdmpp.features as features
    import cdmpp.features.store as store_module

    db, out = fixture_dbs[0], tmp_path / "store"
    first = build_store([db], out, workers=1, progress=False)
    assert first.extracted == 4 and first.reused == 0
    old_keys = set(FeatureStore(out).keys)

    def rebuilt():
        report = build_store([db], out, workers=1, progress=False)
        store = FeatureStore(out)
        samples = store.samples()
        assert samples.num_rows == 4  # the records' rows replaced, not duplicated
        assert not set(samples.column("key").to_pylist()) & old_keys
        return report

    with monkeypatch.context() as m:
        m.setattr(features, "FEATURE_VERSION", features.FEATURE_VERSION + ".1")
        report = rebuilt()
        assert report.extracted == 4 and report.reused == 0
    with monkeypatch.context() as m:
        m.setattr(store_module, "_tvm_version", lambda: "0.0.0-not-this-tvm")
        report = rebuilt()
        assert report.extracted == 4 and report.reused == 0
    again = build_store([db], out, workers=1, progress=False)  # the versions of the first build
    assert again.extracted == 0 and again.reused == 4


def test_a_database_is_one_identity_however_it_is_named(fixture_dbs, tmp_path, monkeypatch):
    """The same database named by an absolute and a relative path is one set of records, and a
    relative name means the database it names from where the command runs."""
    from cdmpp.dataset.splits import make_split

    store_dir = tmp_path / "store"
    build_store([fixture_dbs[0]], store_dir, workers=1, progress=False)
    monkeypatch.chdir(fixture_dbs[0].parent)
    again = build_store([fixture_dbs[0].name, f"./{fixture_dbs[0].name}/"], store_dir,
                        workers=1, progress=False)
    assert again.records == 4 and again.extracted == 0
    samples = FeatureStore(store_dir).samples()
    assert samples.num_rows == 4 and set(samples.column("db").to_pylist()) == {
        str(fixture_dbs[0].resolve())}
    split = make_split(samples, "random", seed=0)
    assert not set(map(tuple, split.train)) & set(map(tuple, split.test))
    # another directory with a database of the same (relative) name: its own records only
    other = tmp_path / "elsewhere"
    (other / fixture_dbs[0].name).parent.mkdir()
    import shutil

    shutil.copytree(fixture_dbs[1], other / fixture_dbs[0].name)
    monkeypatch.chdir(other)
    build_store([fixture_dbs[0].name], store_dir, workers=1, progress=False)
    mine = FeatureStore(store_dir).samples(databases=[fixture_dbs[0].name])
    assert set(mine.column("task").to_pylist()) == {"softmax_12x64x64"}
    assert mine.num_rows == 4 and FeatureStore(store_dir).samples().num_rows == 8


def test_rows_of_an_older_store_with_relative_names_are_dropped(fixture_dbs, tmp_path,
                                                               monkeypatch):
    import pyarrow.parquet as pq

    from cdmpp.features.store import SAMPLES_FILE

    store_dir = tmp_path / "store"
    build_store(fixture_dbs[:2], store_dir, workers=1, progress=False)
    table = pq.read_table(store_dir / SAMPLES_FILE)  # as an older cdmpp wrote it: as typed
    rows = table.to_pylist()
    for r in rows:
        r["db"] = r["db"].rsplit("/", 1)[1]
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), store_dir / SAMPLES_FILE)
    with pytest.warns(UserWarning, match="8 samples of an older cdmpp"):
        report = build_store(fixture_dbs[:1], store_dir, workers=1, progress=False)
    assert report.extracted == 0  # their features are kept and reused
    samples = FeatureStore(store_dir).samples()
    assert samples.column("db").to_pylist() == [str(fixture_dbs[0].resolve())] * 4


def test_failures_file_follows_the_latest_build_of_each_database(fixture_dbs, tmp_path):
    from cdmpp.features.store import FAILURES_FILE

    def listed():
        path = tmp_path / "store" / FAILURES_FILE
        return sorted(json.loads(line)["db"] for line in path.read_text().splitlines())

    kept = [_append_unreplayable(db) for db in fixture_dbs[:2]]
    build_store(fixture_dbs[:2], tmp_path / "store", workers=1, progress=False)
    assert listed() == sorted(str(db.resolve()) for db in fixture_dbs[:2])
    # the first database fixed: its failure goes, the other database's stays
    (fixture_dbs[0] / "database_tuning_record.json").write_text("\n".join(kept[0]) + "\n")
    build_store(fixture_dbs[:1], tmp_path / "store", workers=1, progress=False)
    assert listed() == [str(fixture_dbs[1].resolve())]
