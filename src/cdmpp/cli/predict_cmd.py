"""`cdmpp predict`: predicted latency of every program in TVM JSON databases, as CSV."""

from __future__ import annotations

import sys

from cdmpp.cli import add_for_device_argument, model_help, non_negative_int, positive_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "predict", help="predict the latency of every record of TVM JSON databases",
        description="Predict every record of the given TVM JSON databases (any database, "
                    "including one written by TVM's own tuner) and write one CSV row per "
                    "record: db,record_index,workload_hash,predicted_latency_s,"
                    "measured_latency_s. Lines that are not records, or whose features cannot "
                    "be extracted, are reported on stderr and skipped.")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help=model_help("the shipped cdmpp model fitted for "
                                   "the databases' one device, else default"))
    add_for_device_argument(p, "the device the model was fitted for")
    p.add_argument("--db", action="append", default=None, metavar="DIR",
                   help="a database directory, or a folder of them (repeatable; default: the "
                        "shipped sample data, held out from the shipped models' training)")
    p.add_argument("--out", required=True, metavar="CSV", help="where to write the predictions")
    p.add_argument("--store", default=None, metavar="CACHE",
                   help="feature store used as a cache (default: $XDG_CACHE_HOME/cdmpp/features "
                        "or ~/.cache/cdmpp/features)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="feature-extraction processes (default: all cores)")
    p.add_argument("--show", type=non_negative_int, default=20, metavar="N",
                   help="print the first N predictions beside their measurements (0: none)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run)


def run(args) -> int:
    from cdmpp.model.registry import for_device_id, load_estimator, resolve_for_device
    from cdmpp.predict import predict_databases, sample_databases, write_predictions_csv

    dbs = args.db or sample_databases()
    devices = database_devices(dbs)
    spec = args.model
    if spec is None:
        spec = model_for(devices)
        print(f"model: {spec} (shipped)", file=sys.stderr)
    target = resolve_for_device(args.for_device, spec, _local_device)
    # before any extraction: a bad --model or --for-device fails fast
    model = load_estimator(spec, for_device=target)
    target_id = for_device_id(target)
    notes = (device_notes(spec, devices) if target is None else
             [f"note: predicting for device {target_id} (--for-device), not the "
              f"databases' {d}" for d in devices if d != target_id])
    for note in notes:
        print(note, file=sys.stderr)
    result = predict_databases(model, dbs, store=args.store, workers=args.workers,
                               progress=not args.no_progress and sys.stderr.isatty())
    for skipped in result.skipped:
        print(f"skipped {skipped}", file=sys.stderr)
    path = write_predictions_csv(result, args.out)
    if args.show:
        print(result.table(args.show))
    print(result.summary())
    print(f"wrote {path}")
    return 0


def _local_device():
    from cdmpp.device import local_device

    return local_device()


def database_devices(dbs) -> dict:
    """device id -> Device of every database under `dbs` that has a device.json."""
    from cdmpp.device import load_device
    from cdmpp.predict import resolve_databases

    devices = {}
    for _, path in resolve_databases(dbs):
        device = load_device(path)
        if device is not None:
            devices.setdefault(device.device_id, device)
    return devices


def model_for(devices: dict) -> str:
    """The shipped model for the databases' device (`database_devices`) when they share one,
    else "default"."""
    from cdmpp.model.registry import for_device

    return for_device(next(iter(devices.values()))) if len(devices) == 1 else "default"


def device_notes(model, devices: dict) -> list[str]:
    """A warning per device of the databases (`database_devices`) that `model` was not
    fitted for."""
    from cdmpp.model.registry import device_mismatch

    notes = (device_mismatch(model, d) for d in devices.values())
    return [n for n in notes if n]
