"""Tune a whole network's kernels with meta_schedule, cdmpp scoring the candidates.

    net = import_network("resnet18", 1)
    summary = tune_network(net, local_device(), "tuned-resnet18", trials=2000)
    # then: cdmpp e2e --network resnet18 --tuning-db tuned-resnet18 --measure

The tasks are the kernels `cdmpp e2e` predicts (`e2e.kernels.lower_network`: TVM's CPU fusion),
each once however many networks' calls share it, weighted by its number of calls. Their
workloads are the ones `MetaScheduleApplyDatabase` looks up, so the database written to `out`
(TVM's JSON format, with this machine's `device.json`) is what `cdmpp e2e --tuning-db`
applies. A rerun into the same directory adds trials: the search
skips the programs the database already holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdmpp.tune.phases import TuningPhases

COST_MODELS = ("cdmpp", "xgb", "random")  # cdmpp's, or TVM's own for comparison


@dataclass(frozen=True)
class TuneSummary:
    out: str
    tasks: tuple[str, ...]  # kernel names tuned
    skipped: tuple[str, ...] = field(default=())  # "name: why" meta_schedule cannot schedule
    records_before: int = 0
    records_after: int = 0
    wall_s: float | None = None  # the tuning itself (ms.tune_tasks)
    phases: TuningPhases | None = None  # this run's, from the task scheduler's log
    # kernels of `tasks` with no measured program in the database after the run: the trials
    # ran out before the task scheduler reached them, or every program tried failed
    untuned: tuple[str, ...] = field(default=())


def _tasks(net, target, seed: int, work_dir: str, log):
    """(TuneContexts, weights, skipped): one context per distinct kernel."""
    import tvm_ffi

    from cdmpp.e2e.kernels import workload_module
    from cdmpp.tvm_env import import_tvm, meta_schedule

    tvm = import_tvm()
    ms = meta_schedule()
    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir
    from tvm.s_tir.meta_schedule.utils import fork_seed

    distinct: dict[int, list] = {}  # workload hash -> [kernel name, workload, calls]
    for k in net.kernels:
        mod = workload_module(k)
        entry = distinct.setdefault(int(tvm_ffi.structural_hash(mod)), [k.name, mod, 0])
        entry[2] += k.calls
    names = [name for name, _, _ in distinct.values()]
    contexts, weights, skipped = [], [], []
    loggers = get_loggers_from_work_dir(work_dir, names)
    for (name, mod, calls), logger, rand_state in zip(distinct.values(), loggers,
                                                       fork_seed(seed, n=len(names))):
        ctx = ms.TuneContext(mod=mod, target=tvm.target.Target(target),
                             space_generator="post-order-apply", search_strategy="evolutionary",
                             task_name=name, rand_state=rand_state, num_threads="physical",
                             logger=logger)
        try:
            ctx.generate_design_space()
        except Exception as e:  # noqa: BLE001 - e.g. a kernel calling an extern library
            first = str(e).splitlines()[0] if str(e) else ""
            skipped.append(f"{name}: {type(e).__name__}: {first}")
            log(f"  {name}: not tunable ({type(e).__name__}), left untuned")
            continue
        contexts.append(ctx.clone())
        weights.append(float(calls))
    return contexts, weights, skipped


def round_size(trials: int, kernels: int, most: int = 32) -> int:
    """Programs measured per search round: at most `most`, and few enough that the task
    scheduler's first pass, one round for each kernel in turn, fits in `trials`. With 32 a round,
    832 trials gave MobileNet-V2's last 10 kernels of 56 no program at all."""
    return max(1, min(most, trials // max(kernels, 1)))


def _without_records(out, contexts) -> tuple[str, ...]:
    """Names of the contexts' kernels that the JSON database in `out` holds no record for."""
    from cdmpp.tvm_env import meta_schedule

    ms = meta_schedule()
    db = ms.database.JSONDatabase(work_dir=str(out))
    return tuple(c.task_name for c in contexts
                 if db.query_tuning_record(c.mod, c.target, c.task_name) is None)


def _count_records(out) -> int:
    from pathlib import Path

    path = Path(out) / "database_tuning_record.json"
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def tune_network(mod, device, out, *, trials: int, cost_model: str = "cdmpp", model=None,
                 online: bool = True, seed: int = 0, build_timeout_s: float = 30.0,
                 trials_per_round: int = 32, name: str = "network", log=None) -> TuneSummary:
    """Tune the kernels of Relax module `mod` for `device` (its target and thread count) with
    `trials` measured programs in all, into the JSON database in directory `out`.
    `cost_model`: "cdmpp" (`model`, None: the shipped model for this device; `online`: correct it
    from the measurements too), or TVM's "xgb" / "random". `trials_per_round`: the most
    programs one search round measures (fewer when `trials` would not reach every kernel;
    `round_size`)."""
    from pathlib import Path

    from cdmpp.device import claim_directory
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.tune.builder import builder
    from cdmpp.tune.cost_model import cost_model as cdmpp_cost_model
    from cdmpp.tune.phases import log_size, phases_since
    from cdmpp.tune.runner import runner
    from cdmpp.tvm_env import meta_schedule

    log = log or (lambda _message: None)
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {', '.join(COST_MODELS)}, got {cost_model!r}")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    if cost_model == "cdmpp":
        if model is None:
            from cdmpp.model.registry import for_device

            model = for_device(device)
        # a bad model fails here, before anything is written
        search_model = cdmpp_cost_model(model, online=online, seed=seed)
    else:
        search_model = cost_model  # TVM's own, by name
    ms = meta_schedule()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    claim_directory(out, device)  # one device per database, as the collector's
    before = _count_records(out)
    log(f"lowering {name}")
    net = lower_network(mod, device.target, name=name)
    contexts, weights, skipped = _tasks(net, device.target, seed, str(out), log)
    if not contexts:
        raise RuntimeError(f"{name}: meta_schedule can schedule none of its kernels")
    per_round = round_size(trials, len(contexts), trials_per_round)
    log(f"tuning {len(contexts)} kernels with {trials} trials, {per_round} a round "
        f"({cost_model} cost model)")
    if trials < len(contexts):
        log(f"  {trials} trials cannot reach all {len(contexts)} kernels: some stay untuned")
    log_offset, started = log_size(out), time.monotonic()
    ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir=str(out),
                  max_trials_global=trials, num_trials_per_iter=per_round,
                  builder=builder(build_timeout_s), runner=runner(device.threads),
                  database="json", cost_model=search_model)
    wall_s = time.monotonic() - started
    return TuneSummary(str(out), tuple(c.task_name for c in contexts), tuple(skipped), before,
                       _count_records(out), wall_s, phases_since(out, log_offset, datetime.now()),
                       untuned=_without_records(out, contexts))
