"""`cdmpp train` and `cdmpp eval`: fit the CDMPP model; compare it with the baselines."""

from __future__ import annotations

import sys
from pathlib import Path

from cdmpp.cli import positive_int


def _common(p) -> None:
    p.add_argument("--data", action="append", required=True, metavar="DIR",
                   help="TVM JSON database, or a folder of them (repeatable)")
    p.add_argument("--store", default=None, metavar="CACHE",
                   help="feature store (default: $XDG_CACHE_HOME/cdmpp/features or "
                        "~/.cache/cdmpp/features)")
    p.add_argument("--epochs", type=positive_int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--refit", action="store_true",
                   help="after the validation tenth has chosen the epoch count, train again on "
                        "all the training data for that many epochs (twice the training time)")
    p.add_argument("--rank-weight", type=float, default=None, metavar="R",
                   help="weight of the within-task ranking term added to the regression loss "
                        "(default: TrainConfig's; docs/model.md, \"Ranking term\")")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="feature extraction processes")
    p.add_argument("--device", default=None, metavar="ID",
                   help="use only this device's records (needed when the databases hold several)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (extraction, training epochs)")


def add_parser(subparsers) -> None:
    t = subparsers.add_parser("train", help="train the CDMPP model on databases")
    _common(t)
    t.add_argument("--out", required=True, metavar="MODEL_DIR")
    t.add_argument("--default-weight", type=float, default=1.0, metavar="W",
                   help="loss weight of each task's default (untuned) program, the one TVM runs "
                        "without tuning (others: 1)")
    t.add_argument("--split", default=None,
                   help="random | by-task | by-network:NAME,...: train on its training side and "
                        "report its test side (default: train on everything)")
    t.add_argument("--for-device", default=None, metavar="ID",
                   help="train on the records of every device in the databases, each with its "
                        "device vector (the device encoder, CDMPP's multi-device training), and "
                        "save a model that predicts for device ID: what it learned on the "
                        "other devices carries to the few programs measured on ID "
                        "(docs/cross_device.md)")
    t.add_argument("--device-weight", type=float, default=1.0, metavar="W",
                   help="with --for-device: loss weight of that device's records (times "
                        "--default-weight for its default programs; others: 1), so its few "
                        "records are not outweighed by the other devices' many")
    t.add_argument("--seeds", type=positive_int, default=1, metavar="K",
                   help="train K models (seeds S..S+K-1) and save their geometric-mean "
                        "ensemble: K times the training time, lower error on held-out "
                        "networks; the shipped default is K=3 (docs/model.md)")
    t.add_argument("--default-expert", action="store_true",
                   help="also fit XGBoost on latency per work on the tasks' default (untuned) "
                        "programs alone, and blend it in (geometric mean) wherever a default "
                        "program is predicted: an untuned network's kernels (docs/model.md, "
                        "\"An expert for default programs\")")
    t.set_defaults(run=run_train)
    e = subparsers.add_parser("eval", help="train cdmpp and the baselines on a split; compare")
    _common(e)
    e.add_argument("--split", required=True,
                   help="random | by-task | by-network:NAME,... | by-device:ID,...")
    e.add_argument("--models", default="cdmpp,xgb,mlp",
                   help="comma-separated: cdmpp, cdmpp-seeds (geometric mean of cdmpp over "
                        "seeds S..S+2, as `train --seeds 3` saves), xgb, xgb-tvm (XGBoost on "
                        "TVM's 164 columns of each leaf alone, TenSet's features), xgb-work "
                        "(XGBoost on latency per work), mlp, ensemble (geometric mean of cdmpp "
                        "and xgb-work), "
                        "ensemble-seeds (geometric mean of cdmpp-seeds and xgb-work)")
    e.add_argument("--report-dir", default="cdmpp-eval",
                   help="PNG plots + markdown report here (default: ./cdmpp-eval)")
    e.set_defaults(run=run_eval)


def _store(args):
    from cdmpp.features.build import open_store

    return open_store(args.data, args.store, workers=args.workers,
                      progress=not args.no_progress)


def _train_config(args):
    from dataclasses import replace

    from cdmpp.model.config import TrainConfig

    config = replace(TrainConfig(), seed=args.seed, refit=args.refit)
    if args.rank_weight is not None:
        if not args.rank_weight >= 0:
            raise ValueError(f"--rank-weight must be >= 0, not {args.rank_weight}")
        config = replace(config, rank_weight=args.rank_weight)
    return replace(config, epochs=args.epochs) if args.epochs else config


def _table_row(name: str, m: dict) -> str:
    return (f"{name}: MAPE {100 * m['mape']:.1f}%, median APE {100 * m['median_ape']:.1f}%, "
            f"within ±10% {100 * m['within_10']:.1f}%, top-1 {m['top1']:.3f}")


def run_train(args) -> int:
    from dataclasses import replace

    from cdmpp.dataset.devices import device_counts, device_vector_of, training_samples
    from cdmpp.dataset.loader import default_program_mask, labeled
    from cdmpp.dataset.splits import make_split, parse_split_spec
    from cdmpp.evaluate.metrics import summary
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor
    from cdmpp.model.registry import save_estimator

    if args.split:
        parse_split_spec(args.split)  # a bad spec fails before any extraction
    if args.device_weight != 1.0 and (args.for_device is None
                                      or not 0 < args.device_weight < float("inf")):
        raise ValueError(f"--device-weight {args.device_weight}: needs --for-device and a "
                         "finite weight > 0")
    store = _store(args)
    samples = store.samples(databases=args.data)
    import numpy as np

    with_device = args.for_device is not None
    samples, device_id = training_samples(samples, for_device=args.for_device,
                                          device=args.device)
    if args.split:
        split = make_split(samples, args.split, seed=args.seed)
        split.save(store.path)
        train_rows, test_rows = split.rows(samples)
    else:
        split, train_rows, test_rows = None, np.arange(samples.num_rows), np.zeros(0, np.int64)
    train = labeled(store, samples, train_rows, with_device=with_device)
    checkpoints = Path(args.out).with_name(Path(args.out).name + ".partial")
    # every row's flag, read from the databases once (the test side's too, for the expert)
    default_rows = (default_program_mask(samples)
                    if args.default_weight != 1.0 or args.default_expert else None)
    is_default = None if default_rows is None else default_rows[train_rows]
    if args.default_expert and is_default.sum() < 2:  # before hours of training, not after
        raise ValueError(f"--default-expert: the training records hold {int(is_default.sum())} "
                         "default program(s), it needs at least 2 (the collector times each "
                         "task's default program)")
    weight = None
    if args.default_weight != 1.0:
        weight = np.where(is_default, args.default_weight, 1.0)
    if args.device_weight != 1.0:
        on_device = np.asarray(samples.column("device_id").to_pylist())[train_rows] == device_id
        weight = (1.0 if weight is None else weight) * np.where(on_device, args.device_weight, 1.0)
    config, seeds, members = _train_config(args), range(args.seed, args.seed + args.seeds), []
    # without device vectors, the model predicts for this device
    vector = device_vector_of(store, samples, args.for_device) if with_device else None
    for i, seed in enumerate(seeds, 1):
        # one checkpoint directory per seed: an interrupted run resumes the seed it was on
        ckpt = checkpoints / f"seed-{seed}" if len(seeds) > 1 else checkpoints
        ckpt.mkdir(parents=True, exist_ok=True)
        if len(seeds) > 1:
            print(f"seed {seed} ({i} of {len(seeds)})", file=sys.stderr)
        member = CDMPPRegressor(train_config=replace(config, seed=seed),
                                checkpoint_dir=str(ckpt), progress=not args.no_progress)
        members.append(member.fit(train.programs, train.latency_s, sample_weight=weight))
        if with_device:
            member.device_vector_ = vector
    model = members[0] if len(members) == 1 else EnsembleRegressor.from_fitted(members)
    trained_on = {"data": args.data, "records": int(len(train_rows)),
                  "default_weight": args.default_weight, "device_weight": args.device_weight,
                  "seeds": list(seeds),
                  "device_id": device_id,
                  "split": split.name if split else None}
    if args.default_expert:
        model = _with_default_expert(model, train, is_default, weight, vector)
        trained_on["default_expert"] = {"records": int(is_default.sum()),
                                        "expert_weight": model.expert_weight_}
    if with_device:
        counts = device_counts(samples)
        trained_on["devices"] = {device: c["records"] for device, c in counts.items()}
        # each device's vector as the model learned it: `--for-device` at prediction time
        # asks the same weights about any of them (model.retarget)
        trained_on["device_vectors"] = {
            device: device_vector_of(store, samples, device).tolist() for device in counts}
    save_estimator(model, args.out, trained_on=trained_on)
    import shutil

    shutil.rmtree(checkpoints, ignore_errors=True)
    print(f"saved {args.out} (trained on {len(train_rows)} records)")
    if len(test_rows):
        test = labeled(store, samples, test_rows, with_device=with_device)
        programs = test.programs
        if args.default_expert:  # the expert joins on the test side's default programs
            programs = replace(programs, default=default_rows[test_rows])
        result = summary(test.latency_s, model.predict(programs), programs.task)
        print(_table_row(f"test side of {split.name} ({len(test_rows)} records)", result))
    return 0


def _with_default_expert(model, train, is_default, weight, vector):
    """`model` joined by XGBoost per work fitted on the default programs of `train` (same
    weights; for the device `vector` when the training had device vectors)."""
    from dataclasses import replace

    import numpy as np

    from cdmpp.model.default_expert import DefaultExpertRegressor, fit_default_expert

    print(f"fitting the default-program expert on {int(is_default.sum())} records",
          file=sys.stderr)
    expert = fit_default_expert(replace(train.programs, default=is_default), train.latency_s,
                                sample_weight=weight)
    if vector is not None:
        expert.device_vector_ = np.asarray(vector, dtype=np.float64)
    return DefaultExpertRegressor.from_fitted(model, expert)


def run_eval(args) -> int:
    from cdmpp.dataset.devices import one_device
    from cdmpp.dataset.splits import make_split, parse_split_spec
    from cdmpp.evaluate import report
    from cdmpp.evaluate.run import check_models, compare

    parse_split_spec(args.split)  # bad arguments fail before any extraction
    models = [m for m in args.models.split(",") if m]
    check_models(models)
    store = _store(args)
    samples = store.samples(databases=args.data)
    if not args.split.startswith("by-device"):  # the one split whose sides are devices
        samples = one_device(samples, args.device)
    split = make_split(samples, args.split, seed=args.seed)
    split.save(store.path)
    result = compare(store, split, models, train_config=_train_config(args),
                     progress=not args.no_progress,
                     log=lambda msg: print(msg, file=sys.stderr))
    table = report.comparison_table(result.results, result.noise_floor())
    print(f"split {split.name}: {len(split.train)} train, {len(split.test)} test records")
    print(table)
    out = Path(args.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = [report.plot_predicted_vs_measured(result.y_true, result.predictions,
                                                 out / "predicted_vs_measured.png"),
               report.plot_error_cdf(result.y_true, result.predictions, out / "error_cdf.png")]
    info = {"split": split.name, "train records": len(split.train),
            "test records": len(split.test),
            "train seconds": {k: round(v, 1) for k, v in result.train_seconds.items()}}
    path = report.markdown_report(f"cdmpp eval: {split.name}", info, table, figures,
                                  out / "report.md")
    print(f"report: {path}")
    return 0
