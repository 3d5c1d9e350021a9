"""`cdmpp tune`: a network's kernels tuned into a database that `cdmpp e2e` applies."""

from __future__ import annotations

import json
import re

import pytest

from cdmpp.cli.main import main
from conftest import strip_capture_handlers_from_meta_schedule_logger


def test_tune_writes_a_database_that_replaces_the_networks_kernels(tmp_path, tiny_onnx, capsys):
    from cdmpp.device import local_device
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.onnx_model import load_onnx

    onnx_path, out = tmp_path / "mlp.onnx", tmp_path / "tuned"
    tiny_onnx(onnx_path, batch=1)
    strip_capture_handlers_from_meta_schedule_logger()
    assert main(["tune", "--onnx", str(onnx_path), "--trials", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mlp: 2 kernels tuned, 4 programs measured" in printed
    assert f"cdmpp e2e --onnx {onnx_path} --tuning-db {out} --measure" in printed
    # where the time went, from this run's lines of the task scheduler's log
    assert re.search(r"tuning took [\d.]+ min: search \d+ s, builds \d+ s, runs \d+ s over "
                     r"[1-9]\d* rounds", printed)
    device = local_device()
    assert json.loads((out / "device.json").read_text())["device_id"] == device.device_id
    lines = (out / "database_tuning_record.json").read_text().splitlines()
    assert len(lines) == 4
    assert all(0 < min(json.loads(line)[1][1]) < 1 for line in lines)  # every trial timed

    net = load_onnx(onnx_path)
    lowered = lower_network(net.mod, device.target, tuning_db=out)
    assert any(k.tuned for k in lowered.kernels)

    # a rerun adds trials to the same database
    strip_capture_handlers_from_meta_schedule_logger()
    assert main(["tune", "--onnx", str(onnx_path), "--trials", "2", "--out", str(out),
                 "--seed", "1"]) == 0
    assert "2 programs measured (6 in" in capsys.readouterr().out


def test_rounds_are_small_enough_for_the_first_pass_to_reach_every_kernel():
    from cdmpp.tune.network import round_size

    assert round_size(832, 26) == 32  # ResNet-18: one round of 32 for each kernel
    assert round_size(832, 56) == 14  # MobileNet-V2: 32 a round reached 46 kernels of 56
    assert round_size(10_000, 3) == 32  # never more than the most
    assert round_size(3, 5) == 1  # fewer trials than kernels: one a round


def test_kernels_the_trials_never_reached_are_named(tmp_path, tiny_onnx, capsys):
    from cdmpp.device import local_device
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.onnx_model import load_onnx

    onnx_path, out = tmp_path / "mlp.onnx", tmp_path / "tuned"
    tiny_onnx(onnx_path, batch=1)
    strip_capture_handlers_from_meta_schedule_logger()
    assert main(["tune", "--onnx", str(onnx_path), "--trials", "1", "--out", str(out),
                 "--cost-model", "random"]) == 0
    printed = capsys.readouterr().out
    assert "mlp: 1 of 2 kernels tuned, 1 programs measured" in printed
    line = next(s for s in printed.splitlines() if "no program measured for 1 kernel " in s)
    untuned = line.rsplit(": ", 1)[1]
    # the kernel named is the one the database does not replace
    lowered = lower_network(load_onnx(onnx_path).mod, local_device().target, tuning_db=out)
    tuned = {k.name: k.tuned for k in lowered.kernels}
    assert tuned[untuned] is False and sum(tuned.values()) == 1


def test_tvm_cost_models_take_no_cdmpp_options(tmp_path):
    with pytest.raises(SystemExit, match="do nothing with --cost-model xgb"):
        main(["tune", "--network", "resnet18", "--trials", "4", "--out", str(tmp_path),
              "--cost-model", "xgb", "--offline"])


def test_a_missing_model_fails_before_any_tvm_work(tmp_path, capsys):
    code = main(["tune", "--network", "resnet18", "--trials", "4", "--out", str(tmp_path / "o"),
                 "--model", str(tmp_path / "nonexistent")])
    assert code != 0 and "nonexistent does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
