"""cdmpp as the cost model of TVM's meta_schedule tuner, against TVM's own cost models.

    python benchmarks/tune.py [--trials 64] [--models cdmpp,cdmpp-offline,xgb,random] [--seed S]
                              [--json OUT]
    python benchmarks/tune.py --models cdmpp@default,cdmpp@seeds   # two cdmpp models

Each task is tuned by `ms.tune_tir` (evolutionary search, cdmpp's forked builder, TVM's
LocalRunner with the device's threads, the same seed) once per cost model, with the same number
of trials. The best program each run found is then timed again with the same threads, all of
them interleaved in the same passes (the minimum over passes), so a slow host moment cannot
favour one run. The tasks are operator shapes that are in no training data of the shipped
models (checked against the catalog).
Prints, per task and cost model: the best latency found as the tuner timed it, after the first
round, and re-timed; the tuning time and how much of it was the cost model's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# (op, shape) of the tasks: shapes no network of the catalog has
TASKS = (
    ("dense", dict(m=256, k=1024, n=1024)),
    ("conv2d", dict(n=1, c=96, h=28, w=28, k=96, kernel=3, stride=1, pad=1)),
    ("batch_matmul", dict(b=8, m=192, k=96, n=192)),
)


def check_novel(op: str, params: dict) -> None:
    from cdmpp.programs.catalog import catalog

    for task in catalog():
        if task.op == op and dict(task.params) == params:
            raise SystemExit(f"{op} {params} is the catalog's task {task.name}: not novel")


def read_latencies(work_dir: str) -> list[float | None]:
    """Each trial's latency (min of its run_secs) in the order the tuner measured them; None
    for a failed build or run."""
    out = []
    text = (Path(work_dir) / "database_tuning_record.json").read_text(encoding="utf-8")
    for line in text.splitlines():
        record = json.loads(line)[1]
        secs = [float(s) for s in record[1]] if record[1] else []
        out.append(min(secs) if secs and max(secs) < 1e9 else None)
    return out


def tune_once(func, target, cost_model_name: str, trials: int, seed: int, build_timeout_s: float,
              threads: int):
    import cdmpp.tune
    from cdmpp.tvm_env import import_tvm, meta_schedule

    tvm = import_tvm()
    ms = meta_schedule()
    if cost_model_name.startswith("cdmpp"):
        kind, _, estimator = cost_model_name.partition("@")  # "cdmpp@seeds": that model
        model = cdmpp.tune.cost_model(estimator or None, online=kind != "cdmpp-offline")
        spent = [0.0]
        scores = model.scorer.scores

        def timed_scores(schedules, tgt):
            start = time.perf_counter()
            try:
                return scores(schedules, tgt)
            finally:
                spent[0] += time.perf_counter() - start

        model.scorer.scores = timed_scores
    else:
        model, spent = cost_model_name, None
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    with tempfile.TemporaryDirectory() as work_dir:
        start = time.perf_counter()
        database = ms.tune_tir(mod, tvm.target.Target(target), work_dir, max_trials_global=trials,
                               num_trials_per_iter=32, cost_model=model, seed=seed,
                               builder=cdmpp.tune.builder(build_timeout_s),
                               runner=cdmpp.tune.runner(threads))
        tune_s = time.perf_counter() - start
        latencies = read_latencies(work_dir)
        best = database.query_schedule(mod, tvm.target.Target(target), workload_name="main")
    return {"tune_s": tune_s, "cost_model_s": spent[0] if spent else None,
            "latencies": latencies, "best_mod": None if best is None else best.mod}


def retime(mods: dict, target, threads: int, passes: int = 5) -> dict:
    """name -> the minimum over `passes` interleaved passes of each module's time."""
    from cdmpp.measure.collect import threads_for

    with threads_for(threads):
        return _retime(mods, target, passes)


def _retime(mods: dict, target, passes: int) -> dict:
    from cdmpp.measure.build import compile_module
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    dev = tvm.cpu()
    built = {}
    for name, mod in mods.items():
        # as the tuner's runner does: a weight-layout rewrite changes the arguments' shapes
        args_info = [a.as_json() for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]
        try:
            rt = compile_module(mod, target).jit()
            evaluator = rt.time_evaluator("main", dev, number=1, repeat=3, min_repeat_ms=50)
            args = random_args(args_info, dev)
            evaluator(*args)
        except Exception as e:  # noqa: BLE001 - reported; the other runs are still timed
            print(f"cannot re-time the best program of {name}: {type(e).__name__}: {e}")
            continue
        built[name] = (evaluator, args)
    best = {name: float("inf") for name in built}
    for _ in range(passes):
        for name, (evaluator, args) in built.items():
            best[name] = min(best[name], min(evaluator(*args).results))
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--models", default="cdmpp,cdmpp-offline,xgb,random",
                    help="cost models, comma-separated: cdmpp (corrected online, the default), "
                         "cdmpp-offline (the model alone), xgb, random; cdmpp@MODEL and "
                         "cdmpp-offline@MODEL score with MODEL instead of this machine's "
                         "shipped model (e.g. cdmpp@default,cdmpp@seeds)")
    ap.add_argument("--tasks", default="all", help="indices into TASKS, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build-timeout", type=float, default=30.0)
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)

    from cdmpp.device import local_device
    from cdmpp.programs.catalog import _BUILDERS

    device = local_device()
    target = device.target
    print(f"device {device.device_id}: {device.threads} threads", flush=True)
    tasks = TASKS if args.tasks == "all" else [TASKS[int(i)] for i in args.tasks.split(",")]
    models = args.models.split(",")
    rows = []
    for op, params in tasks:
        check_novel(op, params)
        label = f"{op} " + "x".join(str(v) for v in params.values())
        runs = {}
        for name in models:
            print(f"[{time.strftime('%H:%M:%S')}] tuning {label} with {name}", flush=True)
            runs[name] = tune_once(_BUILDERS[op](**params), target, name, args.trials,
                                   args.seed, args.build_timeout, device.threads)
        retimed = retime({n: r["best_mod"] for n, r in runs.items() if r["best_mod"] is not None},
                         target, device.threads)
        for name, r in runs.items():
            found = [v for v in r["latencies"] if v is not None]
            first = [v for v in r["latencies"][:32] if v is not None]
            rows.append({"task": label, "model": name, "trials": len(r["latencies"]),
                         "failed": sum(v is None for v in r["latencies"]),
                         "best_s": min(found) if found else None,
                         "best_first_round_s": min(first) if first else None,
                         "retimed_s": retimed.get(name), "tune_s": r["tune_s"],
                         "cost_model_s": r["cost_model_s"]})
        if args.json:  # after every task: a crash later keeps what was measured
            Path(args.json).write_text(json.dumps({"device_id": device.device_id,
                                                   "trials": args.trials, "seed": args.seed,
                                                   "rows": rows}, indent=1))
    print(f"\n{'task':<34} {'cost model':<13} {'trials':>6} {'failed':>6} "
          f"{'round 1 us':>10} {'best us':>9} {'re-timed us':>11} {'vs best':>7} "
          f"{'tune s':>7} {'model s':>7}")
    for row in rows:
        best_of_task = min((r["retimed_s"] for r in rows
                            if r["task"] == row["task"] and r["retimed_s"] is not None),
                           default=None)

        def us(v):
            return f"{1e6 * v:.1f}" if v is not None else "-"

        ratio = (f"{row['retimed_s'] / best_of_task:.3f}" if row["retimed_s"] is not None
                 and best_of_task else "-")
        model_s = f"{row['cost_model_s']:.1f}" if row["cost_model_s"] is not None else "-"
        print(f"{row['task']:<34} {row['model']:<13} {row['trials']:>6} {row['failed']:>6} "
              f"{us(row['best_first_round_s']):>10} {us(row['best_s']):>9} "
              f"{us(row['retimed_s']):>11} {ratio:>7} {row['tune_s']:>7.0f} {model_s:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
