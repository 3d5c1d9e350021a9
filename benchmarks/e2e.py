"""End-to-end latency: predicted vs measured for every built-in network at batch 1 and 4.

    python benchmarks/e2e.py [--model MODEL ...] [--networks resnet18,...] [--batches 1,4]
                             [--tuning-db DIR] [--kernels] [--json OUT]

Each network is imported (torch.export), fused as TVM's CPU pipeline does (untuned kernels, or
`--tuning-db`), predicted (kernel latencies from MODEL + dPRO-style replay with the calibrated
per-call overhead) and timed with the Relax VM (the collector's protocol: interleaved passes,
reference kernel, minimum). With `--kernels`, every kernel is also timed on its own, and the
replay of those timings is reported: its gap to the measured total is the replay's own error,
separate from the model's. Several `--model`s are all compared with the same measurement; the
first one fills the table's main columns, the others add an error column each.

Long: untuned kernels are slow (ResNet-18 at batch 1 takes ~2 s per inference here, BERT-base
several seconds) and every network is run ~15 times. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def run_one(models: dict, name: str, batch: int, *, kernels: bool, tuning_db, device) -> dict:
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.measure import measure_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.predict import predict_network

    t0 = time.perf_counter()
    net = lower_network(import_network(name, batch), device.target, tuning_db=tuning_db,
                        name=name, batch=batch)
    t1 = time.perf_counter()
    results = {m: predict_network(est, net, device=device) for m, est in models.items()}
    t2 = time.perf_counter()
    measurement = measure_network(net, device=device, kernels=kernels)
    results = {m: r.with_measurement(measurement) for m, r in results.items()}
    result = next(iter(results.values()))
    return {"network": name, "batch": batch, "predicted_s": result.predicted_s,
            "measured_s": result.measured_s, "abs_error_rel": abs(result.error_rel),
            "error_rel": result.error_rel,
            "measured_kernels_replay_s": result.measured_kernels_replay_s,
            "kernels": len(net.kernels), "calls": len(result.graph),
            "import_lower_s": round(t1 - t0, 2),
            "prediction_s": round(result.timings_s["prediction_s"], 3),
            "measure_s": round(time.perf_counter() - t2, 1),
            "noise_rel": result.measurement.measurement.noise_rel,
            "host_slowdown": measurement.host_slowdown,
            "by_model": {m: {"predicted_s": r.predicted_s, "error_rel": r.error_rel}
                         for m, r in results.items()}}


def table(rows) -> str:
    others = list(rows[0]["by_model"])[1:] if rows else []
    head = (f"{'network':<14} {'batch':>5} {'predicted ms':>13} {'measured ms':>12} "
            f"{'error':>8} {'replay(meas) ms':>16} {'pred time s':>11}"
            + "".join(f" {m[-12:]:>12}" for m in others))
    lines = [head, "-" * len(head)]
    for r in rows:
        replayed = r["measured_kernels_replay_s"]
        lines.append(f"{r['network']:<14} {r['batch']:>5} {1e3 * r['predicted_s']:>13.2f} "
                     f"{1e3 * r['measured_s']:>12.2f} {100 * r['error_rel']:>+7.1f}% "
                     f"{'' if replayed is None else f'{1e3 * replayed:.2f}':>16} "
                     f"{r['prediction_s']:>11.3f}"
                     + "".join(f" {100 * r['by_model'][m]['error_rel']:>+11.1f}%"
                               for m in others))
    if rows:
        lines.append("-" * len(head))
        for m in list(rows[0]["by_model"]):
            mean = sum(abs(r["by_model"][m]["error_rel"]) for r in rows) / len(rows)
            worst = max(abs(r["by_model"][m]["error_rel"]) for r in rows)
            lines.append(f"{m}: mean |error| {100 * mean:.1f}%, worst {100 * worst:.1f}% over "
                         f"{len(rows)} networks")
    return "\n".join(lines)


def main() -> int:
    from cdmpp.e2e.networks import BENCHMARK_NETWORKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a model name or directory (repeatable; default: default)")
    parser.add_argument("--networks", default=",".join(BENCHMARK_NETWORKS))
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--tuning-db", default=None)
    parser.add_argument("--kernels", action="store_true", help="also time every kernel alone")
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args()

    import torch

    from cdmpp.device import local_device
    from cdmpp.measure.collect import set_threads
    from cdmpp.model.registry import load_estimator

    torch.set_num_threads(1)  # torch only exports; the cores are TVM's
    names = args.model or ["default"]
    models = {m: load_estimator(m) for m in names}
    device = local_device()
    set_threads(device.threads)
    rows = []
    for name in args.networks.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            rows.append(run_one(models, name, batch, kernels=args.kernels,
                                tuning_db=args.tuning_db, device=device))
            r = rows[-1]
            print(f"{name} batch {batch}: measured {1e3 * r['measured_s']:.2f} ms (reference "
                  f"kernel x{r['host_slowdown']:.2f} its best on this device); predicted "
                  + ", ".join(f"{m} {1e3 * p['predicted_s']:.2f} ms ({100 * p['error_rel']:+.1f}%)"
                              for m, p in r["by_model"].items()), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device_id": device.device_id, "models": names,
                       "tuning_db": args.tuning_db, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
