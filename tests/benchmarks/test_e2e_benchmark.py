"""benchmarks/e2e.py --measured-from: new predictions against an earlier run's measured totals."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "e2e.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("e2e_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_a_missing_or_foreign_file_is_a_clear_error(bench, tmp_path):
    with pytest.raises(SystemExit, match="missing.json: cannot read it"):
        bench.stored_measurements(str(tmp_path / "missing.json"), "aaaa", None)
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(SystemExit, match="other.json is not the --json"):
        bench.stored_measurements(str(tmp_path / "other.json"), "aaaa", None)
