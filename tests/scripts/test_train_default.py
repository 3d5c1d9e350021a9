"""scripts/train_default.py --keep-seeds: it reuses saved seeds only for the same training run."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "train_default.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_default_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INFO = {"databases": ["data/epyc-2c.tar.xz", "/tmp/x/epyc-2c-kernels"], "records": 100,
        "device_id": "abc", "default_weight": 5.0, "held_out_sample": 28}


def saved(**changes):
    trained = dict(INFO, databases=["/work/data/epyc-2c-kernels", "/work/data/epyc-2c"],
                   seeds=[0, 1, 2])
    return {"trained_on": {**trained, **changes}}


def test_keep_seeds_takes_the_seeds_of_the_same_run(script):
    args = Namespace(seed=0, seeds=3)
    assert script.check_kept(saved(), INFO, args) == [0, 1, 2]  # same databases, other paths


@pytest.mark.parametrize("changes, message", [
    ({"records": 99}, "records 99"), ({"default_weight": 1.0}, "default_weight"),
    ({"databases": ["/work/data/epyc-2c"]}, "trained on"), ({"seeds": [0]}, "seeds")])
def test_keep_seeds_refuses_another_run(script, changes, message):
    with pytest.raises(SystemExit, match=message):
        script.check_kept(saved(**changes), INFO, Namespace(seed=0, seeds=3))


def test_the_ensemble_gets_the_device_json_of_its_device(script, fixture_dbs, tmp_path):
    """The shipped ensemble carries the device.json of the device its records came from (so
    `for_device` finds it there), looked up in the databases below each --data; None when
    none of them is of that device."""
    import shutil

    from cdmpp.model.registry import SHIPPED_DIR

    zen4, zen5 = fixture_dbs[0], tmp_path / "data" / "zen5" / "db"
    shutil.copytree(fixture_dbs[1], zen5)
    shutil.copy(SHIPPED_DIR / "seeds" / "device.json", zen4)
    shutil.copy(SHIPPED_DIR / "zen5" / "device.json", zen5)
    from cdmpp.device import load_device

    mine, theirs = load_device(zen4), load_device(zen5)
    assert mine.device_id != theirs.device_id
    assert script.fitted_device([tmp_path / "data", zen4], mine.device_id) == mine
    assert script.fitted_device([tmp_path / "data"], theirs.device_id) == theirs
    assert script.fitted_device([tmp_path / "data"], mine.device_id) is None
