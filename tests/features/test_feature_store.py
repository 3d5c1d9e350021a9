"""The feature store: real records in, ragged trees out; incremental; failures reported."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cdmpp.features.build import build_store
from cdmpp.features.store import FeatureStore


def test_build_store_from_real_databases(fixture_dbs, tmp_path):
    report = build_store(fixture_dbs, tmp_path / "store", workers=2, progress=False)
    # the 4 add+relu records are one program measured 4 times (its design space has one point)
    assert report.records == 12 and report.failures == [] and report.extracted == 9
    store = FeatureStore(tmp_path / "store")
    samples = store.samples()
    assert samples.num_rows == 12
    assert set(samples.column("task").to_pylist()) == {
        "dense_64x768x768", "softmax_12x64x64", "addrelu_1x64x56x56"}
    for key in samples.column("key").to_pylist():
        features, pos = store.program(key)
        assert features.shape[1] == 164 and len(features) == len(pos) >= 1
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


def test_broken_records_are_reported_and_the_rest_extracted(fixture_dbs, tmp_path):
    db = fixture_dbs[0]
    lines = (db / "database_tuning_record.json").read_text().splitlines()
    broken = json.loads(lines[0])
    broken[1][0][0][0] = ["GetSBlock", [], ["no_such_block", "main"], ["b0"]]
    with open(db / "database_tuning_record.json", "a") as f:
        f.write(json.dumps(broken) + "\n")
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
            "assert f.shape[1] == 164; assert 'tvm' not in sys.modules, 'tvm imported'")
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
