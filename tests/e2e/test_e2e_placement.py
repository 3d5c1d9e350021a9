"""A network timed in the two placements of the threads the memory probe tells apart."""

from __future__ import annotations

from cdmpp.e2e.measure import NetworkMeasurement, _in_the_other_placement
from cdmpp.e2e.report import placement_lines
from cdmpp.measure.placement import FAST_MEMORY, SLOW_MEMORY
from cdmpp.types import Measurement, PassStats

FAST, SLOW = 1.2e-3, 2.6e-3  # the probe in the two placements seen on the Zen 5 VM


def _measurement(*passes) -> Measurement:
    stats = tuple(PassStats(tuple(values), 1.0, probe) for values, probe in passes)
    return Measurement(tuple(v for s in stats for v in s.values_s), stats)


def _network(m: Measurement, probe_range) -> NetworkMeasurement:
    return NetworkMeasurement("net", 4, "dev1", 2, m, probe_best_s=probe_range[0],
                              probe_worst_s=probe_range[1])


def test_the_network_best_time_in_each_placement():
    m = _measurement(([0.053, 0.052], FAST), ([0.041, 0.040], SLOW), ([0.052], FAST))
    net = _network(m, (FAST, SLOW))
    assert net.by_placement() == {FAST_MEMORY: 0.052, SLOW_MEMORY: 0.040}
    assert net.latency_s == 0.040 and not net.one_of_two_placements
    assert net.to_json()["by_placement"] == {FAST_MEMORY: 0.052, SLOW_MEMORY: 0.040}
    assert net.to_json()["network_timing"]["pass_memory_probe_s"] == [FAST, SLOW, FAST]
    (line,) = placement_lines(net)
    assert "fast-memory 52.000 ms" in line and "slow-memory 40.000 ms" in line

    one = _network(_measurement(([0.053], FAST), ([0.052], FAST)), (FAST, SLOW))
    assert one.by_placement() == {FAST_MEMORY: 0.052} and one.one_of_two_placements
    (line,) = placement_lines(one)
    assert line.startswith("warning") and FAST_MEMORY in line
    # a device that never showed two placements: nothing to tell apart, nothing to warn about
    single = _network(_measurement(([0.053], FAST), ([0.052], FAST)), (FAST, 1.1 * FAST))
    assert single.by_placement() == {} and placement_lines(single) == []


class _FakeTimer:
    """Probe times in turn; `measure_batch` times the program in the last probe's placement."""

    def __init__(self, probes, network_s):
        self.probes, self.network_s, self.batches = list(probes), network_s, 0

    def memory_probe_s(self):
        self.now = self.probes.pop(0) if self.probes else self.now
        return self.now

    def measure_batch(self, programs):
        self.batches += 1
        ((key, _, _),) = programs
        return {key: _measurement(([self.network_s], self.now), ([self.network_s], self.now))}


def test_a_network_seen_in_one_placement_is_timed_again_in_the_other(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr("time.sleep", lambda _s: None)
    first = _measurement(([0.053], FAST), ([0.052], FAST))
    # a single slow probe is not a placement: two in a row are
    timer = _FakeTimer([FAST, SLOW, FAST, SLOW, SLOW], network_s=0.041)
    m, best, worst = _in_the_other_placement(timer, ("__network__", None, []), first, "dev1",
                                             (FAST, SLOW), wait_s=60)
    assert timer.batches == 1 and timer.probes == [] and len(m.passes) == 4
    assert m.latency_s == 0.041
    assert (best, worst) == (FAST, SLOW)
    assert _network(m, (best, worst)).by_placement() == {FAST_MEMORY: 0.052,
                                                         SLOW_MEMORY: 0.041}


def test_no_second_timing_when_the_other_placement_does_not_come(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = _measurement(([0.053], FAST), ([0.052], FAST))
    timer = _FakeTimer([FAST], network_s=0.041)
    m, best, worst = _in_the_other_placement(timer, ("__network__", None, []), first, "dev1",
                                             (FAST, SLOW), wait_s=0.05)
    assert timer.batches == 0 and m is first and (best, worst) == (FAST, SLOW)
    # both placements seen already: nothing to wait for
    both = _measurement(([0.053], FAST), ([0.041], SLOW))
    m, *_ = _in_the_other_placement(_FakeTimer([], 0.0), ("__network__", None, []), both,
                                    "dev1", (FAST, SLOW), wait_s=60)
    assert m is both


def test_a_kernel_inside_the_network_is_the_mean_over_its_call_sites_of_their_best_run():
    m = _measurement(([0.05], FAST))
    # kernel "a" called at two sites per inference, two inferences profiled: site 1 took
    # 3 then 2 ms, site 2 took 5 then 6 ms; "b" once per inference
    net = NetworkMeasurement("net", 1, "dev1", 2, m,
                             in_network={"a": (3e-3, 5e-3, 2e-3, 6e-3), "b": (1e-3, 4e-3)},
                             in_network_runs=2)
    inside = net.in_network_s()
    assert inside["a"] == (2e-3 + 5e-3) / 2 and inside["b"] == 1e-3
    assert net.to_json()["in_network_calls_s"]["a"] == [3e-3, 5e-3, 2e-3, 6e-3]
    assert NetworkMeasurement("net", 1, "dev1", 2, m).in_network_s() == {}
