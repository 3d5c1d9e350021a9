"""Per-record accuracy on the programs a tuner's search visited, beside the labels' noise floor.

    python benchmarks/searched.py --db DIR [--db DIR ...] [--model default --model xgb ...]
        [--json OUT]

`DIR` is a collection made with `cdmpp collect --kernels-of NETWORK --records-from TUNING_DB`:
the programs of a real tuning run, timed with the collector's protocol, plus each kernel's
default program. For each database and model it prints MAPE, median APE, the share within
±10% and the share off by more than 2x, over every record and over the searched programs
alone, with top-1 and pairwise ranking accuracy within each kernel, and the median predicted /
measured of each kernel's fastest program, its fastest tenth and its slowest tenth (a tuned
network runs the fastest: a model that pulls a kernel's extremes toward its middle
over-predicts it); beside it, the label noise
floor of the database and how the collector's labels compare with the tuner's own timings of
the same programs. A model whose training data included a database's programs is not being
tested on them: hold the network out (docs/tune.md, "Training on searched programs").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def label_summary(db) -> dict:
    """The database's noise floor, and collector label / tuner's timing of imported records."""
    from cdmpp.measure.noise import noise_floor

    floor = noise_floor(r.measurement for r in db.records)
    ratios = np.array([r.latency_s / min(r.meta["source"]["run_secs"]) for r in db.records
                       if r.meta.get("source")])
    out = {"records": len(db.records), "noise": floor.to_json(), "text": str(floor)}
    if len(ratios):
        out["label_over_tuner"] = {"median": float(np.median(ratios)),
                                   "p25": float(np.percentile(ratios, 25)),
                                   "p75": float(np.percentile(ratios, 75))}
    return out


def scores(y, yhat, groups, kinds) -> dict:
    from cdmpp.evaluate import metrics

    row = {}
    for name, mask in (("all", np.ones(len(y), bool)), ("searched", kinds == "imported"),
                       ("default", kinds == "default")):
        if not mask.any():
            continue
        ratio = yhat[mask] / y[mask]
        row[name] = {"n": int(mask.sum()), "mape": metrics.mape(y[mask], yhat[mask]),
                     "median_ape": metrics.median_ape(y[mask], yhat[mask]),
                     "within_10": metrics.within(y[mask], yhat[mask]),
                     "off_2x": float(np.mean((ratio > 2) | (ratio < 0.5))),
                     "median_ratio": float(np.median(ratio))}
    searched = kinds == "imported"
    if searched.any():
        row["top1"] = metrics.top_k_score(y[searched], yhat[searched], groups[searched], 1)
        row["pairwise"] = metrics.pairwise_accuracy(y[searched], yhat[searched],
                                                    groups[searched])
    row["by_rank"] = ratio_by_rank(y, yhat, groups)
    return row


def ratio_by_rank(y, yhat, groups, min_programs: int = 10) -> dict:
    """Median predicted / measured of each kernel's fastest program, of its fastest and slowest
    tenths, and of the rest (kernels with at least `min_programs` records)."""
    parts: dict[str, list] = {"fastest": [], "fastest_tenth": [], "middle": [],
                              "slowest_tenth": []}
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        if len(rows) < min_programs:
            continue
        rows = rows[np.argsort(y[rows])]
        ratio = yhat[rows] / y[rows]
        share = np.arange(len(rows)) / len(rows)
        parts["fastest"].append(ratio[0])
        parts["fastest_tenth"] += list(ratio[share < 0.1])
        parts["middle"] += list(ratio[(share >= 0.1) & (share < 0.9)])
        parts["slowest_tenth"] += list(ratio[share >= 0.9])
    return {k: float(np.median(v)) if v else None for k, v in parts.items()}


def describe(spec: str, row: dict) -> str:
    a = row["all"]
    text = (f"  {spec}: {a['n']} records, MAPE {100 * a['mape']:.1f}%, median APE "
            f"{100 * a['median_ape']:.1f}%, within ±10% {100 * a['within_10']:.0f}%, off >2x "
            f"{100 * a['off_2x']:.1f}%, median predicted/measured {a['median_ratio']:.3f}")
    if "searched" in row:
        s = row["searched"]
        text += (f"\n    searched programs: MAPE {100 * s['mape']:.1f}%, median predicted/measured "
                 f"{s['median_ratio']:.3f}, top-1 {row['top1']:.3f}, pairwise "
                 f"{row['pairwise']:.3f}")
    if "default" in row:
        text += f"; default programs: MAPE {100 * row['default']['mape']:.1f}%"
    r = row["by_rank"]
    if r["fastest"] is not None:
        text += (f"\n    predicted/measured by rank in its kernel: fastest {r['fastest']:.2f}, "
                 f"fastest tenth {r['fastest_tenth']:.2f}, middle {r['middle']:.2f}, slowest "
                 f"tenth {r['slowest_tenth']:.2f}")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", action="append", required=True)
    parser.add_argument("--model", action="append", default=None,
                        help="shipped name or model directory (repeatable; default: default)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from cdmpp.measure.database import load_database
    from cdmpp.model.registry import load_estimator
    from cdmpp.predict import predict_databases

    models = {spec: load_estimator(spec) for spec in args.model or ["default"]}
    out = {}
    for db_dir in args.db:
        db = load_database(db_dir, strict=False)
        kind_of = {r.record_index: r.meta.get("kind", "?") for r in db.records}
        out[db_dir] = label_summary(db)
        print(f"{db_dir}: {len(db.records)} records; {out[db_dir]['text']}")
        if "label_over_tuner" in out[db_dir]:
            t = out[db_dir]["label_over_tuner"]
            print(f"  collector's label / the tuner's timing of the same program: median "
                  f"{t['median']:.3f} (quartiles {t['p25']:.3f}-{t['p75']:.3f})")
        for spec, model in models.items():
            result = predict_databases(model, [db_dir])
            preds = [p for p in result.predictions if p.measured_latency_s]
            row = scores(np.array([p.measured_latency_s for p in preds]),
                         np.array([p.predicted_latency_s for p in preds]),
                         np.array([p.workload_hash for p in preds]),
                         np.array([kind_of[p.record_index] for p in preds]))
            out[db_dir][spec] = row
            print(describe(spec, row))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
