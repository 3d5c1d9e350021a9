"""Read TVM meta_schedule JSON databases without TVM, with clear errors for bad lines.

A database is a directory with `database_workload.json` (one `[shash, encoded_mod]` per line)
and `database_tuning_record.json` (one `[workload_index, [trace, run_secs, target, args_info]]`
per line). A record's identity is its 0-based line number in the record file (TVM's own
`get_all_tuning_records()` returns records sorted by latency, so we never use its order).

cdmpp adds optional files beside them, which TVM ignores:
- `cdmpp_measurements.jsonl`: one line per record with pass structure and provenance;
- `tasks.json`: workload shash -> {name, op, networks};
- `passes.json` (the format of ../shared/data): per-pass medians in record order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.atomic import write_text_atomic
from cdmpp.types import Measurement, ProgramRecord, Workload, check_run_secs

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
SIDECAR_FILE = "cdmpp_measurements.jsonl"
TASKS_FILE = "tasks.json"
SHARED_PASSES_FILE = "passes.json"


class DatabaseError(ValueError):
    """A database line that cannot be used, with the file, the line and the reason."""

    def __init__(self, file: str | Path, line: int | None, reason: str):
        self.file, self.line, self.reason = str(file), line, reason
        where = f"{file}:{line}" if line is not None else str(file)
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class SkippedLine:
    file: str
    line: int  # 1-based, as editors show it
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class LoadedDatabase:
    path: str
    workloads: tuple[Workload, ...]
    records: tuple[ProgramRecord, ...]
    skipped: tuple[SkippedLine, ...] = field(default=())

    def skip_summary(self) -> str:
        """'N lines skipped: k reason, ...' grouped by the kind of reason."""
        if not self.skipped:
            return "no lines skipped"
        kinds: dict[str, int] = {}
        for s in self.skipped:
            kind = s.reason.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        parts = ", ".join(f"{n} x {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        return f"{len(self.skipped)} lines skipped in {self.path}: {parts}"


def _lines_with_tail(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _parse_workload(text: str) -> list:
    obj = json.loads(text)
    if not (isinstance(obj, list) and len(obj) == 2 and all(isinstance(x, str) for x in obj)):
        raise ValueError("a workload line must be [shash, encoded_module]")
    return obj


def _parse_record(text: str, n_workloads: int) -> tuple[int, list]:
    obj = json.loads(text)
    if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], int)
            and isinstance(obj[1], list) and len(obj[1]) == 4):
        raise ValueError("a record line must be [workload_index, [trace, run_secs, target, args_info]]")
    index = obj[0]
    if not 0 <= index < n_workloads:
        raise LookupError(f"record points at workload {index}, but the workload file has "
                          f"{n_workloads} valid workloads")
    return index, obj[1]


def _load_sidecars(root: Path) -> tuple[dict[int, dict], dict[str, dict], list | None]:
    meta: dict[int, dict] = {}
    sidecar = root / SIDECAR_FILE
    if sidecar.exists():
        for text in _lines_with_tail(sidecar):
            try:
                entry = json.loads(text)
                meta[int(entry["record_index"])] = entry
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line: the collector repairs it on its next run
    tasks = json.loads((root / TASKS_FILE).read_text()) if (root / TASKS_FILE).exists() else {}
    passes_path = root / SHARED_PASSES_FILE
    passes = json.loads(passes_path.read_text()) if passes_path.exists() else None
    return meta, tasks, passes


def _workload_name(root: Path, shash: str, tasks: dict, single: bool) -> str | None:
    if shash in tasks:
        return tasks[shash].get("name")
    networks = root.parent / "networks.json"  # the layout of ../shared/data: one op per directory
    if single and networks.exists() and root.name in json.loads(networks.read_text()):
        return root.name
    return None


def _measurement(run_secs, meta: dict | None, pass_medians) -> Measurement:
    repeats = None
    ratios = None
    if meta is not None:
        repeats = meta.get("repeats_per_pass")
        ratios = meta.get("ref_ratios")
    elif pass_medians:
        repeats = len(run_secs) // len(pass_medians) if len(run_secs) % len(pass_medians) == 0 else None
    return Measurement.from_run_secs(run_secs, repeats, ratios)


def load_database(path: str | Path, *, strict: bool = True) -> LoadedDatabase:
    """Load a JSON database directory.

    strict=True raises `DatabaseError` at the first bad line; strict=False skips bad lines and
    lists each in `LoadedDatabase.skipped` (file, 1-based line, reason). Records whose timing is
    invalid (NaN, non-positive, TVM's 1e10 failure marker) are bad lines too.
    """
    root = Path(path)
    wl_path, rec_path = root / WORKLOAD_FILE, root / RECORD_FILE
    for p in (wl_path, rec_path):
        if not p.is_file():
            raise DatabaseError(p, None, "missing: a TVM JSON database needs "
                                f"{WORKLOAD_FILE} and {RECORD_FILE}")
    skipped: list[SkippedLine] = []

    def bad(file: Path, line0: int, reason: str):
        if strict:
            raise DatabaseError(file, line0 + 1, reason)
        skipped.append(SkippedLine(str(file), line0 + 1, reason))

    meta, tasks, shared_passes = _load_sidecars(root)
    raw_workloads: list[list] = []
    for i, text in enumerate(_lines_with_tail(wl_path)):
        try:
            raw_workloads.append(_parse_workload(text))
        except ValueError as e:
            bad(wl_path, i, f"bad workload line: {e}")
            # TVM indexes workloads by their line: keep the slot so later indices stay right
            raw_workloads.append(None)
    single = len(raw_workloads) == 1
    workloads = [None if w is None else Workload(w[0], w[1], _workload_name(root, w[0], tasks, single))
                 for w in raw_workloads]

    records: list[ProgramRecord] = []
    for i, text in enumerate(_lines_with_tail(rec_path)):
        try:
            wl_index, (trace, run_secs, target, args_info) = _parse_record(text, len(workloads))
        except json.JSONDecodeError as e:
            bad(rec_path, i, f"not JSON (truncated line?): {e}")
            continue
        except (ValueError, LookupError) as e:
            bad(rec_path, i, f"bad record: {e}")
            continue
        if workloads[wl_index] is None:
            bad(rec_path, i, f"bad record: its workload (line {wl_index + 1}) is unreadable")
            continue
        problem = check_run_secs(run_secs)
        if problem:
            bad(rec_path, i, f"bad timing: {problem}")
            continue
        medians = shared_passes[i] if shared_passes and i < len(shared_passes) else None
        records.append(ProgramRecord(
            db=str(path), record_index=i, workload_index=wl_index, workload=workloads[wl_index],
            trace_json=trace, target=target, args_info=args_info,
            measurement=_measurement(run_secs, meta.get(i), medians), meta=meta.get(i, {})))
    return LoadedDatabase(str(path), tuple(w for w in workloads if w is not None),
                          tuple(records), tuple(skipped))


def find_databases(path: str | Path) -> list[Path]:
    """`path` itself if it is a database, else every database directory below it (sorted)."""
    root = Path(path)
    if (root / RECORD_FILE).exists():
        return [root]
    found = sorted(p.parent for p in root.rglob(RECORD_FILE))
    if not found:
        raise DatabaseError(root, None, f"no {RECORD_FILE} found here or below")
    return found


def unique_databases(roots) -> list[Path]:
    """Every database under `roots` (see `find_databases`), each once however often and
    however it is named (the first spelling kept)."""
    found: dict[Path, Path] = {}
    for root in roots:
        for path in find_databases(root):
            found.setdefault(path.resolve(), path)
    return list(found.values())


def write_database(path: str | Path, workloads: list[list], record_lines: list[str]) -> None:
    """Write a complete database (workload JSON pairs and record lines) atomically per file."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / WORKLOAD_FILE, "".join(json.dumps(w, separators=(",", ":")) + "\n" for w in workloads))
    write_text_atomic(root / RECORD_FILE, "".join(line + "\n" for line in record_lines))
