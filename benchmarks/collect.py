"""Collection throughput and label noise, and the protocol study behind the defaults.

    python benchmarks/collect.py                   # throughput + noise of the default protocol
    python benchmarks/collect.py --study           # compare timing protocols (docs/measurement.md)
        [--protocols "NAME;NAME"] [--tasks TASK,...] [--programs-per-task N] [--json OUT]

Throughput: `cdmpp collect` on a fixed task sample into a fresh directory (sampling, building,
timing, writing), reported as programs/hour, with the noise floor of what it measured.

Study: programs of the same fixed sample are built once, then timed by each protocol twice
(runs A and B, minutes apart, protocols interleaved). For each protocol and label statistic:
timing seconds per program, the raw pass-to-pass difference, and the label reproducibility
|label_A - label_B| / min(label_A, label_B) -- the noise a model trained on these labels sees;
and how each protocol's labels compare with the first protocol's on the same programs.
`--tasks` times other catalog tasks (e.g. ones with programs of 20 ms or more).
Targets: >= 6000 programs/hour, median pass-to-pass difference <= 3%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

SAMPLE = ("dense_64x768x768", "densegelu_128x768x3072", "bmm_12x128x64x128", "softmax_12x128x128",
          "layernorm_128x768", "conv3x3_1x64x56x56_k64s1", "conv1x1_1x256x56x56_k64",
          "dwconv3x3_1x144x56x56_s1", "maxpool3x3_1x64x112x112_s2", "addrelu_1x64x56x56")

STATISTICS = {
    "min of pass medians": lambda m: min(p.median_s for p in m.passes),
    "median of pass medians": lambda m: statistics.median(p.median_s for p in m.passes),
    "mean of all repeats": lambda m: statistics.fmean(m.run_secs),
    "min of all repeats": lambda m: min(m.run_secs),
}


def protocols():
    from cdmpp.measure.timing import Protocol

    # the protocols before 2026-11-23 23:00 warmed every program up in every pass
    base = replace(Protocol(), warm_up_every_pass=True)
    return {
        "tvm-like n3 r3 40ms, 3 passes": replace(base, number=3, repeat=3, min_repeat_ms=40,
                                                 passes=3, max_extra_passes=0),
        "r3 20ms, 2 passes": replace(base, min_repeat_ms=20, passes=2, max_extra_passes=0),
        "r3 20ms, 3 passes": replace(base, min_repeat_ms=20, passes=3, max_extra_passes=0),
        "r5 10ms, 2 passes": replace(base, repeat=5, min_repeat_ms=10, passes=2,
                                     max_extra_passes=0),
        "r3 20ms, 2 passes + re-measure": replace(base, min_repeat_ms=20, passes=2,
                                                  max_extra_passes=2),
        "r3 20ms, 3 passes + re-measure": replace(base, min_repeat_ms=20, passes=3,
                                                  max_extra_passes=2),
        "r3 20ms, 3 passes, cache flush": replace(base, min_repeat_ms=20, passes=3,
                                                  max_extra_passes=0, flush_cache=True),
        "r3 10ms, 3 passes + re-measure": replace(base, min_repeat_ms=10, passes=3,
                                                  max_extra_passes=2),
        "r5 10ms, 3 passes + re-measure": replace(base, repeat=5, min_repeat_ms=10, passes=3,
                                                  max_extra_passes=2),
        "r3 20ms, 3 passes + re-measure, warm-up once": Protocol(),  # the default now
    }


def throughput(programs_per_task: int, tasks) -> dict:
    from cdmpp.measure.collect import CollectConfig, collect

    with tempfile.TemporaryDirectory() as out:
        summary = collect(CollectConfig(out=out, programs_per_task=programs_per_task), tasks,
                          progress=False)
    return {"programs": summary.ok + summary.failed, "failed": summary.failed,
            "seconds": round(summary.seconds, 1),
            "programs_per_hour": round(summary.programs_per_hour),
            "stage_secs": {k: round(v, 1) for k, v in summary.stage_secs.items()},
            "waited_s": round(summary.waited_s, 1),
            "noise_floor": summary.noise.to_json()}


def build_sample(tasks, programs_per_task: int, work: Path):
    """Sample and build the study programs once; return (key, module, args_info) triples."""
    from cdmpp.device import local_device
    from cdmpp.measure.build import build_guarded
    from cdmpp.programs.sampling import sample_programs
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    target = local_device().target
    built = []
    for task in tasks:
        mod = tvm.IRModule({"main": task.prim_func().with_attr("global_symbol", "main")})
        for cand in sample_programs(mod, target, programs_per_task, task=task.name):
            result = build_guarded(cand.module(mod), target, timeout_s=30)
            if result.ok:
                built.append((cand.key, result.module, cand.args_info_json))
    return target, built


def label_ratios(base_runs: dict, runs: dict, keys) -> dict:
    """This protocol's labels over another's on the same programs (each label the minimum of
    runs A and B): quantiles of the ratio, for all programs and for those of 20 ms or more."""
    def label(rs, k):
        got = [rs[run][0].get(k) for run in ("A", "B")]
        ok = [m.latency_s for m in got if m is not None and not isinstance(m, Exception)]
        return min(ok) if len(ok) == 2 else None

    out = {}
    for subset, floor_s in (("all", 0.0), ("20 ms or more", 0.02)):
        pairs = [(label(runs, k), label(base_runs, k)) for k in keys]
        ratios = [own / ref for own, ref in pairs if own and ref and ref >= floor_s]
        if ratios:
            q = np.quantile(ratios, [0.05, 0.5, 0.95])
            out[subset] = {"n": len(ratios), "p5": round(float(q[0]), 4),
                           "median": round(float(q[1]), 4), "p95": round(float(q[2]), 4)}
    return out


def study(tasks, programs_per_task: int, only=None) -> dict:
    from cdmpp.measure.collect import set_threads
    from cdmpp.measure.noise import noise_floor
    from cdmpp.measure.timing import Timer, random_args

    with tempfile.TemporaryDirectory() as work:
        target, built = build_sample(tasks, programs_per_task, Path(work))
        set_threads(target["num-cores"])
        chosen = {n: p for n, p in protocols().items() if not only or n in only}
        results = {name: {} for name in chosen}
        for run in ("A", "B"):
            for name, protocol in chosen.items():
                timer = Timer(protocol, target)
                programs = [(k, m, random_args(a, timer.device)) for k, m, a in built]
                start = time.perf_counter()
                measured = timer.measure_batch(programs)
                results[name][run] = (measured, time.perf_counter() - start)
    table = {}
    first = next(iter(results))  # labels of every protocol are compared with this one's
    for name, runs in results.items():
        (a, secs_a), (b, secs_b) = runs["A"], runs["B"]
        keys = [k for k in a if k in b and not isinstance(a[k], Exception)
                and not isinstance(b[k], Exception)]
        row = {"timing_s_per_program": round((secs_a + secs_b) / (2 * len(keys)), 3),
               "pass_to_pass": noise_floor(a[k] for k in keys).to_json()}
        for stat, fn in STATISTICS.items():
            gaps = np.array([abs(fn(a[k]) - fn(b[k])) / min(fn(a[k]), fn(b[k])) for k in keys])
            row[stat] = {"median_rel": round(float(np.median(gaps)), 4),
                         "within_5": round(float(np.mean(gaps <= 0.05)), 3),
                         "within_10": round(float(np.mean(gaps <= 0.10)), 3)}
        row[f"label / label of {first!r}"] = label_ratios(results[first], runs, keys)
        table[name] = row
    return {"programs": len(built), "protocols": table}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", action="store_true")
    parser.add_argument("--programs-per-task", type=int, default=8)
    parser.add_argument("--protocols", help="with --study: only these protocols (names as "
                        "printed, separated by ';')")
    parser.add_argument("--tasks", help="catalog task names, comma-separated (default: the "
                        "ten operators of the fixed sample)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    from cdmpp.programs.catalog import get_task

    tasks = [get_task(name) for name in (args.tasks.split(",") if args.tasks else SAMPLE)]
    only = set(args.protocols.split(";")) if args.protocols else None
    if only and not only <= set(protocols()):
        parser.error(f"unknown protocols: {sorted(only - set(protocols()))}")
    figures = study(tasks, args.programs_per_task, only) if args.study else \
        throughput(args.programs_per_task, tasks)
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
