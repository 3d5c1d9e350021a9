"""The per-call overhead: stored beside the device, loaded, and calibrated for real."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from e2e_helpers import device, lowered  # noqa: F401  (fixtures)
from e2e_helpers import overhead_calibration as _cal

from cdmpp.e2e import overhead as oh
from cdmpp.e2e.replay import CallOverhead


def test_saved_beside_device_json_and_read_back(tmp_path, device):
    cal = _cal(device.device_id)
    path = oh.save_overhead(cal, device, root=tmp_path)
    assert path == tmp_path / "devices" / device.device_id / "overhead.json"
    assert (path.parent / "device.json").is_file()
    assert oh.read_overhead(device.device_id, tmp_path) == cal
    assert oh.load_overhead(device, calibrate=False, root=tmp_path) == cal
    assert "method" in json.loads(path.read_text())


def test_missing_outdated_or_corrupt_calibrations(tmp_path, device):
    assert oh.read_overhead("nothing", tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no overhead calibration"):
        oh.load_overhead(device, calibrate=False, root=tmp_path)
    oh.save_overhead(_cal("old", version=oh.METHOD_VERSION - 1), root=tmp_path)
    assert oh.read_overhead("old", tmp_path) is None  # another method: recalibrate
    (tmp_path / "devices" / "old" / "overhead.json").write_text("{")
    with pytest.raises(ValueError, match="corrupt"):
        oh.read_overhead("old", tmp_path)
    with pytest.raises(ValueError, match="cannot be stored"):
        oh.save_overhead(_cal("other"), device, root=tmp_path)


def test_calibration_measures_the_vm_on_chains_of_tiny_kernels(device):
    from cdmpp.measure.timing import Protocol

    fast = Protocol(repeat=2, passes=2, max_extra_passes=0, min_repeat_ms=2)
    # a 4 MiB "last-level cache": the cold-weights probe cycles through two copies (18 MiB)
    cal = oh.calibrate_overhead(device, lengths=(1, 16), protocol=fast, cold_llc_bytes=4 * 2**20)
    assert cal.device_id == device.device_id and cal.chain_lengths == (1, 16)
    assert cal.kernel_chain_s[1] > cal.kernel_chain_s[0] > 0
    # the documented method, on the values the calibration records: per call = slope of the
    # kernel chains' times minus the kernel alone; per builtin = slope of the view chains';
    # per invoke = the shortest chain minus its calls
    kernel_slope = (cal.kernel_chain_s[1] - cal.kernel_chain_s[0]) / 15
    view_slope = (cal.view_chain_s[1] - cal.view_chain_s[0]) / 15
    tiny = cal.tiny_kernel_s
    assert cal.overhead.per_call_s == pytest.approx(max(kernel_slope - tiny, 0.0), rel=1e-6)
    assert cal.overhead.per_builtin_s == pytest.approx(max(view_slope, 0.0), rel=1e-6)
    assert cal.overhead.per_invoke_s == pytest.approx(
        max(cal.kernel_chain_s[0] - (tiny + cal.overhead.per_call_s), 0.0), rel=1e-6)
    assert set(cal.values) == {"kernel_chain_1", "kernel_chain_16", "view_chain_1",
                               "view_chain_16", "tiny_kernel"}
    assert all(len(v) == 4 for v in cal.values.values())  # every repeat of every pass kept
    assert cal.kernel_chain_s == tuple(min(cal.values[f"kernel_chain_{n}"]) for n in (1, 16))
    assert cal.view_chain_s == tuple(min(cal.values[f"view_chain_{n}"]) for n in (1, 16))
    assert cal.tiny_kernel_s == min(cal.values["tiny_kernel"])
    # the cold-weights probes: extra seconds per weight byte cycling through the copies, the
    # median over passes; the tuned probe's weights are the weight and the bias
    cold = cal.cold
    assert cold.llc_bytes == 4 * 2**20
    # two copies (18 MiB) are already beyond the 4 MiB cache: nothing to probe below it
    assert cold.below_llc == () and cold.cache_bytes == 4 * 2**20
    assert cold.plain.weight_bytes == 4 * 768 * 3072
    assert cold.tuned.weight_bytes == 4 * (768 * 3072 + 3072)
    for probe in (cold.plain, cold.tuned):
        assert probe.cycled_bytes == 2 * probe.weight_bytes and min(probe.warm_s) > 0
        assert len(probe.warm_s) == len(probe.cycled_s) == 7
        extra = sorted(c - w for c, w in zip(probe.cycled_s, probe.warm_s))[3]
        assert probe.s_per_byte == pytest.approx(max(extra, 0.0) / probe.weight_bytes)
    # the memory-streaming probe: 64 MiB read and 64 written, seven passes, the median one
    stream = cal.activations
    assert stream.bytes_moved == 2 * 64 * 2**20 and len(stream.pass_s) == 7
    assert stream.s_per_byte == pytest.approx(sorted(stream.pass_s)[3] / stream.bytes_moved)
    assert oh.OverheadCalibration.from_json(cal.to_json()) == cal


def test_the_streaming_probe_times_its_median_call_pass_by_pass(device):
    from cdmpp.e2e.activations import StreamProbe, measure_activation_cost

    probe = measure_activation_cost(device, mib=1, passes=3, calls=2)
    assert probe.bytes_moved == 2 * 2**20 and len(probe.pass_s) == 3 and min(probe.pass_s) > 0
    assert StreamProbe.from_json(probe.to_json()) == probe
    with pytest.raises(ValueError, match="passes and calls"):
        measure_activation_cost(device, passes=0)


def test_a_stored_streaming_probe_without_passes_is_a_clear_error(tmp_path):
    from cdmpp.e2e.activations import StreamProbe

    cal = replace(_cal("dev"), activations=StreamProbe(100, (1e-6,)))
    path = oh.save_overhead(cal, root=tmp_path)
    data = json.loads(path.read_text())
    data["activations"]["pass_s"] = []  # a hand-edited or truncated file
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"overhead\.json: not an overhead calibration.*pass"):
        oh.read_overhead("dev", tmp_path)


def test_every_kernel_call_pays_its_activations_at_the_calibrated_rate(
        tmp_path, monkeypatch, device, lowered):
    from e2e_helpers import StubEstimator

    from cdmpp.e2e.activations import StreamProbe
    from cdmpp.e2e.graph import from_relax
    from cdmpp.e2e.predict import predict_network

    net = lowered("tiny_mlp")
    activations = from_relax(net.mod).activation_bytes()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    # 100 bytes moved in 1e-6 s per pass: 1e-8 s per byte
    oh.save_overhead(replace(_cal(device.device_id), overhead=CallOverhead(0.0, 0.0, 0.0),
                             activations=StreamProbe(100, (1e-6, 1e-6, 5e-6))), device)
    r = predict_network(StubEstimator(default_s=1e-5), net, device=device)
    assert r.replay.overhead.per_activation_byte_s == pytest.approx(1e-8)
    assert r.activations_s() == pytest.approx(activations * 1e-8)
    assert r.predicted_s == pytest.approx(2e-5 + activations * 1e-8)
    js = r.to_json()
    assert js["activation_bytes"] == activations
    assert js["overhead"]["activations_s"] == pytest.approx(activations * 1e-8)


def test_cold_weights_cost_only_networks_whose_weights_exceed_the_last_level_cache(
        tmp_path, monkeypatch, device, lowered):
    from e2e_helpers import StubEstimator

    from cdmpp.e2e.cold import ColdProbe, ColdWeights
    from cdmpp.e2e.graph import from_relax
    from cdmpp.e2e.predict import predict_network

    def probe(extra_s):  # 1 weight byte, one pass
        return ColdProbe(weight_bytes=1, cycled_bytes=2, warm_s=(1.0,), cycled_s=(1.0 + extra_s,))

    cold = ColdWeights(llc_bytes=1000, plain=probe(2e-9), tuned=probe(5e-9))
    assert cold.at(1000) == 0.0 and cold.at(1001) == pytest.approx(2e-9)
    assert cold.at(1000, tuned=True) == 0.0 and cold.at(1001, tuned=True) == pytest.approx(5e-9)
    assert ColdWeights(1000, probe(2e-9)).at(1001, tuned=True) == pytest.approx(2e-9)
    assert ColdWeights.from_json(cold.to_json()) == cold
    net = lowered("tiny_mlp")
    weights = from_relax(net.mod).weight_bytes()  # 3,232 bytes
    for llc in (1000, 10_000):  # below and above the network's weights
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / str(llc)))
        oh.save_overhead(replace(_cal(device.device_id), overhead=CallOverhead(0.0, 0.0, 0.0),
                                 cold=ColdWeights(llc, ColdProbe(1, 2, (1.0,), (1.0 + 2e-9,)))),
                       device)
        # overhead="auto": the device's calibration, cold weights included
        r = predict_network(StubEstimator(default_s=1e-5), net, device=device)
        extra = weights * 2e-9 if weights > llc else 0.0
        assert r.predicted_s == pytest.approx(2e-5 + extra)
        assert r.replay.overhead.per_weight_byte_s == pytest.approx(2e-9 if extra else 0.0)
        assert r.weights_s() == pytest.approx(extra)
        assert r.to_json()["weight_bytes"] == weights
        # an explicit overhead is taken as given
        explicit = predict_network(StubEstimator(default_s=1e-5), net, device=device,
                                   overhead=CallOverhead(0.0, 0.0, 0.0))
        assert explicit.predicted_s == pytest.approx(2e-5)


def test_the_cache_a_vm_has_is_the_largest_total_of_copies_below_half_the_extra():
    from cdmpp.e2e.cold import ColdProbe, ColdWeights

    def probe(copies, extra_s):  # 1 weight byte, one pass
        return ColdProbe(1, copies, (1.0,), (1.0 + extra_s,))

    full = probe(1000, 4e-9)  # the extra beyond the reported cache (1,000 bytes)
    cold = ColdWeights(1000, full, below_llc=(probe(2, 0.0), probe(4, 1e-9), probe(8, 2.5e-9)))
    assert cold.cache_bytes == 4  # 8 copies cost over half the extra: the cache holds 4
    assert cold.at(4) == 0.0 and cold.at(5) == pytest.approx(4e-9)
    assert ColdWeights(1000, full, below_llc=(probe(2, 3e-9),)).cache_bytes == 1  # one copy
    # none costs half: the reported cache; a probe with no extra at all: the same
    assert ColdWeights(1000, full, below_llc=(probe(2, 1e-9),)).cache_bytes == 1000
    assert ColdWeights(1000, probe(1000, 0.0), below_llc=(probe(2, 0.0),)).cache_bytes == 1000
    assert ColdWeights.from_json(cold.to_json()) == cold
    assert cold.to_json()["cache_bytes"] == 4


def test_the_cache_is_probed_below_the_reported_one_until_a_total_costs_half(monkeypatch):
    from cdmpp.e2e import cold as cw

    plain = cw.ColdProbe(10, 1000, (1.0,), (1.0 + 40e-9,))  # 4e-9 s per byte beyond the cache
    extra = {20: 0.0, 40: 1e-9, 80: 2.5e-9, 160: 4e-9}  # per byte, by total cycled through
    timed = []

    def fake_time_probe(module, info, weight_args, cycled_bytes, runs, passes):
        timed.append((cycled_bytes, passes))
        return cw.ColdProbe(10, cycled_bytes, (1.0,), (1.0 + 10 * extra[cycled_bytes],))

    monkeypatch.setattr(cw, "_time_probe", fake_time_probe)
    probes = cw._below_llc((None, None, (1,)), plain, 1000, runs=4)
    # 2, 4, 8 copies; 16 would cost no more to know: it stops at the first costing half
    assert timed == [(20, cw.CACHE_PASSES), (40, cw.CACHE_PASSES), (80, cw.CACHE_PASSES)]
    assert cw.ColdWeights(1000, plain, below_llc=probes).cache_bytes == 40
    assert cw._below_llc((None, None, (1,)), plain, 30, runs=4) == probes[:1]  # 20 < 30 only
    no_extra = cw.ColdProbe(10, 1000, (1.0,), (1.0,))
    assert cw._below_llc((None, None, (1,)), no_extra, 1000, runs=4) == ()  # nothing to find


@pytest.mark.parametrize("mcpu", ["haswell", "x86-64-v2"])
def test_the_shipped_tuned_probe_builds_for_other_isa_levels(device, mcpu):
    """The tuned probe's trace (tuned on Zen 5, AVX-512) is replayed on its workload for any
    target: it must build and compute the matmul for an AVX2 and an SSE4.2 target too."""
    import numpy as np

    from cdmpp.e2e.cold import tuned_probe_kernel
    from cdmpp.measure.build import ENTRY
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    module, info, weight_args = tuned_probe_kernel({**device.target, "mcpu": mcpu})
    assert [info[i][2] for i in weight_args] == [[768, 3072], [3072]]  # weight, bias
    x, w, b, out = random_args(info, tvm.cpu())
    module.get_function(ENTRY)(x, w, b, out)
    expected = x.numpy() @ w.numpy() + b.numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-3)
