"""A real `cdmpp calibrate` run, judged on the new device's tasks it did not measure.

    cdmpp calibrate --out cal/k --budget-minutes 10 --threads 1
    cdmpp calibrate --out cal/r --budget-minutes 10 --threads 1 --selection random
    python benchmarks/calibration.py --db work/epyc-1t --model cal/k --model cal/r

`--db`: a collection directory of the same device (e.g. data/epyc-1t.tar.xz unpacked, which is
`--threads 1` on this machine). Records of any task a calibrated model measured are dropped,
so every model is tested on the same unseen tasks; the base model (zero-shot) is the first row.
Prints MAPE, median APE, share within 10%, top-1 score and pairwise ranking accuracy per
task, and the ratios to zero-shot and to the label noise
floor of those records (targets: <= 0.7x zero-shot, <= 1.5x the noise floor). After each
calibrated model, the simplest calibration for comparison: the base model's predictions times
one factor (median measured / predicted over what that calibration measured), what
`cdmpp calibrate --rescale` saves.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--model", action="append", required=True,
                        help="a calibrated model (or any other, to compare on the same records)")
    parser.add_argument("--base", default="default", help="the zero-shot model")
    args = parser.parse_args()
    from cdmpp.evaluate.metrics import noise_floor_ape, summary
    from cdmpp.measure.database import load_database
    from cdmpp.model.registry import load_estimator, read_meta
    from cdmpp.predict import predict_databases

    records = {r.record_index: r for r in load_database(args.db).records}
    measured_tasks = set()
    for model in args.model:  # what it measured, and what it took from `calibrate --data`
        trained_on = read_meta(model)["trained_on"]
        measured_tasks |= set(trained_on.get("tasks", [])) | set(trained_on.get("extra_tasks", []))
    keep = [i for i, r in records.items() if r.meta.get("task") not in measured_tasks]
    if not keep:
        raise SystemExit(f"every task of {args.db} was measured by a calibration run")
    tasks = np.array([records[i].meta.get("task") for i in keep])
    noise = noise_floor_ape([records[i].measurement.noise_rel for i in keep])
    print(f"{args.db}: {len(keep)} records of {len(set(tasks))} tasks no calibration measured; "
          f"label noise floor {100 * noise:.1f}%")
    print(f"{'model':<32} {'MAPE':>7} {'median APE':>10} {'within 10%':>10} {'top-1':>6} "
          f"{'pairwise':>8} {'/zero-shot':>10} {'/noise':>7}")
    zero_shot = None

    def row(name, y, y_hat):
        nonlocal zero_shot
        s = summary(y, y_hat, tasks)
        zero_shot = zero_shot or s["mape"]
        print(f"{name[-32:]:<32} {100 * s['mape']:6.1f}% {100 * s['median_ape']:9.1f}% "
              f"{100 * s['within_10']:9.1f}% {s['top1']:6.3f} {100 * s['pairwise_acc']:7.1f}% "
              f"{s['mape'] / zero_shot:10.2f} "
              f"{s['mape'] / noise:7.1f}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        base = load_estimator(args.base)

        def predict(model, db):
            result = predict_databases(model, [db], store=Path(tmp))
            return {p.record_index: p for p in result.predictions}

        by_index = predict(base, args.db)
        y = np.array([by_index[i].measured_latency_s for i in keep])
        base_hat = np.array([by_index[i].predicted_latency_s for i in keep])
        row(args.base, y, base_hat)
        for model in args.model:
            by_index = predict(load_estimator(model), args.db)
            row(model, y, np.array([by_index[i].predicted_latency_s for i in keep]))
            factor = rescale_factor(base, read_meta(model)["trained_on"].get("data"), predict)
            if factor is not None:
                row(f"{args.base} x {factor:.3f} (its data)", y, base_hat * factor)
    return 0


def rescale_factor(base, data, predict) -> float | None:
    """The simplest calibration, for comparison: one factor for every prediction of the base
    model, the median measured / predicted over what the calibration run measured (its data
    directory, `trained_on["data"]`). None when that directory is not here."""
    if not isinstance(data, str) or not Path(data, "database_tuning_record.json").exists():
        why = (f"{data} is not here" if isinstance(data, str)
               else "the model measured nothing itself" if not data
               else "a trained model, not a calibration run")
        print(f"(no rescale row: {why})", file=sys.stderr)
        return None
    from cdmpp.model.scaled import median_ratio

    pairs = [(p.measured_latency_s, p.predicted_latency_s) for p in predict(base, data).values()
             if p.measured_latency_s is not None and p.predicted_latency_s > 0]
    return median_ratio(*zip(*pairs)) if pairs else None  # what `calibrate --rescale` learns


if __name__ == "__main__":
    sys.exit(main())
