"""`cdmpp collect`: measure programs of catalog operators on this machine."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from cdmpp.cli import csv_list, non_negative_int, positive_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "collect", help="sample, build and time programs into a TVM JSON database",
        description="Sample schedules of catalog operators (plus each operator's "
                    "default program), build and time them, and append them to the TVM JSON "
                    "database in --out. Resumable: run the same command again to continue.")
    p.add_argument("--out", help="output directory (a TVM JSON database + cdmpp files)")
    p.add_argument("--list", action="store_true", help="show the operator catalog and exit")
    p.add_argument("--ops", type=csv_list, help="task names or operator families, comma-separated")
    p.add_argument("--network", type=csv_list,
                   help="networks, comma-separated (resnet18, ...; sweep: the catalog's sweeps, "
                        "which belong to no network)")
    p.add_argument("--kernels-of", type=csv_list, default=None, metavar="NETWORK,...",
                   help="collect the fused kernels TVM runs for these networks (resnet18, ..., "
                        "or ONNX files: model.onnx) instead of catalog operators; the database "
                        "then also serves as a tuning database for them (`cdmpp e2e "
                        "--tuning-db`)")
    p.add_argument("--batches", type=csv_list, default=None, metavar="B,...",
                   help="batch sizes of --kernels-of (default: 1; an ONNX file: its own, open "
                        "batch dimensions bound to 1)")
    p.add_argument("--programs-per-task", type=non_negative_int, default=None, metavar="N",
                   help="schedules sampled per task (see --sampling), besides its default "
                        "program (default 32; 0 with --records-from)")
    p.add_argument("--passes", type=positive_int, default=None, metavar="P",
                   help="timing passes per program (default 3); up to 2 more when the two "
                        "best disagree or fewer than two ran on an undisturbed machine")
    p.add_argument("--threads", type=positive_int, default=None, metavar="T",
                   help="threads used to run programs (default: all cores)")
    p.add_argument("--mcpu", default=None, metavar="NAME",
                   help="LLVM CPU to generate code for instead of this host's (e.g. "
                        "x86-64-v2 for SSE-only code, haswell for AVX2): one machine then "
                        "stands in for several devices; each gets its own device id")
    p.add_argument("--programs-from", default=None, metavar="DIR",
                   help="copy candidates/<task>.json from DIR (another --out) when --out has "
                        "none yet, so this device times exactly the same sampled programs: "
                        "cross-device comparisons are then fair (same programs, only the "
                        "device differs). Missing ones are still sampled here")
    p.add_argument("--records-from", action="append", default=None, metavar="DB",
                   help="also time the programs of this TVM JSON database (repeatable), e.g. "
                        "one written by `cdmpp tune` or TVM's tuner: a search's programs, "
                        "where a model trained on random samples errs most. Its workloads are "
                        "matched to the tasks (--kernels-of NETWORK for a network's tuning "
                        "database); only matched tasks are collected, each with its default "
                        "program")
    p.add_argument("--sampling", choices=("random", "search"), default="random",
                   help="how new programs are drawn: at random from the design space "
                        "(default), or as TVM's evolutionary search picks them with a cdmpp "
                        "model as its cost model (no measurement guides it): programs nearer "
                        "the fast ones a tuner ends with than random samples")
    p.add_argument("--search-model", default=None, metavar="MODEL",
                   help="the model that guides --sampling search (a directory, a shipped "
                        "name, or xgb; default: the shipped model for this machine)")
    p.add_argument("--remeasure-disturbed", action="store_true",
                   help="sample nothing new: time again the records of --out whose every pass "
                        "ran while the reference kernel said the machine was disturbed (their "
                        "labels are too high); new passes are appended in place, same record "
                        "index, nothing is dropped")
    p.add_argument("--retest", type=_retest_count, default=None, metavar="N|all",
                   help="sample nothing new: time again N records of --out, disturbed or "
                        "not: the least re-timed first, in a random order (--seed), and print "
                        "how far the new labels land from the old ones (the labels' "
                        "test-retest noise); new passes are appended in place like "
                        "--remeasure-disturbed. 'all': a second "
                        "timing session of every record, whose labels (the minimum over both "
                        "sessions) then carry less of the host's drift (docs/measurement.md)")
    p.add_argument("--time-budget", type=float, default=None, metavar="MINUTES",
                   help="stop cleanly after this many minutes (resume later)")
    p.add_argument("--build-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="kill a program's build after this long (default 30); a rerun with a "
                        "larger limit builds the programs killed at a smaller one again")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the schedule sampling (each seed its own programs) and of "
                        "--retest's draw (default 0). Sampled programs are kept in "
                        "DIR/candidates: a rerun reuses them whatever the seed")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run)


def print_catalog(tasks, header: str | None = None) -> None:
    from cdmpp.programs.catalog import CATALOG_VERSION

    print(header or f"catalog version {CATALOG_VERSION}: {len(tasks)} tasks")
    print(f"{'task':<34} {'op':<18} networks")
    for t in tasks:
        print(f"{t.name:<34} {t.op:<18} {','.join(t.networks) or '(sweep: no network)'}")


def _kernel_tasks(args):
    from cdmpp.device import local_device
    from cdmpp.e2e.networks import spec
    from cdmpp.e2e.onnx_model import existing_onnx_file
    from cdmpp.programs.network_kernels import is_onnx_file, kernel_tasks

    for name in args.kernels_of:  # an unknown name or a missing file fails before any lowering
        if is_onnx_file(name):
            existing_onnx_file(name)
        else:
            spec(name)
    if args.batches is None:
        batches = (None,)  # built-in networks: batch 1; ONNX files: as they are
    else:
        try:
            batches = tuple(int(b) for b in args.batches)
        except ValueError:
            raise ValueError(f"--batches takes integers, got {','.join(args.batches)}") from None
    target = local_device(args.threads, args.mcpu).target
    return kernel_tasks(args.kernels_of, batches, target,
                        log=lambda m: print(m, file=sys.stderr, flush=True))


def _retest_count(text: str) -> int | str:
    """--retest's value: a number of records, or 'all'."""
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of records or 'all', got {text!r}")


def run(args) -> int:
    from dataclasses import replace

    from cdmpp.programs.catalog import select

    if args.kernels_of:
        if args.ops or args.network:
            raise ValueError("--kernels-of collects network kernels: it does not combine with "
                             "--ops or --network (catalog filters)")
        tasks = _kernel_tasks(args)
    else:
        tasks = select(args.ops, args.network)
    if args.list:
        print_catalog(tasks, f"{len(tasks)} kernels of {','.join(args.kernels_of)}"
                      if args.kernels_of else None)
        return 0
    if not args.out:
        raise ValueError("--out DIR is required (or --list to see the catalog)")
    from cdmpp.measure.collect import CollectConfig, collect
    from cdmpp.measure.timing import Protocol

    protocol = Protocol() if args.passes is None else replace(Protocol(), passes=args.passes)
    per_task = args.programs_per_task
    if per_task is None:
        per_task = 0 if args.records_from else 32
    config = CollectConfig(out=args.out, programs_per_task=per_task,
                           threads=args.threads, time_budget_min=args.time_budget,
                           build_timeout_s=args.build_timeout, seed=args.seed, protocol=protocol,
                           mcpu=args.mcpu, programs_from=args.programs_from,
                           records_from=tuple(args.records_from or ()),
                           sampling=args.sampling, search_model=args.search_model)
    if args.search_model is not None and args.sampling != "search":
        raise ValueError("--search-model guides --sampling search: give both, or neither")
    command = shlex.join(["cdmpp"] + sys.argv[1:])
    if args.remeasure_disturbed and args.retest is not None:
        raise ValueError("--remeasure-disturbed and --retest are two different runs: give one")
    if args.records_from and (args.remeasure_disturbed or args.retest is not None):
        raise ValueError("--records-from adds programs: it does not combine with "
                         "--remeasure-disturbed or --retest (which time records again)")
    if args.sampling == "search" and (args.remeasure_disturbed or args.retest is not None):
        raise ValueError("--sampling search draws new programs: it does not combine with "
                         "--remeasure-disturbed or --retest (which sample nothing)")
    cores = len(os.sched_getaffinity(0))
    if args.threads is not None and args.threads > cores:
        raise ValueError(f"--threads {args.threads} is more than the {cores} cores this process "
                         "may use: the timings would measure threads waiting for a core")
    from cdmpp.measure.database import RECORD_FILE

    if (args.remeasure_disturbed or args.retest is not None) and \
            not (Path(args.out) / RECORD_FILE).is_file():
        raise FileNotFoundError(f"{args.out} holds no collection ({RECORD_FILE}) to time again")
    if args.retest is not None:
        from cdmpp.measure.remeasure import retest

        print(retest(config, tasks, args.retest, progress=not args.no_progress, command=command))
        return 0
    if args.remeasure_disturbed:
        from cdmpp.measure.remeasure import remeasure_disturbed

        print(remeasure_disturbed(config, tasks, progress=not args.no_progress, command=command))
        return 0
    summary = collect(config, tasks, progress=not args.no_progress, command=command)
    print(summary)
    return 0
