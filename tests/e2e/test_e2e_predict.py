"""Whole-network prediction with a stub estimator; the `cdmpp e2e` command."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import StubEstimator, device, lowered  # noqa: F401  (fixtures)

from cdmpp.e2e.predict import predict_network
from cdmpp.e2e.replay import CallOverhead, MissingDurationError
from cdmpp.e2e.report import JSON_KEYS


def test_prediction_is_the_replay_of_kernel_predictions_plus_overhead(lowered):
    net = lowered("tiny_mlp")
    first, second = (k.name for k in net.kernels)
    est = StubEstimator({first: 3e-5, second: 1e-5})
    overhead = CallOverhead(per_call_s=1e-6, per_builtin_s=0.0, per_invoke_s=2e-6)
    r = predict_network(est, net, overhead=overhead)
    assert r.predicted_s == pytest.approx(3e-5 + 1e-5 + 2 * 1e-6 + 2e-6)
    assert [(k.name, k.calls) for k in r.kernels] == [(first, 1), (second, 1)]
    assert r.kernels[0].predicted_s == pytest.approx(3e-5)
    assert r.kernels[0].total_s == pytest.approx(3e-5 + 1e-6)
    assert r.critical_path_kernels() == (first, second)
    assert est.calls == 1  # one batched predict for the whole network
    assert r.timings_s["prediction_s"] >= 0  # its wall time is benchmarks/e2e.py's business


def _tiny_mlp_predicted(lowered):
    """tiny_mlp predicted at 3e-5 and 1e-5 s a kernel, 1 us a call and 2 us an inference."""
    net = lowered("tiny_mlp")
    first, second = (k.name for k in net.kernels)
    overhead = CallOverhead(per_call_s=1e-6, per_builtin_s=0.0, per_invoke_s=2e-6)
    r = predict_network(StubEstimator({first: 3e-5, second: 1e-5}), net, overhead=overhead)
    return r, net, first, second


def test_the_tuning_database_timings_are_replayed_beside_the_prediction(lowered):
    from cdmpp.e2e.report import format_table

    r, _, first, second = _tiny_mlp_predicted(lowered)
    both = r.with_database({first: 2e-5, second: 1e-5})
    assert both.database_replay_s == pytest.approx(2e-5 + 1e-5 + 2 * 1e-6 + 2e-6)
    assert both.predicted_s == r.predicted_s  # the prediction itself is unchanged
    assert {k.name: k.database_s for k in both.kernels} == {first: 2e-5, second: 1e-5}
    table = format_table(both)
    assert "replay of the tuning database's timings: 0.034 ms (the prediction is +29.4%" in table
    assert "db ms/call" in table and "+50%" in table  # the first kernel: 3e-5 vs 2e-5
    part = r.with_database({first: 2e-5})  # the database lacks a kernel: no total
    assert part.database_replay_s is None and part.to_json()["database_replay_s"] is None
    assert "the tuning database times 1 of the 2 kernels" in format_table(part)
    # one queue, a chain: the critical path is both calls (kernel time + per-call overhead)
    assert f"critical path 2 of 2 calls, 0.042 ms busy; its longest call {first}" in table


def test_a_database_timed_here_far_from_the_prediction_gives_a_hint(lowered):
    from cdmpp.e2e.report import format_table

    r, _, first, second = _tiny_mlp_predicted(lowered)  # 3e-5 and 1e-5 s a kernel
    far = r.with_database({first: 2e-5, second: 1e-5}, timed_here=True)  # predicted +29.4%
    assert far.to_json()["database_timed_here"] is True
    assert "hint: the tuning database was timed on this device" in format_table(far)
    near = r.with_database({first: 2.5e-5, second: 1e-5}, timed_here=True)  # +12.8%
    assert "hint: the tuning database" not in format_table(near)
    elsewhere = r.with_database({first: 2e-5, second: 1e-5})  # another device's timings
    assert "hint: the tuning database" not in format_table(elsewhere)


def test_a_prediction_anchored_on_another_devices_timings(lowered):
    from cdmpp.e2e.report import format_table

    r, _, first, second = _tiny_mlp_predicted(lowered)  # 3e-5 and 1e-5 s a kernel
    # the database's device: timed 2e-5 and 1e-5, its model predicting 6e-5 and 1e-5
    both = r.with_database({first: 2e-5, second: 1e-5}).with_anchor(
        {first: 6e-5, second: 1e-5}, "there")
    # each kernel: its timing there x this model's prediction / that device's model's
    assert {k.name: k.anchored_s for k in both.kernels} == pytest.approx(
        {first: 2e-5 * 3e-5 / 6e-5, second: 1e-5})
    assert both.anchored_replay_s == pytest.approx(1e-5 + 1e-5 + 2 * 1e-6 + 2e-6)
    assert both.predicted_s == r.predicted_s  # the prediction itself is unchanged
    assert both.to_json()["anchored_replay_s"] == both.anchored_replay_s
    assert both.to_json()["anchor_model"] == "there"
    assert both.to_json()["kernels"][0]["anchored_s"] == pytest.approx(1e-5)
    assert ("anchored on the database's timings: 0.024 ms (a kernel's time there x this "
            "model's prediction / there's for that device)") in format_table(both)
    assert "anch ms/call" in format_table(both) and "anch ms/call" not in format_table(r)
    # a kernel the database does not time (or its model cannot) keeps this model's prediction
    part = r.with_database({first: 2e-5}).with_anchor({first: 6e-5, second: 1e-5}, "there")
    assert {k.name: k.anchored_s for k in part.kernels} == pytest.approx(
        {first: 1e-5, second: 1e-5})
    none = r.with_database({first: 2e-5, second: 1e-5}).with_anchor({first: 0.0}, "there")
    assert {k.name: k.anchored_s for k in none.kernels} == pytest.approx(
        {first: 3e-5, second: 1e-5})
    assert r.anchored_replay_s is None and "anchored" not in format_table(r)


def test_kernels_timed_inside_the_network_are_replayed_beside_those_timed_alone(lowered):
    from cdmpp.e2e.measure import NetworkMeasurement
    from cdmpp.e2e.report import format_table
    from cdmpp.types import Measurement, PassStats

    r, net, first, second = _tiny_mlp_predicted(lowered)
    timing = Measurement((6e-5,), (PassStats((6e-5,), 1.0),))
    alone = {first: Measurement((2e-5,), (PassStats((2e-5,), 1.0),)),
             second: Measurement((1e-5,), (PassStats((1e-5,), 1.0),))}
    m = NetworkMeasurement("tiny_mlp", 1, "dev", 2, timing, alone,
                           in_network={first: (3e-5,), second: (2e-5,)}, in_network_runs=1)
    both = r.with_measurement(m)
    assert both.measured_kernels_replay_s == pytest.approx(2e-5 + 1e-5 + 2e-6 + 2e-6)
    assert both.in_network_replay_s == pytest.approx(3e-5 + 2e-5 + 2e-6 + 2e-6)
    assert {k.name: k.in_network_s for k in both.kernels} == {first: 3e-5, second: 2e-5}
    assert both.to_json()["in_network_replay_s"] == both.in_network_replay_s
    table = format_table(both)
    # 0.054 ms inside vs 0.034 alone vs 0.060 measured
    assert ("replay of the kernels timed inside the network: 0.054 ms (-10.0% vs measured); "
            "+58.8% vs the replay of them alone") in table
    assert "not charged" in table  # tiny_mlp's weights, no cold-weights term
    assert "in net ms/call" in table
    # with weights from memory in the replay: kernels timed alone get the term, kernels timed
    # inside the network already paid it
    cold = CallOverhead(per_call_s=1e-6, per_invoke_s=2e-6, per_weight_byte_s=1e-9)
    weights = sum(n.weight_bytes for n in both.graph.nodes)
    with_cold = predict_network(StubEstimator({first: 3e-5, second: 1e-5}), net,
                                overhead=cold).with_measurement(m)
    assert with_cold.measured_kernels_replay_s == pytest.approx(
        both.measured_kernels_replay_s + weights * 1e-9)
    assert with_cold.in_network_replay_s == pytest.approx(both.in_network_replay_s)
    assert f"weights    {weights / 2**20:.1f} MiB of matrices read per inference, from memory" in \
        format_table(with_cold)
    # and so for activations from memory
    stream = CallOverhead(per_call_s=1e-6, per_invoke_s=2e-6, per_activation_byte_s=1e-9)
    activations = both.graph.activation_bytes()
    with_stream = predict_network(StubEstimator({first: 3e-5, second: 1e-5}), net,
                                  overhead=stream).with_measurement(m)
    assert with_stream.measured_kernels_replay_s == pytest.approx(
        both.measured_kernels_replay_s + activations * 1e-9)
    assert with_stream.in_network_replay_s == pytest.approx(both.in_network_replay_s)
    assert "activations 0.0 MiB read by the kernels per inference" in format_table(with_stream)
    assert "activations" not in table  # no streaming probe, no charge
    # a measurement without the profile (an older one) leaves it out
    plain = r.with_measurement(NetworkMeasurement("tiny_mlp", 1, "dev", 2, timing, alone))
    assert plain.in_network_replay_s is None and "inside the network" not in format_table(plain)


def test_kernels_median_times_alone_are_replayed_beside_their_best(lowered):
    from cdmpp.e2e.measure import NetworkMeasurement
    from cdmpp.e2e.report import format_table
    from cdmpp.types import Measurement, PassStats

    r, _, first, second = _tiny_mlp_predicted(lowered)
    timing = Measurement((4e-5,), (PassStats((4e-5,), 1.0),))
    # best 2e-5 and 1e-5, medians 3e-5 and 1.5e-5
    alone = {first: Measurement((2e-5, 3e-5, 5e-5), (PassStats((2e-5, 3e-5, 5e-5), 1.0),)),
             second: Measurement((1e-5, 1.5e-5, 4e-5), (PassStats((1e-5, 1.5e-5, 4e-5), 1.0),))}
    m = NetworkMeasurement("tiny_mlp", 1, "dev", 2, timing, alone)
    assert m.kernel_median_s() == {first: pytest.approx(3e-5), second: pytest.approx(1.5e-5)}
    both = r.with_measurement(m)
    assert both.measured_kernels_replay_s == pytest.approx(2e-5 + 1e-5 + 4e-6)
    assert both.measured_kernels_median_replay_s == pytest.approx(3e-5 + 1.5e-5 + 4e-6)
    assert both.to_json()["measured_kernels_median_replay_s"] == \
        both.measured_kernels_median_replay_s
    # 0.049 ms against 0.040 measured
    assert "replay of their median times alone: 0.049 ms (+22.5% vs measured" in format_table(both)
    # without a measurement there is none
    assert r.measured_kernels_median_replay_s is None
    assert "median times alone" not in format_table(r)


def test_the_table_says_when_the_network_was_timed(lowered):
    from dataclasses import replace

    from cdmpp.e2e.measure import NetworkMeasurement
    from cdmpp.e2e.report import format_table
    from cdmpp.types import Measurement, PassStats

    r, *_ = _tiny_mlp_predicted(lowered)
    timing = Measurement((4e-5,), (PassStats((4e-5,), 1.0),))
    m = NetworkMeasurement("tiny_mlp", 1, "dev", 2, timing, {},
                           started_utc="2026-11-28T15:18:10+00:00",
                           ended_utc="2026-11-28T15:58:03+00:00")
    assert "measured   0.04 ms (timed 2026-11-28 15:18-15:58 UTC)" in \
        format_table(r.with_measurement(m))
    overnight = replace(m, ended_utc="2026-11-29T00:10:00+00:00")
    assert "(timed 2026-11-28 15:18-2026-11-29 00:10 UTC)" in \
        format_table(r.with_measurement(overnight))
    # a measurement that does not say (made before it was recorded) prints the total alone
    assert "measured   0.04 ms\n" in format_table(r.with_measurement(
        replace(m, started_utc=None, ended_utc=None)))


def _timed(result, network_s, alone_s: dict):
    """`result` with the network timed at `network_s` and each kernel alone at `alone_s`."""
    from cdmpp.e2e.measure import NetworkMeasurement
    from cdmpp.types import Measurement, PassStats

    def once(t):
        return Measurement((t,), (PassStats((t,), 1.0),))

    return result.with_measurement(NetworkMeasurement(
        "tiny_mlp", 1, "dev", 2, once(network_s), {k: once(t) for k, t in alone_s.items()}))


def test_untuned_kernels_far_from_their_times_alone_suggest_a_rescale(lowered):
    from dataclasses import replace

    from cdmpp.e2e.report import format_table

    r, _, first, second = _tiny_mlp_predicted(lowered)  # 0.044 ms predicted

    def measured(first_alone_s):
        return _timed(r, 5e-5, {first: first_alone_s, second: 1e-5})

    fast = measured(2e-5)  # kernels alone replay to 0.034 ms: the model is 1.29x
    assert "hint       the prediction is 1.29x the replay of the kernels timed alone here: " \
           "this machine likely runs faster" in format_table(fast)
    assert "runs slower" in format_table(measured(4.4e-5))  # 0.058 ms: 0.76x
    assert "hint" not in format_table(measured(2.9e-5))  # 0.043 ms: within 5%
    # tuned kernels: their error is the model's on searched programs, not the device's speed
    tuned = replace(fast, kernels=tuple(replace(k, tuned=True) for k in fast.kernels))
    assert "hint" not in format_table(tuned)
    assert "hint" not in format_table(r)  # nothing timed, nothing to say


def test_kernels_far_off_their_prediction_suggest_measuring_them_not_a_rescale(lowered):
    from cdmpp.e2e.report import format_table

    r, _, first, second = _tiny_mlp_predicted(lowered)  # 3e-5 and 1e-5 s predicted

    def measured(first_alone_s, second_alone_s):
        return format_table(_timed(r, 1e-4, {first: first_alone_s, second: second_alone_s}))

    # the first kernel 2.5x its prediction, 88% of the time alone: measure the network's kernels
    # (tiny_mlp is lowered at batch 2)
    table = measured(7.5e-5, 1e-5)
    assert f"hint       1 kernel(s) more than 1.5x off their prediction take 88% of the " \
           f"kernels' time alone (the largest: {first}, 2.50x)" in table
    assert "--kernels-of tiny_mlp --batches 2 --programs-per-task 0" in table
    assert "--balance" in table and "calibrate --rescale" not in table  # not both
    # the second 2x off but 14% of the time alone: too little to say so
    assert "kernel(s) more than" not in measured(3e-5, 0.5e-5)
    # every kernel 1.3x: the machine's speed, which the rescale hint is for
    uniform = measured(3.9e-5, 1.3e-5)
    assert "kernel(s) more than" not in uniform and "calibrate --rescale" in uniform


def test_json_has_the_stated_keys(lowered):
    r = predict_network(StubEstimator(), lowered("tiny_branch"), overhead=None)
    d = json.loads(json.dumps(r.to_json()))
    assert set(JSON_KEYS) <= set(d)
    assert d["network"] == "tiny_branch" and d["batch"] == 2 and d["measured_s"] is None
    assert d["predicted_s"] == pytest.approx(4 * 1e-4)  # 4 kernels, one queue, no overhead
    assert {"name", "calls", "predicted_s"} <= set(d["kernels"][0])


def test_an_invalid_kernel_prediction_is_an_error_naming_the_kernel(lowered):
    net = lowered("tiny_mlp")
    bad = net.kernels[1].name
    with pytest.raises(RuntimeError, match=bad):
        predict_network(StubEstimator({bad: float("nan")}), net, overhead=None)


def test_a_kernel_cdmpp_cannot_featurize_needs_a_given_duration(device):
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm import relax
    from tvm.script import relax as R

    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x))
            z = bb.emit(relax.call_dps_packed("my_lib.gemm", [y],
                                               out_ty=R.Tensor((4, 4), "float32")))
            out = bb.emit_output(relax.op.add(z, y))
        bb.emit_func_output(out)
    net = lower_network(bb.get(), device.target)
    with pytest.raises(MissingDurationError, match="my_lib.gemm"):
        predict_network(StubEstimator(), net, overhead=None)
    r = predict_network(StubEstimator(), net, overhead=None, extra_kernel_s={"my_lib.gemm": 1.0})
    assert r.predicted_s == pytest.approx(1.0 + 2e-4)
    assert [n.kind for n in r.graph.nodes] == ["call_tir", "call_dps_packed", "call_tir"]
    assert r.graph.nodes[2].inputs == (0, 1)


@pytest.fixture
def model_loads() -> list:
    """(spec, for_device) of each model `cdmpp e2e` loads under `cli_env`."""
    return []


@pytest.fixture
def cli_env(monkeypatch, tmp_path, stored_overhead, model_loads):
    """`cdmpp e2e` with the stub estimator and a stored overhead calibration (no timing)."""
    from cdmpp.model import registry

    asked = model_loads
    monkeypatch.setattr(registry, "load_estimator", lambda spec, for_device=None: asked.append(
        (spec, for_device)) or StubEstimator())
    monkeypatch.setattr(registry, "read_meta", lambda spec: {"path": str(spec)})
    monkeypatch.setattr(registry, "fitted_device_id", lambda spec: "0123456789abcdef")
    monkeypatch.setattr(registry, "fitted_device", lambda spec: None)  # no device.json
    monkeypatch.chdir(tmp_path)  # the default PNG (e2e-<network>.png) lands here, not in git
    return tmp_path


def test_cli_prints_the_table_and_writes_json_and_png(cli_env, capsys):
    from cdmpp.cli.main import main

    out, png = cli_env / "r.json", cli_env / "r.png"
    rc = main(["e2e", "--network", "tiny_mlp", "--batch", "2", "--model", "stub", "--measure",
               "--json", str(out), "--plot", str(png)])
    assert rc == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "predicted" in text and "measured" in text and "error" in text
    # the stub "was fitted" for another device: e2e says so
    assert "fitted for device 0123456789abcdef" in captured.err
    d = json.loads(out.read_text())
    assert set(JSON_KEYS) <= set(d)
    assert d["network"] == "tiny_mlp" and d["batch"] == 2 and d["measured_s"] > 0
    assert d["predicted_s"] == pytest.approx(2 * (1e-4 + 1e-6) + 1e-6)
    assert all(k["measured_s"] > 0 for k in d["kernels"])
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_cli_for_device_asks_the_model_about_that_device(cli_env, model_loads, capsys,
                                                         monkeypatch):
    import dataclasses

    from cdmpp.cli.main import main
    from cdmpp.device import local_device
    from cdmpp.measure import microbench
    from cdmpp.model import registry

    here = local_device()
    args = ["e2e", "--network", "tiny_mlp", "--model", "stub", "--plot", "none"]
    # a model trained on this device's records: asked by its id
    monkeypatch.setattr(registry, "device_vectors", lambda spec: {here.device_id: [1.0] * 9})
    assert main(args + ["--for-device", "local"]) == 0
    assert model_loads == [("stub", here.device_id)]
    assert "note:" not in capsys.readouterr().err  # it predicts for this one
    # one that never saw it: zero-shot, from this machine measured once
    measured = dataclasses.replace(here, peak_gflops=200.0, memory_gbps=30.0)
    monkeypatch.setattr(registry, "device_vectors", lambda spec: {})
    monkeypatch.setattr(microbench, "measured_local_device", lambda threads=None: measured)
    assert main(args + ["--for-device", "local"]) == 0
    assert model_loads[-1] == ("stub", measured)
    assert "zero-shot, from its measured device vector" in capsys.readouterr().err
    assert main(args + ["--for-device", "fedcba9876543210"]) == 0
    assert model_loads[-1] == ("stub", "fedcba9876543210")
    assert f"predicting for device fedcba9876543210 (--for-device), not this machine's {here.device_id}" \
        in capsys.readouterr().err


def test_cli_top_limits_the_kernel_rows(cli_env, capsys):
    from cdmpp.cli.main import main

    out = cli_env / "r.json"
    assert main(["e2e", "--network", "tiny_mlp", "--model", "stub", "--top", "1",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    kernels = json.loads(out.read_text())["kernels"]
    assert len(kernels) >= 2
    table = text[text.index("\nkernel "):].strip().splitlines()
    assert table[1].startswith(kernels[0]["name"][:44])  # one kernel row, the largest
    assert table[2].startswith(f"... {len(kernels) - 1} more kernels")


def test_cli_predicts_an_onnx_file_at_the_batch_asked(cli_env, capsys, tiny_onnx):
    from cdmpp.cli.main import main

    path, out = cli_env / "mlp.onnx", cli_env / "r.json"
    tiny_onnx(path, batch="N")
    rc = main(["e2e", "--onnx", str(path), "--batch", "4", "--model", "stub", "--json",
               str(out), "--plot", "none"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "mlp (batch 4): 2 runtime calls, 2 distinct kernels" in captured.out
    assert "inputs {'x': [4, 32]}" in captured.err
    d = json.loads(out.read_text())
    assert d["network"] == "mlp" and d["batch"] == 4 and d["measured_s"] is None
    assert d["predicted_s"] == pytest.approx(2 * (1e-4 + 1e-6) + 1e-6)
    # a batch the file does not leave open is refused, not ignored
    fixed = cli_env / "fixed.onnx"
    tiny_onnx(fixed, batch=2)
    assert main(["e2e", "--onnx", str(fixed), "--batch", "4", "--model", "stub"]) == 2
    assert "no open batch dimension for batch=4" in capsys.readouterr().err


def test_cli_without_a_model_is_a_clear_error(capsys):
    from cdmpp.cli.main import main

    assert main(["e2e", "--network", "tiny_mlp", "--model", "/nonexistent/model"]) == 2
    assert "model directory /nonexistent/model does not exist" in capsys.readouterr().err
    # the model to anchor a foreign database's timings on is checked as early
    assert main(["e2e", "--network", "tiny_mlp", "--anchor-model", "/nonexistent/anchor"]) == 2
    assert "model directory /nonexistent/anchor does not exist" in capsys.readouterr().err
