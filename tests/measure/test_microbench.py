"""Device throughput microbenchmarks: real TVM kernels, short runs."""

from __future__ import annotations

import math
import platform

import pytest

from cdmpp.device import local_device
from cdmpp.measure.microbench import measure_device, peak_gflops


def test_measure_device_fills_positive_figures_and_keeps_the_id():
    import os

    before = (os.sched_getaffinity(0), os.environ.get("TVM_NUM_THREADS"))
    device = local_device(threads=1)
    measured = measure_device(device)
    # timing with one thread pins TVM's calling thread: the process gets its cores back after
    assert (os.sched_getaffinity(0), os.environ.get("TVM_NUM_THREADS")) == before
    assert device.peak_gflops == 0.0  # the input is not modified
    for value in (measured.peak_gflops, measured.memory_gbps):
        assert value > 0 and math.isfinite(value)
    assert measured.device_id == device.device_id
    assert measured.target == device.target and measured.threads == device.threads


def test_peak_runs_for_a_narrower_target_than_the_host():
    # Which target is faster is not asserted: a shared machine's noise can reorder them.
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 CPU names")
    value = peak_gflops(local_device(threads=1, mcpu="x86-64-v2"))
    assert value > 0 and math.isfinite(value)


def test_the_best_round_is_kept(monkeypatch):
    # one round on a busy host can run at half speed: it must not become the device's figure
    import cdmpp.measure.microbench as mb

    peaks, streams = iter([117.1, 229.8, 222.0]), iter([20.5, 41.0, 39.9])
    monkeypatch.setattr(mb, "peak_gflops", lambda device: next(peaks))
    monkeypatch.setattr(mb, "memory_gbps", lambda device: next(streams))
    monkeypatch.setattr(mb, "ROUNDS", 3)
    measured = measure_device(local_device(threads=1))
    assert (measured.peak_gflops, measured.memory_gbps) == (229.8, 41.0)


def test_measured_local_device_measures_once_and_keeps_the_figures(tmp_path, monkeypatch):
    import dataclasses

    from cdmpp.measure import collect
    from cdmpp.measure.microbench import measured_local_device

    calls = []

    def fake_measure(device):  # the figures' meaning is tested above; here, the caching
        calls.append(device.device_id)
        return dataclasses.replace(device, peak_gflops=210.5, memory_gbps=33.25)

    monkeypatch.setattr(collect, "measure_device", fake_measure)
    first = measured_local_device(threads=1, root=tmp_path)
    again = measured_local_device(threads=1, root=tmp_path)
    assert calls == [first.device_id] and first == again
    assert (first.peak_gflops, first.memory_gbps) == (210.5, 33.25)
    assert first.device_id == local_device(threads=1).device_id


def test_the_overhead_calibration_keeps_a_measured_device_json(tmp_path):
    import dataclasses

    from cdmpp.device import load_device, save_device
    from cdmpp.e2e import overhead
    from cdmpp.e2e.replay import CallOverhead
    from cdmpp.paths import device_dir

    device = local_device(threads=1)
    directory = device_dir(device.device_id, tmp_path)
    directory.mkdir(parents=True)
    save_device(directory, dataclasses.replace(device, peak_gflops=210.5, memory_gbps=33.25))
    cal = overhead.OverheadCalibration(device.device_id, 1, CallOverhead(1e-6, 1e-7, 1e-6),
                                       overhead.METHOD_VERSION, "2026-01-01T00:00:00+00:00",
                                       (1, 2), (1e-6, 2e-6), (1e-6, 1e-6), 1e-8, {})
    overhead.save_overhead(cal, device, root=tmp_path)
    assert load_device(directory).peak_gflops == 210.5  # not replaced by the unmeasured one
