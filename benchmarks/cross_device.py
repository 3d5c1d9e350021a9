"""Cross-device accuracy: leave one device out, all figures from one run.

    python benchmarks/cross_device.py --data DIR --data DIR ... [--holdout DEVICE_ID,...]
        [--epochs N] [--ks 5,10,20] [--adapt cmd|mmd|cmd,mmd] [--json out.json]

Every --data is one collection directory of one device (`cdmpp collect`, with
`--programs-from` so every device measured the same programs). For each held-out device, only
its records of programs every device measured are used; its tasks are cut in two halves by a
seeded shuffle, a *pool* (the tasks calibration may choose from) and a *test* half (fixed for
every method). Training uses every record of the other devices, with their device vectors.

Methods, each scored on the held-out device's test tasks:
  zero-shot      the multi-device model, given the new device's vector
  adaptation     trained with CMD towards the new device's unlabeled programs (pool + test);
                 adaptation-mmd the same with MMD (--adapt mmd or cmd,mmd)
  kmeans-k/random-k   zero-shot model fine-tuned (device encoder + head) on the held-out
                 device's records of k pool tasks chosen by KMeans over the model's task
                 embeddings, or at random
  ...-rescale    zero-shot predictions times one factor: the median measured/predicted
                 ratio on those k tasks' records
beside the noise floor of the test labels (median gap of the two best passes).
Targets: calibrated MAPE <= 1.5 x noise floor and <= 0.7 x zero-shot; KMeans beats random.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def _metrics(y, pred) -> dict:
    from cdmpp.evaluate.metrics import mape, median_ape, within

    return {"mape": mape(y, pred), "median_ape": median_ape(y, pred), "within_10": within(y, pred)}


def run_holdout(store, samples, common, device: str, ks, epochs, seed: int,
                adapt_weight: float, adapt_kinds=("cmd",)) -> dict:
    """Train on every record of the other devices; calibrate and test on the held-out
    device's records of programs every device measured (`common`)."""
    from cdmpp.dataset.loader import labeled
    from cdmpp.evaluate.metrics import noise_floor_ape
    from cdmpp.model.config import TrainConfig
    from cdmpp.model.estimator import CDMPPRegressor
    from cdmpp.train.selection import kmeans_select, random_select, task_embeddings

    ids = np.array(samples.column("device_id").to_pylist())
    tasks = np.array(samples.column("task").to_pylist())
    held = (ids == device) & common
    held_tasks = sorted(set(tasks[held]))
    rng = np.random.default_rng(seed)
    shuffled = [held_tasks[i] for i in rng.permutation(len(held_tasks))]
    pool, test_tasks = shuffled[: len(shuffled) // 2], set(shuffled[len(shuffled) // 2:])
    train = labeled(store, samples, np.flatnonzero(ids != device), with_device=True)
    test = labeled(store, samples, np.flatnonzero(held & np.isin(tasks, list(test_tasks))),
                   with_device=True)
    pool_rows = np.flatnonzero(held & np.isin(tasks, pool))
    pool_data = labeled(store, samples, pool_rows, with_device=True)
    config = replace(TrainConfig(), seed=seed, **({"epochs": epochs} if epochs else {}))
    out = {"device": device, "train": len(train.latency_s), "test": len(test.latency_s),
           "pool_tasks": len(pool), "test_tasks": len(test_tasks),
           "noise_floor": noise_floor_ape(test.noise_rel), "methods": {}}
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    t0 = time.perf_counter()
    base = CDMPPRegressor(train_config=config).fit(train.programs, train.latency_s)
    out["train_seconds"] = time.perf_counter() - t0
    out["methods"]["zero-shot"] = _metrics(test.latency_s, base.predict(test.programs))
    log(f"{device}: zero-shot {out['methods']['zero-shot']}")

    unlabeled = pool_data.programs
    from cdmpp.dataset.programs import ProgramSet

    unlabeled = ProgramSet(unlabeled.leaf_features + test.programs.leaf_features,
                           unlabeled.leaf_pos + test.programs.leaf_pos,
                           np.concatenate([unlabeled.device, test.programs.device]))
    for kind in adapt_kinds:
        name = "adaptation" if kind == "cmd" else f"adaptation-{kind}"
        adapted = CDMPPRegressor(train_config=replace(config, adapt=kind,
                                                      adapt_weight=adapt_weight))
        adapted.fit(train.programs, train.latency_s, unlabeled=unlabeled)
        out["methods"][name] = _metrics(test.latency_s, adapted.predict(test.programs))
        log(f"{device}: {name} {out['methods'][name]}")

    z, names = task_embeddings(base, pool_data.programs, pool_data.programs.task)
    base_state = {k: v.clone() for k, v in base.net_.state_dict().items()}
    for k in ks:
        if k > len(pool):
            continue
        for selection in ("kmeans", "random"):
            chosen = (kmeans_select(z, names, k, seed=seed) if selection == "kmeans"
                      else random_select(names, k, seed=seed))
            rows = np.flatnonzero(np.isin(np.array(pool_data.programs.task), chosen))
            base.net_.load_state_dict(base_state)
            cal, y_cal = pool_data.programs.subset(rows), pool_data.latency_s[rows]
            # rescale: one factor for the device, the median ratio measured / zero-shot
            shift = np.median(np.log(y_cal) - np.log(base.predict(cal)))
            m = _metrics(test.latency_s, base.predict(test.programs) * np.exp(shift))
            m.update(records=int(len(rows)))
            out["methods"][f"{selection}-{k}-rescale"] = m
            t0 = time.perf_counter()
            tuned = base.fine_tune(cal, y_cal)
            m = _metrics(test.latency_s, tuned.predict(test.programs))
            m.update(records=int(len(rows)), seconds=time.perf_counter() - t0)
            out["methods"][f"{selection}-{k}"] = m
            log(f"{device}: {selection}-{k} {m}; rescaled "
                f"{out['methods'][f'{selection}-{k}-rescale']}")
    return out


def same_programs(samples) -> np.ndarray:
    """Mask of the records of programs every device measured (the collector's candidate keys,
    `task/index`, from each database's cdmpp_measurements.jsonl): a held-out device with more
    programs per task would otherwise be tested on programs no other device saw."""
    from cdmpp.measure.database import load_database

    program = {}
    for db in sorted(set(samples.column("db").to_pylist())):
        for rec in load_database(db, strict=False).records:
            program[(db, rec.record_index)] = rec.meta.get("key")
    rows = list(zip(samples.column("db").to_pylist(), samples.column("record_index").to_pylist(),
                    samples.column("device_id").to_pylist()))
    keys_of: dict = {}
    for db, index, device in rows:
        keys_of.setdefault(device, set()).add(program.get((db, index)))
    common = set.intersection(*keys_of.values()) - {None}
    return np.array([program.get((db, index)) in common for db, index, _ in rows])


def print_table(results: list) -> None:
    for r in results:
        floor = r["noise_floor"]
        print(f"\n== held out {r['device']} ({r.get('describe', '?')}): {r['train']} training records, {r['test']} test "
              f"records of {r['test_tasks']} tasks; noise floor {100 * floor:.1f}%")
        zs = r["methods"]["zero-shot"]["mape"]
        print(f"{'method':<18} {'MAPE':>7} {'medAPE':>7} {'±10%':>6} {'/floor':>7} {'/zero':>6}")
        for name, m in r["methods"].items():
            print(f"{name:<18} {100 * m['mape']:6.1f}% {100 * m['median_ape']:6.1f}% "
                  f"{100 * m['within_10']:5.1f}% {m['mape'] / floor:7.1f} {m['mape'] / zs:6.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--store", default=None)
    parser.add_argument("--holdout", default=None, help="device ids (default: every device)")
    parser.add_argument("--ks", default="5,10,20")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--adapt-weight", type=float, default=0.1)
    parser.add_argument("--adapt", default="cmd",
                        help="adaptation distances, one row each: cmd, mmd or cmd,mmd "
                             "(default: cmd; a full training each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    args = parser.parse_args()
    from cdmpp.cli import csv_list
    from cdmpp.features.build import open_store
    from cdmpp.model.adaptation import distance

    kinds = csv_list(args.adapt)
    try:  # refused before hours of training, by the same lookup training uses
        if not kinds:
            raise ValueError("no distance given")
        for kind in kinds:
            distance(kind)
    except ValueError as e:
        parser.error(f"--adapt {args.adapt!r}: {e}")
    store = open_store(args.data, args.store)
    samples = store.samples(databases=args.data)
    common = same_programs(samples)
    ids = np.array(samples.column("device_id").to_pylist())
    devices = sorted(set(ids))
    print(f"{len(devices)} devices, {samples.num_rows} records, {int(common.sum())} of programs "
          "measured on every device", file=sys.stderr)
    holdouts = args.holdout.split(",") if args.holdout else devices
    ks = [int(k) for k in args.ks.split(",")]
    results = [run_holdout(store, samples, common, d, ks, args.epochs, args.seed,
                           args.adapt_weight, kinds)
               for d in holdouts]
    described = store.devices()
    for r in results:
        dev = described.get(r["device"])
        if dev is not None:
            r["describe"] = (f"{dev.target.get('mcpu')} x{dev.threads} threads, "
                             f"{dev.vector_width_bits}-bit")
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
