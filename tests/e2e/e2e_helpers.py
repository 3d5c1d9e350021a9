"""Shared by the e2e tests: tiny real networks built by TVM and a stub estimator (no trained
model needed). Not a conftest.py: tests/conftest.py is imported as `conftest` by other tests,
and a second rootless conftest would replace it in sys.modules."""

from __future__ import annotations

import functools

import numpy as np
import pytest


class StubEstimator:
    """Predicts a fixed latency per program: `latency_s[kernel name]` (the ProgramSet's task
    names are the kernel names), else `default_s`."""

    def __init__(self, latency_s: dict | None = None, default_s: float = 1e-4):
        self.latency_s = dict(latency_s or {})
        self.default_s = default_s
        self.calls = 0

    def predict(self, programs):
        self.calls += 1
        assert all(f.ndim == 2 and f.shape[1] == 164 for f in programs.leaf_features)
        return np.array([self.latency_s.get(t, self.default_s) for t in programs.task])


@pytest.fixture(scope="session")
def device():
    from cdmpp.device import local_device

    return local_device()


@functools.lru_cache(maxsize=None)
def _lowered(name: str, batch: int, target_json: str):
    import json

    import torch

    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network

    torch.set_num_threads(1)
    return lower_network(import_network(name, batch), json.loads(target_json), name=name,
                         batch=batch)


@pytest.fixture(scope="session")
def lowered(device):
    """lowered(name, batch) -> NetworkModule, built once per session."""
    import json

    return lambda name, batch=2: _lowered(name, batch, json.dumps(device.target, sort_keys=True))


def write_tiny_onnx(path, batch="N"):
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
