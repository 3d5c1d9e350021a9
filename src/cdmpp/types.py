"""Frozen records that flow through cdmpp. Units are in the names (`latency_s`, `run_secs`).

A `Workload` and a `ProgramRecord` hold the JSON of TVM objects, not the objects: loading a
database never needs TVM; the IRModule and the trace are decoded on demand (`Workload.mod()`).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

# TVM's tuner writes this run time for programs that failed to build or run.
TVM_FAILURE_RUN_SECS = 1e10


@dataclass(frozen=True)
class Workload:
    """One line of `database_workload.json`: an IRModule to be scheduled."""

    shash: str  # TVM's structural hash, as TVM writes it (a decimal string)
    encoded_mod: str = field(repr=False)  # the IRModule as TVM stores it (base64 of its JSON graph)
    name: str | None = None  # a human name (catalog task name) where known

    def to_json(self) -> list:
        return [self.shash, self.encoded_mod]

    def mod(self):
        """Decode the IRModule (imports TVM)."""
        from cdmpp.measure.tvm_codec import decode_workload

        return decode_workload(self.to_json()).mod


@dataclass(frozen=True)
class PassStats:
    """Timing of one program in one measurement pass (one `time_evaluator` call)."""

    values_s: tuple[float, ...]  # every repeat of the pass
    ref_ratio: float | None = None  # reference kernel time now / its baseline (>1: machine slow)
    # the memory-streaming probe's time just before the pass (`measure.placement`), if timed
    memory_probe_s: float | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.values_s)

    @property
    def min_s(self) -> float:
        return min(self.values_s)

    def undisturbed(self, ref_slow_rel: float) -> bool:
        """The reference kernel ran within `ref_slow_rel` of its best before this pass (True
        too when the pass has no reference ratio: nothing says it was disturbed)."""
        return self.ref_ratio is None or self.ref_ratio <= 1 + ref_slow_rel


@dataclass(frozen=True)
class Measurement:
    """All timings of one program, and the label derived from them.

    The label (`latency_s`) is the minimum over every repeat of every pass. Each repeat is
    already an average of enough runs to last `min_repeat_ms`; interference on these machines
    only ever slows a repeat down; and of the statistics we compared, the minimum moved least
    when the same programs were measured again minutes later (docs/measurement.md).
    """

    run_secs: tuple[float, ...]  # every repeat of every pass, in pass order (TVM's run_secs)
    passes: tuple[PassStats, ...]

    @classmethod
    def from_run_secs(cls, run_secs, repeats_per_pass: int | None = None,
                      ref_ratios=None) -> "Measurement":
        """Group TVM's flat `run_secs` into passes of `repeats_per_pass` values.

        With no pass structure known (a database written by TVM's own tuner), each value is its
        own pass: TVM's runner takes each repeat as a separate average of `number` runs.
        """
        values = tuple(float(v) for v in run_secs)
        size = repeats_per_pass or 1
        if len(values) % size:
            size = 1
        groups = [values[i:i + size] for i in range(0, len(values), size)]
        ratios = list(ref_ratios) if ref_ratios is not None else [None] * len(groups)
        if len(ratios) != len(groups):
            ratios = [None] * len(groups)
        return cls(values, tuple(PassStats(g, r) for g, r in zip(groups, ratios)))

    @property
    def pass_medians_s(self) -> tuple[float, ...]:
        return tuple(p.median_s for p in self.passes)

    @property
    def latency_s(self) -> float:
        return min(self.run_secs)

    @property
    def noise_rel(self) -> float | None:
        """How far the label could move: relative gap between the best values of the two best
        passes (the label without its best pass). None with a single pass.

        `pass_to_pass_rel` is the raw figure (first vs second pass), before any choice.
        """
        best = sorted(p.min_s for p in self.passes)
        if len(best) < 2:
            return None
        return (best[1] - best[0]) / best[0]

    def clean_passes(self, ref_slow_rel: float) -> int | None:
        """How many passes ran while the reference kernel was within `ref_slow_rel` of its best
        (an undisturbed machine); None when no pass has a reference ratio (TVM's own records)."""
        timed = [p for p in self.passes if p.ref_ratio is not None]
        if not timed:
            return None
        return sum(p.undisturbed(ref_slow_rel) for p in timed)

    @property
    def pass_to_pass_rel(self) -> float | None:
        """|pass 1 - pass 2| / min of the two: the raw noise of one pass, before any choice."""
        medians = self.pass_medians_s
        if len(medians) < 2:
            return None
        return abs(medians[0] - medians[1]) / min(medians[0], medians[1])


@dataclass(frozen=True)
class ProgramRecord:
    """One line of `database_tuning_record.json`: a scheduled program and its timings."""

    db: str  # the database directory, as given
    record_index: int  # 0-based line number in database_tuning_record.json: the record's identity
    workload_index: int
    workload: Workload
    trace_json: Any = field(repr=False, compare=False)  # TVM trace JSON: [insts, decisions]
    target: dict = field(compare=False)
    args_info: Any = field(repr=False, compare=False)
    measurement: Measurement | None  # None when the record has no valid timing
    meta: dict = field(default_factory=dict, compare=False)  # cdmpp sidecar info, when present

    @property
    def latency_s(self) -> float | None:
        return self.measurement.latency_s if self.measurement else None

    @property
    def is_default(self) -> bool:
        """The task's default (untuned) program, the one TVM runs without tuning: the collector
        marks it `kind: default`, and its trace is empty (no schedule instruction)."""
        return self.meta.get("kind") == "default" or not (self.trace_json or [[]])[0]

    def to_json_line(self) -> str:
        """The record's line in TVM's `database_tuning_record.json` format."""
        run_secs = list(self.measurement.run_secs) if self.measurement else None
        body = [self.trace_json, run_secs, self.target, self.args_info]
        return json.dumps([self.workload_index, body], separators=(",", ":"))


def check_run_secs(run_secs) -> str | None:
    """Why a run_secs list is not a valid timing, or None if it is."""
    if run_secs is None:
        return "no run_secs"
    if not isinstance(run_secs, (list, tuple)) or not run_secs:
        return "run_secs is empty or not a list"
    for value in run_secs:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"run_secs holds a non-number: {value!r}"
        if math.isnan(value) or math.isinf(value):
            return f"run_secs holds {value}"
        if value <= 0:
            return f"run_secs holds a non-positive time: {value}"
        if value >= TVM_FAILURE_RUN_SECS:
            return f"TVM's failure marker ({value:g} s): the program failed to build or run"
    return None
