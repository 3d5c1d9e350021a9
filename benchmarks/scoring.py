"""How fast cdmpp scores and builds tuning candidates, on one core and on all of them.

    python benchmarks/scoring.py [--programs 256] [--builds 32] [--repeats 3] [--model default]

TVM's evolutionary search asks its cost model to score about 2,000 candidates a round; with
cdmpp that was 11-29 s of a 43-87 s tuning run of 64 trials (docs/tune.md). For each task of
benchmarks/tune.py (shapes in no training data), `--programs` random schedules are sampled as
the tuner samples its first population (post-order-apply + replay-trace, post-processed), then
a fresh `CandidateScorer` (no cache, no online correction) scores them all, with
`threads=1` and with the cores this process may use, alternated `--repeats` times.
Prints candidates scored per second (wall time: featurizing and predicting), the median of the
repeats, and the speed-up. Then the first `--builds` of them are compiled by the tuner's
builder (`cdmpp.tune.builder`'s `build_batch`: forked children, 30 s limit) with one child and
with one per core, alternated `--repeats` times: programs built per second (wall time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def sample_schedules(func, target, n: int, seed: int) -> list:
    from cdmpp.measure.tvm_codec import replay_trace
    from cdmpp.programs.sampling import sample_programs
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    workload = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    sampled = sample_programs(workload, target, n, task="bench", seed=seed,
                              include_default=False)
    return [replay_trace(workload, c.trace_json) for c in sampled]


def time_scoring(estimator, schedules, target, threads: int) -> float:
    from cdmpp.tune import CandidateScorer

    scorer = CandidateScorer(estimator, online=False, threads=threads)
    start = time.perf_counter()
    scores = scorer.scores(schedules, target)
    seconds = time.perf_counter() - start
    if scorer.failed or not (scores > 0).all():
        raise RuntimeError(f"{scorer.failed} of {len(schedules)} candidates not featurized")
    return seconds


def time_building(schedules, target, workers: int) -> float:
    import tempfile

    from cdmpp.tune.builder import build_batch

    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        built = build_batch([s.mod for s in schedules], [target] * len(schedules), 30.0,
                            Path(work), workers)
        seconds = time.perf_counter() - start
    failed = [error for _, error in built if error]
    if failed:
        print(f"  {len(failed)} of {len(built)} builds failed: {failed[0][:200]}")
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=256)
    ap.add_argument("--builds", type=int, default=32, help="programs built per task (0: none)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    import cdmpp
    from cdmpp.device import local_device
    from cdmpp.features.parallel import default_threads
    from cdmpp.programs.catalog import _BUILDERS
    from tune import TASKS

    device = local_device()
    cores = default_threads()
    estimator = cdmpp.load_model(args.model)
    print(f"device {device.device_id}; featurizing on 1 and {cores} threads", flush=True)
    rows = []
    for op, params in TASKS:
        label = f"{op} " + "x".join(str(v) for v in params.values())
        schedules = sample_schedules(_BUILDERS[op](**params), device.target, args.programs,
                                     args.seed)
        time_scoring(estimator, schedules[:4], device.target, 1)  # warm up
        seconds = {1: [], cores: []}
        for _ in range(args.repeats):
            for threads in seconds:
                seconds[threads].append(time_scoring(estimator, schedules, device.target,
                                                     threads))
        one, many = (statistics.median(seconds[t]) for t in (1, cores))
        rows.append({"task": label, "programs": len(schedules),
                     "per_s_1_thread": len(schedules) / one,
                     f"per_s_{cores}_threads": len(schedules) / many, "speedup": one / many,
                     "seconds": {str(t): v for t, v in seconds.items()}})
        print(f"{label:<34} {len(schedules):>5} programs: {len(schedules) / one:7.1f}/s on 1 "
              f"thread, {len(schedules) / many:7.1f}/s on {cores}: x{one / many:.2f}",
              flush=True)
        if args.builds:
            batch = schedules[:args.builds]
            built = {1: [], cores: []}
            for _ in range(args.repeats):
                for workers in built:
                    built[workers].append(time_building(batch, device.target, workers))
            one, many = (statistics.median(built[w]) for w in (1, cores))
            rows[-1]["build_seconds"] = {str(w): v for w, v in built.items()}
            print(f"{'':<34} {len(batch):>5} built:    {len(batch) / one:7.1f}/s by 1 "
                  f"child,  {len(batch) / many:7.1f}/s by {cores}: x{one / many:.2f}",
                  flush=True)
    total = {t: sum(statistics.median(r["seconds"][str(t)]) for r in rows) for t in (1, cores)}
    n = sum(r["programs"] for r in rows)
    print(f"all {n} candidates: {n / total[1]:.1f}/s on 1 thread, {n / total[cores]:.1f}/s on "
          f"{cores}: x{total[1] / total[cores]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device_id": device.device_id, "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
