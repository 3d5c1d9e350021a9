"""`cdmpp calibrate --rescale` on a CPU left out of training, simulated with its own labels.

    python benchmarks/e2e.py --model noz5@<zen5-2c>/device.json \
        --measured-from benchmarks/measured/8d19a00b08391ba3-untuned.json --json noz5_net.json
    python benchmarks/rescale.py --model noz5 --device <zen5-2c>/device.json --db <zen5-2c> \
        --networks noz5_net.json [--ks 10,20] [--draws 20] [--seeds 3]

`--model` was trained without the held-out CPU; `--db` is a collection of that CPU (its catalog
tasks' default programs and sampled ones, e.g. data/zen5-2c.tar.xz unpacked) and `--networks`
a benchmarks/e2e.py --json whose first model is `--model` asked about that CPU, against the
totals measured there (benchmarks/measured/). A rescale measures the default programs of k
catalog tasks and multiplies every prediction by the median measured / predicted over them;
here the held-out CPU's own labels of those programs stand in for the measurement, so the
CPU need not be at hand. Tasks are chosen as `cdmpp calibrate` chooses them: KMeans over the
model's embeddings of every catalog default program (seeds 0..--seeds-1), or at random
(--draws draws). Per rescale: the factor, the per-program MAPE on the records of the tasks not
chosen, and the networks' mean |error| and count within 10%, beside zero-shot (no factor).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def rescaled(y, p, task, default, chosen, predicted_totals, measured_totals) -> dict:
    """One rescale: factor from the chosen tasks' default programs; scored per program on
    the other tasks' records, and on the networks."""
    from cdmpp.evaluate.metrics import mape
    from cdmpp.model.scaled import median_ratio

    cal = default & np.isin(task, list(chosen))
    factor = median_ratio(y[cal], p[cal])
    rest = ~np.isin(task, list(chosen))
    errors = np.abs(factor * predicted_totals / measured_totals - 1)
    return {"factor": factor, "mape": mape(y[rest], factor * p[rest]),
            "networks_mean": float(errors.mean()), "within_10": int((errors <= 0.10).sum())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", required=True, help="the held-out CPU's device.json")
    parser.add_argument("--db", required=True, help="a collection of the held-out CPU")
    parser.add_argument("--networks", required=True, help="a benchmarks/e2e.py --json")
    parser.add_argument("--ks", default="10,20")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from cdmpp.calibrate import choose_tasks, cdmpp_members, default_programs
    from cdmpp.device import device_vector
    from cdmpp.evaluate.metrics import mape, median_ape, noise_floor_ape
    from cdmpp.measure.database import load_database
    from cdmpp.model.registry import load_estimator, resolve_for_device
    from cdmpp.predict import predict_databases
    from cdmpp.programs.catalog import select

    device = resolve_for_device(args.device, args.model, lambda: None)
    model = load_estimator(args.model, for_device=device)
    records = load_database(args.db, strict=False).records
    with tempfile.TemporaryDirectory() as tmp:
        result = predict_databases(model, [args.db], store=Path(tmp))
    rows = [q for q in result.predictions if q.measured_latency_s is not None]
    y = np.array([q.measured_latency_s for q in rows])
    p = np.array([q.predicted_latency_s for q in rows])
    task = np.array([records[q.record_index].meta.get("task") for q in rows])
    default = np.array([records[q.record_index].is_default for q in rows])
    floor = noise_floor_ape([records[q.record_index].measurement.noise_rel for q in rows])

    with open(args.networks) as f:
        runs = json.load(f)
    if runs.get("device_id") != device.device_id:
        raise SystemExit(f"{args.networks} holds totals of device {runs.get('device_id')}, "
                         f"not {device.device_id}")
    first = runs["models"][0]
    predicted = np.array([r["by_model"][first]["predicted_s"] for r in runs["rows"]])
    measured = np.array([r["measured_s"] for r in runs["rows"]])
    zero = np.abs(predicted / measured - 1)

    candidates = [t for t in select(None, None) if t.name in set(task[default])]
    programs = default_programs(candidates, device.target).with_device(device_vector(device))
    embedder = cdmpp_members(model, args.model)[0]
    print(f"{args.model} for {device.device_id} ({args.db}: {len(y)} records, "
          f"{len(candidates)} tasks with a default program; noise floor {100 * floor:.2f}%)")
    print(f"zero-shot: per program MAPE {100 * mape(y, p):.1f}%, median APE "
          f"{100 * median_ape(y, p):.1f}%; networks ({first}) mean |error| "
          f"{100 * zero.mean():.1f}%, within 10% {(zero <= 0.10).sum()} of {len(zero)}")
    out = {"model": args.model, "device_id": device.device_id, "records": len(y),
           "noise_floor": floor, "zero_shot": {"mape": mape(y, p),
                                               "networks_mean": float(zero.mean()),
                                               "within_10": int((zero <= 0.10).sum())},
           "rescale": {}}
    for k in [int(k) for k in args.ks.split(",")]:
        kmeans = [rescaled(y, p, task, default, choose_tasks(embedder, programs, k, "kmeans", s),
                           predicted, measured) for s in range(args.seeds)]
        drawn = [rescaled(y, p, task, default, choose_tasks(embedder, programs, k, "random", s),
                          predicted, measured) for s in range(args.draws)]
        out["rescale"][k] = {"kmeans": kmeans, "random": drawn}
        for r in kmeans:
            print(f"k={k:<3} kmeans  x{r['factor']:.3f}: per program MAPE {100 * r['mape']:.1f}%, "
                  f"networks {100 * r['networks_mean']:.1f}%, {r['within_10']} of {len(zero)}")
        nets = [r["networks_mean"] for r in drawn]
        print(f"k={k:<3} random  {args.draws} draws: networks median {100 * np.median(nets):.1f}% "
              f"(range {100 * min(nets):.1f}-{100 * max(nets):.1f}), within 10% median "
              f"{np.median([r['within_10'] for r in drawn]):.0f} (range "
              f"{min(r['within_10'] for r in drawn)}-{max(r['within_10'] for r in drawn)}); "
              f"per program MAPE median {100 * np.median([r['mape'] for r in drawn]):.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
