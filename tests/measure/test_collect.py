"""The collector on tiny real operators: real sampling, builds, timing and TVM's reader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from cdmpp.device import DeviceMismatchError
from cdmpp.measure.collect import CollectConfig, collect
from cdmpp.measure.database import RECORD_FILE, SIDECAR_FILE, load_database
from cdmpp.measure.timing import Protocol
from conftest import MATMUL_64, ROOT, SOFTMAX_SMALL

FAST = Protocol(repeat=2, min_repeat_ms=2, passes=2, max_extra_passes=1, quiet_wait_s=2.0)


def _config(out, **kw) -> CollectConfig:
    return CollectConfig(out=str(out), programs_per_task=3, batch_size=2, protocol=FAST, **kw)


def test_collect_writes_a_database_tvm_reads(tmp_path):
    summary = collect(_config(tmp_path), [MATMUL_64, SOFTMAX_SMALL], progress=False)
    assert summary.ok + summary.failed == 8  # 3 sampled + the default, per task
    db = load_database(tmp_path)
    assert len(db.records) == summary.ok >= 6
    assert {w.name for w in db.workloads} == {"dense_64x64x64", "softmax_1x16x64"}
    keys = [r.meta["key"] for r in db.records]
    assert len(set(keys)) == len(keys) and "dense_64x64x64/default" in keys
    for r in db.records:
        assert len(r.measurement.passes) >= 2 and r.latency_s > 0
        assert r.meta["repeats_per_pass"] == 2 and r.meta["replay_ok"] in (True, False)
    from cdmpp.tvm_env import meta_schedule

    tvm_db = meta_schedule().database.JSONDatabase(work_dir=str(tmp_path))
    assert len(tvm_db.get_all_tuning_records()) == len(db.records)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["runs"][0]["measured"] == summary.ok
    assert summary.noise.n == summary.ok
    assert set(manifest["runs"][0]["stage_secs"]) == {"sample", "build", "time", "write"}
    stages = summary.stage_secs
    assert all(v > 0 for v in stages.values()) and sum(stages.values()) <= summary.seconds
    assert "time spent: sample" in str(summary)


def test_recorded_trace_replays_to_the_measured_module(tmp_path):
    from cdmpp.measure import tvm_codec

    collect(_config(tmp_path), [MATMUL_64], progress=False)
    db = load_database(tmp_path)
    mod = db.workloads[0].mod()
    for r in db.records:
        if r.meta["replay_ok"]:
            replayed = tvm_codec.replay_trace(mod, r.trace_json).mod
            assert tvm_codec.structural_hash(replayed) == r.meta["mod_shash"]
        else:
            kept = (tmp_path / r.meta["measured_module"]).read_text()
            assert tvm_codec.structural_hash(tvm_codec.load_module(kept)) == r.meta["mod_shash"]


def test_rerun_resumes_without_duplicates(tmp_path):
    first = collect(_config(tmp_path), [MATMUL_64], progress=False)
    again = collect(_config(tmp_path), [MATMUL_64], progress=False)
    assert again.ok == again.failed == 0 and again.already_done == first.ok + first.failed
    more = collect(replace(_config(tmp_path), programs_per_task=5), [MATMUL_64], progress=False)
    assert more.ok + more.failed == 2  # only the two new candidates
    keys = [r.meta["key"] for r in load_database(tmp_path).records]
    assert len(keys) == len(set(keys))


def test_kill_9_mid_run_then_resume_loses_nothing(tmp_path):
    script = (f"import sys; sys.path[:0] = [{str(ROOT / 'tests')!r}, "
              f"{str(ROOT / 'tests' / 'measure')!r}];"
              "from test_collect import _config, MATMUL_64, SOFTMAX_SMALL;"
              "from cdmpp.measure.collect import collect;"
              f"collect(_config({str(tmp_path)!r}), [MATMUL_64, SOFTMAX_SMALL], progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        records = tmp_path / RECORD_FILE
        if records.exists() and records.read_text().count("\n") >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the collector ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = load_database(tmp_path, strict=False)
    kept = {r.meta["key"]: r.measurement.run_secs for r in before.records}
    assert kept, "the run was killed before it measured anything"
    summary = collect(_config(tmp_path), [MATMUL_64, SOFTMAX_SMALL], progress=False)
    after = load_database(tmp_path)  # strict: no torn or bad line survives
    keys = [r.meta["key"] for r in after.records]
    failed = [json.loads(x)["key"] for x in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys))
    assert len(keys) + len(failed) == 8
    for r in after.records:  # everything measured before the kill is still there, unchanged
        if r.meta["key"] in kept:
            assert r.measurement.run_secs == kept[r.meta["key"]]
    assert summary.already_done >= len(kept)
    sidecar = (tmp_path / SIDECAR_FILE).read_text().splitlines()
    assert len(sidecar) == len(keys)


@pytest.mark.parametrize("torn", [False, True])
def test_a_record_line_lost_after_its_journal_line_is_rebuilt(tmp_path, torn):
    """A kill between the journal line and the record line (or halfway through the record
    line): the next run, even for other tasks, writes the record from the journal."""
    collect(_config(tmp_path), [MATMUL_64], progress=False)
    path = tmp_path / RECORD_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + (lines[-1][:40] if torn else ""))
    summary = collect(_config(tmp_path), [SOFTMAX_SMALL], progress=False)
    after = path.read_text().splitlines(keepends=True)
    assert after[:len(lines) - 1] == lines[:-1]  # untouched, byte for byte
    assert json.loads(after[len(lines) - 1]) == json.loads(lines[-1])  # the lost one, rebuilt
    assert summary.ok + summary.failed == 4
    keys = [r.meta["key"] for r in load_database(tmp_path).records]
    assert len(keys) == len(set(keys)) == len(lines) + summary.ok


def test_a_build_that_times_out_is_recorded_and_the_rest_are_measured(tmp_path, monkeypatch):
    from cdmpp.measure import collect as collect_module
    from cdmpp.measure.build import BuildResult
    from cdmpp.measure.store import FAILURE_FILE

    real_build_many = collect_module.build_many

    def first_times_out(mods, target, timeout_s):  # as a build killed at its time limit
        results = real_build_many(mods, target, timeout_s)
        return [BuildResult(False, timeout_s, f"timeout after {timeout_s} s")] + results[1:]

    monkeypatch.setattr(collect_module, "build_many", first_times_out)
    summary = collect(_config(tmp_path), [MATMUL_64], progress=False)
    failures = [json.loads(line) for line in (tmp_path / FAILURE_FILE).read_text().splitlines()]
    batches = -(-4 // 2)  # 3 sampled + the default, in batches of 2: one timeout per batch
    assert summary.failed == len(failures) == batches
    assert all(f["stage"] == "timeout" and f["task"] == "dense_64x64x64" for f in failures)
    keys = {r.meta["key"] for r in load_database(tmp_path).records}
    assert len(keys) == summary.ok == 4 - batches and not keys & {f["key"] for f in failures}
    assert all(f["timeout_s"] == _config(tmp_path).build_timeout_s for f in failures)
    # a rerun does not build the failed programs again ...
    monkeypatch.setattr(collect_module, "build_many", real_build_many)
    again = collect(_config(tmp_path), [MATMUL_64], progress=False)
    assert again.ok == again.failed == 0 and again.already_done == 4
    # ... unless it allows their builds longer than the limit that killed them
    longer = replace(_config(tmp_path), build_timeout_s=_config(tmp_path).build_timeout_s + 30)
    retried = collect(longer, [MATMUL_64], progress=False)
    assert retried.ok == batches and retried.already_done == 4 - batches
    assert len(load_database(tmp_path).records) == 4
    assert collect(longer, [MATMUL_64], progress=False).ok == 0  # measured now: not again


def test_an_interrupted_run_is_in_the_manifest(tmp_path, monkeypatch):
    from cdmpp.measure import collect as collect_module

    def ctrl_c(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(collect_module._Run, "measure", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        collect(_config(tmp_path), [MATMUL_64], progress=False, command="cdmpp collect ...")
    (run,) = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert run["interrupted"] is True and run["command"] == "cdmpp collect ..."
    assert run["measured"] == 0 and run["seconds"] > 0


def test_refuses_to_mix_devices(tmp_path):
    collect(replace(_config(tmp_path), programs_per_task=1), [MATMUL_64], progress=False)
    other = 1 if os.cpu_count() > 1 else 2
    with pytest.raises(DeviceMismatchError, match=str(tmp_path)) as refused:
        collect(replace(_config(tmp_path), threads=other), [MATMUL_64], progress=False)
    stored = json.loads((tmp_path / "device.json").read_text())["threads"]
    assert f"give --threads {stored} (as it was collected)" in str(refused.value)


def test_time_budget_stops_cleanly(tmp_path):
    summary = collect(replace(_config(tmp_path), time_budget_min=0.0), [MATMUL_64],
                      progress=False)
    assert summary.stopped_by_budget and summary.ok == 0
    assert load_database(tmp_path).records == ()


def test_device_is_measured_once_and_saved(tmp_path):
    from cdmpp.device import load_device

    tiny = replace(_config(tmp_path), programs_per_task=0)
    first = collect(tiny, [SOFTMAX_SMALL], progress=False)
    device = load_device(tmp_path)
    assert device.peak_gflops > 0 and device.memory_gbps > 0
    assert first.device_measured == {"peak_gflops": device.peak_gflops,
                                     "memory_gbps": device.memory_gbps}
    again = collect(tiny, [SOFTMAX_SMALL], progress=False)
    assert again.device_measured is None and load_device(tmp_path) == device
    runs = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert [r["device_measured"] for r in runs] == [first.device_measured, None]


@pytest.fixture
def no_microbench(monkeypatch):
    """Skip the device microbenchmarks (tested above) to keep collect tests fast."""
    import cdmpp.measure.collect as collect_module

    monkeypatch.setattr(collect_module, "measure_device",
                        lambda d: replace(d, peak_gflops=1.0, memory_gbps=1.0))


def test_programs_from_copies_candidates(tmp_path, no_microbench):
    first, second = tmp_path / "first", tmp_path / "second"
    collect(replace(_config(first), programs_per_task=2), [MATMUL_64], progress=False)
    # Another target stands in for another device, which must time the same programs.
    config = replace(_config(second), programs_per_task=2, programs_from=str(first),
                     mcpu="x86-64-v2")
    collect(config, [MATMUL_64], progress=False)
    name = f"{MATMUL_64.name}.json"
    copied = (second / "candidates" / name).read_text()
    assert copied == (first / "candidates" / name).read_text()  # copied, not re-sampled
    shash = {c["key"]: c["mod_shash"] for c in json.loads(copied)["candidates"]}
    records = load_database(second).records
    assert records and all(shash[r.meta["key"]] == r.meta["mod_shash"] for r in records)
    assert {r.target["mcpu"] for r in records} == {"x86-64-v2"}


def test_programs_from_needs_a_collect_directory(tmp_path, no_microbench):
    with pytest.raises(ValueError, match="no candidates/ directory"):
        collect(replace(_config(tmp_path / "out"), programs_from=str(tmp_path)), [MATMUL_64],
                progress=False)


def test_unknown_mcpu_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="unknown LLVM CPU name"):
        collect(replace(_config(tmp_path / "out"), mcpu="no-such-cpu"), [MATMUL_64],
                progress=False)
    assert not (tmp_path / "out").exists()


def _simulate_disturbed_window(out, factor: float = 3.0) -> list:
    """Rewrite every record as if timed while the machine ran `factor` slow: labels `factor`
    too high, and the reference kernel as slow in every pass. Returns the doctored entries."""
    records = (out / RECORD_FILE).read_text().splitlines()
    entries = [json.loads(e) for e in (out / SIDECAR_FILE).read_text().splitlines()]
    for i, entry in enumerate(entries):
        entry["run_secs"] = [factor * v for v in entry["run_secs"]]
        entry["ref_ratios"] = [factor] * len(entry["ref_ratios"])
        record = json.loads(records[i])
        record[1][1] = entry["run_secs"]
        records[i] = json.dumps(record)
    (out / RECORD_FILE).write_text("".join(r + "\n" for r in records))
    (out / SIDECAR_FILE).write_text("".join(json.dumps(e) + "\n" for e in entries))
    return entries


def test_remeasure_disturbed_appends_passes_in_place(tmp_path, no_microbench):
    from cdmpp.measure.remeasure import remeasure_disturbed

    config = replace(_config(tmp_path), programs_per_task=2)
    collect(config, [MATMUL_64], progress=False)
    # labels 1000x too high: the new passes come out lower even on a loaded machine (a 3x
    # factor failed once, when parallel test runs made the new passes 35-57x slow)
    before = _simulate_disturbed_window(tmp_path, factor=1000.0)
    summary = remeasure_disturbed(config, [MATMUL_64], progress=False)
    assert summary.selected == summary.remeasured == len(before) > 0
    after = load_database(tmp_path).records
    assert [r.meta["key"] for r in after] == [e["key"] for e in before]  # same indices
    for old, new in zip(before, after):
        run_secs = new.measurement.run_secs
        assert list(run_secs[:len(old["run_secs"])]) == old["run_secs"]  # nothing dropped
        assert len(run_secs) > len(old["run_secs"]) and new.latency_s < min(old["run_secs"])
        assert new.latency_s == min(run_secs)  # the label is the minimum of old and new passes
        assert new.meta["remeasured"][0]["previous_latency_s"] == min(old["run_secs"])
    from cdmpp.tvm_env import meta_schedule

    tvm_db = meta_schedule().database.JSONDatabase(work_dir=str(tmp_path))
    assert len(tvm_db.get_all_tuning_records()) == len(after)
    again = remeasure_disturbed(config, [MATMUL_64], progress=False)
    assert again.selected == summary.remeasured - summary.now_clean
    runs = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert runs[-1]["remeasure_disturbed"]["remeasured"] == again.remeasured
    # disturbed records of tasks not named are counted and left alone, with a hint
    _simulate_disturbed_window(tmp_path)
    other = remeasure_disturbed(config, [], progress=False)
    assert other.selected == other.remeasured == 0 and other.not_selected == len(before)
    assert "--kernels-of" in str(other)


def test_retest_times_a_seeded_sample_again_and_reports_its_noise(tmp_path, no_microbench,
                                                                  capsys):
    from cdmpp.measure.remeasure import retest

    config = replace(_config(tmp_path), programs_per_task=3)
    collect(config, [MATMUL_64], progress=False)
    before = [json.loads(e) for e in (tmp_path / SIDECAR_FILE).read_text().splitlines()]
    summary = retest(config, [MATMUL_64], 2, progress=False)
    assert summary.retest and summary.selected == summary.remeasured == 2
    assert len(summary.session_ratios) == 2 and all(r > 0 for r in summary.session_ratios)
    after = load_database(tmp_path).records
    grown = [i for i, (old, new) in enumerate(zip(before, after))
             if len(new.measurement.run_secs) > len(old["run_secs"])]
    assert len(grown) == 2 and len(after) == len(before)  # in place, nothing added or dropped
    for i in grown:
        assert list(after[i].measurement.run_secs[:len(before[i]["run_secs"])]) == \
            before[i]["run_secs"]
    runs = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert runs[-1]["retest"]["test_retest"]["n"] == 2
    assert "test-retest" in str(summary)
    # a second retest takes the records not re-timed yet (4 records: the other two)
    again = retest(config, [MATMUL_64], 2, progress=False)
    regrown = [i for i, (old, new) in enumerate(zip(after, load_database(tmp_path).records))
               if len(new.measurement.run_secs) > len(old.measurement.run_secs)]
    assert again.selected == 2 and sorted(regrown + grown) == [0, 1, 2, 3]
    # the records keep why and how they were re-timed: `cdmpp db` reports it from them
    from cdmpp.cli.main import main
    from cdmpp.measure.noise import retested_ratios

    metas = [r.meta for r in load_database(tmp_path).records]
    assert all(h["reason"] == "retest" for m in metas for h in m["remeasured"])
    assert len(retested_ratios(metas)) == 4
    assert main(["db", str(tmp_path)]) == 0
    assert "test-retest noise of 4 records" in capsys.readouterr().out
    with pytest.raises(ValueError, match="at least 1"):
        retest(config, [MATMUL_64], 0, progress=False)
    # 'all': a second session of every record, each once
    sizes = [len(r.measurement.run_secs) for r in load_database(tmp_path).records]
    every = retest(config, [MATMUL_64], "all", progress=False)
    assert every.selected == every.remeasured == len(sizes)
    assert all(len(r.measurement.run_secs) > n
               for r, n in zip(load_database(tmp_path).records, sizes))


def test_retest_noise_is_the_gap_between_two_labels():
    from cdmpp.measure.noise import retest_noise

    r = retest_noise([1.0, 1.2, 0.5])  # gaps |a - b| / min(a, b): 0, 0.2, 1.0
    assert r["n"] == 3 and r["median"] == pytest.approx(0.2) and r["mean"] == pytest.approx(0.4)
    assert r["within_10"] == pytest.approx(1 / 3) and r["median_ratio"] == pytest.approx(1.0)


def test_the_most_disturbed_records_are_remeasured_first(tmp_path):
    from cdmpp.measure.remeasure import _disturbed

    def entry(key, ratios):
        return {"key": key, "run_secs": [1e-3] * len(ratios), "repeats_per_pass": 1,
                "ref_ratios": ratios}

    journal = [entry("dense_64x64x64/0", [1.3, 1.4]), entry("dense_64x64x64/1", [1.0, 1.02]),
               entry("dense_64x64x64/2", [3.0, 2.5]), entry("softmax_1x16x64/0", [9.0, 9.0]),
               entry("dense_64x64x64/default", [1.8, 1.9])]
    todo, summary = _disturbed(journal, _config(tmp_path), [MATMUL_64])
    # undisturbed (/1) and other tasks' records are left; the rest by their best reference ratio
    assert [e["key"] for e in todo] == ["dense_64x64x64/2", "dense_64x64x64/default",
                                        "dense_64x64x64/0"]
    assert (summary.selected, summary.not_selected) == (3, 1)


def test_retest_draws_the_least_retimed_records_first_in_a_seeded_order(tmp_path):
    from cdmpp.measure.remeasure import _sample

    def entry(i, sessions):
        return {"key": f"dense_64x64x64/{i}", "ref_ratios": [1.0],
                "remeasured": [{"reason": "retest"}] * sessions + [{"reason": "disturbed"}]}

    journal = [entry(i, sessions) for i, sessions in enumerate([1, 0, 2, 0, 1, 0])]
    todo, _ = _sample(journal, _config(tmp_path), [MATMUL_64], 4)
    keys = [e["key"][-1] for e in todo]
    assert sorted(keys[:3]) == ["1", "3", "5"] and keys[3] in ("0", "4")
    assert [e["key"] for e in _sample(journal, _config(tmp_path), [MATMUL_64], 4)[0]] == \
        [e["key"] for e in todo]  # the same seed, the same order
    orders = {tuple(e["key"] for e in _sample(journal, replace(_config(tmp_path), seed=s),
                                               [MATMUL_64], 6)[0]) for s in range(8)}
    assert len(orders) > 1  # the seed orders records that were re-timed equally often
    # records of tasks not named are counted, with the hint to name them
    todo, summary = _sample(journal, _config(tmp_path), [SOFTMAX_SMALL], 4)
    assert todo == [] and summary.not_selected == 6 and "--kernels-of" in str(summary)
