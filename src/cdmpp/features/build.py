"""`cdmpp features`: turn databases into a feature store, incrementally and in parallel."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.atomic import write_text_atomic
from cdmpp.features.samples import device_id_of, sample_row, schema, tasks_json_of
from cdmpp.features.store import (DEVICES_FILE, FAILURES_FILE, SAMPLES_FILE, FeatureStore,
                                  program_key, write_shard)
from cdmpp.gc_scope import heap_frozen
from cdmpp.measure.database import load_database, unique_databases

_CHUNK = 32  # records per extraction job: one workload decode serves the whole chunk
# `build_store` writes a shard each time this many new programs are extracted: an interrupted
# run keeps them (the next run extracts only the rest), and they are not all held in memory
FLUSH_PROGRAMS = 4096


@dataclass
class BuildReport:
    databases: int = 0
    records: int = 0
    extracted: int = 0
    reused: int = 0  # programs already in the store (same key)
    same_program: int = 0  # records whose program another record of this run already has
    failures: list = field(default_factory=list)  # {"db", "record_index", "line", "reason"}
    # program key of every record read, by (db, record_index): callers need not hash again
    keys: dict = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        lines = [f"{self.records} records from {self.databases} databases: {self.extracted} "
                 f"programs extracted, {self.reused} already in the store, "
                 + (f"{self.same_program} the same program as another record, "
                    if self.same_program else "")
                 + f"{len(self.failures)} failed"]
        kinds: dict[str, int] = {}
        for f in self.failures:
            kind = f["reason"].split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n} x {kind}")
        return "\n".join(lines)


def _extract_chunk(keyed) -> list:
    """Worker: features of (key, record) pairs sharing one workload. Returns (key, arrays |
    error)."""
    from cdmpp.features import extract
    from cdmpp.features.programs import measured_program

    out = []
    workload_mod = keyed[0][1].workload.mod()
    for key, rec in keyed:
        try:
            program = measured_program(rec, workload_mod)
            out.append((key, rec.record_index, extract(program, rec.target), None))
        except Exception as e:  # noqa: BLE001 - reported per record, never stops the rest
            out.append((key, rec.record_index, None, f"{type(e).__name__}: {e}"))
    return out


def _chunks(keyed):
    by_workload: dict[str, list] = {}
    for key, rec in keyed:
        by_workload.setdefault(rec.workload.shash, []).append((key, rec))
    for items in by_workload.values():
        for i in range(0, len(items), _CHUNK):
            yield items[i:i + _CHUNK]


@heap_frozen()
def extract_programs(records, *, workers: int | None = None, progress: bool = False,
                     keys=None, flush=None) -> tuple[dict, dict]:
    """Compact ASTs of the records' programs, extracted in parallel (forked workers that
    inherit the imported TVM). Returns ({key: CompactAST}, {key: error message}).
    `keys`: the records' program keys if the caller has them (else they are computed).
    `flush`: called with every FLUSH_PROGRAMS new ASTs ({key: CompactAST}) as they come, and
    with the rest at the end; those are then not returned (the first dict is empty)."""
    from tqdm import tqdm

    from cdmpp.features import FEATURE_VERSION
    from cdmpp.tvm_env import import_tvm

    if keys is None:
        keys = [program_key(rec, FEATURE_VERSION) for rec in records]
    unique: dict = {}
    for key, rec in zip(keys, records):  # one extraction per program, however many records
        unique.setdefault(key, rec)
    good, errors = {}, {}

    def take(part) -> None:
        nonlocal good
        for key, _, ast, error in part:
            if error is None:
                good[key] = ast
            else:
                errors[key] = error
        if flush is not None and len(good) >= FLUSH_PROGRAMS:
            flush(good)
            good = {}

    if unique:
        import_tvm()  # before forking: the workers inherit it
        chunks = list(_chunks(unique.items()))
        bar = tqdm(total=len(unique), unit="prog", disable=not progress, file=sys.stderr,
                   desc="extracting")
        n_workers = min(workers or len(os.sched_getaffinity(0)), len(chunks))
        if n_workers <= 1:
            for chunk in chunks:
                take(_extract_chunk(chunk))
                bar.update(len(chunk))
        else:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(n_workers, mp_context=ctx) as pool:
                for fut in as_completed([pool.submit(_extract_chunk, c) for c in chunks]):
                    part = fut.result()
                    take(part)
                    bar.update(len(part))
        bar.close()
    if flush is not None and good:
        flush(good)
        good = {}
    return good, errors


def add_shard(out: Path, asts: dict) -> int:
    """Write {key: CompactAST} as the store's next shard; return how many programs it holds."""
    if not asts:
        return 0
    shard_dir = Path(out) / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    n = len([p for p in shard_dir.iterdir() if not p.name.endswith(".tmp")])
    keys = sorted(asts)
    write_shard(shard_dir / f"{n:05d}", keys, [asts[k] for k in keys])
    return len(keys)


def _record_devices(out: Path, databases) -> None:
    """Keep each database's device.json in the store (DEVICES_FILE, by device id), so device
    vectors can be read back without the databases."""
    path = out / DEVICES_FILE
    devices = json.loads(path.read_text()) if path.exists() else {}
    for db in databases:
        device_file = Path(db) / "device.json"
        if device_file.exists():
            d = json.loads(device_file.read_text())
            devices[d["device_id"]] = d
    if devices:
        write_text_atomic(path, json.dumps(devices, indent=1, sort_keys=True))


def open_store(db_paths, store: str | Path | None = None, *,
               workers: int | None = None, progress: bool = True) -> FeatureStore:
    """The feature store at `store` (default: the shared one, `paths.default_store_dir()`)
    after adding every record of `db_paths`; the build report goes to stderr."""
    import sys

    from cdmpp.paths import default_store_dir

    path = Path(store) if store else default_store_dir()
    print(build_store(db_paths, path, workers=workers, progress=progress), file=sys.stderr)
    return FeatureStore(path)


@heap_frozen()
def build_store(db_paths, out: str | Path, *, workers: int | None = None,
                progress: bool = True) -> BuildReport:
    """Add every record of the databases under `db_paths` to the store at `out`."""
    loaded = [load_database(path.resolve(), strict=False) for path in unique_databases(db_paths)]
    return build_store_from(loaded, out, workers=workers, progress=progress)


@heap_frozen()
def build_store_from(loaded, out: str | Path, *, workers: int | None = None,
                     progress: bool = True) -> BuildReport:
    """`build_store` for databases the caller has already loaded (`load_database(strict=False)`
    results), so a caller that needs their records too reads each database once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cdmpp.features import FEATURE_VERSION

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = FeatureStore(out)
    report = BuildReport()
    rows, todo, todo_keys, pending, databases = [], [], [], set(), []
    for db in loaded:
        path = Path(db.path)
        databases.append(path)
        report.databases += 1
        for s in db.skipped:
            report.failures.append({"db": str(path), "record_index": None, "line": s.line,
                                    "reason": f"bad line: {s.reason}"})
        tasks_json, device_id = tasks_json_of(path), None
        for rec in db.records:
            report.records += 1
            device_id = device_id or device_id_of(path, rec.target)
            key = program_key(rec, FEATURE_VERSION)
            report.keys[(rec.db, rec.record_index)] = key
            rows.append(sample_row(rec, key, device_id, tasks_json))
            if key in store.keys or key in pending:
                report.reused += key in store.keys
                report.same_program += key not in store.keys
                continue
            pending.add(key)
            todo.append(rec)
            todo_keys.append(key)

    def flush(asts) -> None:  # a shard per batch: an interrupted run keeps what it did
        report.extracted += add_shard(out, asts)

    _, errors = extract_programs(todo, workers=workers, progress=progress, keys=todo_keys,
                                 flush=flush)
    for rec, key in zip(todo, todo_keys):
        if key in errors:
            report.failures.append({"db": rec.db, "record_index": rec.record_index,
                                    "line": rec.record_index + 1, "reason": errors[key]})
    failed_keys = set(errors)

    # samples: replace rows of the same (db, record_index), keep the others. A record is one
    # row however its database was named (rows hold the absolute path); rows of an older
    # cdmpp that kept the path as typed cannot be told apart from others, so they go (their
    # features stay: their databases' next build reuses them)
    new = list({(r["db"], r["record_index"]): r for r in rows
                if r["key"] not in failed_keys}.values())
    fresh = {(r["db"], r["record_index"]) for r in new}
    old = store.samples().to_pylist()
    relative = [r for r in old if not Path(r["db"]).is_absolute()]
    if relative:
        warnings.warn(f"{out}: {len(relative)} samples of an older cdmpp named their database "
                      "by a relative path and were dropped; give their databases again to "
                      "add them back (their features are reused)")
    old = [r for r in old if Path(r["db"]).is_absolute()
           and (r["db"], r["record_index"]) not in fresh]
    table = pa.Table.from_pylist(old + new, schema=schema())
    tmp = out / f".{SAMPLES_FILE}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, out / SAMPLES_FILE)
    _record_devices(out, databases)
    _write_failures(out, databases, report.failures)
    return report


def _write_failures(out: Path, databases, failures: list) -> None:
    """FAILURES_FILE: the failures of every database in the store as of its latest build; the
    databases built now replace theirs (a fixed record is no longer listed)."""
    built = {str(Path(db).resolve()) for db in databases}
    path = out / FAILURES_FILE
    kept = []
    if path.exists():
        kept = [f for f in (json.loads(line) for line in path.read_text().splitlines() if line)
                if str(Path(f["db"]).resolve()) not in built]
    entries = kept + [dict(f, db=str(Path(f["db"]).resolve())) for f in failures]
    if entries or path.exists():
        write_text_atomic(path, "".join(json.dumps(f) + "\n" for f in entries))
