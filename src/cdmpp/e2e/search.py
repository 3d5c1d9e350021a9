"""A tuned kernel runs the fastest program its search timed: predict it as such.

TVM applies, for each kernel, the record of the tuning database with the lowest timing. On the
device that timed them, that program is the fastest of the N programs the search measured for
the kernel, so its time is the minimum of N latencies. Predicting that one program alone is
biased high: the search chose it for being faster than its other candidates, and a model with
an error of spread `sigma` per program cannot see that part of its speed. Measured: with the
chosen programs predicted on their own, nine networks tuned by real searches came out 27-145%
slow; as the fastest of their search, 5 of 9 within 10%, and those searched by cdmpp itself
predicted about 20% low (docs/tune.md, "A tuned kernel is the fastest of its search").

With every candidate predicted (p_i) and errors independent and log-normal,
y_i = p_i exp(sigma z_i), the chosen program's time min_i y_i has the median t that solves

    prod_i (1 - Phi((ln t - ln p_i) / sigma)) = 1/2,

which is p for a single candidate, and falls below the fastest prediction as more candidates
come near it. `SEARCH_SIGMA` was chosen on a validation carve of the training side, where this
estimate of each task's fastest program is as often above its label as below.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

# The spread at which the shipped recipe (cdmpp's seeds and XGBoost per work, weighted 0.3 and
# 0.7), fitted on 80% of the four Zen 4 collections, estimates the fastest program of each task
# of the other 20% (330 tasks of four or more programs) at a median ratio of 1.00 to its label
# (0.2: 1.04, 0.35: 0.98; the fastest program's own prediction: 1.13). The standard deviation of
# its log error within a task there is 0.384, its MAD-based spread 0.252 (heavy tails).
# docs/tune.md, "A tuned kernel is the fastest of its search". Chosen there, not on a network.
SEARCH_SIGMA = 0.3


def median_fastest_s(predicted_s, sigma: float = SEARCH_SIGMA) -> float:
    """The median of the fastest of programs predicted at `predicted_s` (seconds), each off by
    an independent log-normal error of spread `sigma`: the time of the program a search that
    timed them all would choose. One program: its prediction."""
    from scipy.special import log_ndtr

    predicted = np.asarray(predicted_s, dtype=np.float64).reshape(-1)
    if not len(predicted) or not np.all(np.isfinite(predicted) & (predicted > 0)):
        raise ValueError(f"need one or more positive, finite predictions, got {predicted_s!r}")
    logs = np.log(predicted)
    if sigma < 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    if sigma == 0 or len(logs) == 1:
        return float(np.exp(logs.min()))

    def log_none_faster(x: float) -> float:  # ln P(every program takes more than e^x)
        return float(log_ndtr((logs - x) / sigma).sum())

    # P(min > e^x) falls from 1 to 0 as x grows; the median is where it is 1/2. At the fastest
    # prediction it is at most 1/2 (that program alone is faster with odds 1/2); 9 sigma below,
    # each program is faster with odds of 1e-19, so it is 1 for any number of programs.
    lo, hi = logs.min() - 9 * sigma, logs.min()
    for _ in range(60):  # bisection to ~1e-18 of the bracket
        mid = (lo + hi) / 2
        if log_none_faster(mid) > math.log(0.5):
            lo = mid
        else:
            hi = mid
    return float(np.exp((lo + hi) / 2))


def candidate_predictions(estimator, net, tuning_db, *, workers: int | None = None
                          ) -> dict[str, np.ndarray]:
    """{tuned kernel of `net`: the predicted seconds of every distinct program the tuning
    database at path `tuning_db` timed for its workload}, for the kernels it timed two or more
    distinct programs for: a kernel with one had no choice made for it, and its own prediction
    stands. Records whose programs have the same features are one program: the model cannot
    tell them apart, so its errors on them are one error, not independent ones (a search
    times such near-copies: 12% of ResNet-18's records in one XGBoost search here). Records
    without a valid timing are left out (the search had no time to choose them by), as are
    records whose program cannot be rebuilt as it was timed (`features.programs`)."""
    import hashlib

    import tvm_ffi

    from cdmpp.dataset.programs import ProgramSet
    from cdmpp.e2e.kernels import workload_module
    from cdmpp.features import FEATURE_VERSION
    from cdmpp.features.build import extract_programs
    from cdmpp.features.store import program_key
    from cdmpp.measure.database import load_database

    wanted: dict[str, list[str]] = {}  # workload structural hash -> its kernels in `net`
    for k in net.kernels:
        if k.tuned:
            shash = str(tvm_ffi.structural_hash(workload_module(k, untuned=True)))
            wanted.setdefault(shash, []).append(k.name)
    records: dict[str, list] = {}
    for rec in load_database(tuning_db, strict=False).records:  # timed records only
        if rec.workload.shash in wanted:
            records.setdefault(rec.workload.shash, []).append(rec)
    records = {shash: recs for shash, recs in records.items() if len(recs) > 1}
    if not records:
        return {}
    todo = [(shash, rec, program_key(rec, FEATURE_VERSION))
            for shash, recs in records.items() for rec in recs]
    asts, _ = extract_programs([rec for _, rec, _ in todo], workers=workers,
                               keys=[key for _, _, key in todo])
    rows, seen = [], set()
    for shash, rec, key in todo:
        if key in asts:  # the model's whole view of the program: what it sees, twice, is once
            ast = asts[key]
            view = hashlib.blake2b(ast.leaf_features.tobytes() + ast.leaf_pos.tobytes(),
                                   digest_size=16).digest()
            if (shash, rec.is_default, view) not in seen:
                seen.add((shash, rec.is_default, view))
                rows.append((shash, rec, key))
    if not rows:
        return {}
    programs = ProgramSet(tuple(asts[key].leaf_features for _, _, key in rows),
                          tuple(asts[key].leaf_pos for _, _, key in rows), None,
                          tuple(wanted[shash][0] for shash, _, _ in rows),
                          np.array([rec.is_default for _, rec, _ in rows], dtype=bool))
    latency = np.asarray(estimator.predict(programs), dtype=np.float64).reshape(-1)
    if latency.shape != (len(rows),) or not np.all(np.isfinite(latency) & (latency > 0)):
        raise RuntimeError(f"the estimator gave no valid latency for some of the {len(rows)} "
                           f"programs of {tuning_db}")
    by_workload: dict[str, list[float]] = {}
    for (shash, _, _), y in zip(rows, latency):
        by_workload.setdefault(shash, []).append(float(y))
    return {name: np.asarray(times) for shash, times in by_workload.items()
            if len(times) > 1 for name in wanted[shash]}


def fastest_of_search(candidates: Mapping[str, np.ndarray], sigma: float = SEARCH_SIGMA
                      ) -> dict[str, float]:
    """{kernel: `median_fastest_s` of its candidates' predictions}."""
    return {name: median_fastest_s(p, sigma) for name, p in candidates.items() if len(p)}
