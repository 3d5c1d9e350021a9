"""The meta_schedule runner (`cdmpp.tune.runner`) times with the device's threads."""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

import cdmpp.tune
from cdmpp.tvm_env import meta_schedule
from conftest import strip_capture_handlers_from_meta_schedule_logger

# the probe below runs in the runner's worker process, which cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])
CORES = len(os.sched_getaffinity(0))


def _tvm_threads_in_worker() -> int:
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def _worker_threads(runner) -> int:
    return runner.pool.submit(_tvm_threads_in_worker).result()


@pytest.mark.parametrize("threads", [1, pytest.param(2, marks=pytest.mark.skipif(
    CORES < 2, reason="one core"))])
def test_the_worker_times_with_the_threads_asked_for(threads, monkeypatch):
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    assert _worker_threads(cdmpp.tune.runner(threads)) == threads


def test_tune_network_hands_the_tuner_a_runner_with_the_devices_threads(tmp_path, monkeypatch):
    from cdmpp.device import local_device
    from cdmpp.e2e.networks import import_network
    from cdmpp.tune.network import tune_network

    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    # a count TVM's own runner would not use (on x86 it takes half the hardware threads)
    tvms_own = _worker_threads(meta_schedule().runner.LocalRunner())
    if tvms_own == 1 and CORES < 2:
        pytest.skip("one core: no other count to tell the runners apart")
    device = local_device(2 if tvms_own == 1 else 1)
    seen = {}

    def fake_tune_tasks(**kwargs):  # the search itself is tested in test_builder.py
        seen["threads"] = _worker_threads(kwargs["runner"])

    monkeypatch.setattr(meta_schedule(), "tune_tasks", fake_tune_tasks)
    strip_capture_handlers_from_meta_schedule_logger()
    tune_network(import_network("tiny_mlp"), device, tmp_path / "t", trials=1,
                 cost_model="random")
    assert seen["threads"] == device.threads


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="threads"):
        cdmpp.tune.runner(0)
    with pytest.raises(ValueError, match="timeout_s"):
        cdmpp.tune.runner(1, timeout_s=0)
