"""Shared by the e2e tests: tiny real networks built by TVM and a stub estimator (no trained
model needed). Not a conftest.py: tests/conftest.py is imported as `conftest` by other tests,
and a second rootless conftest would replace it in sys.modules."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from cdmpp.features import N_LEAF_FEATURES


class StubEstimator:
    """Predicts a fixed latency per program: `latency_s[kernel name]` (the ProgramSet's task
    names are the kernel names), else `default_s`."""

    def __init__(self, latency_s: dict | None = None, default_s: float = 1e-4):
        self.latency_s = dict(latency_s or {})
        self.default_s = default_s
        self.calls = 0

    def predict(self, programs):
        self.calls += 1
        assert all(f.ndim == 2 and f.shape[1] == N_LEAF_FEATURES for f in programs.leaf_features)
        return np.array([self.latency_s.get(t, self.default_s) for t in programs.task])


def overhead_calibration(device_id: str = "abc", version: int | None = None):
    """A hand-made `overhead.OverheadCalibration` (no cold-weights probes) of `device_id`."""
    from cdmpp.e2e import overhead as oh
    from cdmpp.e2e.replay import CallOverhead

    return oh.OverheadCalibration(device_id, 2, CallOverhead(2e-7, 1e-7, 5e-7),
                                  oh.METHOD_VERSION if version is None else version,
                                  "2026-01-01T00:00:00+00:00", (1, 64), (1e-6, 2e-5),
                                  (5e-7, 1e-5), 1e-8, {"kernel_chain_1": [1e-6, 1.1e-6]})


@pytest.fixture(scope="session")
def device():
    from cdmpp.device import local_device

    return local_device()


@functools.lru_cache(maxsize=None)
def _lowered(name: str, batch: int, target_json: str):
    import json

    import torch

    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network

    torch.set_num_threads(1)
    return lower_network(import_network(name, batch), json.loads(target_json), name=name,
                         batch=batch)


@pytest.fixture(scope="session")
def lowered(device):
    """lowered(name, batch) -> NetworkModule, built once per session."""
    import json

    return lambda name, batch=2: _lowered(name, batch, json.dumps(device.target, sort_keys=True))
