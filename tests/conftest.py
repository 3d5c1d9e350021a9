"""Shared fixtures: tiny real operators, real measured records, temp databases."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from cdmpp.programs.catalog import Task

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data" / "epyc-2c"



def require_shared(path: Path = SHARED_DATA) -> Path:
    """`path` under ../shared, or skip the test where it is not beside the checkout. In CI
    (`CI` set; .ci/run runs beside ../shared) its absence fails the test: a silent skip there
    would leave the model tests unrun."""
    if path.exists():
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{path} is missing: CI must run beside ../shared")
    pytest.skip(f"{path} is not beside this checkout")


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
def stored_overhead(monkeypatch, tmp_path):
    """A private cache holding this machine's call-overhead calibration (1 us per call, 0.1 us
    per builtin, 1 us per invoke), so a whole-network prediction times nothing. Returns the
    device."""
    from cdmpp.device import local_device
    from cdmpp.e2e import overhead
    from cdmpp.e2e.replay import CallOverhead

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    device = local_device()
    cal = overhead.OverheadCalibration(device.device_id, device.threads,
                                       CallOverhead(1e-6, 1e-7, 1e-6), overhead.METHOD_VERSION,
                                       "2026-01-01T00:00:00+00:00", (1, 2), (1e-6, 2e-6),
                                       (1e-6, 1e-6), 1e-8, {})
    overhead.save_overhead(cal, device)
    return device


@pytest.fixture
def shared_data() -> Path:
    return require_shared()


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


def _write_tiny_onnx(path, batch="N"):
    """A two-layer MLP as an ONNX file made with onnx.helper (skips without `onnx`): x (batch,
    32) -> Gemm(64) + bias -> Relu -> Gemm(10). `batch`: an int, or a symbol left open.
    Returns the weights (w1, b1, w2) to compute the expected output with numpy."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 32)).astype(np.float32)
    b1 = rng.standard_normal(64).astype(np.float32)
    w2 = rng.standard_normal((10, 64)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "W1", "B1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "W2"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "tiny_onnx_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
         numpy_helper.from_array(w2, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return w1, b1, w2


@pytest.fixture
def tiny_onnx():
    """write(path, batch="N") -> (w1, b1, w2): a two-layer MLP as an ONNX file (skips the test
    without the `onnx` package)."""
    return _write_tiny_onnx


def strip_capture_handlers_from_meta_schedule_logger():
    """Call before tuning in a test. pytest's log capture handlers (which have no name) end up
    on meta_schedule's logger once a test has tuned, and TVM's next logging set-up
    (`get_loggers_from_work_dir`) fails formatting their name None. Outside pytest the logger
    holds only TVM's named handlers."""
    import logging

    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)
