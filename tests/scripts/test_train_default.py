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
