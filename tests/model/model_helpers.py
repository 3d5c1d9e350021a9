"""Stand-ins shared by the tests of estimators made of estimators (ensemble, default expert)."""

from __future__ import annotations

import numpy as np

from cdmpp.dataset.programs import ProgramSet
from cdmpp.features import N_LEAF_FEATURES


def random_programs(n=40, seed=0):
    """n random programs of 1-5 leaves and a latency that is a smooth function of them."""
    rng = np.random.default_rng(seed)
    feats = tuple(rng.random((int(k), N_LEAF_FEATURES), dtype=np.float32)
                  for k in rng.integers(1, 6, n))
    programs = ProgramSet(feats, tuple(np.arange(len(f), dtype=np.int32) for f in feats))
    return programs, np.exp(programs.summed()[:, 0] / 10) * 1e-4


class Constant:
    """A fitted stand-in predicting one latency for every program."""

    def __init__(self, latency_s):
        self.latency_s = latency_s

    def predict(self, programs):
        return np.full(len(programs), self.latency_s)
