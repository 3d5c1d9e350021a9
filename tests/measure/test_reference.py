"""The device's best reference-kernel time, kept across runs, and the slow-host warning."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cdmpp.e2e.report import slow_host_warning
from cdmpp.measure.reference import REFERENCE_FILE, remember_reference


def test_the_best_time_is_kept_and_only_ever_lowered(tmp_path):
    path = tmp_path / "devices" / "dev1" / REFERENCE_FILE
    assert remember_reference("dev1", 2e-4, tmp_path) == 2e-4
    assert json.loads(path.read_text())["best_s"] == 2e-4
    assert remember_reference("dev1", 3e-4, tmp_path) == 2e-4  # a slow run keeps the best
    assert json.loads(path.read_text())["best_s"] == 2e-4
    assert remember_reference("dev1", 1.5e-4, tmp_path) == 1.5e-4
    assert remember_reference("dev2", 9e-4, tmp_path) == 9e-4  # devices are separate
    path.write_text("{not json")
    assert remember_reference("dev1", 5e-4, tmp_path) == 5e-4  # a corrupt file is replaced
    with pytest.raises(ValueError, match="positive"):
        remember_reference("dev1", 0.0, tmp_path)


def test_an_unwritable_cache_does_not_lose_the_measurement(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert remember_reference("dev1", 2e-4, blocker) == 2e-4
    assert "could not record" in capsys.readouterr().err


def test_a_slow_run_is_flagged():
    def warn(slowdown):
        return slow_host_warning(SimpleNamespace(host_slowdown=slowdown))

    assert warn(None) == [] and warn(1.0) == [] and warn(1.08) == []
    assert warn(1.10) == [] and len(warn(1.12)) == 1  # README: "more than 10%" slower
    (line,) = warn(1.44)
    assert "44% slower" in line and "too high" in line
    assert slow_host_warning(None) == []  # no measurement at all
