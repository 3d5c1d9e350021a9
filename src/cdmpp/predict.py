"""Predict the latency of every program in TVM JSON databases with a saved estimator.

    from cdmpp.model.registry import load_estimator
    from cdmpp.predict import predict_databases, write_predictions_csv

    result = predict_databases(load_estimator("default"), ["tuning_logs/"], store="cache")
    write_predictions_csv(result, "preds.csv")
    print(result.summary())

Any database works, including one written by TVM's own tuner for operators cdmpp has never
seen: features come from the record's workload and trace, never from a catalog. A record
without a valid timing (TVM's 1e10 s failure marker, NaN, none) is still a program: it is
predicted and its measured latency left empty. Lines that are not records (non-JSON, pointing
at a missing workload) and programs whose features cannot be extracted are skipped, each
reported with its file, line and reason.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from cdmpp.atomic import write_text_atomic
from cdmpp.dataset.loader import programs_for_rows
from cdmpp.gc_scope import heap_frozen
from cdmpp.measure.database import (RECORD_FILE, DatabaseError, SkippedLine, _lines_with_tail,
                                    _load_sidecars, _parse_record, find_databases,
                                    load_database)
from cdmpp.paths import default_store_dir
from cdmpp.types import ProgramRecord, check_run_secs

CSV_COLUMNS = ("db", "record_index", "workload_hash", "predicted_latency_s", "measured_latency_s")


def sample_databases() -> list[str]:
    """The shipped sample data: real measurements held out from the shipped models' training."""
    root = Path(__file__).parent / "assets" / "sample_data"
    if not root.exists():
        raise FileNotFoundError(f"no sample data is shipped with this cdmpp ({root} is missing)")
    return [str(root)]


@dataclass(frozen=True)
class SkippedRecord(SkippedLine):
    """A record line that was not predicted (file, 1-based line, reason) and its database."""

    db: str = ""  # the database, as named in the output


@dataclass(frozen=True)
class Prediction:
    db: str  # as given on the command line (or given/sub/dir for a folder of databases)
    record_index: int  # 0-based line in database_tuning_record.json
    workload_hash: str
    predicted_latency_s: float
    measured_latency_s: float | None  # None when the record has no valid timing


@dataclass
class PredictionResult:
    predictions: list[Prediction] = field(default_factory=list)
    skipped: list[SkippedRecord] = field(default_factory=list)
    databases: int = 0
    extracted: int = 0  # programs whose features were extracted by this run

    def metrics(self) -> dict | None:
        """`evaluate.metrics.summary` of the predictions against measured latencies (grouped by
        workload), or None when no prediction has a measured latency."""
        from cdmpp.evaluate.metrics import summary

        pairs = [(p.measured_latency_s, p.predicted_latency_s, p.workload_hash)
                 for p in self.predictions if p.measured_latency_s is not None
                 and np.isfinite(p.predicted_latency_s) and p.predicted_latency_s > 0]
        if not pairs:
            return None
        true, pred, groups = zip(*pairs)
        return summary(np.array(true), np.array(pred), np.array(groups))

    def table(self, limit: int = 20) -> str:
        """The first `limit` predictions beside their measured latency, as aligned text."""
        lines = [f"{'db':<28} {'record':>6} {'predicted':>11} {'measured':>11} {'error':>7}"]
        for p in self.predictions[:limit]:
            measured = "" if p.measured_latency_s is None else f"{1e3 * p.measured_latency_s:.4f}ms"
            error = "" if p.measured_latency_s is None else \
                f"{100 * (p.predicted_latency_s / p.measured_latency_s - 1):+.0f}%"
            lines.append(f"{Path(p.db).name[-28:]:<28} {p.record_index:>6} "
                         f"{1e3 * p.predicted_latency_s:.4f}ms {measured:>11} {error:>7}")
        if len(self.predictions) > limit:
            lines.append(f"... {len(self.predictions) - limit} more rows in the CSV")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: what was predicted and skipped, and the accuracy where measured."""
        kinds: dict[str, int] = {}
        for s in self.skipped:
            kind = s.reason.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        detail = f" ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})" if kinds else ""
        unmeasured = sum(p.measured_latency_s is None for p in self.predictions)
        text = (f"{len(self.predictions)} records predicted ({unmeasured} without a measured "
                f"latency), {len(self.skipped)} skipped{detail}, from {self.databases} databases")
        m = self.metrics()
        if m is not None:
            text += (f"; vs measured ({m['n']} records): MAPE {100 * m['mape']:.1f}%, median APE "
                     f"{100 * m['median_ape']:.1f}%, within ±10% {100 * m['within_10']:.1f}%")
        invalid = sum(not (np.isfinite(p.predicted_latency_s) and p.predicted_latency_s > 0)
                      for p in self.predictions)
        if invalid:
            text += (f"; WARNING: {invalid} predictions are not a positive finite latency (NaN, "
                     "0 or infinite): the model is broken for these programs, and the figures "
                     "above leave them out")
        return text


def _database_label(given: str, path: Path) -> str:
    """The database's name in the output: exactly as given, or given + its path below it."""
    if path == Path(given):
        return given
    return os.path.join(given, str(path.relative_to(given)))


def predictable_records(path: str | Path, db=None) -> tuple[list[ProgramRecord], list]:
    """(records, bad lines) of one database, as `load_database(strict=False)` reads it, except
    that a record without a valid timing is kept (with `measurement=None`), not a bad line.
    `db`: that `load_database` result, if the caller has it."""
    db = db if db is not None else load_database(path, strict=False)
    root = Path(path)
    rec_file = root / RECORD_FILE
    bad_lines = [s for s in db.skipped if Path(s.file).name == RECORD_FILE]
    if not bad_lines:
        return list(db.records), list(db.skipped)
    # Slots of the workload file: bad workload lines keep their index (TVM's indexing).
    bad_workloads = {s.line - 1 for s in db.skipped if Path(s.file).name != RECORD_FILE}
    valid = iter(db.workloads)
    workloads = [None if i in bad_workloads else next(valid)
                 for i in range(len(db.workloads) + len(bad_workloads))]
    meta, _, _ = _load_sidecars(root)
    lines = _lines_with_tail(rec_file)
    records, skipped = list(db.records), []
    for s in db.skipped:
        untimed = None
        if Path(s.file).name == RECORD_FILE:
            untimed = _untimed_record(str(path), s.line - 1, lines[s.line - 1], workloads, meta)
        if untimed is None:
            skipped.append(s)
        else:
            records.append(untimed)
    records.sort(key=lambda r: r.record_index)
    return records, skipped


def _untimed_record(db: str, index: int, text: str, workloads, meta) -> ProgramRecord | None:
    """The record of a line whose only fault is its timing, else None."""
    try:
        wl_index, (trace, run_secs, target, args_info) = _parse_record(text, len(workloads))
    except (ValueError, LookupError):
        return None
    if workloads[wl_index] is None or check_run_secs(run_secs) is None or not isinstance(target, dict):
        return None
    return ProgramRecord(db=db, record_index=index, workload_index=wl_index,
                         workload=workloads[wl_index], trace_json=trace, target=target,
                         args_info=args_info, measurement=None, meta=meta.get(index, {}))


def _one_line(reason: str) -> str:
    """A multi-line error (TVM prints the IR) as its first line ... its last line."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if len(lines) <= 1:
        return reason.strip()
    return f"{lines[0]} ... {lines[-1]}"


def _extract_missing(store_dir: Path, records: list, workers: int | None) -> dict:
    """Extract the programs of `records` into a new shard of the store. Returns
    {key: error message} for the programs that could not be extracted."""
    from cdmpp.features.build import add_shard, extract_programs

    good, errors = extract_programs(records, workers=workers)
    add_shard(store_dir, good)
    return errors


def _sample_rows(records, keys) -> list[dict]:
    """Rows of the samples schema for records (NaN latency where there is no timing)."""
    from cdmpp.features.samples import device_id_of, sample_row, tasks_json_of

    tasks = {db: tasks_json_of(db) for db in {rec.db for rec in records}}
    return [sample_row(rec, key, device_id_of(rec.db, rec.target), tasks[rec.db])
            for rec, key in zip(records, keys)]


def resolve_databases(dbs) -> list[tuple[str, Path]]:
    """(label, database directory) for every database under the given paths, in order."""
    out = []
    for given in dbs:
        given = str(given)
        if not Path(given).exists():
            raise FileNotFoundError(f"database {given} does not exist")
        try:
            paths = find_databases(given)
        except DatabaseError as e:
            raise FileNotFoundError(str(e)) from e
        out += [(_database_label(given, p), p) for p in paths]
    return out


@heap_frozen()
def predict_databases(estimator, dbs, *, store: str | Path | None = None,
                      workers: int | None = None, progress: bool = False) -> PredictionResult:
    """Predict every record of the databases under `dbs` (directories, or folders of them).

    Features are cached in the feature store at `store` (default: `default_store_dir()`),
    built or refreshed with `features.build.build_store`; programs it could not take (records
    without a valid timing) are extracted into it here.
    """
    import pyarrow as pa

    from cdmpp.features import FEATURE_VERSION
    from cdmpp.features.build import build_store_from
    from cdmpp.features.samples import schema
    from cdmpp.features.store import FeatureStore, program_key

    databases = resolve_databases(dbs)
    loaded = [load_database(p, strict=False) for _, p in databases]  # read once, used twice
    store_dir = Path(store) if store is not None else default_store_dir()
    report = build_store_from(loaded, store_dir, workers=workers, progress=progress)
    build_errors = {(f["db"], f["record_index"]): f["reason"] for f in report.failures
                    if f["record_index"] is not None}
    result = PredictionResult(databases=len(databases), extracted=report.extracted)

    # Every record line of every database: (label, record) or a skipped line, in order.
    entries = []
    for (label, path), db in zip(databases, loaded):
        records, bad = predictable_records(path, db)
        # bad workload lines first, then record lines in file order
        items = [((Path(s.file).name == RECORD_FILE, s.line - 1),
                  SkippedRecord(s.file, s.line, s.reason, db=label)) for s in bad]
        items += [((True, r.record_index), (label, r)) for r in records]
        entries += [item for _, item in sorted(items, key=lambda kv: kv[0])]

    fs = FeatureStore(store_dir)
    keyed = [(e, report.keys.get((e[1].db, e[1].record_index))
              or program_key(e[1], FEATURE_VERSION))  # untimed records were not in the build
             for e in entries if not isinstance(e, SkippedRecord)]
    missing = [rec for (_, rec), key in keyed
               if key not in fs.keys and (rec.db, rec.record_index) not in build_errors]
    errors = {}
    if missing:
        errors = _extract_missing(store_dir, missing, workers)
        result.extracted += len({program_key(r, FEATURE_VERSION) for r in missing}) - len(errors)
        fs = FeatureStore(store_dir)

    todo, skipped_at = [], {}
    for (label, rec), key in keyed:
        if key in fs.keys:
            todo.append((label, rec, key))
            continue
        reason = build_errors.get((rec.db, rec.record_index)) or errors.get(key) \
            or "features missing from the store"
        skipped_at[(label, rec.record_index)] = SkippedRecord(
            str(Path(rec.db) / RECORD_FILE), rec.record_index + 1,
            f"feature extraction failed: {_one_line(reason)}", db=label)

    predicted = {}
    if todo:
        table = pa.Table.from_pylist(_sample_rows([r for _, r, _ in todo], [k for _, _, k in todo]),
                                     schema=schema())
        programs = programs_for_rows(fs, table, np.arange(len(todo)))
        # the tasks' default programs, for a model with a default-program expert
        programs = replace(programs, default=np.array([rec.is_default for _, rec, _ in todo]))
        latency_s = np.asarray(estimator.predict(programs), dtype=np.float64)
        if latency_s.shape != (len(todo),):
            raise RuntimeError(f"the model returned {latency_s.shape} predictions for "
                               f"{len(todo)} programs")
        for (label, rec, _), y in zip(todo, latency_s):
            predicted[(label, rec.record_index)] = Prediction(
                label, rec.record_index, rec.workload.shash, float(y), rec.latency_s)

    for e in entries:
        if isinstance(e, SkippedRecord):
            result.skipped.append(e)
            continue
        label, rec = e
        at = (label, rec.record_index)
        if at in predicted:
            result.predictions.append(predicted[at])
        else:
            result.skipped.append(skipped_at[at])
    return result


def _number(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def write_predictions_csv(result: PredictionResult, path: str | Path) -> Path:
    """One row per predicted record (columns `CSV_COLUMNS`), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in result.predictions:
        writer.writerow([p.db, p.record_index, p.workload_hash, _number(p.predicted_latency_s),
                         _number(p.measured_latency_s)])
    write_text_atomic(path, buf.getvalue())
    return path
