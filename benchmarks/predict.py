"""Prediction throughput: from the feature store, and from a raw TVM database.

    python benchmarks/predict.py [--model default] [--db ../shared/data/epyc-2c/dense_128x768x768]

Targets: >= 20,000 programs/s predicted from the feature store; >= 200 programs/s from a raw
TVM database (feature extraction included, fresh store, every core).
The default databases are the nine operator families of benchmarks/features.py (dense, dense +
GELU, batch matmul, softmax, layer norm, 3x3 / 1x1 / depthwise conv, max pool): the rate is
that of a mix of operators, not of the cheapest ones. Trace replay and TVM's own per-store
feature extractor take most of the time (see benchmarks/features.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from features import FAMILIES  # the same operator mix as the extraction benchmark

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "epyc-2c"


def from_store(model, store_path: Path, n: int) -> dict:
    from cdmpp.dataset.loader import programs_for_rows
    from cdmpp.features.store import FeatureStore

    store = FeatureStore(store_path)
    samples = store.samples()
    rows = np.resize(np.arange(samples.num_rows), n)
    start = time.perf_counter()
    programs = programs_for_rows(store, samples, rows)
    load_s = time.perf_counter() - start
    model.predict(programs.subset(np.arange(min(256, n))))  # warm up
    start = time.perf_counter()
    model.predict(programs)
    predict_s = time.perf_counter() - start
    return {"programs": n, "load_s": round(load_s, 3), "predict_s": round(predict_s, 3),
            "programs_per_s": round(n / (load_s + predict_s))}


def from_database(model, dbs) -> dict:
    from cdmpp.predict import predict_databases

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = predict_databases(model, dbs, store=Path(tmp) / "store")
        seconds = time.perf_counter() - start
    n = len(result.predictions)
    return {"programs": n, "seconds": round(seconds, 2), "programs_per_s": round(n / seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--db", action="append", default=None)
    parser.add_argument("--programs", type=int, default=50_000)
    args = parser.parse_args()
    from cdmpp.features.build import build_store
    from cdmpp.model.registry import load_estimator
    from cdmpp.tvm_env import import_tvm

    import_tvm()  # a warm TVM process, as in a tuner
    model = load_estimator(args.model)
    dbs = args.db or [str(SHARED / n) for n in FAMILIES]
    figures = {"from_raw_database": from_database(model, dbs)}
    with tempfile.TemporaryDirectory() as tmp:
        build_store(dbs, Path(tmp) / "store", progress=False)
        figures["from_feature_store"] = from_store(model, Path(tmp) / "store", args.programs)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
