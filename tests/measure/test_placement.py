"""The memory probe, the placements it tells apart, and the device's probe history."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cdmpp.measure.placement import (FAST_MEMORY, PROBE_FILE, SLOW_MEMORY, has_two_placements,
                                     memory_state, remember_memory_probe)


def test_a_probe_is_placed_against_the_device_best():
    assert memory_state(1.2e-3, 1.2e-3) == FAST_MEMORY
    assert memory_state(1.7e-3, 1.2e-3) == FAST_MEMORY  # within 1.5x of the best
    assert memory_state(2.6e-3, 1.2e-3) == SLOW_MEMORY
    assert memory_state(None, 1.2e-3) is None and memory_state(1.2e-3, None) is None
    assert has_two_placements(1.2e-3, 2.6e-3)
    assert not has_two_placements(1.2e-3, 1.4e-3) and not has_two_placements(None, 2e-3)


def test_the_probe_history_keeps_the_fastest_probe_and_slowest_run(tmp_path):
    path = tmp_path / "devices" / "dev1" / PROBE_FILE
    assert remember_memory_probe("dev1", [2.6e-3, 2.5e-3, 2.6e-3], tmp_path) == (2.5e-3, 2.6e-3)
    assert remember_memory_probe("dev1", [1.2e-3, None], tmp_path) == (1.2e-3, 2.6e-3)
    kept = json.loads(path.read_text())
    assert (kept["best_s"], kept["worst_s"]) == (1.2e-3, 2.6e-3)
    # one disturbed probe in a run does not make the slowest placement: the run's median does
    assert remember_memory_probe("dev3", [1.2e-3] * 4 + [1.9e-3], tmp_path) == (1.2e-3, 1.2e-3)
    assert remember_memory_probe("dev2", [3e-3], tmp_path) == (3e-3, 3e-3)  # devices apart
    path.write_text("{not json")
    assert remember_memory_probe("dev1", [2e-3], tmp_path) == (2e-3, 2e-3)  # corrupt: replaced
    with pytest.raises(ValueError, match="positive"):
        remember_memory_probe("dev1", [None], tmp_path)


def test_the_device_placements_are_described(tmp_path):
    from cdmpp.measure.placement import describe_placements

    assert "not probed yet" in describe_placements("dev1", tmp_path)
    remember_memory_probe("dev1", [2.5e-3, 2.6e-3], tmp_path)
    assert describe_placements("dev1", tmp_path).startswith("placements one seen")
    remember_memory_probe("dev1", [1.2e-3], tmp_path)
    line = describe_placements("dev1", tmp_path)
    assert line.startswith("placements two seen") and "1.20-2.55 ms" in line


def test_an_unwritable_cache_does_not_lose_the_probe(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert remember_memory_probe("dev1", [2e-3], blocker) == (2e-3, 2e-3)
    assert "could not record" in capsys.readouterr().err


def test_the_probe_kernel_streams_and_the_timer_keeps_its_time():
    from cdmpp.device import local_device
    from cdmpp.measure.placement import memory_probe_kernel
    from cdmpp.measure.timing import Protocol, Timer, random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    target = local_device().target
    mod, args_info = memory_probe_kernel(target, mib=1)
    a, b = random_args(args_info, tvm.cpu())
    mod["main"](a, b)
    np.testing.assert_allclose(b.numpy(), 2 * a.numpy())
    assert args_info[0] == ["TENSOR", "float32", [256 * 1024]]

    timer = Timer(Protocol(repeat=2, min_repeat_ms=1, passes=2, max_extra_passes=0,
                           memory_probe=True), target)
    m = timer.measure_batch([("probe", mod, [a, b])])["probe"]
    assert len(m.passes) == 2 and all(p.memory_probe_s > 0 for p in m.passes)
    plain = Timer(Protocol(repeat=2, min_repeat_ms=1, passes=2, max_extra_passes=0), target)
    m = plain.measure_batch([("probe", mod, [a, b])])["probe"]
    assert all(p.memory_probe_s is None for p in m.passes)  # the collector's default: no probe
