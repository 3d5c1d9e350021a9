"""`cdmpp tune`: tune a network's kernels with meta_schedule, cdmpp as the cost model."""

from __future__ import annotations

import sys

from cdmpp.cli import (add_network_arguments, import_network_argument, non_negative_int,
                       positive_float, positive_int)


def add_parser(subparsers) -> None:
    from cdmpp.tune.network import COST_MODELS

    p = subparsers.add_parser(
        "tune", help="tune a network's kernels with meta_schedule, cdmpp scoring candidates",
        description="Tune every kernel TVM runs for a network (the kernels `cdmpp e2e` "
                    "predicts) with meta_schedule's evolutionary search on this machine, "
                    "the cdmpp model as its cost model, a forked builder with a time "
                    "limit, and programs timed with the device's threads. Writes TVM's "
                    "JSON database (and device.json) to --out, which `cdmpp e2e "
                    "--tuning-db OUT` applies. A rerun into the same directory adds "
                    "trials.")
    add_network_arguments(p)
    p.add_argument("--out", required=True, metavar="DIR", help="the tuning database directory")
    p.add_argument("--trials", type=positive_int, required=True,
                   help="programs measured in all, over every kernel (TVM's max_trials_global)")
    p.add_argument("--cost-model", choices=COST_MODELS, default="cdmpp",
                   help="cdmpp (default), or TVM's own xgb / random, to compare")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="the cdmpp model: a shipped name or a model directory (default: the "
                        "shipped model fitted for this machine's device, else default)")
    p.add_argument("--offline", action="store_true",
                   help="score with the cdmpp model alone (by default it is also corrected "
                        "from the tuner's own measurements: an XGBoost on the log of measured "
                        "over predicted latency, once 32 programs are timed)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="the search's seed")
    p.add_argument("--build-timeout", type=positive_float, default=30.0, metavar="S",
                   help="seconds one program may take to compile before it is given up")
    p.set_defaults(run=run)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args) -> int:
    from cdmpp.device import local_device
    from cdmpp.tune.network import tune_network

    if args.cost_model != "cdmpp" and (args.model or args.offline):
        raise SystemExit("cdmpp tune: --model and --offline choose and set up the cdmpp cost "
                         f"model; they do nothing with --cost-model {args.cost_model}")
    model = args.model
    if model is not None:
        from cdmpp.model.registry import load_estimator

        model = load_estimator(model)  # a missing model fails before any TVM work
    device = local_device()
    name, _, mod = import_network_argument(args, _log)
    summary = tune_network(mod, device, args.out, trials=args.trials,
                           cost_model=args.cost_model, model=model, online=not args.offline,
                           seed=args.seed, build_timeout_s=args.build_timeout, name=name,
                           log=_log)
    added = summary.records_after - summary.records_before
    tuned = len(summary.tasks) - len(summary.untuned)
    of = f" of {len(summary.tasks)}" if summary.untuned else ""
    print(f"{name}: {tuned}{of} kernels tuned, {added} programs measured "
          f"({summary.records_after} in {summary.out})")
    if summary.untuned:
        n = len(summary.untuned)
        print(f"  no program measured for {n} kernel{'s' * (n != 1)} (the trials ran out before "
              f"the search reached them, or every one tried failed; more --trials into the same "
              f"--out adds them): {', '.join(summary.untuned)}")
    if summary.phases is not None and summary.wall_s is not None:
        print(f"tuning took {summary.wall_s / 60:.1f} min: {summary.phases} (the task "
              f"scheduler's log)")
    for why in summary.skipped:
        print(f"  left untuned: {why}")
    source = f"--onnx {args.onnx}" if args.onnx else f"--network {args.network}"
    batch = f" --batch {args.batch}" if args.batch else ""
    print(f"next: cdmpp e2e {source}{batch} --tuning-db {summary.out} --measure")
    return 0
