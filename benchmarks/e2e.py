"""End-to-end latency: predicted vs measured for every built-in network at batch 1 and 4.

    python benchmarks/e2e.py --model MODEL [--networks resnet18,...] [--batches 1,4]
                             [--kernels] [--json OUT]

Each network is imported (torch.export), fused as TVM's CPU pipeline does (untuned kernels, or
`--tuning-db`), predicted (kernel latencies from MODEL + dPRO-style replay with the calibrated
per-call overhead) and timed with the Relax VM (the collector's protocol: interleaved passes,
reference kernel, minimum). With `--kernels`, every kernel is also timed on its own, and the
replay of those timings is reported: its gap to the measured total is the replay's own error,
separate from the model's.

Long: untuned kernels are slow (ResNet-18 at batch 1 takes ~2 s per inference here, BERT-base
several seconds) and every network is run ~15 times. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def run_one(model, name: str, batch: int, *, kernels: bool, tuning_db, device) -> dict:
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.measure import measure_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.predict import predict_network

    t0 = time.perf_counter()
    net = lower_network(import_network(name, batch), device.target, tuning_db=tuning_db,
                        name=name, batch=batch)
    t1 = time.perf_counter()
    result = predict_network(model, net, device=device)
    result = result.with_measurement(measure_network(net, device=device, kernels=kernels))
    t2 = time.perf_counter()
    return {"network": name, "batch": batch, "predicted_s": result.predicted_s,
            "measured_s": result.measured_s, "abs_error_rel": abs(result.error_rel),
            "error_rel": result.error_rel,
            "measured_kernels_replay_s": result.measured_kernels_replay_s,
            "kernels": len(net.kernels), "calls": len(result.graph),
            "import_lower_s": round(t1 - t0, 2),
            "prediction_s": round(result.timings_s["prediction_s"], 3),
            "measure_s": round(t2 - t1, 1), "noise_rel": result.measurement.measurement.noise_rel}


def table(rows) -> str:
    head = (f"{'network':<14} {'batch':>5} {'predicted ms':>13} {'measured ms':>12} "
            f"{'|error|':>8} {'replay(meas) ms':>16} {'pred time s':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        replayed = r["measured_kernels_replay_s"]
        lines.append(f"{r['network']:<14} {r['batch']:>5} {1e3 * r['predicted_s']:>13.2f} "
                     f"{1e3 * r['measured_s']:>12.2f} {100 * r['abs_error_rel']:>7.1f}% "
                     f"{'' if replayed is None else f'{1e3 * replayed:.2f}':>16} "
                     f"{r['prediction_s']:>11.3f}")
    if rows:
        mean = sum(r["abs_error_rel"] for r in rows) / len(rows)
        lines.append("-" * len(head))
        lines.append(f"mean |error| {100 * mean:.1f}% over {len(rows)} networks")
    return "\n".join(lines)


def main() -> int:
    from cdmpp.e2e.networks import BENCHMARK_NETWORKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
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
    model = load_estimator(args.model)
    device = local_device()
    set_threads(device.threads)
    rows = []
    for name in args.networks.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            rows.append(run_one(model, name, batch, kernels=args.kernels,
                                tuning_db=args.tuning_db, device=device))
            r = rows[-1]
            print(f"{name} batch {batch}: predicted {1e3 * r['predicted_s']:.2f} ms, measured "
                  f"{1e3 * r['measured_s']:.2f} ms ({100 * r['error_rel']:+.1f}%)",
                  file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device_id": device.device_id, "model": args.model, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
