"""KMeans against random task selection for calibration, over many draws (offline, paired).

    python benchmarks/selection.py --data work/cal/k10.data --data work/cal/r10.data ... \
        [--model default] [--draws 40] [--k 5,10,20,34] [--records-per-task 4] [--fine-tunes R]
        [--weight-folds F]

`--data`: collection directories of ONE device that the base model was not trained on (e.g. the
data directories `cdmpp calibrate --threads 1` leaves beside its models: data/README.md). Each
draw splits their tasks in half at random: candidates and test. From the candidates, `cdmpp
calibrate`'s own selection picks k tasks, by KMeans over the base model's embeddings of the
catalog's default programs and at random, each with the draw's seed; the base model is
fine-tuned as `cdmpp calibrate` does on <= `--records-per-task` measured programs of each chosen
task, and scored on every record of the test half. The two selections share the draw, so their
difference is paired; the draws are independent. Prints, per k, the mean MAPE of each, how many
draws KMeans won, the mean difference with its standard error, and the label noise floor of the
test records; then the same comparison in RMSE of log latency and median APE, and the median
ratio predicted / measured of zero-shot and of each calibration. MAPE rewards predicting low
(an under-prediction costs at most 100%): a zero-shot model that predicts a device 10% fast
can score a lower MAPE than an unbiased calibration with a lower median error, so the
symmetric figures are printed beside it. Nothing is measured: a draw costs two calibrations
per k (seconds each, times `--fine-tunes`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from math import comb
from pathlib import Path

import numpy as np


def _load(data_dirs, store_dir: Path, per_task: int):
    from cdmpp.dataset.loader import labeled
    from cdmpp.device import load_device
    from cdmpp.features.build import build_store
    from cdmpp.features.store import FeatureStore

    devices = {load_device(d).device_id for d in data_dirs}
    if len(devices) != 1:
        raise SystemExit(f"--data must hold one device; found {sorted(devices)}")
    print(build_store(data_dirs, store_dir, progress=False), file=sys.stderr)
    store = FeatureStore(store_dir)
    samples = store.samples()
    data = labeled(store, samples, np.arange(samples.num_rows))
    tasks = np.asarray(data.programs.task)
    names, counts = np.unique(tasks, return_counts=True)
    return data, tasks, [str(t) for t, c in zip(names, counts) if c >= per_task], load_device(
        data_dirs[0])


def _fine_tuned(base, members, model_name: str, programs, y, seed: int, vector,
                fine_tunes: int | None, weight_folds: int):
    """The base model fine-tuned as `cdmpp calibrate` fine-tunes it (same settings; copies of
    its `members`, which stay as they are for the next draw)."""
    from cdmpp.calibrate import CalibrateConfig, fine_tuned_model

    config = CalibrateConfig(out="selection", model=model_name, seed=seed,
                             fine_tunes=fine_tunes, weight_folds=weight_folds)
    return fine_tuned_model(base, members, programs, y, config, vector, progress=False)


def run(args) -> list:
    with tempfile.TemporaryDirectory() as tmp:  # the store's shards are read while it lives
        data, tasks, names, device = _load(args.data, Path(tmp) / "store", args.records_per_task)
        return _draws(args, data, tasks, names, device)


def _draws(args, data, tasks, names, device) -> list:
    from cdmpp.calibrate import (base_device_vector, cdmpp_members, choose_tasks,
                                 default_programs)
    from cdmpp.evaluate.metrics import noise_floor_ape
    from cdmpp.model.registry import load_estimator
    from cdmpp.programs.catalog import select

    catalog = {t.name: t for t in select(None, None)}
    names = [t for t in names if t in catalog]
    base = load_estimator(args.model)
    members = cdmpp_members(base, args.model)
    first = members[0]
    vector = base_device_vector(first, device, args.model)
    programs = data.programs.with_device(vector)
    defaults = default_programs([catalog[t] for t in names], device.target).with_device(vector)
    print(f"{len(data.latency_s)} records, {len(names)} catalog tasks with >= "
          f"{args.records_per_task} records", file=sys.stderr)
    rows = []
    for draw in range(args.draws):
        order = np.random.default_rng(1000 + draw).permutation(len(names))
        half = len(names) // 2
        candidates = sorted(int(i) for i in order[:half])
        test = np.flatnonzero(np.isin(tasks, [names[i] for i in order[half:]]))
        y = data.latency_s[test]
        row = {"draw": draw, "test_records": int(len(test)),
               "noise_floor": noise_floor_ape(data.noise_rel[test]),
               **_scores("zero_shot", y, base.predict(programs.subset(test)))}
        for k in args.k:
            for selection in ("kmeans", "random"):
                chosen = choose_tasks(first, defaults.subset(candidates), k, selection, seed=draw)
                cal = np.concatenate([np.flatnonzero(tasks == t)[: args.records_per_task]
                                      for t in chosen])
                model = _fine_tuned(base, members, args.model, programs.subset(cal),
                                    data.latency_s[cal], draw, vector, args.fine_tunes,
                                    args.weight_folds)
                row.update(_scores(f"{selection}-{k}", y, model.predict(programs.subset(test))))
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


# the symmetric figures of each arm, kept beside its MAPE (the arm's own key)
SYMMETRIC = ("rmse_log", "median_ape")


def _scores(arm: str, y, predicted) -> dict:
    """{arm: MAPE, arm:rmse_log, arm:median_ape, arm:median_ratio} of one arm's predictions."""
    from cdmpp.evaluate.metrics import mape, median_ape, rmse_log
    from cdmpp.model.scaled import median_ratio  # measured / predicted, as a rescale learns it

    return {arm: mape(y, predicted), f"{arm}:rmse_log": rmse_log(y, predicted),
            f"{arm}:median_ape": median_ape(y, predicted),
            f"{arm}:median_ratio": 1.0 / median_ratio(y, predicted)}


def report(rows, ks) -> None:
    n = len(rows)
    sizes = [r["test_records"] for r in rows]
    print(f"{n} draws; test records per draw {min(sizes)}-{max(sizes)}; label noise floor "
          f"{100 * np.median([r['noise_floor'] for r in rows]):.2f}%; zero-shot MAPE "
          f"{100 * np.mean([r['zero_shot'] for r in rows]):.1f}%")
    _comparison(rows, ks, "")
    for metric in SYMMETRIC:
        zero = np.mean([r[f"zero_shot:{metric}"] for r in rows])
        print(f"\n{metric}: zero-shot {_fmt(metric, zero)}")
        _comparison(rows, ks, f":{metric}")
    ratios = [f"zero-shot {np.mean([r['zero_shot:median_ratio'] for r in rows]):.3f}"]
    for k in ks:
        for arm in ("kmeans", "random"):
            ratios.append(f"{arm}-{k} {np.mean([r[f'{arm}-{k}:median_ratio'] for r in rows]):.3f}")
    print("\nmedian predicted / measured (mean over draws): " + ", ".join(ratios))


def _fmt(metric: str, value: float) -> str:
    return f"{value:.3f}" if metric == "rmse_log" else f"{100 * value:.1f}%"


def _comparison(rows, ks, suffix: str) -> None:
    """Per k and over all k: each selection's mean, KMeans' wins and the paired difference."""
    n = len(rows)
    metric = suffix[1:]
    scale, digits = (1.0, 3) if metric == "rmse_log" else (100.0, 2)
    print(f"{'k':>4} {'KMeans':>8} {'random':>8} {'KMeans ahead':>13} {'random - KMeans':>16} "
          f"{'sign test p':>11}")

    def line(label, diff, km, rnd):
        wins = int((diff > 0).sum())
        p = sum(comb(n, i) for i in range(wins, n + 1)) / 2**n  # one-sided: KMeans ahead
        se = diff.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
        print(f"{label:>4} {_fmt(metric, km):>8} {_fmt(metric, rnd):>8} {wins:>7} of {n:<3} "
              f"{scale * diff.mean():+7.{digits}f} ± {scale * se:.{digits}f} {p:11.3f}")

    for k in ks:
        km = np.array([r[f"kmeans-{k}{suffix}"] for r in rows])
        rnd = np.array([r[f"random-{k}{suffix}"] for r in rows])
        line(str(k), rnd - km, km.mean(), rnd.mean())
    km = np.array([np.mean([r[f"kmeans-{k}{suffix}"] for k in ks]) for r in rows])
    rnd = np.array([np.mean([r[f"random-{k}{suffix}"] for k in ks]) for r in rows])
    line("all", rnd - km, km.mean(), rnd.mean())


def main() -> int:
    from cdmpp.calibrate import FINE_TUNES, FINE_TUNES_BESIDE_OTHERS, WEIGHT_FOLDS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--model", default="default")
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")],
                        default=[5, 10, 20, 34])
    parser.add_argument("--records-per-task", type=int, default=4)
    parser.add_argument("--fine-tunes", type=int, default=None, metavar="R",
                        help="fine-tunings of each member (default: calibrate's, "
                             f"{FINE_TUNES}, or {FINE_TUNES_BESIDE_OTHERS} for a base that also "
                             "holds other kinds; the figures in docs/cross_device.md before "
                             "2026-11-25 used 1, those of 2026-12-05 3)")
    parser.add_argument("--weight-folds", type=int, default=WEIGHT_FOLDS, metavar="F",
                        help="as calibrate's: a base that also holds other kinds gets its "
                             "weights chosen by F folds of the chosen tasks (0: kept; the "
                             "figures before 2026-12-05 02:00 UTC kept them)")
    parser.add_argument("--json", help="also write every draw here (JSON lines)")
    args = parser.parse_args()
    rows = run(args)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(rows, args.k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
