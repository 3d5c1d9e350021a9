"""Time a few records of a database under three thread-pool settings, each in a fresh process.

    python benchmarks/threadpool.py --db ../shared/data/epyc-2c/conv3x3_1x64x56x56_k64s1 \\
        --db data/epyc-2c-unpacked --records 0,1,2

Settings: TVM's default pool (no `runtime.config_threadpool` call: TVM sizes it at half the
hardware threads), and 1 and 2 pinned threads (`cdmpp.measure.collect.set_threads`, what the
collector does). Prints each record's label next to what it times at now under each setting,
with the timing protocol of `../shared/data` (number=3, repeat=3, min_repeat_ms=40), so one can
tell which setting a database was measured with. See docs/measurement.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

SETTINGS = ("default", "1", "2")


def child(setting: str, dbs: list[str], records: list[int]) -> list[dict]:
    """Run in a fresh process: time the records under one setting."""
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.build import compile_module
    from cdmpp.measure.collect import set_threads
    from cdmpp.measure.database import load_database
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    if setting != "default":
        set_threads(int(setting))
    threads = tvm.get_global_func("runtime.NumThreads")()
    dev = tvm.cpu()
    out = []
    for db_path in dbs:
        db = load_database(db_path)
        for i in records:
            if i >= len(db.records):
                continue
            rec = db.records[i]
            program = measured_program(rec)
            mod = program.mod if hasattr(program, "mod") else program
            rt = compile_module(mod, rec.target).jit()
            args = random_args(rec.args_info, dev)
            timer = rt.time_evaluator("main", dev, number=3, repeat=3, min_repeat_ms=40)
            now = min(min(timer(*args).results) for _ in range(2))
            out.append({"db": db_path, "record": i, "label_s": rec.latency_s, "now_s": now,
                        "tvm_threads": threads})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", action="append", required=True)
    parser.add_argument("--records", default="0,1,2", help="record indices of each database")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    records = [int(r) for r in args.records.split(",") if r]
    if args.child:
        print(json.dumps(child(args.child, args.db, records)))
        return 0
    results = {}
    for setting in SETTINGS:  # a fresh process each: the pool is sized once per process
        cmd = [sys.executable, __file__, "--child", setting, "--records", args.records]
        for db in args.db:
            cmd += ["--db", db]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[setting] = json.loads(done.stdout.strip().splitlines()[-1])
    threads = {s: r[0]["tvm_threads"] for s, r in results.items() if r}
    print(f"TVM worker threads: " + ", ".join(f"{s}: {t}" for s, t in threads.items()))
    print(f"{'database':50s} {'rec':>4s} {'label ms':>10s} " +
          " ".join(f"{s + ' ms':>11s} {'/label':>6s}" for s in SETTINGS))
    for row in zip(*(results[s] for s in SETTINGS)):
        first = row[0]
        cells = " ".join(f"{r['now_s'] * 1e3:11.4f} {r['now_s'] / first['label_s']:6.2f}"
                         for r in row)
        print(f"{first['db'][-50:]:50s} {first['record']:4d} {first['label_s'] * 1e3:10.4f} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
