"""`cdmpp features` and `cdmpp split`: the feature store and its saved splits."""

from __future__ import annotations

from cdmpp.cli import positive_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "features", help="extract compact-AST features of databases into a feature store",
        description="Featurize every record of the given TVM JSON databases into the store at "
                    "--out. Incremental: programs already in the store are not extracted again.")
    p.add_argument("--db", action="append", required=True, metavar="DIR",
                   help="a database directory, or a folder of them (repeatable)")
    p.add_argument("--out", required=True, metavar="CACHE", help="feature store directory")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes (default: all cores)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run_features)

    s = subparsers.add_parser(
        "split", help="make and save a train/test split of a feature store",
        description="Save a split with the store, and the feature/target normalizers fitted on "
                    "its training side only.")
    s.add_argument("--store", required=True, metavar="CACHE")
    s.add_argument("--split", required=True,
                   help="random | by-task | by-network:NAME,... | by-device:ID,...")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(run=run_split)


def run_features(args) -> int:
    from cdmpp.features.build import build_store

    report = build_store(args.db, args.out, workers=args.workers, progress=not args.no_progress)
    print(report)
    for failure in report.failures[:20]:
        where = f"record {failure['record_index']}" if failure["record_index"] is not None \
            else f"line {failure['line']}"
        print(f"  {failure['db']} {where}: {failure['reason']}")
    if len(report.failures) > 20:
        print(f"  ... {len(report.failures) - 20} more in {args.out}/failures.jsonl")
    return 0


def run_split(args) -> int:
    from cdmpp.dataset.normalize import fit_on_split
    from cdmpp.dataset.splits import make_split
    from cdmpp.features.store import FeatureStore

    store = FeatureStore(args.store)
    samples = store.samples()
    if not samples.num_rows:
        raise FileNotFoundError(f"{args.store} is not a feature store with records (no "
                                "samples.parquet): build one with `cdmpp features --db ... "
                                f"--out {args.store}`")
    split = make_split(samples, args.split, seed=args.seed)
    path = split.save(store.path)
    fit_on_split(store, split)
    print(f"split {split.name}: {len(split.train)} train, {len(split.test)} test, "
          f"{len(split.excluded)} excluded (shared tasks); saved to {path}")
    return 0
