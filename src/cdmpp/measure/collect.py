"""`cdmpp collect`: sample, build and time programs of catalog tasks into a TVM JSON database.

The output directory holds:
  database_workload.json, database_tuning_record.json   TVM's JSONDatabase (loads in TVM)
  cdmpp_measurements.jsonl   one line per record: passes, reference-kernel ratios, provenance
  failures.jsonl             programs that failed to build or run, with the error
  candidates/<task>.json     the sampled programs, persisted before anything is measured
  measured_modules/          modules whose stored trace does not replay to what was measured
  tasks.json, device.json, manifest.json

device.json gets the device's measured peak GFLOP/s and memory GB/s (`measure.microbench`) on
the first run that finds them missing.

Resumable: every finished program is a fsynced line; a rerun skips what is done (measured or
failed) and re-times only the batch that was interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cdmpp.clock import now_iso
from cdmpp.device import Device, claim_directory, local_device, save_device
from cdmpp.measure import tvm_codec
from cdmpp.measure.build import build_many
from cdmpp.measure.database import RECORD_FILE, SIDECAR_FILE
from cdmpp.measure.microbench import measure_device
from cdmpp.atomic import write_text_atomic
from cdmpp.measure.noise import NoiseFloor, noise_floor
from cdmpp.measure.store import RecordStore
from cdmpp.measure.timing import Protocol, Timer, random_args
from cdmpp.programs.catalog import CATALOG_VERSION, Task
from cdmpp.programs.from_database import (ImportReport, import_programs, imported_path,
                                          task_candidates)
from cdmpp.programs.sampling import Candidate, load_candidates, load_or_sample
from cdmpp.tvm_env import import_tvm

MANIFEST_FILE = "manifest.json"
STAGES = ("sample", "build", "time", "write")
SAMPLINGS = ("random", "search")


@dataclass(frozen=True)
class CollectConfig:
    out: str
    programs_per_task: int = 32  # random schedules per task (the default program comes on top)
    threads: int | None = None  # None: every core this process may use
    time_budget_min: float | None = None
    build_timeout_s: float = 30.0
    batch_size: int = 16  # programs timed together in interleaved passes
    seed: int = 0
    protocol: Protocol = field(default_factory=Protocol)
    mcpu: str | None = None  # LLVM CPU to generate code for; None: the host's
    # Another output directory whose candidates/<task>.json are copied before sampling, so
    # several devices time exactly the same programs (fair cross-device comparisons).
    programs_from: str | None = None
    # TVM JSON databases (e.g. a tuner's) whose programs are timed too, as the tasks' programs
    # they were tuned for (programs.from_database)
    records_from: tuple[str, ...] = ()
    # "random": schedules drawn at random from the design space; "search": the ones TVM's
    # evolutionary search picks with `search_model` as its cost model (programs.sampling)
    sampling: str = "random"
    search_model: str | None = None  # as `cdmpp.load_model` takes it; None: the shipped one


@dataclass
class CollectSummary:
    ok: int = 0
    failed: int = 0
    already_done: int = 0
    seconds: float = 0.0
    stopped_by_budget: bool = False
    noise: NoiseFloor | None = None
    device_measured: dict | None = None  # {"peak_gflops", "memory_gbps"} if measured this run
    disturbed: int = 0  # records with no pass on an undisturbed machine (labels likely too high)
    waited_s: float = 0.0  # spent waiting for the machine to be quiet
    # where the time went: sampling (and replaying) programs, building, timing (waits
    # included), writing records
    stage_secs: dict = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    measurements: list = field(default_factory=list, repr=False)
    imported: ImportReport | None = None  # what --records-from took from its databases

    @property
    def programs_per_hour(self) -> float:
        return 3600.0 * (self.ok + self.failed) / self.seconds if self.seconds else 0.0

    def __str__(self) -> str:
        lines = [] if self.imported is None else [str(self.imported)]
        lines += [f"measured {self.ok} programs, {self.failed} failed, {self.already_done} "
                 f"already done; {self.seconds:.0f} s, {self.programs_per_hour:.0f} programs/hour"]
        if self.stopped_by_budget:
            lines.append("stopped at the time budget: run the same command again to resume")
        if self.seconds:
            lines.append("time spent: " + ", ".join(
                f"{stage} {secs:.0f} s" for stage, secs in self.stage_secs.items()))
        if self.waited_s >= 1:
            lines.append(f"waited {self.waited_s:.0f} s for the machine to be quiet")
        if self.disturbed:
            lines.append(f"{self.disturbed} records got no pass on an undisturbed machine: their "
                         "labels are likely too high; time them again later with "
                         "--remeasure-disturbed")
        if self.noise is not None and self.ok:
            lines.append(str(self.noise))
        if self.device_measured is not None:
            m = self.device_measured
            lines.append(f"device measured: peak {m['peak_gflops']:.1f} GFLOP/s, "
                         f"memory {m['memory_gbps']:.1f} GB/s (saved in device.json)")
        return "\n".join(lines)


def set_threads(threads: int) -> None:
    """Use `threads` worker threads in TVM's runtime (before or after it started)."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    tvm = import_tvm()
    config = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
    if config is not None:
        config(0, threads)  # 0: big-core affinity mode, `threads` workers


@contextlib.contextmanager
def threads_for(threads: int):
    """`set_threads(threads)` for the block, then TVM's pool, TVM_NUM_THREADS and the process's
    CPU affinity as they were: configuring TVM's pool pins the calling thread to the cores it
    uses, and `local_device()` would then see a device with fewer threads for the rest of the
    process (an API call with `threads=1` made every later call a one-thread device)."""
    affinity = os.sched_getaffinity(0)
    env = os.environ.get("TVM_NUM_THREADS")
    set_threads(threads)
    try:
        yield
    finally:
        set_threads(int(env) if env else len(affinity))
        if env is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        os.sched_setaffinity(0, affinity)


def claim_measured_device(out, threads: int | None = None,
                          mcpu: str | None = None) -> tuple[Device, bool]:
    """(the device of output directory `out`, whether its figures were measured just now):
    this machine with `threads` and `mcpu`, bound to `out` (another device is refused), with
    its peak FLOP/s and bandwidth measured once and kept in `out/device.json`."""
    device = claim_directory(out, local_device(threads, mcpu))
    if device.peak_gflops:
        return device, False
    device = measure_device(device)  # first run here, or a device.json from before
    save_device(out, device)  # same device_id: only the figures are added
    return device, True


class _Run:
    """State of one collection run over one output directory."""

    def __init__(self, config: CollectConfig, tasks: list[Task]):
        if config.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, "
                             f"got {config.sampling!r}")
        self.config = config
        # the cost model guiding --sampling search, made before anything is written: a model
        # that does not load stops the run with nothing on disk. No measurement reaches it:
        # what it picks is the estimator's view alone.
        self.search_cost_model = None
        if config.sampling == "search":
            from cdmpp.tune.cost_model import cost_model

            self.search_cost_model = cost_model(config.search_model, online=False,
                                                seed=config.seed)
        self.tasks = tasks
        self.out = Path(config.out)
        self.programs_from = _programs_dir(config.programs_from)
        self.summary = CollectSummary()
        self.device, measured = claim_measured_device(self.out, config.threads, config.mcpu)
        if measured:
            self.summary.device_measured = {"peak_gflops": self.device.peak_gflops,
                                            "memory_gbps": self.device.memory_gbps}
        set_threads(self.device.threads)
        self.target = self.device.target  # the exact TVM target dict, stored in every record
        self._candidates: dict[str, list[Candidate]] = {}
        self._workload_index: dict[str, int] = {}
        self._workloads: dict[str, object] = {}
        self.store = RecordStore(self.out, rebuild_record=self._rebuild_record)
        shutil.rmtree(self.out / ".build", ignore_errors=True)  # scratch of older versions
        self.timer: Timer | None = None
        self.start = time.monotonic()

    # -- workloads and candidates ------------------------------------------------------------
    def workload(self, task: Task):
        if task.name not in self._workloads:
            tvm = import_tvm()
            func = task.prim_func().with_attr("global_symbol", "main")
            self._workloads[task.name] = tvm.IRModule({"main": func})
        return self._workloads[task.name]

    def workload_index(self, task: Task) -> int:
        if task.name not in self._workload_index:
            encoded = tvm_codec.encode_workload(self.workload(task))
            info = {"name": task.name, "op": task.op, "networks": list(task.networks)}
            self._workload_index[task.name] = self.store.workload_index(encoded, info)
        return self._workload_index[task.name]

    def sampled(self, task: Task) -> list[Candidate]:
        """The task's default program and `programs_per_task` sampled ones."""
        if task.name not in self._candidates:
            path = self.out / "candidates" / f"{task.name}.json"
            source = self.programs_from and self.programs_from / "candidates" / path.name
            if not path.exists() and source and source.exists():
                write_text_atomic(path, source.read_text())
            self._candidates[task.name] = load_or_sample(
                path, self.workload(task), self.target, self.config.programs_per_task,
                task=task.name, seed=self.config.seed, cost_model=self.search_cost_model)
        return self._candidates[task.name]

    def imported(self, task: Task) -> list[Candidate]:
        """The task's programs taken from databases (--records-from, this run or before)."""
        path = imported_path(self.out, task.name)
        return load_candidates(path) if path.exists() else []

    def candidates(self, task: Task) -> list[Candidate]:
        return self.sampled(task) + self.imported(task)

    def import_records(self) -> None:
        """Take the programs of --records-from's databases into the tasks' candidates."""
        with self.stage("sample"):
            self.summary.imported = import_programs(
                self.config.records_from, self.tasks, self.workload, self.out,
                lambda task: {c.mod_shash for c in self.candidates(task)},
                log=lambda m: print(m, file=sys.stderr, flush=True))

    def record_line(self, task: Task, cand: Candidate, run_secs) -> str:
        return self._line(self.workload_index(task), cand, run_secs)

    def _line(self, workload_index: int, cand: Candidate, run_secs) -> str:
        """A TVM database record line: [workload index, [trace, run_secs, target, args]]."""
        body = [cand.trace_json, list(run_secs), self.target, cand.args_info_json]
        return json.dumps([workload_index, body], separators=(",", ":"))

    def _rebuild_record(self, entry: dict, store: RecordStore) -> str:
        """The record line of a journal entry whose line a crash kept from being written, from
        what is on disk (its task need not be among this run's tasks)."""
        name = task_of_key(entry["key"])
        index = store.workload_index_of_task(name)
        cand = next((c for c in task_candidates(self.out, name) if c.key == entry["key"]), None)
        if index is None or cand is None:
            raise RuntimeError(f"{self.out}: record {entry.get('record_index')} ({entry['key']}) "
                               f"is in {SIDECAR_FILE} but not in {RECORD_FILE}, and its "
                               f"{'program' if cand is None else 'workload'} is missing: "
                               "cannot rebuild it")
        return self._line(index, cand, entry["run_secs"])

    # -- one batch ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.summary.stage_secs[name] += time.monotonic() - start

    def build(self, task: Task, batch: list[Candidate]) -> list[tuple[Candidate, object, float]]:
        """(candidate, runtime module, build seconds) of the batch's programs that built."""
        replayed = []
        with self.stage("sample"):
            for cand in batch:
                try:
                    replayed.append((cand, cand.module(self.workload(task))))
                except Exception as e:  # noqa: BLE001
                    self.fail(task, cand, "replay", f"{type(e).__name__}: {e}", 0.0)
        with self.stage("build"):
            results = build_many([mod for _, mod in replayed], self.target,
                                 self.config.build_timeout_s)
        built = []
        for (cand, _), result in zip(replayed, results):
            if result.ok:
                built.append((cand, result.module, result.build_secs))
            else:
                stage = "timeout" if result.error.startswith("timeout") else "build"
                self.fail(task, cand, stage, result.error, result.build_secs)
        return built

    def fail(self, task: Task, cand: Candidate, stage: str, error: str, build_secs: float) -> None:
        entry = {"key": cand.key, "task": task.name, "stage": stage, "error": error[-2000:],
                 "build_secs": round(build_secs, 3)}
        if stage == "timeout":
            entry["timeout_s"] = self.config.build_timeout_s
        self.store.append_failure(entry)
        self.summary.failed += 1

    def retried_timeouts(self) -> set[str]:
        """Keys of programs whose every build so far was killed at a shorter time limit than
        this run's `build_timeout_s`: a larger --build-timeout tries them again (how long a
        build takes moves with the host's load). Programs measured since are not among them."""
        limit = self.config.build_timeout_s
        measured = {e["key"] for e in self.store.journal}
        shorter: dict[str, bool] = {}
        for f in self.store.failures:
            # entries of older runs lack timeout_s: they were killed at about build_secs
            was = f.get("timeout_s", f.get("build_secs", 0.0)) if f["stage"] == "timeout" else None
            ok = was is not None and was < limit
            shorter[f["key"]] = shorter.get(f["key"], True) and ok
        return {k for k, ok in shorter.items() if ok and k not in measured}

    def measure(self, task: Task, built, progress) -> None:
        with self.stage("time"):
            if self.timer is None:
                self.timer = Timer(self.config.protocol, self.target)
            programs = [(cand.key, rt_mod, random_args(cand.args_info_json, self.timer.device))
                        for cand, rt_mod, _ in built]
            results = self.timer.measure_batch(programs)
        for cand, _, build_secs in built:
            result = results[cand.key]
            with self.stage("write"):
                if isinstance(result, Exception):
                    self.fail(task, cand, "run", f"{type(result).__name__}: {result}",
                              build_secs)
                else:
                    self.commit(task, cand, result, build_secs)
            progress.update(1)
            self.show_counts(progress)

    def show_counts(self, progress) -> None:
        elapsed = time.monotonic() - self.start
        done = self.summary.ok + self.summary.failed
        progress.set_postfix(ok=self.summary.ok, failed=self.summary.failed,
                             per_hour=round(3600 * done / elapsed) if elapsed else 0,
                             refresh=False)

    def commit(self, task: Task, cand: Candidate, m, build_secs: float) -> None:
        module_file = None
        if cand.measured_module is not None:
            module_file = f"measured_modules/{cand.key.replace('/', '__')}.json"
            (self.out / "measured_modules").mkdir(exist_ok=True)
            write_text_atomic(self.out / module_file, cand.measured_module)
        entry = {"key": cand.key, "task": task.name, "kind": cand.kind,
                 "run_secs": list(m.run_secs), "repeats_per_pass": self.config.protocol.repeat,
                 "ref_ratios": [p.ref_ratio for p in m.passes], "mod_shash": cand.mod_shash,
                 "replay_ok": cand.replay_ok, "measured_module": module_file,
                 "build_secs": round(build_secs, 3)}
        if cand.source is not None:
            entry["source"] = cand.source
        self.store.append(self.record_line(task, cand, m.run_secs), entry)
        self.summary.ok += 1
        self.summary.disturbed += m.clean_passes(self.config.protocol.ref_slow_rel) == 0
        self.summary.measurements.append(m)

    # -- the loop ----------------------------------------------------------------------------
    def over_budget(self, start: float) -> bool:
        budget = self.config.time_budget_min
        return budget is not None and time.monotonic() - start > 60 * budget

    def run(self, progress_enabled: bool = True) -> CollectSummary:
        from tqdm import tqdm

        start = self.start = time.monotonic()
        if self.config.records_from:
            self.import_records()
            # only the tasks the databases were tuned for (this run's import or an earlier one)
            self.tasks = [t for t in self.tasks if imported_path(self.out, t.name).exists()]
        done = self.store.done_keys - self.retried_timeouts()
        done_per_task = Counter(task_of_key(k) for k in done)
        self.summary.already_done = sum(done_per_task[t.name] for t in self.tasks)
        # to do per task: its default program, and the sampled ones up to programs_per_task
        # (a task measured earlier with more than that has none left)
        expected = {}  # programs left per task, before its design space is sampled
        for t in self.tasks:
            default_done = f"{t.name}/default" in done
            sampled_done = done_per_task[t.name] - default_done
            expected[t.name] = (not default_done) + max(self.config.programs_per_task
                                                        - sampled_done, 0)
        todo_total = sum(expected.values())
        progress = tqdm(total=todo_total, unit="prog",
                        disable=not progress_enabled, file=sys.stderr, smoothing=0.05)
        for task in self.tasks:
            if self.over_budget(start):
                self.summary.stopped_by_budget = True
                break
            with self.stage("sample"):
                todo = [c for c in self.candidates(task) if c.key not in done]
            if len(todo) != expected[task.name]:  # a design space smaller than asked for
                progress.total += len(todo) - expected[task.name]
                progress.refresh()
            progress.set_description(task.name)
            for i in range(0, len(todo), self.config.batch_size):
                if self.over_budget(start):
                    self.summary.stopped_by_budget = True
                    break
                batch = todo[i:i + self.config.batch_size]
                built = self.build(task, batch)
                progress.update(len(batch) - len(built))
                self.show_counts(progress)
                if built:
                    self.measure(task, built, progress)
            if self.summary.stopped_by_budget:
                break
        progress.close()
        self.summary.seconds = time.monotonic() - start
        self.summary.waited_s = self.timer.waited_s if self.timer else 0.0
        self.summary.noise = noise_floor(self.summary.measurements)
        return self.summary


def task_of_key(key: str) -> str:
    """The task name of a program key ("<task>/<n>" or "<task>/default")."""
    return key.rsplit("/", 1)[0]


def _programs_dir(programs_from: str | None) -> Path | None:
    if programs_from is None:
        return None
    path = Path(programs_from)
    if not (path / "candidates").is_dir():
        raise ValueError(f"--programs-from {path}: no candidates/ directory there; give the "
                         "--out directory of an earlier collect run")
    return path


def append_manifest_run(out: Path, run: dict) -> None:
    """Add one run (its command, times, settings and figures) to `out/manifest.json`."""
    path = out / MANIFEST_FILE
    manifest = json.loads(path.read_text()) if path.exists() else {"runs": []}
    manifest["catalog_version"] = CATALOG_VERSION
    manifest["runs"].append(dict(run, finished=now_iso()))
    write_text_atomic(path, json.dumps(manifest, indent=1))


def _append_manifest(out: Path, config: CollectConfig, summary: CollectSummary,
                     started: str, tasks: list[Task], command: str | None,
                     interrupted: bool = False) -> None:
    append_manifest_run(out, {
        **({"interrupted": True} if interrupted else {}),
        "command": command, "started": started,
        "tasks": [t.name for t in tasks], "config": asdict(config),
        "measured": summary.ok, "failed": summary.failed, "seconds": round(summary.seconds, 1),
        "stopped_by_budget": summary.stopped_by_budget,
        "noise_floor": summary.noise.to_json() if summary.noise else None,
        "device_measured": summary.device_measured,
        "disturbed": summary.disturbed, "waited_s": round(summary.waited_s, 1),
        "stage_secs": {k: round(v, 1) for k, v in summary.stage_secs.items()},
    })


def collect(config: CollectConfig, tasks: list[Task], *, progress: bool = True,
            command: str | None = None) -> CollectSummary:
    """Measure `config.programs_per_task` sampled programs (+ the default) of each task."""
    started = now_iso()
    run = _Run(config, tasks)
    try:
        summary = run.run(progress)
    except KeyboardInterrupt:  # Ctrl-C: the run is in the manifest too, as far as it went
        run.summary.seconds = time.monotonic() - run.start
        _append_manifest(Path(config.out), config, run.summary, started, tasks, command,
                         interrupted=True)
        raise
    finally:
        run.store.close()
    _append_manifest(Path(config.out), config, summary, started, tasks, command)
    return summary
