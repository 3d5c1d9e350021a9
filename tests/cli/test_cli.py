"""The command line: thin subcommands, clear errors."""

from __future__ import annotations

import pytest

from cdmpp.cli.main import main


def test_collect_list_shows_the_catalog(capsys):
    assert main(["collect", "--list", "--network", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert "softmax_12x128x128" in out and "gpt2" in out


def test_version_is_the_package_version(capsys):
    import cdmpp

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"cdmpp {cdmpp.__version__}"


def test_unknown_network_is_a_clear_error(capsys):
    assert main(["collect", "--list", "--network", "alexnet"]) == 2
    err = capsys.readouterr().err
    assert "alexnet" in err and "resnet18" in err


def test_collect_needs_out(capsys):
    assert main(["collect", "--ops", "softmax"]) == 2
    assert "--out" in capsys.readouterr().err


def test_retest_and_remeasure_are_one_or_the_other(tmp_path, capsys):
    args = ["collect", "--ops", "softmax", "--out", str(tmp_path), "--retest", "5"]
    assert main(args + ["--remeasure-disturbed"]) == 2
    assert "give one" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_collect_refuses_impossible_settings_before_writing(tmp_path, capsys):
    import os

    out = ["collect", "--ops", "softmax", "--out", str(tmp_path / "c")]
    assert main(out + ["--retest", "5"]) == 2  # nothing collected there to time again
    assert "holds no collection" in capsys.readouterr().err
    too_many = len(os.sched_getaffinity(0)) + 1
    assert main(out + ["--threads", str(too_many)]) == 2
    assert f"--threads {too_many} is more than" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # 0 is refused, not read as "the default"
        main(out + ["--passes", "0"])
    assert "must be at least 1, got 0" in capsys.readouterr().err
    assert main(out + ["--search-model", "xgb"]) == 2  # it guides --sampling search only
    assert "--search-model guides --sampling search" in capsys.readouterr().err
    assert main(out + ["--sampling", "search", "--retest", "5"]) == 2
    assert "--sampling search draws new programs" in capsys.readouterr().err
    # a guiding model that does not load stops the run before anything is written
    assert main(out + ["--sampling", "search", "--search-model", str(tmp_path / "none")]) == 2
    assert "model directory" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_retest_takes_a_count_or_all(tmp_path, capsys):
    from cdmpp.cli.collect_cmd import _retest_count

    assert _retest_count("7") == 7 and _retest_count("all") == "all"
    with pytest.raises(SystemExit):
        main(["collect", "--ops", "softmax", "--out", str(tmp_path), "--retest", "some"])
    assert "'all'" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_env_prints_versions_and_device(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "apache-tvm" in out and "torch" in out and "device" in out
    assert "\nmodel      " in out


def test_env_json_is_the_device_json_of_this_machine(capsys):
    import json

    from cdmpp.device import local_device

    assert main(["env", "--json"]) == 0
    device = json.loads(capsys.readouterr().out)
    assert device["device_id"] == local_device().device_id and device["threads"] >= 1


def _with(device, **fields):
    """`device` as another machine writes it: some fields changed, its id recomputed."""
    from cdmpp.device import Device, device_id

    d = {**device.to_json(), **fields}
    d["device_id"] = device_id(d)
    return Device.from_json(d)


def test_env_says_whether_the_shipped_model_is_for_this_device():
    from cdmpp.cli.env_cmd import shipped_model_line
    from cdmpp.model.registry import fitted_device, fitted_device_id

    for name in ("default", "zen5", "emeraldrapids", "zen3", "xeon480"):
        line = shipped_model_line(fitted_device(name))
        assert line.startswith(f"model      {name}:") and line.endswith("fitted for this device")
    intel = fitted_device("emeraldrapids")
    unknown = _with(intel, target={**intel.target, "mcpu": "rocketlake"})
    other = shipped_model_line(unknown)
    assert other.startswith("model      default,") and "cdmpp calibrate" in other
    assert fitted_device_id("default") in other
    # another VM of the Intel processor, a flag hidden: its model, said so
    flags = [f for f in intel.isa_features if f != "avx512_fp16"]
    same = shipped_model_line(_with(intel, isa_features=flags))
    assert same.startswith("model      emeraldrapids,") and "same processor" in same


def test_env_names_the_models_of_other_devices_that_know_this_one():
    from cdmpp.cli.env_cmd import also_knowing_line
    from cdmpp.model.registry import fitted_device_id

    zen4 = also_knowing_line(fitted_device_id("default"))  # every multi-device model's data
    assert "zen5, emeraldrapids, zen3, xeon480" in zen4 and "--for-device local" in zen4
    zen3 = fitted_device_id("zen3")  # zen3 and xeon480 were trained on Zen 3's records
    assert "xeon480" in also_knowing_line(zen3) and "emeraldrapids" not in also_knowing_line(zen3)
    assert also_knowing_line(fitted_device_id("xeon480")) is None  # only xeon480 knows its CPU
    assert "emeraldrapids, zen3" in also_knowing_line(fitted_device_id("zen5"))
    assert also_knowing_line("0123456789abcdef") is None


def test_db_reports_bad_lines(dense_db, capsys):
    with open(dense_db / "database_tuning_record.json", "a") as f:
        f.write("[0, [[[], []], [NaN], {}, []]]\n")
    assert main(["db", str(dense_db)]) == 0
    out = capsys.readouterr().out
    assert "1 bad lines skipped" in out and ":5:" in out
    # a TVM database without device.json: its target, and a warning about the threads
    assert "no device.json" in out and '"mcpu": "znver4"' in out and "default thread pool" in out


def test_db_counts_a_database_once_however_it_is_named(dense_db, capsys, monkeypatch):
    monkeypatch.chdir(dense_db.parent)
    assert main(["db", str(dense_db), dense_db.name, str(dense_db.parent)]) == 0
    out = capsys.readouterr().out
    assert "total: 4 records" in out and out.count(" records\n") == 1


def test_db_strict_stops_at_the_first_bad_line(dense_db, capsys):
    with open(dense_db / "database_tuning_record.json", "a") as f:
        f.write("[0, [[[], []], [NaN], {}, []]]\n")
    assert main(["db", "--strict", str(dense_db)]) == 2
    err = capsys.readouterr().err
    assert "database_tuning_record.json:5: bad timing" in err


def test_collect_time_budget_reaches_the_collector(tmp_path, capsys, monkeypatch):
    import cdmpp.measure.collect as collect_module
    from dataclasses import replace

    monkeypatch.setattr(collect_module, "measure_device",
                        lambda d: replace(d, peak_gflops=1.0, memory_gbps=1.0))
    out = tmp_path / "db"
    assert main(["collect", "--ops", "softmax_12x64x64", "--out", str(out), "--time-budget",
                 "0", "--programs-per-task", "1"]) == 0
    assert "stopped at the time budget" in capsys.readouterr().out
    assert (out / "database_tuning_record.json").read_text() == ""


def test_db_names_a_few_workloads_and_counts_the_rest():
    from types import SimpleNamespace

    from cdmpp.cli.db_cmd import SHOWN_NAMES, _names

    few = [SimpleNamespace(name=f"op{i}", shash=f"h{i}") for i in (2, 1)]
    assert _names(few) == "op1,op2"
    many = [SimpleNamespace(name=f"op{i:03d}", shash="") for i in range(SHOWN_NAMES + 5)]
    shown = _names(many)
    assert shown.startswith("op000,op001") and shown.endswith(", ... 5 more")
    assert shown.count(",") == SHOWN_NAMES  # the names, then the count


def test_split_of_no_store_is_a_clear_error(tmp_path, capsys):
    assert main(["split", "--store", str(tmp_path / "nowhere"), "--split", "random"]) == 2
    assert "nowhere is not a feature store" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


def test_features_then_split(fixture_dbs, tmp_path, capsys):
    store = tmp_path / "store"
    args = ["features", "--out", str(store), "--workers", "1", "--no-progress"]
    for db in fixture_dbs:
        args += ["--db", str(db)]
    assert main(args) == 0
    assert "12 records from 3 databases" in capsys.readouterr().out
    assert main(["split", "--store", str(store), "--split", "by-network:resnet18"]) == 0
    out = capsys.readouterr().out
    assert "8 train, 4 test" in out
    assert (store / "splits" / "by-network-resnet18.json").exists()
    assert (store / "splits" / "by-network-resnet18.norm.npz").exists()
    from cdmpp.features.store import FeatureStore

    # the fixtures' one device: holding it out leaves nothing to train on
    (only,) = set(FeatureStore(store).samples().column("device_id").to_pylist())
    assert main(["split", "--store", str(store), "--split", f"by-device:{only}"]) == 2
    assert "leaves 0 train and 12 test records" in capsys.readouterr().err
    assert sorted(p.name for p in (store / "splits").iterdir()) == [
        "by-network-resnet18.json", "by-network-resnet18.norm.npz"]


def test_db_counts_records_with_no_undisturbed_pass(dense_db, capsys):
    import json

    records = (dense_db / "database_tuning_record.json").read_text().splitlines()
    entries = []
    for i, line in enumerate(records):
        run_secs = json.loads(line)[1][1]
        slow = 3.0 if i == 0 else 1.0  # record 0 timed while the machine was disturbed
        entries.append({"key": f"r/{i}", "run_secs": run_secs, "repeats_per_pass": 1,
                        "ref_ratios": [slow] * len(run_secs), "record_index": i})
    (dense_db / "cdmpp_measurements.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in entries))
    assert main(["db", str(dense_db)]) == 0
    out = capsys.readouterr().out
    assert f"1 of {len(entries)} records with reference-kernel timings have no pass" in out
    assert "--remeasure-disturbed" in out


def test_calibrate_passes_data_and_refuses_to_measure_nothing(tmp_path, capsys, monkeypatch):
    import cdmpp.calibrate

    assert main(["calibrate", "--out", str(tmp_path / "m"), "--tasks", "0"]) == 2
    assert "--tasks 0 measures nothing: give --data" in capsys.readouterr().err
    seen = []
    monkeypatch.setattr(cdmpp.calibrate, "calibrate", lambda config: seen.append(config) or {})
    assert main(["calibrate", "--out", "m", "--tasks", "0", "--data", "a", "--data", "b"]) == 0
    assert seen[0].data == ("a", "b") and seen[0].tasks == 0
    assert seen[0].fine_tunes is None  # calibrate chooses by the base (`fine_tunes_for`)
    assert seen[0].weight_folds == cdmpp.calibrate.WEIGHT_FOLDS
    assert main(["calibrate", "--out", "m", "--tasks", "0", "--data", "a",
                 "--fine-tunes", "1", "--weight-folds", "0"]) == 0
    assert seen[1].fine_tunes == 1 and seen[1].weight_folds == 0
    assert main(["calibrate", "--out", "m", "--tasks", "3", "--selection", "random",
                 "--adapt", "mmd", "--adapt-weight", "0.3", "--budget-minutes", "2"]) == 0
    assert (seen[2].tasks, seen[2].selection, seen[2].adapt) == (3, "random", "mmd")
    assert (seen[2].adapt_weight, seen[2].budget_minutes) == (0.3, 2.0)
    assert seen[0].selection == "kmeans" and seen[0].adapt is None  # the defaults
    assert seen[0].programs_per_task == 8 and not seen[0].rescale
    # --rescale: the default programs alone, of RESCALE_TASKS tasks unless told otherwise
    assert main(["calibrate", "--out", "m", "--rescale"]) == 0
    assert (seen[3].rescale, seen[3].tasks, seen[3].programs_per_task) == (
        True, cdmpp.calibrate.RESCALE_TASKS, 0)
    assert main(["calibrate", "--out", "m", "--rescale", "--budget-minutes", "1",
                 "--programs-per-task", "2"]) == 0
    assert (seen[4].tasks, seen[4].budget_minutes, seen[4].programs_per_task) == (None, 1.0, 2)
    for budget in ("-1", "0", "nan"):
        with pytest.raises(SystemExit):
            main(["calibrate", "--out", "m", "--budget-minutes", budget])
        assert "--budget-minutes: must be a positive number" in capsys.readouterr().err


def test_the_cli_starts_without_numpy():
    """Every `cdmpp` call builds all sub-command parsers: they import nothing heavy (numpy alone
    tripled the start-up), only the command that runs does."""
    import subprocess
    import sys

    code = "import sys, cdmpp.cli.main; assert 'numpy' not in sys.modules, 'numpy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_closed_pipe_ends_the_output_quietly():
    """`cdmpp collect --list | head -1`: no BrokenPipeError traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "cdmpp.cli.main", "collect", "--list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Traceback" not in err and "BrokenPipe" not in err
