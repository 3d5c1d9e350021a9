"""benchmarks/e2e.py --measured-from: new predictions against an earlier run's measured totals."""

import json

import pytest
from benchmark_helpers import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("e2e.py")


def predicted_row(network="resnet18", batch=1, **predicted_s):
    return {"network": network, "batch": batch, "predicted_s": next(iter(predicted_s.values())),
            "measured_s": None, "error_rel": None, "abs_error_rel": None,
            "measured_kernels_replay_s": None, "in_network_replay_s": None,
            "database_replay_s": None, "prediction_s": 0.1,
            "noise_rel": None, "host_slowdown": None, "by_placement": {},
            "by_model": {m: {"predicted_s": p, "error_rel": None, "vs_database_rel": None}
                         for m, p in predicted_s.items()}}


STORED = {"network": "resnet18", "batch": 1, "measured_s": 2.0, "noise_rel": 0.01,
          "host_slowdown": 1.05, "measured_kernels_replay_s": 1.9, "in_network_replay_s": 2.1,
          "by_placement": {"near": 2.0, "far": 2.4}, "predicted_s": 9.9,
          "by_model": {"old": {"predicted_s": 9.9, "error_rel": 3.95}}}


def test_each_model_is_judged_against_the_stored_total(bench):
    row = bench.with_stored_measurement(predicted_row(new=1.8, other=2.2), STORED)
    assert row["measured_s"] == 2.0 and row["by_placement"] == {"near": 2.0, "far": 2.4}
    assert row["host_slowdown"] == 1.05 and row["measured_kernels_replay_s"] == 1.9
    assert row["by_model"]["new"]["error_rel"] == pytest.approx(-0.1)
    assert row["by_model"]["other"]["error_rel"] == pytest.approx(0.1)
    # the first model fills the main columns; the stored run's own models are not carried over
    assert row["error_rel"] == pytest.approx(-0.1) and row["abs_error_rel"] == pytest.approx(0.1)
    assert row["predicted_s"] == 1.8 and set(row["by_model"]) == {"new", "other"}
    text = bench.table([row])
    assert "-10.0%" in text and "+10.0%" in text  # the main error column and the other model's
    assert "new vs measured: mean |error| 10.0%" in text
    assert "over 1 networks, within 10% 1 of 1" in text  # the target's own count


def test_a_different_network_or_an_unmeasured_one_is_refused(bench):
    with pytest.raises(ValueError, match="batch 4"):
        bench.with_stored_measurement(predicted_row(batch=4, new=1.0), STORED)
    with pytest.raises(ValueError, match="did not measure"):
        bench.with_stored_measurement(predicted_row(new=1.0), {**STORED, "measured_s": None})


def test_stored_runs_of_another_device_or_database_are_refused(bench, tmp_path):
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps({"device_id": "aaaa", "models": ["old"], "tuning_db": None,
                                "rows": [STORED, {**STORED, "batch": 4, "measured_s": None}]}))
    assert set(bench.stored_measurements(str(path), "aaaa", None)) == {("resnet18", 1)}
    with pytest.raises(SystemExit, match="device aaaa"):
        bench.stored_measurements(str(path), "bbbb", None)
    with pytest.raises(SystemExit, match="tuning-db"):
        bench.stored_measurements(str(path), "aaaa", "work/kernels")


def test_another_devices_runs_are_taken_for_a_model_asked_about_it_one_device_at_a_time(
        bench, tmp_path):
    zen5, zen3 = tmp_path / "zen5.json", tmp_path / "zen3.json"
    for path, device, total in ((zen5, "aaaa", 2.0), (zen3, "cccc", 3.0)):
        path.write_text(json.dumps({"device_id": device, "models": ["old"], "tuning_db": None,
                                    "rows": [{**STORED, "measured_s": total}]}))
    # this machine is bbbb; a model is asked about aaaa (NAME@aaaa)
    stored = bench.stored_measurements(str(zen5), {"bbbb", "aaaa"}, None)
    assert stored[("resnet18", 1)]["measured_s"] == 2.0
    assert bench.measured_device([str(zen5)]) == "aaaa"
    with pytest.raises(SystemExit, match="NAME@cccc"):  # no model asked about cccc
        bench.stored_measurements(str(zen3), {"bbbb", "aaaa"}, None)
    with pytest.raises(SystemExit, match="one device at a time"):  # no mean over two CPUs
        bench.stored_measurements([str(zen5), str(zen3)], {"bbbb", "aaaa", "cccc"}, None)


def test_a_missing_or_foreign_file_is_a_clear_error(bench, tmp_path):
    with pytest.raises(SystemExit, match="missing.json: cannot read it"):
        bench.stored_measurements(str(tmp_path / "missing.json"), "aaaa", None)
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(SystemExit, match="other.json is not the --json"):
        bench.stored_measurements(str(tmp_path / "other.json"), "aaaa", None)


def test_a_network_measured_in_several_runs_is_compared_with_their_mean(bench, tmp_path):
    early, late = tmp_path / "early.json", tmp_path / "late.json"
    early.write_text(json.dumps({"device_id": "aaaa", "tuning_db": None, "rows": [
        {**STORED, "measured_at": "00:24-00:44 UTC"}, {**STORED, "batch": 4, "measured_s": 8.0}]}))
    late.write_text(json.dumps({"device_id": "aaaa", "tuning_db": None, "rows": [
        {**STORED, "measured_s": 2.4, "measured_kernels_replay_s": None,
         "host_slowdown": 1.15, "measured_at": "12:30-12:33 UTC"}]}))
    stored = bench.stored_measurements([str(early), str(late)], "aaaa", None)
    both = stored[("resnet18", 1)]
    assert both["measured_s"] == pytest.approx(2.2)
    assert [r["measured_s"] for r in both["measured_runs"]] == [2.0, 2.4]
    assert [r["measured_at"] for r in both["measured_runs"]] == ["00:24-00:44 UTC",
                                                                "12:30-12:33 UTC"]
    assert both["host_slowdown"] == pytest.approx(1.1)  # both runs have it: their mean
    # one run's kernel replay is not the mean's: a figure every run lacks is left out
    assert both["measured_kernels_replay_s"] is None and both["by_placement"] == {}
    # a network measured once keeps its run's own figures
    assert stored[("resnet18", 4)]["measured_s"] == 8.0
    assert stored[("resnet18", 4)]["by_placement"] == {"near": 2.0, "far": 2.4}
    row = bench.with_stored_measurement(predicted_row(new=1.98), both)
    assert row["by_model"]["new"]["error_rel"] == pytest.approx(-0.1)
    assert "mean of 2 stored runs, 2000.00-2400.00 ms" in bench._measured_how(row)


def test_the_json_of_cdmpp_e2e_measure_is_a_stored_run(bench, tmp_path):
    one = {"network": "gpt2", "batch": 4, "device_id": "aaaa", "predicted_s": 130.0,
           "measured_s": 145.6, "measured_kernels_replay_s": 133.0,
           "measured_kernels_median_replay_s": 145.3, "in_network_replay_s": 149.7,
           "kernels": [{"name": "k", "tuned": False}],
           "measurement": {"host_slowdown": 1.03, "by_placement": {"fast-memory": 145.6},
                           "started_utc": "2026-11-28T10:25:00+00:00",
                           "ended_utc": "2026-11-28T11:04:00+00:00"}}
    path = tmp_path / "e2e_gpt2_b4.json"
    path.write_text(json.dumps(one))
    row = bench.stored_measurements(str(path), "aaaa", None)[("gpt2", 4)]
    assert row["measured_s"] == 145.6 and row["measured_kernels_median_replay_s"] == 145.3
    assert row["host_slowdown"] == 1.03 and row["by_placement"] == {"fast-memory": 145.6}
    assert row["measured_runs"][0]["measured_at"] == \
        "2026-11-28T10:25:00+00:00 - 2026-11-28T11:04:00+00:00"
    with pytest.raises(SystemExit, match="device aaaa"):
        bench.stored_measurements(str(path), "bbbb", None)
    # a tuned network's e2e JSON does not say which database: refused, not guessed
    path.write_text(json.dumps({**one, "kernels": [{"name": "k", "tuned": True}]}))
    with pytest.raises(SystemExit, match="does not say which tuning database"):
        bench.stored_measurements(str(path), "aaaa", None)


MEASURED = BENCHMARKS / "measured"


@pytest.mark.parametrize("path", sorted(MEASURED.glob("*.json")), ids=lambda p: p.name)
def test_the_committed_measured_totals_are_well_formed(bench, path):
    from cdmpp.e2e.networks import NETWORKS

    data = json.loads(path.read_text())
    device_id, kind = path.stem.split("-", 1)
    assert data["device_id"] == device_id and kind == "untuned" and data["tuning_db"] is None
    assert data["rows"], f"{path.name} holds no measurement"
    for r in data["rows"]:
        assert r["network"] in NETWORKS and r["batch"] in (1, 4), r
        assert r["measured_s"] > 0 and r["measured_at"] and r["source"], r
    # loaded as the benchmark loads them, each network once
    stored = bench.stored_measurements(str(path), device_id, None)
    assert len(stored) == len({(r["network"], r["batch"]) for r in data["rows"]})


def test_a_model_name_may_say_which_device_it_predicts_for(bench, tmp_path):
    assert bench.model_and_device("zen3") == ("zen3", None)
    assert bench.model_and_device("zen3@local") == ("zen3", "local")
    assert bench.model_and_device("zen3@7566cfb52e598ab7") == ("zen3", "7566cfb52e598ab7")
    (tmp_path / "device.json").write_text("{}")
    assert bench.model_and_device(f"zen3@{tmp_path}/device.json") == (
        "zen3", f"{tmp_path}/device.json")
    # an '@' that names no device is part of a directory's name
    assert bench.model_and_device("runs/m@v2") == ("runs/m@v2", None)
