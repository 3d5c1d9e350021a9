"""Sample schedules of a workload as TVM's tuner does, and persist them before measuring.

Sampling with a fixed seed is not reproducible across processes, so sampled programs are
written to a candidates file once and always read back from it, never re-sampled.

Each candidate keeps the structural hash of the module that will be measured (`sch.mod`, after
postprocessing). If replaying the stored trace on the workload does not give that module back,
the module itself is kept in the candidate, so the program we time is the one we describe.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.measure import tvm_codec
from cdmpp.atomic import write_text_atomic
from cdmpp.tvm_env import import_tvm, meta_schedule

EMPTY_TRACE: list = [[], []]  # the default program: the workload as TVM builds it untuned


@dataclass(frozen=True)
class Candidate:
    key: str  # "<task>/<i>": unique in an output directory
    # "sampled" (random), "searched" (where a model's search goes), "default", or "imported"
    # (from a database: programs.from_database)
    kind: str
    trace_json: list
    args_info_json: list
    mod_shash: str  # structural hash of the module to be measured
    replay_ok: bool  # replaying trace_json on the workload gives exactly that module
    measured_module: str | None = None  # the module's JSON, kept only when replay_ok is False
    # an imported program's origin: {"db", "record_index", "run_secs" (the tuner's timing)}
    source: dict | None = field(default=None, compare=False)

    def to_json(self) -> dict:
        d = {"key": self.key, "kind": self.kind, "trace": self.trace_json,
             "args_info": self.args_info_json, "mod_shash": self.mod_shash,
             "replay_ok": self.replay_ok, "measured_module": self.measured_module}
        if self.source is not None:
            d["source"] = self.source
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Candidate":
        return cls(d["key"], d["kind"], d["trace"], d["args_info"], d["mod_shash"],
                   d["replay_ok"], d.get("measured_module"), d.get("source"))

    def module(self, workload_mod):
        """The IRModule that is built and timed for this candidate."""
        if self.measured_module is not None:
            return tvm_codec.load_module(self.measured_module)
        if self.kind == "default":
            return workload_mod
        return tvm_codec.replay_trace(workload_mod, self.trace_json).mod


def _candidate(key: str, kind: str, workload_mod, mod, trace_json, args_info) -> Candidate:
    shash = tvm_codec.structural_hash(mod)
    if kind == "default":
        replay_ok = True
    else:
        try:
            replayed = tvm_codec.replay_trace(workload_mod, trace_json).mod
            replay_ok = tvm_codec.structural_equal(replayed, mod)
        except Exception:  # noqa: BLE001 - any replay failure means "keep the module"
            replay_ok = False
    kept = None if replay_ok else tvm_codec.save_module(mod)
    return Candidate(key, kind, trace_json, tvm_codec.args_info_to_json(args_info), shash,
                     replay_ok, kept)


def tvm_rand_state(seed: int) -> int:
    """TVM's random state for our `seed` (>= 0). TVM takes state 0 as 1, so seeds 0 and 1
    sampled the same programs; -1 would mean "random": seed + 1 keeps every seed distinct."""
    if seed < 0:
        raise ValueError(f"a sampling seed is a non-negative integer, got {seed}")
    return seed + 1


def sample_programs(workload_mod, target, n: int, *, task: str, seed: int = 0,
                    include_default: bool = True, max_rounds: int = 8,
                    existing: list[Candidate] = (), cost_model=None) -> list[Candidate]:
    """Up to `n` distinct schedules, plus the default program.

    Without `cost_model`: random schedules (post-order-apply + replay-trace), kind "sampled".
    With a meta_schedule cost model: the ones TVM's evolutionary search would time first when
    guided by that model (kind "searched"), without any measurement: programs nearer a
    tuner's fast ones than random samples (docs/tune.md, "Sampling where a search goes").
    `existing` candidates are kept as they are (same keys, same programs); only the missing
    ones are sampled, distinct from them.
    """
    tvm = import_tvm()
    ms = meta_schedule()
    out: list[Candidate] = list(existing)
    include_default = include_default and not any(c.kind == "default" for c in out)
    if include_default:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        args = ArgInfo.from_prim_func(workload_mod["main"])
        out.append(_candidate(f"{task}/default", "default", workload_mod, workload_mod,
                              EMPTY_TRACE, args))
    seen = {c.mod_shash for c in out}
    rand_state = tvm_rand_state(seed)
    kind, strategy = ("sampled", "replay-trace") if cost_model is None else \
        ("searched", "evolutionary")
    try:
        ctx = ms.TuneContext(mod=workload_mod, target=tvm.target.Target(target),
                             space_generator="post-order-apply", search_strategy=strategy,
                             task_name=task, rand_state=rand_state, num_threads=1)
        spaces = ctx.generate_design_space()
    except Exception as e:  # noqa: BLE001 - e.g. a fused kernel meta_schedule cannot schedule
        # The default program is still worth measuring; say why nothing else is.
        warnings.warn(f"{task}: meta_schedule has no design space ({type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}); only the default program")
        return out
    n_default = sum(c.kind == "default" for c in out)
    # the search starts from random programs each round (no measured ones to start from)
    database = None if cost_model is None else ms.database.MemoryDatabase()
    for _ in range(max_rounds):
        want = n - (len(out) - n_default)
        if want <= 0:
            break
        ctx.pre_tuning(max_trials=want, num_trials_per_iter=want, design_spaces=spaces,
                       database=database, cost_model=cost_model)
        new = 0
        for cand in ctx.search_strategy.generate_measure_candidates() or []:
            mod = cand.sch.mod
            shash = tvm_codec.structural_hash(mod)
            if shash in seen:
                continue
            seen.add(shash)
            new += 1
            index = len(out) - n_default
            out.append(_candidate(f"{task}/{index}", kind, workload_mod, mod,
                                  tvm_codec.trace_to_json(cand.sch.trace), cand.args_info))
        ctx.post_tuning()
        if cost_model is not None and not new:
            break  # a search that finds nothing new once will not later: it costs seconds
    return out


def candidates_from_json(data: dict) -> list[Candidate]:
    """The programs of a parsed candidates/<task>.json."""
    return [Candidate.from_json(c) for c in data["candidates"]]


def load_candidates(path: Path) -> list[Candidate]:
    """The programs persisted in `path` (candidates/<task>.json), sampling nothing."""
    return candidates_from_json(json.loads(Path(path).read_text()))


def load_or_sample(path: Path, workload_mod, target, n: int, *, task: str,
                   seed: int = 0, cost_model=None) -> list[Candidate]:
    """The default program and `n` sampled programs of a task (searched ones with
    `cost_model`, as `sample_programs` draws them).

    Read from `path` when it holds them; otherwise the missing ones are sampled (the ones
    already there are kept, so their keys keep naming the same programs) and `path` rewritten.
    """
    existing: list[Candidate] = []
    if path.exists():
        data = json.loads(path.read_text())
        existing = candidates_from_json(data)
        if len(existing) - 1 >= n or data.get("exhausted_at", -1) >= n:
            return existing[:n + 1]
    candidates = sample_programs(workload_mod, target, n, task=task, seed=seed + len(existing),
                                 existing=existing, cost_model=cost_model)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"task": task, "candidates": [c.to_json() for c in candidates],
               # the design space had fewer distinct programs than asked for
               "exhausted_at": n if len(candidates) - 1 < n else -1}
    write_text_atomic(path, json.dumps(payload, separators=(",", ":")))
    return candidates
