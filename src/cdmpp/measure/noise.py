"""The label noise floor of a set of measurements: how far labels move when re-measured.

Two figures: pass-to-pass (passes of one session, minutes apart, kept with every record) and
test-retest (a record timed again in a later session by `cdmpp collect --retest`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from cdmpp.types import Measurement


@dataclass(frozen=True)
class NoiseFloor:
    n: int  # measurements with at least two passes
    median_pass_to_pass_rel: float  # raw: first vs second pass
    within_5: float  # share of records whose first two passes agree within 5%
    within_10: float
    median_label_gap_rel: float  # gap between the two best passes (what the label could move)

    def __str__(self) -> str:
        if not self.n:
            return "noise floor: no record with two passes"
        return (f"noise floor over {self.n} records: median pass-to-pass difference "
                f"{100 * self.median_pass_to_pass_rel:.1f}% ({100 * self.within_5:.0f}% within "
                f"±5%, {100 * self.within_10:.0f}% within ±10%); median gap of the two best "
                f"passes {100 * self.median_label_gap_rel:.1f}%")

    def to_json(self) -> dict:
        return {"n": self.n, "median_pass_to_pass_rel": self.median_pass_to_pass_rel,
                "within_5": self.within_5, "within_10": self.within_10,
                "median_label_gap_rel": self.median_label_gap_rel}


def noise_floor(measurements: Iterable[Measurement]) -> NoiseFloor:
    raw, gaps = [], []
    for m in measurements:
        if m is not None and m.pass_to_pass_rel is not None:
            raw.append(m.pass_to_pass_rel)
            gaps.append(m.noise_rel)
    if not raw:
        return NoiseFloor(0, float("nan"), float("nan"), float("nan"), float("nan"))
    raw_a = np.asarray(raw)
    return NoiseFloor(len(raw), float(np.median(raw_a)), float(np.mean(raw_a <= 0.05)),
                      float(np.mean(raw_a <= 0.10)), float(np.median(gaps)))


def retested_ratios(measurement_metas) -> list:
    """new / old label of every re-timing a `--retest` run made, from the records' `meta`
    (a record's history of re-timings is kept with it, so the figure survives the run)."""
    return [h["session_latency_s"] / h["previous_latency_s"]
            for meta in measurement_metas for h in meta.get("remeasured", ())
            if h.get("reason") == "retest" and h.get("previous_latency_s")]


def retest_noise(ratios) -> dict:
    """Label reproducibility |a - b| / min(a, b) of pairs of labels given as ratios b / a."""
    r = [float(x) for x in ratios]
    gaps = sorted(max(x, 1 / x) - 1 for x in r)
    return {"n": len(r), "median": statistics.median(gaps), "mean": statistics.fmean(gaps),
            "within_10": sum(g <= 0.10 for g in gaps) / len(gaps),
            "median_ratio": statistics.median(r)}
