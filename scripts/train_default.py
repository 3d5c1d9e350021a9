"""Train the shipped models (`seeds`: cdmpp over three seeds; `xgb`: the XGBoost baseline;
and `ensemble`, the shipped `default`: the geometric mean of those three seeds and XGBoost on
latency per work, weighted `cdmpp.model.ensemble.SHIPPED_WEIGHTS`, `ensemble-seeds` in
benchmarks/accuracy.py) and cut the shipped sample data.

    python scripts/train_default.py --data data/epyc-2c-kernels.tar.xz --data data/epyc-2c.tar.xz
    python scripts/train_default.py --data ... --keep-seeds   # refit the XGBoost models only

Every record of the given databases (a .tar.xz is unpacked first) is featurized; a few records
of a few tasks of the repository's own dataset are held out as the shipped sample data
(`src/cdmpp/assets/sample_data/`, a TVM JSON database); the models are trained on everything
else and written to `src/cdmpp/assets/models/{seeds,xgb,ensemble}` with what they were
trained on, and the ensemble with the device.json of the device it was fitted for.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Loss weight of each task's default (untuned) program. Chosen on the training side: with 1,
# the model predicted the default programs of its own training data 6-10% low (median, by
# network) once 8 sampled schedules of each network kernel joined them; with 5, 1-4% low
# (docs/model.md).
DEFAULT_WEIGHT = 5.0
# `seeds` (within `default`) averages (geometric mean) cdmpp over this many seeds: on held-out
# networks three seeds cut MAPE from 50.4% to 46.3% and raised top-1 from 0.834 to 0.848, and on a random
# split from 35.7% to 33.2% (benchmarks/accuracy.py, docs/model.md), at 3x the training time.
SEEDS = 3
ASSETS = ROOT / "src" / "cdmpp" / "assets"


def resolve_data(specs, tmp: Path) -> list[Path]:
    from cdmpp.measure.archive import unpack

    out = []
    for spec in specs:
        path = Path(spec)
        if path.name.endswith(".tar.xz"):
            out.append(unpack(path, tmp / path.name.removesuffix(".tar.xz")))
        else:
            out.append(path)
    return out


def cut_sample(db_dir: Path, out: Path, tasks: int, per_task: int, seed: int) -> set:
    """Copy `per_task` records of `tasks` workloads of one database into a new database at `out`;
    return the (db, record_index) pairs taken."""
    from cdmpp.measure.database import (RECORD_FILE, SIDECAR_FILE, TASKS_FILE, WORKLOAD_FILE,
                                        load_database, write_database, write_text_atomic)

    db = load_database(db_dir)
    rng = np.random.default_rng(seed)
    by_workload: dict[int, list] = {}
    for rec in db.records:
        by_workload.setdefault(rec.workload_index, []).append(rec)
    chosen_workloads = sorted(rng.choice(sorted(by_workload), size=tasks, replace=False))
    wl_lines = (db_dir / WORKLOAD_FILE).read_text().splitlines()
    rec_lines = (db_dir / RECORD_FILE).read_text().splitlines()
    workloads, records, sidecar, taken = [], [], [], set()
    for new_index, wl in enumerate(chosen_workloads):
        workloads.append(json.loads(wl_lines[wl]))
        recs = by_workload[wl]
        for rec in [recs[i] for i in sorted(rng.choice(len(recs), size=min(per_task, len(recs)),
                                                       replace=False))]:
            line = json.loads(rec_lines[rec.record_index])
            line[0] = new_index
            records.append(json.dumps(line, separators=(",", ":")))
            sidecar.append(json.dumps(dict(rec.meta, record_index=len(records) - 1,
                                           measured_module=None)))
            taken.add((str(Path(rec.db).resolve()), rec.record_index))  # as the store names it
            assert not rec.meta.get("measured_module"), "sample records must replay"
    if out.exists():
        shutil.rmtree(out)
    write_database(out, workloads, records)
    write_text_atomic(out / SIDECAR_FILE, "\n".join(sidecar) + "\n")
    tasks_json = json.loads((db_dir / TASKS_FILE).read_text())
    write_text_atomic(out / TASKS_FILE, json.dumps(
        {w[0]: tasks_json[w[0]] for w in workloads if w[0] in tasks_json}, indent=1))
    shutil.copy(db_dir / "device.json", out / "device.json")
    return taken


def check_kept(meta: dict, info: dict, args) -> list:
    """The seeds of a saved `seeds` that `--keep-seeds` may reuse: trained on the same
    records (count, databases, held-out sample, default weight) with the seeds asked for."""
    trained = meta.get("trained_on") or {}
    asked = list(range(args.seed, args.seed + args.seeds))
    for key in ("records", "held_out_sample", "default_weight", "device_id"):
        if trained.get(key) != info[key]:
            raise SystemExit(f"--keep-seeds: the saved seeds were trained with {key} "
                             f"{trained.get(key)!r}, this run has {info[key]!r}: train it again")
    if sorted(Path(d).name for d in trained.get("databases", [])) != sorted(
            Path(d).name.removesuffix(".tar.xz") for d in info["databases"]):
        raise SystemExit(f"--keep-seeds: the saved seeds were trained on "
                         f"{trained.get('databases')}, this run on {info['databases']}")
    if trained.get("seeds") != asked:
        raise SystemExit(f"--keep-seeds: the saved seeds are {trained.get('seeds')}, "
                         f"this run asks for {asked}")
    return asked


def fitted_device(data, device_id):
    """The device.json of a collection of `device_id` among `data` (what `for_device` matches
    this machine against), None when none of them has one."""
    from cdmpp.device import load_device
    from cdmpp.measure.database import find_databases

    for root in data:
        for db in find_databases(root):
            device = load_device(db)
            if device is not None and device.device_id == device_id:
                return device
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--store", default=None)
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write the models to DIR/{default,xgb,ensemble} and the sample data "
                        "to DIR/sample_data instead of shipping them (an experiment, as in "
                        "docs/tune.md, \"Training on searched programs\")")
    parser.add_argument("--sample-tasks", type=int, default=8)
    parser.add_argument("--sample-per-task", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=SEEDS, help="the default model is the "
                        "geometric mean of cdmpp trained with seeds SEED .. SEED+SEEDS-1")
    parser.add_argument("--rank-weight", type=float, default=None, metavar="R",
                        help="TrainConfig.rank_weight (default: its default, 0; docs/model.md, "
                        "\"Ranking term\")")
    parser.add_argument("--default-weight", type=float, default=DEFAULT_WEIGHT,
                        help="loss weight of each task's default (untuned) program")
    parser.add_argument("--stride-alignment", action=argparse.BooleanOptionalAction,
                        default=None, help="ModelConfig.stride_alignment (default: its default)")
    parser.add_argument("--readout", default=None, choices=("pooled", "work_weighted"),
                        help="ModelConfig.readout (default: its default)")
    parser.add_argument("--relative-positions", action=argparse.BooleanOptionalAction,
                        default=None, help="ModelConfig.relative_positions (default: its default)")
    parser.add_argument("--keep-seeds", action="store_true",
                        help="reuse the cdmpp seeds already in DIR/seeds (trained by an "
                        "earlier run on the same records) and refit only the XGBoost models and "
                        "the ensemble")
    parser.add_argument("--for-device", default=None, metavar="ID",
                        help="train cdmpp on every device's records, each with its device "
                        "vector, fitted for device ID (as `cdmpp train --for-device`); the "
                        "XGBoost baseline and the ensemble's XGBoost, which have no device "
                        "input, train on ID's records only")
    args = parser.parse_args()

    from dataclasses import replace

    from cdmpp.baselines import make_baseline
    from cdmpp.dataset.devices import device_counts, device_vector_of, training_samples
    from cdmpp.dataset.loader import default_program_mask, labeled
    from cdmpp.features.build import open_store
    from cdmpp.measure.database import find_databases
    from cdmpp.model.config import ModelConfig, TrainConfig
    from cdmpp.model.ensemble import SHIPPED_WEIGHTS, EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor
    from cdmpp.model.registry import load_estimator, read_meta, save_estimator

    with tempfile.TemporaryDirectory() as tmp:
        data = resolve_data(args.data, Path(tmp))
        own = [p for p in data if (p / "device.json").exists()]  # cdmpp-collected databases
        out = Path(args.out) if args.out else ASSETS / "models"
        sample_dir = Path(args.out) / "sample_data" if args.out else ASSETS / "sample_data"
        taken = cut_sample(find_databases(own[-1])[0], sample_dir, args.sample_tasks,
                           args.sample_per_task, args.seed) if own else set()
        store = open_store(data, args.store)
        samples = store.samples(databases=data)
        joint = args.for_device is not None  # else the shipped model has no device input
        samples, device_id = training_samples(samples, for_device=args.for_device)
        ids = zip(samples.column("db").to_pylist(), samples.column("record_index").to_pylist())
        rows = np.array([i for i, (db, r) in enumerate(ids) if (db, r) not in taken])
        train = labeled(store, samples, rows, with_device=joint)
        weight = np.where(default_program_mask(samples, rows), args.default_weight, 1.0)
        # its device.json, kept with the models: that of the last collection (the project's
        # own dataset, as for the sample cut), whose bandwidth and peak the collections differ in
        device = fitted_device(data[::-1], device_id)
        info = {"databases": [str(a) for a in args.data], "records": int(len(rows)),
                "device_id": device_id,
                "default_weight": args.default_weight, "held_out_sample": len(taken)}
        if joint:
            counts = device_counts(samples.take(rows))
            info["devices"] = {d: c["records"] for d, c in counts.items()}
            vector = device_vector_of(store, samples, device_id)
        config = replace(TrainConfig(), seed=args.seed,
                         **({"epochs": args.epochs} if args.epochs else {}),
                         **({"rank_weight": args.rank_weight}
                            if args.rank_weight is not None else {}))
        print(f"training on {len(rows)} records ({len(taken)} held out as sample data)")
        options = {"stride_alignment": args.stride_alignment, "readout": args.readout,
                   "relative_positions": args.relative_positions}
        model_config = replace(ModelConfig(), **{k: v for k, v in options.items()
                                                 if v is not None})
        if args.keep_seeds:
            kept = check_kept(read_meta(out / "seeds"), info, args)
            print(f"keeping the {len(kept)} seeds of {out / 'seeds'}")
            default = load_estimator(out / "seeds")
        else:
            seeds = []
            for i in range(args.seeds):
                print(f"cdmpp seed {args.seed + i} ({i + 1} of {args.seeds})")
                seeds.append(CDMPPRegressor(model_config, train_config=replace(
                    config, seed=args.seed + i), progress=True).fit(
                    train.programs, train.latency_s, sample_weight=weight))
                if joint:  # given no device vector, the model predicts for this device
                    seeds[-1].device_vector_ = vector
            default = seeds[0] if len(seeds) == 1 else EnsembleRegressor.from_fitted(seeds)
            save_estimator(default, out / "seeds", trained_on=dict(
                info, seeds=list(range(args.seed, args.seed + args.seeds))), device=device)
        seeds_info = info  # what the seeds trained on, kept in the ensemble's record
        if joint:  # the baselines have no device input: the fitted device's records only
            devices = np.array(samples.column("device_id").to_pylist())
            train = labeled(store, samples, rows[devices[rows] == device_id])
            info = {k: v for k, v in seeds_info.items() if k != "devices"}
            mine_dbs = [Path(db).resolve() for db in counts[device_id]["databases"]]
            info.update(records=len(train.latency_s), databases=[
                str(spec) for spec, root in zip(args.data, data)
                if any(db.is_relative_to(Path(root).resolve()) for db in mine_dbs)])
        xgb = make_baseline("xgb", seed=args.seed).fit(train.programs, train.latency_s)
        save_estimator(xgb, out / "xgb", trained_on=info)
        xgb_work = make_baseline("xgb", seed=args.seed, per_work=True).fit(train.programs,
                                                                          train.latency_s)
        # the seeds together with XGBoost per work, weighted as chosen on validation: on
        # held-out networks better than either alone (docs/model.md, "The three seeds with
        # XGBoost per work", "The heaviest store's features")
        weights = SHIPPED_WEIGHTS
        save_estimator(EnsembleRegressor.from_fitted([default, xgb_work], weights),
                       out / "ensemble", trained_on=dict(
                           seeds_info, members="the three seeds (`seeds`), and XGBoost on "
                           f"latency per work, weighted {weights[0]:g} and {weights[1]:g}",
                           **({"xgb_records": info["records"], "xgb_databases": info["databases"]}
                              if joint else {})),
                       device=device)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"models in {out}: {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
