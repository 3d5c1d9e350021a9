"""XGBoost's settings and the ensemble's weight chosen on the training side, judged on the test.

    python benchmarks/chosen_on_validation.py --data <epyc-2c> --data <epyc-2c-kernels> ... \\
        [--store DIR] [--split by-network:mobilenet_v2,resnet50] [--npz preds.npz]

Leak-free model selection in two stages. Stage 1 carves a validation set out of the split's
training side (`--val-fraction` of its tasks, or of its records for the random split: the
carve `CDMPPRegressor` chooses its epochs on, `cdmpp.dataset.splits.carve_rows`), fits every
candidate on the rest and scores it there: XGBoost on latency and on latency per work, each
over a small grid of settings (`GRID`, TVM meta_schedule's own XGBModel settings among them;
per work also with the features of each program's heaviest store, `WORK_GRID`), and cdmpp's
three seeds. It chooses each XGBoost's settings, and the weight of cdmpp (a multiple of 0.05,
`cdmpp.model.ensemble.choose_weights`) in the geometric-mean ensemble of cdmpp's seeds with
XGBoost per work, by validation MAPE alone. Stage 2 refits the chosen and the default
settings on the whole training side and reports both on the test side, so every row is the
default beside what the validation chose; the test side chooses nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from cdmpp.evaluate.metrics import mape

# name -> XGBBaseline keyword arguments: "d6" is XGBBaseline's plain defaults, "d8-lr.03-cs.5"
# and "d10-lr.03-cs.5-heavy-pw" (`WORK_GRID`) the settings cdmpp ships for XGBoost on latency
# and on latency per work (`cdmpp.baselines.XGB_SETTINGS`, `XGB_PER_WORK_SETTINGS`),
# "d10-lr.03-cs.5-heavy", "d6-lr.05-mcw5" and "d8-lr.05" ones it shipped before
GRID = {
    "d6": {},
    "d8-lr.05": {"max_depth": 8, "learning_rate": 0.05, "n_estimators": 800},
    "d10-lr.03-cs.5": {"max_depth": 10, "learning_rate": 0.03, "n_estimators": 1000,
                       "colsample_bytree": 0.5},
    "d8-lr.03-cs.5": {"max_depth": 8, "learning_rate": 0.03, "n_estimators": 1500,
                      "colsample_bytree": 0.5},
    "d6-lr.05-mcw5": {"learning_rate": 0.05, "n_estimators": 1000, "min_child_weight": 5.0},
    # half the trees of the best-scoring deep settings above, whose saved model is large
    # (44 MB fitted on the 19,891 records of the shipped models)
    "d10-lr.06-cs.5": {"max_depth": 10, "learning_rate": 0.06, "n_estimators": 500,
                       "colsample_bytree": 0.5},
    "d8-lr.06-cs.5": {"max_depth": 8, "learning_rate": 0.06, "n_estimators": 600,
                      "colsample_bytree": 0.5},
    # TVM's XGBModel (meta_schedule/cost_model/xgb_model.py): depth 10, eta 0.2, no
    # subsampling, min_child_weight 0; its early stopping replaced by a fixed 400 rounds
    "tvm": {"max_depth": 10, "learning_rate": 0.2, "min_child_weight": 0.0, "subsample": 1.0,
            "colsample_bytree": 1.0},
}
# XGBoost per work (cdmpp's own member, not a TenSet baseline) may also see the features of
# each program's store with the most work (`heaviest_leaf`): "<setting>-heavy", and those
# features relative to the program's work as well (`heaviest_per_work`): "<setting>-heavy-pw"
WORK_GRID = {**GRID, **{f"{g}-heavy": {**GRID[g], "heaviest_leaf": True}
                        for g in ("d6", "d8-lr.05", "d10-lr.03-cs.5", "d8-lr.03-cs.5",
                                  "d6-lr.05-mcw5")},
             **{f"{g}-heavy-pw": {**GRID[g], "heaviest_leaf": True, "heaviest_per_work": True}
                for g in ("d6", "d10-lr.03-cs.5", "d8-lr.03-cs.5")}}
GRIDS = {"xgb": GRID, "xgb-work": WORK_GRID}
SEEDS = 3
PLAIN = "d6"
SHIPPED = {"xgb": "d8-lr.03-cs.5", "xgb-work": "d10-lr.03-cs.5-heavy-pw"}  # `make_baseline`'s


def fit_predict(kind: str, train, y_train, test, seed: int, settings: dict, epochs=None):
    from cdmpp.baselines.xgb import XGBBaseline
    from cdmpp.model.config import TrainConfig
    from cdmpp.model.estimator import CDMPPRegressor

    if kind == "cdmpp":
        model = CDMPPRegressor(None, replace(TrainConfig(), seed=seed,
                                             **({"epochs": epochs} if epochs else {})))
    else:
        # XGBBaseline itself: `make_baseline` would start from the shipped settings
        model = XGBBaseline(seed=seed, per_work=kind == "xgb-work", **settings)
    start = time.perf_counter()
    model.fit(train, y_train)
    seconds = time.perf_counter() - start
    size = f", {len(model.booster_.save_raw('json')) / 2**20:.1f} MB" if kind != "cdmpp" else ""
    return model.predict(test), f"{seconds:.0f} s{size}"


def geo(a, b, w: float):
    return np.exp(w * np.log(a) + (1 - w) * np.log(b))


def run_stage(name, train, y_train, test, y_test, members, out: dict, npz: Path | None,
              epochs=None):
    """Fit each (kind, settings name, seed) of `members` on train, predict test; into `out`.
    Predictions an earlier run kept in `npz` (for the same labels) are reused."""
    if npz is not None and npz.exists():
        kept = np.load(npz)
        if np.array_equal(kept["y"], y_test):
            out.update({k: kept[k] for k in kept.files if k != "y"})
            print(f"[{name}] reusing {len(kept.files) - 1} predictions from {npz}")
    for kind, setting, seed in members:
        key = f"{kind}:{setting}:{seed}"
        if key in out:
            continue
        pred, cost = fit_predict(kind, train, y_train, test, seed,
                                 WORK_GRID.get(setting, {}), epochs)
        out[key] = pred
        print(f"[{name}] {key}: MAPE {100 * mape(y_test, pred):.1f}% ({cost})", flush=True)
        if npz is not None:
            np.savez(npz, y=y_test, **out)


def seeds_mean(out: dict):
    return np.exp(np.mean([np.log(out[f"cdmpp:-:{s}"]) for s in range(SEEDS)], axis=0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--store", default=None)
    parser.add_argument("--split", default="by-network:mobilenet_v2,resnet50")
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="cdmpp's (default: its own)")
    parser.add_argument("--npz", default=None, help="keep every prediction: <npz>-val/-test.npz")
    args = parser.parse_args()

    from cdmpp.dataset.devices import one_device
    from cdmpp.dataset.loader import split_data
    from cdmpp.dataset.splits import carve_rows, make_split
    from cdmpp.evaluate.metrics import summary
    from cdmpp.features.build import open_store
    from cdmpp.model.ensemble import CDMPP_WEIGHT, choose_weights

    store = open_store(args.data, args.store)
    samples = one_device(store.samples(databases=args.data), None)
    split = make_split(samples, args.split, seed=args.seed)
    train, test = split_data(store, split)
    tasks = train.programs.task
    # the carve CDMPPRegressor chooses its epochs on: tasks held out unless the split is random
    fit_rows, val_rows = carve_rows(len(tasks), args.val_fraction, args.seed,
                                    None if split.name.startswith("random") else tasks)
    print(f"{split.name}: {len(train.rows)} train ({len(fit_rows)} fit, {len(val_rows)} "
          f"validation, {len(set(tasks[i] for i in val_rows))} validation tasks), "
          f"{len(test.rows)} test", flush=True)
    npz = Path(args.npz) if args.npz else None

    # stage 1: every candidate on the carve
    fit_p, val_p = train.programs.subset(fit_rows), train.programs.subset(val_rows)
    y_fit, y_val = train.latency_s[fit_rows], train.latency_s[val_rows]
    val: dict = {}
    members = [(k, g, 0) for k, grid in GRIDS.items() for g in grid]
    members += [("cdmpp", "-", s) for s in range(SEEDS)]
    run_stage("validation", fit_p, y_fit, val_p, y_val, members, val,
              npz and npz.with_name(npz.stem + "-val.npz"), args.epochs)
    chosen = {k: min(grid, key=lambda g: mape(y_val, val[f"{k}:{g}:0"]))
              for k, grid in GRIDS.items()}
    cd_val = seeds_mean(val)
    weights = {}
    for g in WORK_GRID:
        w = float(choose_weights([cd_val, val[f"xgb-work:{g}:0"]], y_val)[0])
        weights[g] = (w, mape(y_val, geo(cd_val, val[f"xgb-work:{g}:0"], w)),
                      mape(y_val, geo(cd_val, val[f"xgb-work:{g}:0"], 0.5)))
        print(f"validation: cdmpp-seeds x xgb-work {g}: best weight {weights[g][0]:.2f} "
              f"MAPE {100 * weights[g][1]:.1f}% (half each {100 * weights[g][2]:.1f}%)")
    ens_setting = min(WORK_GRID, key=lambda g: weights[g][1])
    print(f"chosen on validation: xgb {chosen['xgb']}, xgb-work {chosen['xgb-work']}, "
          f"ensemble with xgb-work {ens_setting} at cdmpp weight {weights[ens_setting][0]:.2f}",
          flush=True)

    # stage 2: the plain, shipped and chosen settings on the whole training side
    full: dict = {}
    members = [(k, g, 0) for k in ("xgb", "xgb-work")
               for g in dict.fromkeys((PLAIN, SHIPPED[k], chosen[k])
                                      + ((ens_setting,) if k == "xgb-work" else ()))]
    members += [("cdmpp", "-", s) for s in range(SEEDS)]
    run_stage("test", train.programs, train.latency_s, test.programs, test.latency_s, members,
              full, npz and npz.with_name(npz.stem + "-test.npz"), args.epochs)
    y, task = test.latency_s, test.programs.task
    cd = seeds_mean(full)
    rows = {"cdmpp, seed 0": full["cdmpp:-:0"], "cdmpp, 3 seeds": cd}
    for k, label in (("xgb", "XGBoost"), ("xgb-work", "XGBoost per work")):
        named = {PLAIN: "plain defaults"}
        named[SHIPPED[k]] = named.get(SHIPPED[k], "") + (", " if SHIPPED[k] in named else "") + \
            "shipped"
        named[chosen[k]] = named.get(chosen[k], "") + (", " if chosen[k] in named else "") + \
            "chosen"
        for g, why in named.items():
            rows[f"{label} ({g}, {why})"] = full[f"{k}:{g}:0"]
    rows[f"3 seeds x per work {PLAIN}, half each"] = geo(cd, full[f"xgb-work:{PLAIN}:0"], 0.5)
    shipped_work = SHIPPED["xgb-work"]  # the shipped `ensemble`'s recipe
    rows[f"3 seeds x per work {shipped_work}, cdmpp {CDMPP_WEIGHT:.2f} (shipped)"] = geo(
        cd, full[f"xgb-work:{shipped_work}:0"], CDMPP_WEIGHT)
    w = weights[ens_setting][0]
    rows[f"3 seeds x per work {ens_setting}, cdmpp weight {w:.2f} (chosen)"] = geo(
        cd, full[f"xgb-work:{ens_setting}:0"], w)
    noise = test.noise_rel[np.isfinite(test.noise_rel)]
    floor = float(np.median(noise))
    plain, shipped = mape(y, full[f"xgb:{PLAIN}:0"]), mape(y, full[f"xgb:{SHIPPED['xgb']}:0"])
    print(f"\n{split.name} test: {len(y)} records, noise floor (median pass-to-pass gap) "
          f"{100 * floor:.1f}%")
    print("| model | MAPE | median APE | ±10% | RMSE(log) | top-1 | pairwise | / XGBoost plain | "
          "/ XGBoost shipped | / floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, pred in rows.items():
        m = summary(y, pred, task)
        print(f"| {name} | {100 * m['mape']:.1f}% | {100 * m['median_ape']:.1f}% | "
              f"{100 * m['within_10']:.1f}% | {m['rmse_log']:.3f} | {m['top1']:.3f} | "
              f"{100 * m['pairwise_acc']:.1f}% | {m['mape'] / plain:.2f} | "
              f"{m['mape'] / shipped:.2f} | {m['mape'] / floor:.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
