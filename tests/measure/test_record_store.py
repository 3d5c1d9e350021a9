"""The crash-safe record store: torn lines are cut, journaled records are never lost."""

from __future__ import annotations

import json

import pytest

from cdmpp.measure.database import RECORD_FILE, SIDECAR_FILE, WORKLOAD_FILE
from cdmpp.measure.store import FAILURE_FILE, RecordStore

WORKLOAD = ["123", "encoded"]


def _line(run_secs) -> str:
    return json.dumps([0, [[[], []], run_secs, {"kind": "llvm"}, []]])


def test_append_then_reopen(tmp_path):
    store = RecordStore(tmp_path)
    assert store.workload_index(WORKLOAD, {"name": "t"}) == 0
    assert store.workload_index(WORKLOAD) == 0  # no duplicate workload line
    assert store.append(_line([0.1]), {"key": "t/0"}) == 0
    store.append_failure({"key": "t/1", "stage": "build", "error": "boom"})
    again = RecordStore(tmp_path)
    assert again.n_records == 1
    assert again.done_keys == {"t/0", "t/1"}
    assert (tmp_path / WORKLOAD_FILE).read_text().count("\n") == 1


def test_torn_last_lines_are_cut(tmp_path):
    store = RecordStore(tmp_path)
    store.workload_index(WORKLOAD)
    store.append(_line([0.1]), {"key": "t/0"})
    for name in (RECORD_FILE, SIDECAR_FILE, FAILURE_FILE):
        with open(tmp_path / name, "a") as f:
            f.write('{"half a li')
    again = RecordStore(tmp_path)
    assert again.repaired_bytes > 0
    for name in (RECORD_FILE, SIDECAR_FILE):
        lines = (tmp_path / name).read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])
    assert again.done_keys == {"t/0"}


def test_journal_entry_without_record_is_rebuilt(tmp_path):
    store = RecordStore(tmp_path)
    store.workload_index(WORKLOAD)
    store.append(_line([0.1]), {"key": "t/0", "run_secs": [0.1]})
    # a crash between the journal line and the record line
    with open(tmp_path / SIDECAR_FILE, "a") as f:
        f.write(json.dumps({"key": "t/1", "run_secs": [0.2], "record_index": 1}) + "\n")
    again = RecordStore(tmp_path, rebuild_record=lambda e, store: _line(e["run_secs"]))
    records = (tmp_path / RECORD_FILE).read_text().splitlines()
    assert again.n_records == 2 and json.loads(records[1])[1][1] == [0.2]
    assert again.done_keys == {"t/0", "t/1"}


def test_journal_entry_without_rebuild_is_dropped(tmp_path):
    store = RecordStore(tmp_path)
    store.workload_index(WORKLOAD)
    with open(tmp_path / SIDECAR_FILE, "a") as f:
        f.write(json.dumps({"key": "t/0", "record_index": 0}) + "\n")
    again = RecordStore(tmp_path)
    assert again.n_records == 0 and again.done_keys == set()
    assert (tmp_path / SIDECAR_FILE).read_text() == ""


def test_replace_records_keeps_indices_and_the_journal_aligned(tmp_path):
    store = RecordStore(tmp_path)
    store.workload_index(WORKLOAD)
    for i in range(3):
        store.append(_line([0.1 * (i + 1)]), {"key": f"t/{i}", "run_secs": [0.1 * (i + 1)]})
    store.replace_records({1: (_line([0.2, 0.15]), {"key": "t/1", "run_secs": [0.2, 0.15]})})
    records = [json.loads(r) for r in (tmp_path / RECORD_FILE).read_text().splitlines()]
    assert [r[1][1] for r in records] == [[0.1], [0.2, 0.15], [0.30000000000000004]]
    again = RecordStore(tmp_path)
    assert [e["record_index"] for e in again.journal] == [0, 1, 2]
    assert again.journal[1]["run_secs"] == [0.2, 0.15] and again.n_records == 3
    with pytest.raises(IndexError, match="record 7"):
        again.replace_records({7: (_line([1.0]), {"key": "t/7"})})


def test_a_retiming_cut_between_journal_and_records_is_finished_on_open(tmp_path, monkeypatch):
    from cdmpp.measure import store as store_module

    store = RecordStore(tmp_path)
    store.workload_index(WORKLOAD)
    for i in range(3):
        store.append(_line([0.1 * (i + 1)]), {"key": f"t/{i}", "run_secs": [0.1 * (i + 1)]})
    real_write = store_module.write_text_atomic

    def crash_on_records(path, text):  # the process dies before the records are rewritten
        if path.name == RECORD_FILE:
            raise KeyboardInterrupt
        real_write(path, text)

    monkeypatch.setattr(store_module, "write_text_atomic", crash_on_records)
    with pytest.raises(KeyboardInterrupt):
        store.replace_records({1: (_line([0.2, 0.15]), {"key": "t/1", "run_secs": [0.2, 0.15]})})
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="interrupted"):
        RecordStore(tmp_path)  # no way to rebuild a record: refuse rather than mismatch
    again = RecordStore(tmp_path, rebuild_record=lambda e, s: _line(e["run_secs"]))
    records = [json.loads(r) for r in (tmp_path / RECORD_FILE).read_text().splitlines()]
    assert records[1][1][1] == [0.2, 0.15] and again.journal[1]["run_secs"] == [0.2, 0.15]
    assert len(records) == 3 and not (tmp_path / store_module.REPLACING_FILE).exists()


def test_another_process_is_refused_while_a_store_is_open(tmp_path):
    import subprocess
    import sys

    store = RecordStore(tmp_path)
    code = ("import sys; from cdmpp.measure.store import RecordStore\n"
            "try:\n    RecordStore(sys.argv[1])\nexcept RuntimeError as e:\n"
            "    print(e); sys.exit(3)\n")
    busy = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True)
    assert busy.returncode == 3 and "in use by another cdmpp process" in busy.stdout
    store.close()
    free = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True)
    assert free.returncode == 0, free.stdout + free.stderr


def test_a_forked_child_does_not_keep_a_dead_collectors_lock(tmp_path):
    """The collector forks build guards: when it is killed while one still runs, the next run
    must get the directory (measured: with flock the child held it and resuming failed)."""
    import subprocess
    import sys

    holder = ("import os, sys, time; from cdmpp.measure.store import RecordStore\n"
              "RecordStore(sys.argv[1])\n"
              "if os.fork() == 0:\n    time.sleep(20); os._exit(0)\n"
              "os._exit(0)\n")
    # no pipes: the sleeping child would keep them open, and run() would wait for it
    subprocess.run([sys.executable, "-c", holder, str(tmp_path)], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60, check=True)
    # the holder is gone, its forked child sleeps on
    code = ("import sys; from cdmpp.measure.store import RecordStore\n"
            "try:\n    RecordStore(sys.argv[1])\nexcept RuntimeError as e:\n"
            "    print(e); sys.exit(3)\n")
    after = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           text=True, timeout=60)
    assert after.returncode == 0, after.stdout + after.stderr
