"""The programs of a TVM tuning database as collector candidates: a search's programs, timed here.

Sampled programs are random draws from a design space. A tuner's evolutionary search visits
another region (the programs it converges to and their mutants), and there a model trained on
random draws alone errs most (docs/tune.md, "Predicting tuned networks"). `cdmpp collect
--records-from DB` times the programs of any TVM JSON database (written by `cdmpp tune` or by
TVM's own tuner) with the collector's protocol, so they become training data with labels as
good as the rest, and the tuner's own timing is kept beside them for comparison.

A database's workload is matched to a task by structural equality with the task's workload
(the collector's own tasks, e.g. `--kernels-of resnet18`). Each record's trace is replayed on
the task's workload, and the replayed module is what is built, timed and featurized, so the
features describe what was measured by construction. A program equal to one the task already
has is not taken twice. Records of workloads no task matches, records TVM marked as failed and
traces that do not replay are counted and reported, never silently dropped.

Imported programs are persisted in `candidates/<task>.imported.json` before anything is timed,
keyed `<task>/db-<structural hash>`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.atomic import write_text_atomic
from cdmpp.programs.sampling import Candidate, load_candidates

IMPORTED_SUFFIX = ".imported.json"


@dataclass
class ImportReport:
    """What `import_programs` took from the databases and what it could not use."""

    databases: list[str] = field(default_factory=list)
    records: int = 0  # records read (TVM's failure markers and unreadable lines included)
    new: int = 0  # programs added to the tasks' candidates
    duplicates: int = 0  # programs a task already had (sampled, or from a database)
    unmatched: int = 0  # records whose workload is none of the tasks'
    unmatched_workloads: int = 0
    # "db:line: why": records TVM marked failed, unreadable record or workload lines
    unusable: list = field(default_factory=list)
    not_replayed: list = field(default_factory=list)  # "db record i: why"
    args_changed: int = 0  # replays whose arguments differ from the record's args_info

    def __str__(self) -> str:
        lines = [f"from {len(self.databases)} database(s): {self.records} records, {self.new} "
                 f"programs new, {self.duplicates} already there"]
        if self.unmatched:
            lines.append(f"{_records(self.unmatched)} of {self.unmatched_workloads} "
                         "workload(s) that match none of the tasks (name the tasks they belong "
                         "to: --kernels-of NETWORK, --ops ...)")
        if self.unusable:
            reasons = Counter(u.split(": ", 2)[1].split(":")[0] for u in self.unusable
                              if ": " in u)
            lines.append(f"{len(self.unusable)} database line(s) not usable: " + ", ".join(
                f"{n} x {why}" for why, n in reasons.most_common())
                + f" (first: {self.unusable[0]})")
        if self.not_replayed:
            lines.append(f"{len(self.not_replayed)} traces do not replay on the task's workload "
                         f"(first: {self.not_replayed[0]})")
        if self.args_changed:
            lines.append(f"{self.args_changed} replays have other arguments than their record "
                         "says: the replayed program is what is timed and featurized")
        return "\n".join(lines)


def _records(n: int) -> str:
    return f"{n} record" + ("" if n == 1 else "s")


def imported_path(out: Path, task: str) -> Path:
    return Path(out) / "candidates" / f"{task}{IMPORTED_SUFFIX}"


def task_candidates(out: Path, task: str) -> list[Candidate]:
    """Every persisted program of `task` in collection directory `out`: sampled (and the
    default) from `candidates/<task>.json`, then those taken from databases."""
    found = []
    for path in (Path(out) / "candidates" / f"{task}.json", imported_path(out, task)):
        if path.exists():
            found += load_candidates(path)
    return found


def _args_json(mod) -> list:
    """The arguments the built program takes, as meta_schedule derives them for a candidate (a
    layout rewrite changes a weight's shape: its preprocessing block is left out)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from cdmpp.measure import tvm_codec

    return tvm_codec.args_info_to_json(ArgInfo.from_entry_func(mod, remove_preproc=True))


def import_programs(databases, tasks, workload_of, out: Path, known_shashes,
                    log=None) -> ImportReport:
    """Add the programs of `databases` (TVM JSON database directories) to the candidates of the
    `tasks` whose workload they were tuned for; `workload_of(task)` gives a task's workload
    IRModule, `known_shashes(task)` the structural hashes of the programs it already has.
    Returns what was taken and what was not, with reasons."""
    from cdmpp.measure import tvm_codec
    from cdmpp.measure.database import load_database

    report = ImportReport(databases=[str(d) for d in databases])
    by_shash = {tvm_codec.structural_hash(workload_of(t)): t for t in tasks}
    added: dict[str, list[Candidate]] = {}
    seen: dict[str, set] = {}
    for db_dir in databases:
        db = load_database(db_dir, strict=False)
        report.records += len(db.records) + len(db.skipped)
        report.unusable += [str(s) for s in db.skipped]
        task_of_workload: dict[str, object] = {}
        for w in db.workloads:
            try:
                task_of_workload[w.shash] = by_shash.get(tvm_codec.structural_hash(w.mod()))
            except Exception as e:  # noqa: BLE001 - a workload TVM cannot decode matches nothing
                task_of_workload[w.shash] = None
                report.unusable.append(f"{db_dir} workload {w.shash}: undecodable: "
                                       f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
        unmatched = {r.workload.shash for r in db.records
                     if task_of_workload[r.workload.shash] is None}
        report.unmatched_workloads += len(unmatched)
        for rec in db.records:
            task = task_of_workload[rec.workload.shash]
            if task is None:
                report.unmatched += 1
                continue
            if task.name not in seen:
                seen[task.name] = set(known_shashes(task))
            try:
                mod = tvm_codec.replay_trace(workload_of(task), rec.trace_json).mod
            except Exception as e:  # noqa: BLE001 - any failure: report the record, go on
                report.not_replayed.append(f"{db_dir} record {rec.record_index}: "
                                           f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            shash = tvm_codec.structural_hash(mod)
            if shash in seen[task.name]:
                report.duplicates += 1
                continue
            seen[task.name].add(shash)
            args = _args_json(mod)
            report.args_changed += args != json.loads(json.dumps(rec.args_info))
            source = {"db": str(db_dir), "record_index": rec.record_index,
                      "run_secs": list(rec.measurement.run_secs)}
            added.setdefault(task.name, []).append(Candidate(
                f"{task.name}/db-{shash}", "imported", rec.trace_json, args, shash, True,
                source=source))
            report.new += 1
        if log:
            log(f"{db_dir}: {len(db.records)} records read, {report.new} new programs so far")
    for name, cands in added.items():  # persisted before anything is timed
        path = imported_path(out, name)
        before = load_candidates(path) if path.exists() else []
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(
            {"task": name, "candidates": [c.to_json() for c in before + cands]},
            separators=(",", ":")))
    return report
