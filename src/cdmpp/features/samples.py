"""The samples table: one row per measured record, pointing at its program's features."""

from __future__ import annotations

import functools
import json
from pathlib import Path

SCHEMA_FIELDS = (
    ("key", "string"),  # program key (features row)
    ("db", "string"),  # database directory, absolute: one identity however it was typed
    ("record_index", "int64"),  # line in database_tuning_record.json
    ("device_id", "string"),  # device.json id, else "<mcpu>/<num-cores>" of the record's target
    ("task", "string"),  # workload name, else its structural hash
    ("op", "string"),
    ("networks", "string"),  # comma-separated
    ("workload_shash", "string"),
    ("latency_s", "float64"),
    ("noise_rel", "float64"),  # gap of the two best passes (NaN with one pass)
    ("pass_to_pass_rel", "float64"),  # first vs second pass (NaN with one pass)
    # passes timed on an undisturbed machine (by the reference kernel); NaN when not recorded.
    # 0: the label is likely too high (`cdmpp collect --remeasure-disturbed`)
    ("clean_passes", "float64"),
)


def schema():
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA_FIELDS])


def empty_samples():
    import pyarrow as pa

    return pa.Table.from_pylist([], schema=schema())


def device_id_of(db_path: str | Path, target: dict) -> str:
    device_file = Path(db_path) / "device.json"
    if device_file.exists():
        return json.loads(device_file.read_text())["device_id"]
    return target_device_id(target)


def target_device_id(target: dict) -> str:
    """The device id of a record without a `device.json` (e.g. written by TVM's own tuner):
    what its target says, "mcpu/num-cores"."""
    return f"{target.get('mcpu', '?')}/{target.get('num-cores', '?')}"


def tasks_json_of(db_path: str | Path) -> dict:
    """The database's `tasks.json` (workload shash -> name, op, networks), {} when absent."""
    path = Path(db_path) / "tasks.json"
    return json.loads(path.read_text()) if path.exists() else {}


@functools.cache
def _catalog_by_name() -> dict:
    from cdmpp.programs.catalog import catalog

    return {t.name: t for t in catalog()}


def task_info(record, tasks_json: dict) -> tuple[str, str, str]:
    """(task name, op family, networks) of a record, the catalog being the authority."""
    name = record.workload.name or record.workload.shash
    known = _catalog_by_name()
    if name in known:
        return name, known[name].op, ",".join(known[name].networks)
    info = tasks_json.get(record.workload.shash, {})
    return name, info.get("op", ""), ",".join(info.get("networks", []))


def sample_row(record, key: str, device_id: str, tasks_json: dict) -> dict:
    """The record's row; label and noise are NaN when it has no valid timing."""
    from cdmpp.measure.timing import Protocol

    ref_slow_rel = Protocol.ref_slow_rel  # the collector's threshold for a disturbed pass
    task, op, networks = task_info(record, tasks_json)
    m = record.measurement

    def number_or_nan(value) -> float:
        return float("nan") if value is None else float(value)

    def number(name: str) -> float:
        return number_or_nan(None if m is None else getattr(m, name))

    return {"key": key, "db": str(Path(record.db).resolve()),
            "record_index": record.record_index, "device_id": device_id, "task": task,
            "op": op, "networks": networks,
            "workload_shash": record.workload.shash, "latency_s": number("latency_s"),
            "noise_rel": number("noise_rel"), "pass_to_pass_rel": number("pass_to_pass_rel"),
            "clean_passes": number_or_nan(None if m is None else m.clean_passes(ref_slow_rel))}
