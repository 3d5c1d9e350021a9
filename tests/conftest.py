"""Shared fixtures: tiny real operators, real measured records, temp databases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cdmpp.programs.catalog import Task

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data" / "epyc-2c"

# Tiny real operators: a 64x64 matmul and a small softmax (fast to sample, build and time).
MATMUL_64 = Task("dense_64x64x64", "dense", (("k", 64), ("m", 64), ("n", 64)), ())
SOFTMAX_SMALL = Task("softmax_1x16x64", "softmax", (("b", 1), ("m", 16), ("n", 64)), ())


@pytest.fixture
def dense_db(tmp_path) -> Path:
    """A copy of a 4-record slice of real measurements (dense 64x768x768 from ../shared/data:
    AMD EPYC, TVM's default thread pool, i.e. one worker: docs/measurement.md)."""
    dst = tmp_path / "dense_64x768x768"
    shutil.copytree(FIXTURES / "dense_64x768x768", dst)
    return dst


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA


@pytest.fixture
def fixture_dbs(tmp_path) -> list[Path]:
    """Copies of three 4-record slices of real measurements: dense and softmax (BERT/GPT-2
    shapes) and add+relu (ResNet-18 shape)."""
    out = []
    for name in ("dense_64x768x768", "softmax_12x64x64", "addrelu_1x64x56x56"):
        dst = tmp_path / "dbs" / name
        shutil.copytree(FIXTURES / name, dst)
        out.append(dst)
    return out
