"""Where a tuning run's time went: searching, building, running, from the task scheduler's log.

In TVM 0.27 the gradient task scheduler logs when it picks a task (its search then proposes a
batch), when it sends the batch to the builder and when it sends the built programs to the
runner; it waits for the runs before it picks again. So the time from a pick to the next
"to builder" is search, from there to "to runner" building, and from there to the next pick
(or the end of the run) running. The log's timestamps are whole seconds of local time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

SCHEDULER_LOG = "logs/tvm.s_tir.meta_schedule.logging.task_scheduler.log"
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ")
_EVENTS = (("TaskScheduler picks", "search"), ("sample(s) to builder", "build"),
           ("sample(s) to runner", "run"))


@dataclass(frozen=True)
class TuningPhases:
    search_s: float
    build_s: float
    run_s: float
    rounds: int  # tasks picked

    def __str__(self) -> str:
        return (f"search {self.search_s:,.0f} s, builds {self.build_s:,.0f} s, "
                f"runs {self.run_s:,.0f} s over {self.rounds} rounds")


def phases_from_log(lines, end: datetime | None = None) -> TuningPhases:
    """The phases of the scheduler log `lines`; the last phase ends at `end` (local time, as
    the log's), else at the last event."""
    events = []
    for line in lines:
        stamp = _STAMP.match(line)
        phase = next((p for text, p in _EVENTS if text in line), None)
        if stamp and phase:
            events.append((phase, datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")))
    totals = {"search": 0.0, "build": 0.0, "run": 0.0}
    ends = [t for _, t in events[1:]] + ([end] if end is not None else [])
    for (phase, start), stop in zip(events, ends):
        totals[phase] += max(0.0, (stop - start).total_seconds())
    return TuningPhases(totals["search"], totals["build"], totals["run"],
                        sum(phase == "search" for phase, _ in events))


def log_size(work_dir) -> int:
    """Bytes in the work directory's scheduler log now (0: none yet): a rerun appends to it."""
    path = Path(work_dir) / SCHEDULER_LOG
    return path.stat().st_size if path.exists() else 0


def phases_since(work_dir, offset: int, end: datetime | None = None) -> TuningPhases | None:
    """The phases logged in `work_dir` after byte `offset` (`log_size` before the run), or
    None when there is no log."""
    path = Path(work_dir) / SCHEDULER_LOG
    if not path.exists():
        return None
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return phases_from_log(text.splitlines(), end)
