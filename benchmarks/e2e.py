"""End-to-end latency: predicted vs measured for every built-in network at batch 1 and 4.

    python benchmarks/e2e.py [--model MODEL ...] [--networks resnet18,...] [--batches 1,4]
                             [--tuning-db DIR] [--kernels] [--no-measure]
                             [--both-placements SECONDS] [--json OUT]
                             [--measured-from OUT ...]

Each network is imported (torch.export), fused as TVM's CPU pipeline does (untuned kernels, or
`--tuning-db`), predicted (kernel latencies from MODEL + dPRO-style replay with the calibrated
per-call overhead) and timed with the Relax VM (the collector's protocol: interleaved passes,
reference kernel, minimum). With `--kernels`, every kernel is also timed on its own, and the
replay of those timings is reported: its gap to the measured total is the replay's own error,
separate from the model's; each kernel is also stamped inside the network (the VM's instrument
hook), and the replay of those times (`replay(in net)`) tells how much of that gap is the
kernels running slower there than alone. Several `--model`s are all compared with the same
measurement; the first one fills the table's main columns, the others add an error column each.
With `--tuning-db`, the replay of the database's own timing of every kernel (`replay(db)`; no
model, no new run) is reported too, and how far each model's prediction is from it (`vs db`):
the model's error on the kernels alone, free of the run-to-run drift of a measured total.
A database timed on this device has its tuned kernels predicted as the fastest of the programs
it timed for each (`cdmpp.e2e.search`, as `cdmpp e2e` does); each model's total with the chosen
programs predicted on their own is in the `--json` rows (`chosen_programs_s`) and summed up
below the table.
A database timed on another device for which a shipped model is fitted is also anchored on its
timings (`E2EResult.with_anchor`): each model's anchored total is in the `--json` rows
(`anchored_s`), and its error against the measured total is summed up below the table.
`--no-measure` skips the runs (seconds per network instead of minutes). `--measured-from OUT`
skips them too and compares the predictions with the totals an earlier run's `--json OUT`
measured on this device (new models against one measurement; say when it was taken: the host
drifts over the day), or on a device a `--model` predicts for (the one it was fitted for, or
the one `NAME@DEVICE` asks about): another CPU's totals judged from here, the kernels lowered
for this machine, which for untuned networks gives the same kernels and features on the four
CPUs tried. It is repeatable and also takes the `--json` of `cdmpp e2e --measure`; a network
measured in several of them is compared with their mean. `benchmarks/measured/` keeps the
untuned totals measured on each CPU so far, so a new model is judged on one in minutes:

    python benchmarks/e2e.py --model zen3 --measured-from benchmarks/measured/7566cfb52e598ab7-untuned.json

A `--networks` entry
ending in `.onnx` is an ONNX file (`scripts/export_onnx.py` writes the built-in networks as
such), its open batch dimension bound to each batch.
A memory probe is timed before every pass: the host may move the threads between two placements
in which a network runs up to 28% apart (src/cdmpp/measure/placement.py). A network seen in one
placement waits up to `--both-placements` seconds for the other; the measured time is the lower,
and each placement's own time is reported beside it, with each model's error against it.

Long: untuned kernels are slow (ResNet-18 at batch 1 takes ~2 s per inference here, BERT-base
several seconds) and every network is run ~15 times. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def run_one(models: dict, name: str, batch: int, *, kernels: bool, tuning_db, device,
            measure: bool = True, both_placements_s: float = 0.0, source=None,
            search_db=None) -> dict:
    from cdmpp.e2e.kernels import database_latencies, lower_network
    from cdmpp.e2e.measure import measure_network
    from cdmpp.e2e.pipeline import anchor_predictions
    from cdmpp.e2e.predict import predict_network
    from cdmpp.programs.network_kernels import network_module

    t0 = time.perf_counter()
    _, mod = network_module(name, batch)  # a built-in network, or an ONNX file
    name = Path(name).name  # an ONNX file is shown as "resnet18.onnx", apart from "resnet18"
    net = lower_network(mod, device.target, tuning_db=tuning_db, name=name, batch=batch)
    t1 = time.perf_counter()
    # `search_db`: the database's path when it was timed here: each tuned kernel predicted as
    # the fastest of the programs it timed for it, as `cdmpp e2e` does (e2e.search)
    results = {m: predict_network(est, net, device=device, search_db=search_db)
               for m, est in models.items()}
    if tuning_db is not None:
        recorded = database_latencies(net)
        results = {m: r.with_database(recorded) for m, r in results.items()}
        # a database timed on another device (`source`: opened once, as a Database object)
        anchor = anchor_predictions(net, device, timed_on=source)
        if anchor is not None:
            results = {m: r.with_anchor(anchor[1], anchor[0]) for m, r in results.items()}
    t2 = time.perf_counter()
    measurement = (measure_network(net, device=device, kernels=kernels,
                                   both_placements_s=both_placements_s) if measure else None)
    if measurement is not None:
        results = {m: r.with_measurement(measurement) for m, r in results.items()}
    result = next(iter(results.values()))
    error = result.error_rel
    return {"network": name, "batch": batch, "predicted_s": result.predicted_s,
            "measured_s": result.measured_s,
            "abs_error_rel": None if error is None else abs(error), "error_rel": error,
            "measured_kernels_replay_s": result.measured_kernels_replay_s,
            "measured_kernels_median_replay_s": result.measured_kernels_median_replay_s,
            # the kernels stamped inside the network (with --kernels), replayed
            "in_network_replay_s": result.in_network_replay_s,
            "database_replay_s": result.database_replay_s,
            "kernels": len(net.kernels), "calls": len(result.graph),
            "import_lower_s": round(t1 - t0, 2),
            "prediction_s": round(result.timings_s["prediction_s"], 3),
            "measure_s": round(time.perf_counter() - t2, 1),
            "noise_rel": None if measurement is None else measurement.measurement.noise_rel,
            "measured_at": None if measurement is None
            else f"{measurement.started_utc} - {measurement.ended_utc}",
            "host_slowdown": None if measurement is None else measurement.host_slowdown,
            # the network's best time in each placement of the threads (measure.placement)
            "by_placement": {} if measurement is None else measurement.by_placement(),
            "by_model": {m: {"predicted_s": r.predicted_s, "error_rel": r.error_rel,
                             "vs_database_rel": None if r.database_replay_s is None
                             else r.predicted_s / r.database_replay_s - 1,
                             # anchored on the database's timings (`E2EResult.with_anchor`)
                             "anchored_s": r.anchored_replay_s, "anchor_model": r.anchor_model,
                             # the programs the database chose, each predicted on its own
                             "chosen_programs_s": r.chosen_programs_replay_s}
                         for m, r in results.items()}}


# what a measurement contributes to a row, taken over by --measured-from
MEASURED_KEYS = ("measured_s", "measured_kernels_replay_s", "measured_kernels_median_replay_s",
                 "in_network_replay_s", "noise_rel", "host_slowdown", "by_placement",
                 "measured_at", "measured_runs")


def with_stored_measurement(row: dict, stored: dict) -> dict:
    """`row` (predicted, not measured) with the measurement of `stored`, the same network and
    batch in an earlier run's --json: each model's error against that measured total."""
    if (row["network"], row["batch"]) != (stored["network"], stored["batch"]):
        raise ValueError(f"{row['network']} batch {row['batch']} against a measurement of "
                         f"{stored['network']} batch {stored['batch']}")
    measured = stored["measured_s"]
    if measured is None:
        raise ValueError(f"{row['network']} batch {row['batch']}: the stored run did not "
                         "measure it")
    by_model = {m: {**p, "error_rel": p["predicted_s"] / measured - 1}
                for m, p in row["by_model"].items()}
    error = next(iter(by_model.values()))["error_rel"]
    return {**row, **{k: stored.get(k) for k in MEASURED_KEYS}, "by_model": by_model,
            "error_rel": error, "abs_error_rel": abs(error)}


def _rows_of(path: str, stored: dict) -> list[dict]:
    """The measured rows of one file: an earlier run's --json (`rows`), or the --json of one
    `cdmpp e2e --measure` (one network)."""
    if isinstance(stored, dict) and {"device_id", "rows"} <= set(stored):
        return stored["rows"]
    if isinstance(stored, dict) and {"network", "batch", "measured_s", "measurement"} <= set(stored):
        if any(k.get("tuned") for k in stored.get("kernels", [])):
            raise SystemExit(f"{path}: a `cdmpp e2e --json` of a tuned network does not say "
                             "which tuning database; use benchmarks/e2e.py --json runs for those")
        m = stored["measurement"] or {}
        start, end = m.get("started_utc"), m.get("ended_utc")
        return [{"network": stored["network"], "batch": stored["batch"],
                 "measured_s": stored["measured_s"],
                 "measured_at": f"{start} - {end}" if start and end else None,
                 "measured_kernels_replay_s": stored.get("measured_kernels_replay_s"),
                 "measured_kernels_median_replay_s":
                     stored.get("measured_kernels_median_replay_s"),
                 "in_network_replay_s": stored.get("in_network_replay_s"),
                 "noise_rel": None, "host_slowdown": m.get("host_slowdown"),
                 "by_placement": m.get("by_placement") or {}}]
    raise SystemExit(f"{path} is not the --json of an earlier benchmarks/e2e.py run (no "
                     "device_id and rows) nor of `cdmpp e2e --measure`")


def _tuning_db_of(stored: dict):
    return stored.get("tuning_db") if "rows" in stored else None


def combined(runs: list[dict]) -> dict:
    """One stored row from the runs that measured a network: their mean total (the host
    drifts from run to run; each run is kept in `measured_runs`), and the other measured
    figures averaged where every run has them."""
    first = runs[0]
    row = {"network": first["network"], "batch": first["batch"],
           "measured_s": sum(r["measured_s"] for r in runs) / len(runs),
           "measured_runs": [{"measured_s": r["measured_s"], "measured_at": r.get("measured_at"),
                              "source": r.get("source", r.get("_file"))} for r in runs]}
    for key in MEASURED_KEYS:
        if key in row or key == "by_placement":
            continue
        values = [r.get(key) for r in runs]
        numeric = all(isinstance(v, (int, float)) for v in values)
        row[key] = (sum(values) / len(values) if numeric and len(runs) > 1 else
                    first.get(key) if len(runs) == 1 else None)
    row["by_placement"] = (first.get("by_placement") or {}) if len(runs) == 1 else {}
    return row


def stored_measurements(paths, device_ids, tuning_db) -> dict:
    """(network, batch) -> one stored row, from earlier runs' --json files (a path or a list
    of them; `cdmpp e2e --measure --json` outputs too), each checked to be of one of
    `device_ids` (a device id or a set: this machine, and the devices the models predict for)
    and of the same tuning database, all of one device. A network measured in several runs
    gets their mean (`combined`)."""
    allowed = {device_ids} if isinstance(device_ids, str) else set(device_ids)
    runs: dict[tuple[str, int], list[dict]] = {}
    seen: dict[str, str] = {}  # device id -> the first file of it
    for path in [paths] if isinstance(paths, str) else paths:
        try:
            with open(path) as f:
                stored = json.load(f)
        except (OSError, ValueError) as e:
            raise SystemExit(f"{path}: cannot read it ({e})") from None
        rows = _rows_of(path, stored)
        if stored["device_id"] not in allowed:
            raise SystemExit(f"{path} was measured on device {stored['device_id']}, this is "
                             f"{' or '.join(sorted(allowed))} (a model fitted for that device, or "
                             f"asked about it: NAME@{stored['device_id']} or NAME@its "
                             "device.json, may be compared with it)")
        seen.setdefault(stored["device_id"], path)
        if len(seen) > 1:  # a mean over two devices' totals would be no device's
            first, first_path = next(iter(seen.items()))
            raise SystemExit(f"{path} was measured on device {stored['device_id']}, "
                             f"{first_path} on {first}: one device at a time")
        if _tuning_db_of(stored) != tuning_db:
            raise SystemExit(f"{path} was measured with --tuning-db {_tuning_db_of(stored)}, "
                             f"not {tuning_db}")
        for r in rows:
            if r["measured_s"] is not None:
                runs.setdefault((r["network"], r["batch"]), []).append({**r, "_file": path})
    return {key: combined(rs) for key, rs in runs.items()}


def measured_device(paths) -> str:
    """The device id of the first stored run (`stored_measurements` checked they agree)."""
    path = paths if isinstance(paths, str) else paths[0]
    with open(path) as f:
        return json.load(f)["device_id"]


def _ms(x) -> str:
    return "" if x is None else f"{1e3 * x:.2f}"


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def table(rows) -> str:
    others = list(rows[0]["by_model"])[1:] if rows else []
    # the other models' column: error vs the measured total, or vs the database without one,
    # or their predicted total when there is neither (--no-measure, no --tuning-db)
    if any(r["measured_s"] is not None for r in rows):
        key, show, unit = "error_rel", _pct, ""
    elif any(r["database_replay_s"] is not None for r in rows):
        key, show, unit = "vs_database_rel", _pct, ""
    else:
        key, show, unit = "predicted_s", _ms, " ms"
    head = (f"{'network':<14} {'batch':>5} {'predicted ms':>13} {'measured ms':>12} "
            f"{'error':>8} {'replay(meas) ms':>16} {'replay(in net)':>14} "
            f"{'replay(db) ms':>14} {'vs db':>8} "
            f"{'pred time s':>11}" + "".join(f" {(m + unit)[-12:]:>12}" for m in others))
    lines = [head, "-" * len(head)]
    for r in rows:
        first = next(iter(r["by_model"].values()))
        lines.append(f"{r['network']:<14} {r['batch']:>5} {_ms(r['predicted_s']):>13} "
                     f"{_ms(r['measured_s']):>12} {_pct(r['error_rel']):>8} "
                     f"{_ms(r['measured_kernels_replay_s']):>16} "
                     f"{_ms(r['in_network_replay_s']):>14} "
                     f"{_ms(r['database_replay_s']):>14} {_pct(first['vs_database_rel']):>8} "
                     f"{r['prediction_s']:>11.3f}"
                     + "".join(f" {show(r['by_model'][m][key]):>12}" for m in others))
    if rows:
        lines.append("-" * len(head))
        for m in list(rows[0]["by_model"]):
            for against, what in (("error_rel", "vs measured"),
                                  ("vs_database_rel", "vs database")):
                errors = [r["by_model"][m][against] for r in rows
                          if r["by_model"][m][against] is not None]
                if errors:
                    lines.append(f"{m} {what}: {_summary(errors)}")
            chosen = [r["by_model"][m]["chosen_programs_s"] / r["measured_s"] - 1 for r in rows
                      if r["by_model"][m].get("chosen_programs_s") and r["measured_s"]]
            if chosen:
                lines.append(f"{m} with the chosen programs predicted on their own, not as the "
                             f"fastest of their search, vs measured: {_summary(chosen)}")
            anchored = [r["by_model"][m]["anchored_s"] / r["measured_s"] - 1 for r in rows
                        if r["by_model"][m].get("anchored_s") and r["measured_s"]]
            if anchored:
                source = rows[0]["by_model"][m]["anchor_model"]
                lines.append(f"{m} anchored on the database's timings ({source} for its device) "
                             f"vs measured: {_summary(anchored)}")
            for state in sorted({s for r in rows for s in r["by_placement"]}):
                errors = [r["by_model"][m]["predicted_s"] / r["by_placement"][state] - 1
                          for r in rows if state in r["by_placement"]]
                lines.append(f"{m} vs the {state} placement alone: {_summary(errors)}")
    return "\n".join(lines)


def _summary(errors) -> str:
    """Mean and worst |error| of relative errors, and how many are within 10%."""
    errors = [abs(e) for e in errors]
    return (f"mean |error| {100 * sum(errors) / len(errors):.1f}%, worst {100 * max(errors):.1f}% "
            f"over {len(errors)} networks, within 10% {sum(e <= 0.10 for e in errors)} of "
            f"{len(errors)}")


def _measured_how(row: dict) -> str:
    """' (reference kernel x1.05 its best ...; placements)' for a run, or where the stored
    totals come from and when they were taken."""
    notes = []
    if row.get("host_slowdown") is not None:
        notes.append(f"reference kernel x{row['host_slowdown']:.2f} its best on this device")
    notes += [f"{s} {_ms(t)} ms" for s, t in row["by_placement"].items()]
    runs = row.get("measured_runs") or []
    if len(runs) > 1:
        totals = [r["measured_s"] for r in runs]
        notes.append(f"mean of {len(runs)} stored runs, {_ms(min(totals))}-{_ms(max(totals))} ms")
    elif runs:
        notes.append(f"stored: {runs[0]['measured_at'] or 'time not recorded'}, "
                     f"{runs[0]['source']}")
    return f" ({'; '.join(notes)})" if notes else ""


def model_and_device(name: str) -> tuple:
    """(model spec, --for-device value or None) of a --model value: "zen3" predicts for the
    device the model was fitted for; "zen3@local" for this machine (zero-shot if the model
    never saw it), "zen3@<device id>" for a device it was trained on, "zen3@<device.json>" for
    that device (`cdmpp.cli.resolve_for_device`)."""
    import re

    spec, at, device = name.rpartition("@")
    if at and (device == "local" or re.fullmatch(r"[0-9a-f]{16}", device)
               or Path(device).exists()):
        return spec, device
    return name, None


def main() -> int:
    from cdmpp.e2e.networks import BENCHMARK_NETWORKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=None,
                        help="a model name or directory (repeatable; default: default); "
                             "NAME@local predicts for this machine's device (zero-shot when "
                             "the model never saw it), NAME@ID for device ID (one the "
                             "multi-device model was trained on), NAME@DEVICE_JSON for that one")
    parser.add_argument("--networks", default=None,
                        help="comma-separated (default: the five built-ins; with "
                             "--measured-from, every network those runs measured)")
    parser.add_argument("--batches", default=None, help="comma-separated (default: 1,4)")
    parser.add_argument("--tuning-db", default=None)
    parser.add_argument("--kernels", action="store_true", help="also time every kernel alone")
    parser.add_argument("--no-measure", action="store_true",
                        help="predict only (with --tuning-db: against the replay of the "
                             "database's own timings), no run of the networks")
    parser.add_argument("--both-placements", type=float, default=120.0, metavar="SECONDS",
                        help="a network timed in one placement of the threads, on a device "
                             "known to have two, waits this long for the other "
                             "(src/cdmpp/measure/placement.py; 0: never)")
    parser.add_argument("--json", default=None, metavar="OUT")
    parser.add_argument("--measured-from", action="append", default=None, metavar="OUT",
                        help="no runs: compare with the totals an earlier --json OUT measured "
                             "(repeatable; also a `cdmpp e2e --measure --json` file; the "
                             "committed ones: benchmarks/measured/)")
    args = parser.parse_args()

    import torch

    from cdmpp.device import local_device
    from cdmpp.e2e.kernels import read_tuning_database
    from cdmpp.e2e.pipeline import database_device, timed_here
    from cdmpp.measure.collect import set_threads
    from cdmpp.model.registry import (fitted_device_id, for_device_id, load_estimator,
                                      resolve_for_device)

    torch.set_num_threads(1)  # torch only exports; the cores are TVM's
    # once for all networks (~5 s each open); the device its records were timed on
    tuning_db, timed_on = read_tuning_database(args.tuning_db)
    source = database_device(args.tuning_db, timed_on)
    device = local_device()
    searched = args.tuning_db is not None and timed_here(timed_on, device)
    names = args.model or ["default"]
    models, asked = {}, {}
    for m in names:
        spec, for_device = model_and_device(m)
        resolved = resolve_for_device(for_device, spec, lambda: device)
        models[m] = load_estimator(spec, for_device=resolved)
        # the device it predicts for: the one asked, else the one it was fitted for
        asked[m] = for_device_id(resolved) or fitted_device_id(spec)
    set_threads(device.threads)
    stored = (None if args.measured_from is None else
              stored_measurements(args.measured_from,
                                  {device.device_id, *filter(None, asked.values())},
                                  args.tuning_db))
    measured_on = device.device_id if stored is None else measured_device(args.measured_from)
    if measured_on != device.device_id:
        # another CPU's totals: the kernels are lowered here, for this machine's target, and
        # replayed with this machine's per-call overhead (docs/cross_device.md, "Every CPU
        # left out in turn": the untuned kernels' TIR and features are the same for the four)
        blind = [m for m in names if asked[m] != measured_on]
        print(f"measured on device {measured_on}, not this machine ({device.device_id}): "
              f"kernels lowered for {device.target.get('mcpu')}, this machine's per-call "
              "overhead" + (f"; {', '.join(blind)}: predicting for another device" if blind
                            else ""), file=sys.stderr, flush=True)
    batches = None if args.batches is None else [int(b) for b in args.batches.split(",")]
    if args.networks is None and stored is not None:  # every network the stored runs measured
        configs = [key for key in stored if batches is None or key[1] in batches]
    else:
        networks = (args.networks or ",".join(BENCHMARK_NETWORKS)).split(",")
        configs = [(n, b) for n in networks for b in batches or (1, 4)]
    if stored is not None:  # before hours of lowering and predicting, not after
        missing = [f"{n} batch {b}" for n, b in configs if (Path(n).name, b) not in stored]
        if missing:
            raise SystemExit(f"{', '.join(args.measured_from)}: no measurement of "
                             f"{', '.join(missing)}")
    rows = []

    def save_json() -> None:
        if args.json:  # after every network, atomically: a stopped run keeps what it timed
            from cdmpp.atomic import write_text_atomic

            # device_id: the device of the measured totals (a later --measured-from reads it)
            write_text_atomic(args.json, json.dumps(
                {"device_id": measured_on, "lowered_on": device.device_id, "models": names,
                 "tuning_db": args.tuning_db, "rows": rows}, indent=1))

    for name, batch in configs:
        rows.append(run_one(models, name, batch, kernels=args.kernels,
                            tuning_db=tuning_db, source=source, device=device,
                            search_db=args.tuning_db if searched else None,
                            measure=not (args.no_measure or stored is not None),
                            both_placements_s=args.both_placements))
        if stored is not None:
            rows[-1] = with_stored_measurement(rows[-1], stored[(rows[-1]["network"], batch)])
        r = rows[-1]
        measured = ("not measured" if r["measured_s"] is None else
                    f"measured {_ms(r['measured_s'])} ms{_measured_how(r)}")
        print(f"{name} batch {batch}: {measured}; predicted "
              + ", ".join(f"{m} {_ms(p['predicted_s'])} ms"
                          + (f" ({_pct(p['error_rel'])})" if p["error_rel"] is not None else "")
                          for m, p in r["by_model"].items()), file=sys.stderr, flush=True)
        save_json()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
