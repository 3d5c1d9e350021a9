"""What the loop-view columns add: XGBoost per work with and without them, on the same rows.

    python benchmarks/loop_view.py --data <data/epyc-2c unpacked> --data <epyc-2c-kernels> \\
        --data <epyc-2c-sweep> --data <epyc-2c-convsweep> [--store DIR] \\
        [--split by-network:mobilenet_v2,resnet50] [--stage val|test] [--seed 0]

Every leaf of FEATURE_VERSION 3 holds TVM's per-store row followed by the twelve columns of
`cdmpp.features.loop_view` (the loop LLVM is likely to vectorize around the store). The shipped
ensemble's XGBoost member (`XGB_PER_WORK_SETTINGS`: latency per work; the summed features, the
heaviest store's as they are and per work) is fitted twice on the same rows: on the leaves cut
to TVM's row, and on the whole leaves. `--stage val` fits on the training side's validation
carve (`carve_rows`, by task: what a setting is chosen on); `--stage test` on the whole training
side, scored on the held-out networks. Prints MAPE, median APE, top-1 and pairwise accuracy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    from cdmpp.baselines import make_baseline
    from cdmpp.dataset.devices import one_device
    from cdmpp.dataset.loader import split_data
    from cdmpp.dataset.splits import carve_rows, make_split
    from cdmpp.evaluate.metrics import mape, pairwise_accuracy, top_k_score
    from cdmpp.features.build import open_store
    from cdmpp.features.matching import N_TVM_FEATURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--store", help="feature store directory (default: the shared one)")
    parser.add_argument("--split", default="by-network:mobilenet_v2,resnet50")
    parser.add_argument("--stage", choices=("val", "test"), default="val")
    parser.add_argument("--seed", type=int, default=0, help="XGBoost's subsampling seed")
    args = parser.parse_args(argv)

    store = open_store(args.data, args.store, progress=False)
    samples = one_device(store.samples(databases=[str(Path(d)) for d in args.data]), None)
    split = make_split(samples, args.split, seed=0)
    train, test = split_data(store, split)
    if args.stage == "val":
        tasks = train.programs.task
        by_task = None if split.name.startswith("random") else tasks
        fit, held = carve_rows(len(tasks), 0.2, 0, by_task)
        a, ya = train.programs.subset(fit), train.latency_s[fit]
        b, yb = train.programs.subset(held), train.latency_s[held]
    else:
        a, ya, b, yb = train.programs, train.latency_s, test.programs, test.latency_s
    tasks_b = np.asarray(b.task)
    print(f"{split.name}, {args.stage}: {len(ya)} fitted, {len(yb)} scored")
    for name, cut in (("without", N_TVM_FEATURES), ("with the loop view", a.n_features)):
        model = make_baseline("xgb", per_work=True, seed=args.seed)  # the shipped member
        p = model.fit(a.first_columns(cut), ya).predict(b.first_columns(cut))
        print(f"  {name:20s} MAPE {100 * mape(yb, p):.2f}%  median APE "
              f"{100 * np.median(np.abs(p / yb - 1)):.1f}%  top-1 "
              f"{top_k_score(yb, p, tasks_b, 1):.3f}  pairwise "
              f"{pairwise_accuracy(yb, p, tasks_b):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
