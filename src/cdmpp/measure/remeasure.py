"""`cdmpp collect --remeasure-disturbed` and `--retest N`: time records of a collection again.

A record is *disturbed* when the reference kernel ran more than the protocol's `ref_slow_rel`
slower than its best before every one of its passes. Measured here: in bursts where the
reference kernel ran 2-11x slow, whole batches got labels several times too high, and their
passes agreed with each other, so the pass-to-pass noise did not show it (relu6_4x576x14x14
timed at 3.4 ms; the same loop nest on a quiet machine, 0.47 ms). 29% of the records of
data/epyc-2c were disturbed; re-timed, 79% of those came down by over 10% (docs/measurement.md).

Each disturbed record is rebuilt from its persisted program (candidates/<task>.json) and timed
again with the collector's protocol. Its new passes are appended to its old ones (`run_secs`,
`ref_ratios`) in place, at the same record index: the label (the minimum) can only come down
toward the undisturbed time, and nothing measured is lost. Records without reference ratios
(TVM's own databases, ../shared/data) are never touched.

`--retest N` times again N records, disturbed or not, the same way: those re-timed the fewest
times so far, in a random order seeded by `--seed` (so a run stopped by its time budget, or
killed, goes on with the records it did not reach, and a second `--retest N` takes N others),
and reports how far the new session's label (its minimum) lands from the old one: the label's
test-retest noise. Pass-to-pass noise only compares passes a few minutes apart; the host's
state drifts over hours (docs/measurement.md), and a model's error on records timed on other
days cannot go below this figure. `--retest all` is a second timing session of every record:
the labels (the minimum over all passes) then come down toward the host's undisturbed speed. On
the Zen 5 VM a second session 12 hours after the first lowered the labels of the networks'
kernels by 3.1% at the median, and their call-weighted sums went from 3-9% above the networks
timed whole to -2% to +5% (docs/measurement.md, "A second session on Zen 5").
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.clock import now_iso
from cdmpp.measure.build import build_many
from cdmpp.measure.collect import CollectConfig, _Run, append_manifest_run, task_of_key
from cdmpp.measure.database import _measurement
from cdmpp.measure.noise import retest_noise
from cdmpp.measure.timing import Timer, random_args
from cdmpp.programs.from_database import task_candidates
from cdmpp.types import Measurement


@dataclass
class RemeasureSummary:
    selected: int = 0  # records to re-time: of the tasks given, those with no undisturbed
    # pass (--remeasure-disturbed) or those re-timed the fewest times (--retest)
    remeasured: int = 0  # timed again, passes appended
    now_clean: int = 0  # of those, with an undisturbed pass now
    failed: int = 0  # could not be built or run again: left as they were
    missing: int = 0  # no persisted program (or another protocol's): left as they were
    # records of tasks not given (catalog filters/--kernels-of): disturbed ones for
    # --remeasure-disturbed, any for --retest
    not_selected: int = 0
    seconds: float = 0.0
    waited_s: float = 0.0  # spent waiting for the machine to be quiet
    stopped_by_budget: bool = False
    label_ratios: list = field(default_factory=list, repr=False)  # new label / old label
    # the new session's own label / the old label (test-retest; before merging the passes)
    session_ratios: list = field(default_factory=list, repr=False)
    retest: bool = False  # a random sample, not the disturbed records

    def __str__(self) -> str:
        selected = (f"{self.selected} records drawn (the least re-timed first)" if self.retest
                    else f"{self.selected} records had no undisturbed pass")
        lines = [f"{selected}; re-timed {self.remeasured} "
                 f"({self.now_clean} now with an undisturbed pass), {self.failed} failed, "
                 f"{self.missing} without a persisted program; {self.seconds:.0f} s "
                 f"({self.waited_s:.0f} s waiting for a quiet machine)"]
        if self.not_selected:
            which = "records" if self.retest else "disturbed records"
            lines.append(f"{self.not_selected} more {which} belong to tasks not "
                         "selected: name them as they were collected (--ops / --network, or "
                         "--kernels-of NETWORKS --batches B for network kernels)")
        if self.retest and self.session_ratios:
            r = retest_noise(self.session_ratios)
            lines.append(f"test-retest (the new session's label against the old label, "
                         f"|a - b| / min(a, b)): median {100 * r['median']:.1f}%, mean "
                         f"{100 * r['mean']:.1f}%, {100 * r['within_10']:.0f}% within 10%; "
                         f"new / old: median {r['median_ratio']:.3f}")
        if self.label_ratios:
            r = sorted(self.label_ratios)
            lines.append(f"new label / old label: median {statistics.median(r):.3f}, "
                         f"lowest {r[0]:.3f}, {sum(x < 0.9 for x in r)} came down by over 10%")
        if self.stopped_by_budget:
            lines.append("stopped at the time budget: run the same command again to go on")
        return "\n".join(lines)

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()
               if k not in ("label_ratios", "session_ratios")}
        out["median_label_ratio"] = (statistics.median(self.label_ratios)
                                     if self.label_ratios else None)
        if self.retest:
            out["test_retest"] = retest_noise(self.session_ratios) if self.session_ratios else None
        return out


def is_disturbed(entry: dict, ref_slow_rel: float) -> bool:
    """No pass of this journal entry ran on an undisturbed machine (by its reference ratios)."""
    return _measurement(entry["run_secs"], entry, None).clean_passes(ref_slow_rel) == 0


def merged_entry(entry: dict, new: Measurement, reason: str = "disturbed") -> dict:
    """The journal entry with `new`'s passes appended, and a note of the re-timing: why
    (`disturbed` or `retest`), the label before, and the new session's own label."""
    history = list(entry.get("remeasured", []))
    history.append({"at": now_iso(), "reason": reason, "passes": len(new.passes),
                    "previous_latency_s": min(entry["run_secs"]),
                    "session_latency_s": min(new.run_secs)})
    return dict(entry, run_secs=list(entry["run_secs"]) + list(new.run_secs),
                ref_ratios=list(entry["ref_ratios"]) + [p.ref_ratio for p in new.passes],
                remeasured=history)


def remeasure_disturbed(config: CollectConfig, tasks, *, progress: bool = True,
                        command: str | None = None) -> RemeasureSummary:
    """Re-time the disturbed records of `tasks` in `config.out` (see the module docstring)."""
    return _run_and_log(config, tasks, progress, command, "remeasure_disturbed",
                        lambda journal: _disturbed(journal, config, tasks))


def retest(config: CollectConfig, tasks, n: int | str, *, progress: bool = True,
           command: str | None = None) -> RemeasureSummary:
    """Re-time the `n` records of `tasks` re-timed the fewest times so far (in a random order
    seeded by `config.seed`), or every record (`n="all"`), and report the test-retest noise of
    their labels (see the module docstring)."""
    if n == "all":
        n = sys.maxsize
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"--retest needs at least 1 record or 'all', got {n!r}")
    return _run_and_log(config, tasks, progress, command, "retest",
                        lambda journal: _sample(journal, config, tasks, n))


def _disturbed(journal, config: CollectConfig, tasks) -> tuple[list, RemeasureSummary]:
    names = {t.name for t in tasks}
    disturbed = [e for e in journal if is_disturbed(e, config.protocol.ref_slow_rel)]
    todo = [e for e in disturbed if task_of_key(e["key"]) in names]
    # the worst first: a time budget then cuts off the mildest
    todo.sort(key=lambda e: -min(e["ref_ratios"]))
    return todo, RemeasureSummary(selected=len(todo), not_selected=len(disturbed) - len(todo))


def retest_sessions(entry: dict) -> int:
    """How many `--retest` sessions timed this journal entry again."""
    return sum(h.get("reason") == "retest" for h in entry.get("remeasured", []))


def _sample(journal, config: CollectConfig, tasks, n: int) -> tuple[list, RemeasureSummary]:
    import random

    names = {t.name for t in tasks}
    pool = [e for e in journal if task_of_key(e["key"]) in names and e.get("ref_ratios")]
    order = random.Random(config.seed).sample(pool, len(pool))
    order.sort(key=retest_sessions)  # stable: the least re-timed first, seeded among equals
    todo = order[:n]
    others = sum(1 for e in journal if e.get("ref_ratios")) - len(pool)
    return todo, RemeasureSummary(selected=len(todo), not_selected=others, retest=True)


def _run_and_log(config, tasks, progress, command, kind: str, select) -> RemeasureSummary:
    started = now_iso()
    run = _Run(config, tasks)
    try:
        todo, summary = select(run.store.journal)
        _remeasure(run, config, tasks, todo, summary, progress)
    finally:
        run.store.close()
    append_manifest_run(Path(config.out), {"command": command, "started": started,
                                           kind: summary.to_json()})
    return summary


def _remeasure(run: _Run, config: CollectConfig, tasks, todo: list, summary: RemeasureSummary,
               progress: bool) -> RemeasureSummary:
    from tqdm import tqdm

    protocol = config.protocol
    by_name = {t.name: t for t in tasks}
    bar = tqdm(total=len(todo), unit="prog", disable=not progress, file=sys.stderr)
    programs: dict[str, dict] = {}  # task -> {key: Candidate}
    timer = None
    start = time.monotonic()
    for i in range(0, len(todo), config.batch_size):
        if run.over_budget(start):
            summary.stopped_by_budget = True
            break
        chosen = []
        for entry in todo[i:i + config.batch_size]:
            task = by_name[task_of_key(entry["key"])]
            if task.name not in programs:
                programs[task.name] = {c.key: c for c in task_candidates(run.out, task.name)}
            cand = programs[task.name].get(entry["key"])
            if cand is None or entry.get("repeats_per_pass") != protocol.repeat:
                summary.missing += 1
                continue
            chosen.append((entry, task, cand))
        builds = build_many([cand.module(run.workload(task)) for _, task, cand in chosen],
                            run.target, config.build_timeout_s)
        built = [(entry, task, cand, b.module)
                 for (entry, task, cand), b in zip(chosen, builds) if b.ok]
        summary.failed += len(chosen) - len(built)
        timer = timer or Timer(protocol, run.target)
        results = timer.measure_batch([(c.key, mod, random_args(c.args_info_json, timer.device))
                                       for _, _, c, mod in built])
        updates = {}
        for entry, task, cand, _ in built:
            new = results[cand.key]
            if isinstance(new, Exception):
                summary.failed += 1
                continue
            merged = merged_entry(entry, new, "retest" if summary.retest else "disturbed")
            updates[entry["record_index"]] = (run.record_line(task, cand, merged["run_secs"]),
                                              merged)
            summary.remeasured += 1
            summary.now_clean += not is_disturbed(merged, protocol.ref_slow_rel)
            summary.label_ratios.append(min(merged["run_secs"]) / min(entry["run_secs"]))
            summary.session_ratios.append(min(new.run_secs) / min(entry["run_secs"]))
        run.store.replace_records(updates)
        bar.update(min(config.batch_size, len(todo) - i))
    bar.close()
    summary.seconds = time.monotonic() - start
    summary.waited_s = timer.waited_s if timer else 0.0
    return summary
