"""`cdmpp db`: check TVM JSON databases and summarize what they hold."""

from __future__ import annotations


SHOWN_NAMES = 8  # a collection has hundreds of workloads: name a few, count the rest


def _names(workloads) -> str:
    names = sorted({w.name or w.shash for w in workloads})
    more = len(names) - SHOWN_NAMES
    return ",".join(names[:SHOWN_NAMES]) + (f", ... {more} more" if more > 0 else "")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("db", help="check databases: counts, bad lines, noise floor")
    p.add_argument("paths", nargs="+", help="database directories (or folders holding them)")
    p.add_argument("--strict", action="store_true", help="stop at the first bad line")
    p.set_defaults(run=run)


def device_line(path, db) -> str:
    """Which device the database was timed on, as far as it says."""
    import json

    from cdmpp.device import load_device, short_name

    device = load_device(path)  # a corrupt device.json is a clear error naming the file
    if device is not None:
        return f"{device.device_id} ({short_name(device)})"
    targets = sorted({json.dumps(r.target, sort_keys=True) for r in db.records})
    shown = "; ".join(targets) or "none"
    return (f"no device.json; record targets: {shown}. The threads it was timed with are "
            "unknown: unless the timing process called runtime.config_threadpool, TVM used its "
            "default thread pool, half the hardware threads (docs/measurement.md)")


def run(args) -> int:
    from cdmpp.measure.database import load_database, unique_databases
    from cdmpp.measure.noise import noise_floor, retest_noise, retested_ratios
    from cdmpp.measure.timing import Protocol

    total, measurements, metas, skipped = 0, [], [], 0
    for path in unique_databases(args.paths):
        db = load_database(path, strict=args.strict)
        total += len(db.records)
        skipped += len(db.skipped)
        measurements += [r.measurement for r in db.records]
        metas += [r.meta for r in db.records]
        print(f"{path}: {len(db.workloads)} workloads ({_names(db.workloads)}), "
              f"{len(db.records)} records")
        print(f"  device: {device_line(path, db)}")
        for line in db.skipped:
            print(f"  skipped {line}")
    print(f"total: {total} records, {skipped} bad lines skipped")
    print(noise_floor(measurements))
    rel = Protocol.ref_slow_rel
    clean = [m.clean_passes(rel) for m in measurements]
    known = [c for c in clean if c is not None]
    if known:
        disturbed = sum(c == 0 for c in known)
        print(f"{disturbed} of {len(known)} records with reference-kernel timings have no pass "
              f"on an undisturbed machine (reference within {100 * rel:.0f}% of its best)"
              + ("; re-time them: cdmpp collect --out DIR --remeasure-disturbed"
                 if disturbed else ""))
    ratios = retested_ratios(metas)
    if ratios:
        r = retest_noise(ratios)
        print(f"test-retest noise of {r['n']} records timed again at random (collect --retest): "
              f"median {100 * r['median']:.1f}%, mean {100 * r['mean']:.1f}%, "
              f"{100 * r['within_10']:.0f}% within 10%")
    return 0
