"""`cdmpp calibrate --rescale` on a CPU left out of training, simulated with its own labels.

    python benchmarks/rescale.py --model default --device <zen5-2c>/device.json --db <zen5-2c> \
        --networks benchmarks/measured/8d19a00b08391ba3-untuned.json \
        [--ks 10,20] [--draws 20] [--seeds 3] [--neighbors 0,5]

`--model` was trained without the held-out CPU (or is fitted for another one); `--db` is a
collection of that CPU (its catalog tasks' default programs and sampled ones, e.g.
data/zen5-2c.tar.xz unpacked) and `--networks` the untuned totals measured there
(benchmarks/measured/, or a benchmarks/e2e.py --json; a network timed in several runs counts
as the mean of its runs). The networks are lowered here for this machine's target (their
untuned kernels are the same on every CPU measured so far) and predicted kernel by kernel for
the held-out CPU, each total the replay's: the kernels' calls times their predictions, plus
the rest of the prediction (per-call overhead, weights from memory), which no factor scales.

A rescale measures the default programs of k catalog tasks and multiplies every prediction by
the median measured / predicted over them; here the held-out CPU's own labels of those
programs stand in for the measurement, so the CPU need not be at hand. Tasks are chosen as
`cdmpp calibrate` chooses them: KMeans over the model's embeddings of every catalog default
program (seeds 0..--seeds-1), or at random (--draws draws). Per rescale: the factor, the per-program MAPE on the records of the tasks not
chosen, and the networks' mean |error| and count within 10%, beside zero-shot (no factor).

`--neighbors 0,5` (the default) scores each rescale twice: one factor (0), and each program's
own factor, the median over the 5 chosen default programs nearest it in the model's embedding
(`ScaledRegressor(neighbors=5)`, what `cdmpp calibrate --rescale` does since 2026-12-02).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np


def rescaled(labels, chosen, networks, measured_totals, neighbors: int) -> dict:
    """One rescale: factor(s) from the chosen tasks' default programs; scored per program on
    the other tasks' records, and on the networks (`network_kernels`)."""
    from cdmpp.evaluate.metrics import mape
    from cdmpp.model.scaled import Anchors, median_ratio

    y, p, task, default, z = labels
    cal = default & np.isin(task, list(chosen))
    factor = median_ratio(y[cal], p[cal])
    rest = ~np.isin(task, list(chosen))
    if neighbors:
        anchors = Anchors.of(z[cal], np.log(y[cal] / p[cal]))
        per_record = anchors.factors(z[rest], neighbors)
        totals = np.array([n["rest_s"] + n["calls"] @ (n["predicted_s"]
                                                       * anchors.factors(n["z"], neighbors))
                           for n in networks])
    else:
        per_record = factor
        totals = np.array([n["rest_s"] + factor * (n["calls"] @ n["predicted_s"])
                           for n in networks])
    errors = np.abs(totals / measured_totals - 1)
    return {"factor": factor, "mape": mape(y[rest], per_record * p[rest]),
            "networks_mean": float(errors.mean()), "within_10": int((errors <= 0.10).sum())}


def network_kernels(model, embedder, configs, target, for_device) -> list[dict]:
    """Each (network, batch) of `configs` lowered for `target` (untuned): its distinct
    kernels' predictions (`for_device` sets the programs' device) and embeddings, each one's
    calls per inference, and the rest of the predicted total (`rest_s`: no factor scales it)."""
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.predict import kernel_programs, predict_network
    from cdmpp.programs.network_kernels import network_module

    out = []
    for name, batch in configs:
        _, mod = network_module(name, batch)
        net = lower_network(mod, target, name=name, batch=batch)
        programs, kernel_row = kernel_programs(net.kernels, target)
        programs = for_device(programs)
        predicted = np.asarray(model.predict(programs), dtype=np.float64)
        total = predict_network(model, net)
        calls = np.zeros(len(programs))
        for k in total.kernels:
            if k.name in kernel_row:
                calls[kernel_row[k.name]] += k.calls
        out.append({"predicted_s": predicted, "z": embedder.embed(programs), "calls": calls,
                    "rest_s": total.predicted_s - calls @ predicted})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", required=True, help="the held-out CPU's device.json")
    parser.add_argument("--db", required=True, help="a collection of the held-out CPU")
    parser.add_argument("--networks", required=True,
                        help="the untuned totals measured on that CPU: benchmarks/measured/"
                             "<device id>-untuned.json, or a benchmarks/e2e.py --json")
    parser.add_argument("--ks", default="10,20")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--neighbors", default="0,5",
                        help="per-program factors from this many nearest chosen programs "
                             "(0: one factor), comma-separated")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from cdmpp.calibrate import choose_tasks, default_programs
    from cdmpp.device import device_vector
    from cdmpp.evaluate.metrics import mape, median_ape, noise_floor_ape
    from cdmpp.dataset.loader import default_program_mask, labeled
    from cdmpp.features.build import build_store
    from cdmpp.features.store import FeatureStore
    from cdmpp.model.members import embedder as placing_model
    from cdmpp.model.registry import load_estimator, resolve_for_device
    from cdmpp.model.retarget import takes_device
    from cdmpp.programs.catalog import select

    device = resolve_for_device(args.device, args.model, lambda: None)
    model = load_estimator(args.model)
    if takes_device(model):  # asked about the held-out CPU (else it predicts its own CPU's)
        model = load_estimator(args.model, for_device=device)

    def for_device(programs):
        return programs.with_device(device_vector(device)) if takes_device(model) else programs

    embedder = placing_model(model)  # as `cdmpp calibrate --rescale`: any model holding one
    with tempfile.TemporaryDirectory() as tmp:
        build_store([args.db], Path(tmp), progress=False)
        store = FeatureStore(tmp)
        samples = store.samples()
        rows = np.flatnonzero(np.isfinite(samples.column("latency_s").to_numpy()))
        data = labeled(store, samples, rows)
        # flagged as at prediction time (a default-program expert joins on them)
        flags = default_program_mask(samples, rows)
    records = for_device(replace(data.programs, default=flags))
    y = np.asarray(data.latency_s, dtype=np.float64)
    p = np.asarray(model.predict(records), dtype=np.float64)
    task, default = np.asarray(records.task), np.asarray(records.default, dtype=bool)
    floor = noise_floor_ape(data.noise_rel)
    labels = (y, p, task, default, embedder.embed(records))

    with open(args.networks) as f:
        runs = json.load(f)
    if runs.get("device_id") != device.device_id:
        raise SystemExit(f"{args.networks} holds totals of device {runs.get('device_id')}, "
                         f"not {device.device_id}")
    by_config = {}  # a network timed in several runs: the mean of its runs
    for r in runs["rows"]:
        by_config.setdefault((r["network"], r["batch"]), []).append(r["measured_s"])
    configs = sorted(by_config)
    measured = np.array([np.mean(by_config[c]) for c in configs])
    networks = network_kernels(model, embedder, configs, device.target, for_device)
    predicted = np.array([n["rest_s"] + n["calls"] @ n["predicted_s"] for n in networks])
    zero = np.abs(predicted / measured - 1)

    candidates = [t for t in select(None, None) if t.name in set(task[default])]
    programs = for_device(default_programs(candidates, device.target))
    print(f"{args.model} for {device.device_id} ({args.db}: {len(y)} records, "
          f"{len(candidates)} tasks with a default program; noise floor {100 * floor:.2f}%)")
    print(f"zero-shot: per program MAPE {100 * mape(y, p):.1f}%, median APE "
          f"{100 * median_ape(y, p):.1f}%; networks mean |error| "
          f"{100 * zero.mean():.1f}%, within 10% {(zero <= 0.10).sum()} of {len(zero)}")
    out = {"model": args.model, "device_id": device.device_id, "records": len(y),
           "noise_floor": floor, "zero_shot": {"mape": mape(y, p),
                                               "networks_mean": float(zero.mean()),
                                               "within_10": int((zero <= 0.10).sum())},
           "rescale": {}}
    for k in [int(k) for k in args.ks.split(",")]:
        kmeans = [choose_tasks(embedder, programs, k, "kmeans", s) for s in range(args.seeds)]
        drawn = [choose_tasks(embedder, programs, k, "random", s) for s in range(args.draws)]
        for nn in [int(n) for n in args.neighbors.split(",")]:
            how = f"k={k:<3} neighbors={nn}"
            km = [rescaled(labels, c, networks, measured, nn) for c in kmeans]
            rd = [rescaled(labels, c, networks, measured, nn) for c in drawn]
            out["rescale"][f"{k}/{nn}"] = {"kmeans": km, "random": rd}
            for r in km:
                print(f"{how} kmeans  x{r['factor']:.3f}: per program MAPE "
                      f"{100 * r['mape']:.1f}%, networks {100 * r['networks_mean']:.1f}%, "
                      f"{r['within_10']} of {len(zero)}")
            nets = [r["networks_mean"] for r in rd]
            print(f"{how} random  {args.draws} draws: networks median "
                  f"{100 * np.median(nets):.1f}% (range {100 * min(nets):.1f}-"
                  f"{100 * max(nets):.1f}), within 10% median "
                  f"{np.median([r['within_10'] for r in rd]):.0f} (range "
                  f"{min(r['within_10'] for r in rd)}-{max(r['within_10'] for r in rd)}); "
                  f"per program MAPE median {100 * np.median([r['mape'] for r in rd]):.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
