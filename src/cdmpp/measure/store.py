"""Append-only, crash-safe writer of one database directory (used by the collector).

Every append is one line written with a single `write`, then flushed and fsynced. A `kill -9`
can leave at most a torn last line, which `RecordStore` cuts off when it opens the directory.

Ordering makes the pair (sidecar line, record line) safe: the sidecar line (the journal, with
the record's key and timings) is written first, the TVM record line second. If a crash falls
between the two, reopening rebuilds the missing record line from its journal entry with the
`rebuild_record(entry, store)` callback, so nothing measured is lost and nothing is written
twice. The callback gets the store being opened: the workload of the entry is already in it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from cdmpp.atomic import write_text_atomic
from cdmpp.measure.database import RECORD_FILE, SIDECAR_FILE, TASKS_FILE, WORKLOAD_FILE

FAILURE_FILE = "failures.jsonl"
REPLACING_FILE = ".replacing.json"  # record indices a re-timing is rewriting
_COMPACT = (",", ":")


def _repair_tail(path: Path) -> int:
    """Cut a torn last line (no trailing newline); return how many bytes were cut."""
    if not path.exists():
        path.touch()
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return 0
        f.seek(0)
        data = f.read()
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


def _read_json_lines(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n") if line]


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


LOCK_FILE = ".cdmpp.lock"
_HELD: dict[Path, list] = {}  # directory -> [lock file handle, stores of this process using it]


def _lock(path: Path) -> Path:
    """Lock the directory against other processes until every store of this process on it is
    closed (the OS releases it if the process dies): two collectors appending to one database
    would interleave their record indices.

    A POSIX record lock (`lockf`), not `flock`: forked children (the build guards) do not
    inherit it, so a killed collector whose build child is still compiling does not keep the
    directory locked against its own resume."""
    import errno
    import fcntl

    key = path.resolve()
    if key in _HELD:
        _HELD[key][1] += 1
        return key
    handle = open(path / LOCK_FILE, "a")
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        handle.close()
        if e.errno not in (errno.EACCES, errno.EAGAIN):
            raise
        raise RuntimeError(f"{path} is in use by another cdmpp process (collect, "
                           "--retest or --remeasure-disturbed): wait for it to finish") from None
    _HELD[key] = [handle, 1]
    return key


def _unlock(key: Path) -> None:
    held = _HELD.get(key)
    if held is not None:
        held[1] -= 1
        if held[1] == 0:
            held[0].close()
            del _HELD[key]


class RecordStore:
    """The open output directory of a collection run."""

    def __init__(self, path: str | Path,
                 rebuild_record: Callable[[dict, "RecordStore"], str] | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.path)
        self.repaired_bytes = sum(_repair_tail(self.path / name) for name in
                                  (WORKLOAD_FILE, RECORD_FILE, SIDECAR_FILE, FAILURE_FILE))
        self._workload_index = {json.loads(line)[0]: i for i, line in
                                enumerate(self._lines(WORKLOAD_FILE))}
        self.tasks: dict = (json.loads((self.path / TASKS_FILE).read_text())
                            if (self.path / TASKS_FILE).exists() else {})
        self.journal: list[dict] = _read_json_lines(self.path / SIDECAR_FILE)
        self.failures: list[dict] = _read_json_lines(self.path / FAILURE_FILE)
        self.n_records = len(self._lines(RECORD_FILE))
        self._reconcile(rebuild_record)

    def _lines(self, name: str) -> list[str]:
        return [line for line in (self.path / name).read_text(encoding="utf-8").split("\n") if line]

    def _reconcile(self, rebuild_record) -> None:
        self._finish_replacing(rebuild_record)
        missing = self.journal[self.n_records:]
        if missing and rebuild_record is None:
            # no way to rebuild the record: forget the journal entry, the program is re-measured
            self.journal = self.journal[:self.n_records]
            self._write_journal()
            return
        for entry in missing:
            _append_line(self.path / RECORD_FILE, rebuild_record(entry, self))
            self.n_records += 1

    @property
    def done_keys(self) -> set[str]:
        """Keys of every program already measured or already failed."""
        return {e["key"] for e in self.journal} | {e["key"] for e in self.failures}

    def workload_index_of_task(self, name: str) -> int | None:
        """Index of the workload recorded for task `name` (tasks.json), None if there is none."""
        for shash, info in self.tasks.items():
            if info.get("name") == name and shash in self._workload_index:
                return self._workload_index[shash]
        return None

    def workload_index(self, workload_json: list, info: dict | None = None) -> int:
        """Index of the workload, appending it (and its task info) if new."""
        shash = workload_json[0]
        if shash not in self._workload_index:
            _append_line(self.path / WORKLOAD_FILE, json.dumps(workload_json, separators=_COMPACT))
            self._workload_index[shash] = len(self._workload_index)
        if info is not None and self.tasks.get(shash) != info:
            self.tasks[shash] = info
            write_text_atomic(self.path / TASKS_FILE, json.dumps(self.tasks, indent=1, sort_keys=True))
        return self._workload_index[shash]

    def append(self, record_line: str, journal_entry: dict) -> int:
        """Append one measured program; return its record index."""
        entry = dict(journal_entry, record_index=self.n_records)
        _append_line(self.path / SIDECAR_FILE, json.dumps(entry, separators=_COMPACT))
        self.journal.append(entry)
        _append_line(self.path / RECORD_FILE, record_line)
        self.n_records += 1
        return entry["record_index"]

    def append_failure(self, entry: dict) -> None:
        _append_line(self.path / FAILURE_FILE, json.dumps(entry, separators=_COMPACT))
        self.failures.append(entry)

    def close(self) -> None:
        """Release the directory (also released when the process ends, however it ends)."""
        if self._lock is not None:
            _unlock(self._lock)
            self._lock = None

    def replace_records(self, updates: dict[int, tuple[str, dict]]) -> None:
        """Replace records in place, `{record_index: (record line, journal entry)}`: record
        indices (a record's identity) do not move. Each file is rewritten whole (temp file +
        rename): first a note of the indices (REPLACING_FILE), then the journal (it holds
        everything measured), then the records, then the note goes. A crash in between leaves
        the note, and the next open rebuilds those record lines from the journal."""
        if not updates:
            return
        records = self._lines(RECORD_FILE)
        for i, (line, entry) in updates.items():
            if not 0 <= i < len(records):
                raise IndexError(f"record {i} is not in {self.path / RECORD_FILE}")
            if self.journal[i].get("record_index") != i:
                raise ValueError(f"{self.path / SIDECAR_FILE}: entry {i} is for record "
                                 f"{self.journal[i].get('record_index')}, not {i}")
            records[i] = line
            self.journal[i] = dict(entry, record_index=i)
        write_text_atomic(self.path / REPLACING_FILE, json.dumps(sorted(updates)))
        self._write_journal()
        self._write_records(records)
        (self.path / REPLACING_FILE).unlink()

    def _write_records(self, records: list[str]) -> None:
        write_text_atomic(self.path / RECORD_FILE, "".join(r + "\n" for r in records))

    def _write_journal(self) -> None:
        write_text_atomic(self.path / SIDECAR_FILE, "".join(
            json.dumps(e, separators=_COMPACT) + "\n" for e in self.journal))

    def _finish_replacing(self, rebuild_record) -> None:
        """A crash interrupted `replace_records`: rewrite the noted records from the journal."""
        note = self.path / REPLACING_FILE
        if not note.exists():
            return
        if rebuild_record is None:
            raise RuntimeError(f"{self.path}: a re-timing was interrupted ({REPLACING_FILE}); "
                               "open it with cdmpp collect to finish it")
        records = self._lines(RECORD_FILE)
        for i in json.loads(note.read_text()):
            records[i] = rebuild_record(self.journal[i], self)
        self._write_records(records)
        note.unlink()
