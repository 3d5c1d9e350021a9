"""XGBoost per work with and without the loop-view columns (`cdmpp.features.loop_view`).

    python benchmarks/loop_view.py --data <data/epyc-2c unpacked> --data <epyc-2c-kernels> \\
        --data <epyc-2c-sweep> --data <epyc-2c-convsweep> [--store DIR] \\
        [--split by-network:mobilenet_v2,resnet50] [--stage val|test] [--seed 0]

The shipped ensemble's XGBoost member (`XGB_PER_WORK_SETTINGS`: latency per work, the heaviest
store's features as they are and per work) is fitted twice on the same rows: on its program
vectors, and on those with each program's loop-view vector appended (`loop_view.of_program` of
the program each record measured). `--stage val` fits on the training side's validation carve
(`carve_rows`, by task: what a setting is chosen on); `--stage test` on the whole training side,
scored on the held-out networks. Prints MAPE, median APE, top-1 and pairwise accuracy of each.
The loop-view columns are computed from the TIR here (TVM needed, about 1 ms a program); they
are not in the feature store yet.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def loop_view_vectors(samples) -> tuple[np.ndarray, int]:
    """(samples, N_PROGRAM) loop-view vectors of the store's samples, NaN where the record's
    program cannot be rebuilt, and how many those are."""
    from cdmpp.features import loop_view
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.database import load_database

    dbs = samples.column("db").to_pylist()
    index = samples.column("record_index").to_pylist()
    out = np.full((len(dbs), loop_view.N_PROGRAM), np.nan)
    failed = 0
    for db in sorted(set(dbs)):
        rows = {i: r for r, (d, i) in enumerate(zip(dbs, index)) if d == db}
        for rec in load_database(db, strict=False).records:
            row = rows.get(rec.record_index)
            if row is None:
                continue
            try:
                out[row] = loop_view.of_program(measured_program(rec, rec.workload.mod()))
            except Exception as e:  # noqa: BLE001 - reported and counted, the rest goes on
                failed += 1
                print(f"{db} record {rec.record_index}: {type(e).__name__}: {e}", file=sys.stderr)
    return out, failed


def fit_predict(programs, y, extra, test_programs, test_extra, seed: int) -> np.ndarray:
    import xgboost as xgb

    from cdmpp.baselines import XGB_PER_WORK_SETTINGS, XGBBaseline, program_vectors

    # XGBBaseline reads program vectors from a ProgramSet only: its booster settings and
    # target are used here on the vectors with the columns appended
    model = XGBBaseline(**XGB_PER_WORK_SETTINGS, per_work=True, seed=seed)

    def inputs(p, e):
        x = program_vectors(p, heaviest=True, heaviest_per_work=True)
        return x if e is None else np.hstack([x, e])

    train = xgb.DMatrix(inputs(programs, extra), label=np.log(y) - np.log(programs.work()))
    booster = xgb.train(model._booster_params(), train, num_boost_round=model.n_estimators)
    log_s = booster.predict(xgb.DMatrix(inputs(test_programs, test_extra)))
    return np.exp(log_s.astype(np.float64) + np.log(test_programs.work()))


def main(argv=None) -> int:
    from cdmpp.dataset.devices import one_device
    from cdmpp.dataset.loader import split_data
    from cdmpp.dataset.splits import carve_rows, make_split
    from cdmpp.evaluate.metrics import mape, pairwise_accuracy, top_k_score
    from cdmpp.features.build import open_store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--store", help="feature store directory (default: the shared one)")
    parser.add_argument("--split", default="by-network:mobilenet_v2,resnet50")
    parser.add_argument("--stage", choices=("val", "test"), default="val")
    parser.add_argument("--seed", type=int, default=0, help="XGBoost's subsampling seed")
    args = parser.parse_args(argv)

    store = open_store(args.data, args.store, progress=False)
    samples = one_device(store.samples(databases=[str(Path(d)) for d in args.data]), None)
    split = make_split(samples, args.split, seed=0)
    train, test = split_data(store, split)
    train_rows, test_rows = split.rows(samples)
    latency = np.asarray(samples.column("latency_s").to_pylist())
    if not (np.array_equal(latency[train_rows], train.latency_s)
            and np.array_equal(latency[test_rows], test.latency_s)):
        raise SystemExit("the split's rows are not in the order split_data loads them")
    start = time.time()
    extra, failed = loop_view_vectors(samples)
    print(f"loop view of {len(extra)} records in {time.time() - start:.0f} s, {failed} failed",
          file=sys.stderr)
    if args.stage == "val":
        tasks = train.programs.task
        by_task = None if split.name.startswith("random") else tasks
        fit, held = carve_rows(len(tasks), 0.2, 0, by_task)
        a, ya, ea = train.programs.subset(fit), train.latency_s[fit], extra[train_rows][fit]
        b, yb, eb = train.programs.subset(held), train.latency_s[held], extra[train_rows][held]
    else:
        a, ya, ea = train.programs, train.latency_s, extra[train_rows]
        b, yb, eb = test.programs, test.latency_s, extra[test_rows]
    tasks_b = np.asarray(b.task)
    print(f"{split.name}, {args.stage}: {len(ya)} fitted, {len(yb)} scored")
    for name, (e_a, e_b) in (("without", (None, None)), ("with the loop view", (ea, eb))):
        p = fit_predict(a, ya, e_a, b, e_b, args.seed)
        print(f"  {name:20s} MAPE {100 * mape(yb, p):.2f}%  median APE "
              f"{100 * np.median(np.abs(p / yb - 1)):.1f}%  top-1 "
              f"{top_k_score(yb, p, tasks_b, 1):.3f}  pairwise "
              f"{pairwise_accuracy(yb, p, tasks_b):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
