"""`cdmpp calibrate`: adapt a model to this machine from a few measured tasks."""

from __future__ import annotations

import json

from cdmpp.calibrate import (FINE_TUNES, FINE_TUNES_BESIDE_OTHERS, RESCALE_NEIGHBORS,
                             RESCALE_TASKS, WEIGHT_FOLDS)
from cdmpp.cli import csv_list, non_negative_int, positive_float, positive_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="measure a few chosen tasks here and fine-tune a model for this device",
        description="Embed every catalog task with the base model, choose the k most "
                    "representative (KMeans) or k random ones, measure them on this machine "
                    "within the budget, fine-tune the base model on them and save it. The "
                    "result works with `cdmpp predict --model` and `cdmpp e2e --model`. With "
                    "--rescale, one factor instead of fine-tuning (a minute, for a new CPU).")
    p.add_argument("--out", required=True, metavar="MODEL_DIR",
                   help="the calibrated model; its measurements go to MODEL_DIR.data/")
    p.add_argument("--model", default=None, metavar="BASE",
                   help="the model to start from (default: the shipped model of this CPU, "
                        "the one predict, e2e and tune use here; on a CPU with none, the "
                        "shipped model one factor maps best onto the programs measured)")
    p.add_argument("--budget-minutes", type=positive_float, default=None, metavar="M",
                   help="total time; without --tasks it also decides how many tasks fit")
    p.add_argument("--tasks", type=non_negative_int, default=None, metavar="K",
                   help="tasks to measure (0: none, fine-tune on --data only)")
    p.add_argument("--selection", choices=("kmeans", "random"), default="kmeans",
                   help="kmeans: the k tasks most representative of the catalog in the base "
                        "model's embedding (default); random: k tasks at random")
    p.add_argument("--programs-per-task", type=non_negative_int, default=None, metavar="N",
                   help="sampled programs measured per task, besides its default one "
                        "(default: 8; with --rescale 0, the default programs alone)")
    p.add_argument("--rescale", action="store_true",
                   help="fine-tune nothing: multiply the base model, asked about this device "
                        "(zero-shot if it never saw it), by the median of measured / predicted "
                        "over the programs measured (without --tasks or --budget-minutes: "
                        f"{RESCALE_TASKS} tasks' default programs, about a minute). Fixes a new "
                        "CPU's overall speed, not the order of its programs")
    p.add_argument("--neighbors", type=non_negative_int, default=RESCALE_NEIGHBORS, metavar="K",
                   help="with --rescale: each program's factor is the median over the K "
                        "measured programs nearest it in the base model's embedding (kinds of "
                        "kernel speed up or slow down apart); 0: one factor for all "
                        "(default: %(default)s). Also how a fine-tuning rescales a base whose "
                        "members are not all CDMPP models (the shipped default's XGBoost), "
                        "unless the folds of --weight-folds find one factor better")
    p.add_argument("--adapt", choices=("cmd", "mmd"), default=None,
                   help="domain adaptation towards every catalog task's default program here "
                        "(off by default: in the leave-one-device-out runs it helped little, and "
                        "CMD at weight 0.1 once made the model 3.6x worse; docs/cross_device.md)")
    p.add_argument("--adapt-weight", type=float, default=0.1,
                   help="weight of the --adapt distance in the loss (default: %(default)s)")
    p.add_argument("--epochs", type=positive_int, default=100,
                   help="most fine-tuning epochs; early stopping may end sooner "
                        "(default: %(default)s)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="T",
                   help="threads the programs run with (default: all cores; another count "
                        "is another device)")
    p.add_argument("--mcpu", default=None, help="LLVM CPU to generate code for (default: host)")
    p.add_argument("--ops", type=csv_list, default=None, help="candidate tasks or operator families")
    p.add_argument("--network", type=csv_list, default=None, help="candidate networks")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the task choice, the sampling and the fine-tuning")
    p.add_argument("--fine-tunes", type=positive_int, default=None, metavar="R",
                   help="fine-tune each CDMPP model of the base R times (other seeds) and "
                        f"keep all, averaged (default: {FINE_TUNES}; "
                        f"{FINE_TUNES_BESIDE_OTHERS} for a base that also holds other kinds, "
                        "as the shipped default's XGBoost, which damps a fine-tuning's seed)")
    p.add_argument("--weight-folds", type=non_negative_int, default=WEIGHT_FOLDS, metavar="F",
                   help="a base that also holds other kinds (the shipped default's XGBoost): "
                        "choose its members' weights for this device by F folds of the measured "
                        "tasks, each fine-tuned on the others (0: keep the base's weights; "
                        "default: %(default)s)")
    p.add_argument("--data", action="append", default=[], metavar="DIR",
                   help="also fine-tune on every program of this collection, measured on this "
                        "device, e.g. `cdmpp collect --kernels-of NET` of the networks you "
                        "will predict (repeatable)")
    p.add_argument("--balance", action="store_true",
                   help="fine-tuning: every source of programs (this run's data directory, "
                        "each --data) weighs the same, however many programs it holds: a "
                        "network's few kernels count as much as a calibration's hundreds of "
                        "catalog programs")
    p.add_argument("--refit", action="store_true",
                   help="fine-tuning: once the tasks held out for validation chose the epoch "
                        "count, fine-tune again from the base on every program for that many "
                        "epochs (twice the time; the held-out tasks, e.g. a network's few "
                        "kernels, then teach the model too)")
    p.set_defaults(run=run)


def run(args) -> int:
    from cdmpp.calibrate import CalibrateConfig, calibrate

    tasks = args.tasks
    if args.rescale and tasks is None and args.budget_minutes is None:
        tasks = RESCALE_TASKS
    info = calibrate(CalibrateConfig(
        out=args.out, model=args.model, budget_minutes=args.budget_minutes, tasks=tasks,
        programs_per_task=(args.programs_per_task if args.programs_per_task is not None
                           else 0 if args.rescale else 8),
        selection=args.selection, adapt=args.adapt,
        adapt_weight=args.adapt_weight, epochs=args.epochs, threads=args.threads,
        mcpu=args.mcpu, ops=args.ops, networks=args.network, seed=args.seed,
        data=tuple(args.data), fine_tunes=args.fine_tunes, rescale=args.rescale,
        neighbors=args.neighbors, weight_folds=args.weight_folds, balance=args.balance,
        refit=args.refit))
    print(json.dumps(info, indent=1))
    return 0
