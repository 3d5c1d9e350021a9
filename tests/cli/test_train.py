"""`cdmpp train` on databases of two devices: refused unless one is chosen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cdmpp.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_train_refuses_two_devices_and_trains_on_the_chosen_one(tmp_path, capsys):
    # the same real records, once as ../shared/data has them (no device.json: "znver4/2") and
    # once claimed by our own collector's device
    plain = tmp_path / "plain" / "dense_64x768x768"
    ours = tmp_path / "ours" / "dense_64x768x768"
    shutil.copytree(FIXTURES / "dense_64x768x768", plain)
    shutil.copytree(FIXTURES / "dense_64x768x768", ours)
    shutil.copy(FIXTURES / "device_epyc_2c.json", ours / "device.json")
    ours_id = json.loads((ours / "device.json").read_text())["device_id"]
    common = ["train", "--data", str(plain), "--data", str(ours), "--store",
              str(tmp_path / "store"), "--epochs", "1", "--workers", "1"]

    assert main(common + ["--out", str(tmp_path / "mixed")]) == 2
    err = capsys.readouterr().err
    assert "2 devices" in err and ours_id in err and "znver4/2" in err
    assert not (tmp_path / "mixed").exists()

    assert main(common + ["--out", str(tmp_path / "model"), "--device", ours_id,
                          "--default-weight", "5"]) == 0
    meta = json.loads((tmp_path / "model" / "estimator.json").read_text())
    assert meta["trained_on"]["device_id"] == ours_id
    assert meta["trained_on"]["records"] == 4
    assert meta["trained_on"]["default_weight"] == 5.0
